"""Compare pipeline invocations without the MLflow UI.

One row per invocation (a parent run: one `dvc repro` or `dvc exp run`, see lopd/core/tracking.py) with its DVC
experiment name, start time, status and commit (`*`: uncommitted code changes), then the params that differ between
the rows, then the metrics of the chosen stage's runs (default: the report stage).

Run: python scripts/compare.py [--experiment NAME] [--uri URI] [--runs NAME ...] [--stage REGEX] [--metrics REGEX]
                               [--all-params]
The experiment defaults to `<tracking.experiment_prefix>-<profile>` of params.yaml and the store to its
`tracking.mlflow_uri` (env LOPD_MLFLOW_URI overrides), as the stages log them.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

MISSING = "-"
_MAX_CELL = 20  # wider values are cut: the table must fit a terminal
_GAP = "  "


class CompareError(Exception):
    """A problem worth one line to the user (no traceback)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", help="MLflow experiment (default: <tracking.experiment_prefix>-<profile>)")
    parser.add_argument("--uri", help="tracking URI (default: params.yaml's tracking.mlflow_uri; env LOPD_MLFLOW_URI)")
    parser.add_argument("--runs", nargs="+", metavar="NAME",
                        help="only these invocations: DVC experiment names, parent run names or run-id prefixes")
    parser.add_argument("--stage", default="report",
                        help="regex of the stage(s) whose metrics to show (default: report)")
    parser.add_argument("--metrics", help="regex of the metric names to show (default: all but system/ metrics)")
    parser.add_argument("--all-params", action="store_true", help="show every param, not only those that differ")
    parser.add_argument("--all-metrics", action="store_true",
                        help="with several rows, also show the metrics equal in every row")
    return parser.parse_args(argv)


# --- where the runs are ---

def resolve_target(experiment: str | None, uri: str | None) -> tuple[str, str]:
    """The experiment name and tracking URI, defaulted from params.yaml the way the stages' Tracker does."""
    from lopd.core.config import ConfigError, load_config, mlflow_uri

    if experiment is None or uri is None:
        try:
            cfg = load_config()
        except ConfigError as err:
            raise CompareError(f"{err} (or pass --experiment and --uri)") from None
        experiment = experiment or f"{cfg.tracking.experiment_prefix}-{cfg.profile}"
        uri = uri or mlflow_uri(cfg)
    if uri.startswith("sqlite:///"):
        path = Path(os.path.expanduser(uri.removeprefix("sqlite:///"))).resolve()
        if not path.is_file():  # MLflow would create an empty store there and report no experiment
            raise CompareError(f"no MLflow store at {path}")
        uri = f"sqlite:///{path}"
    return experiment, uri


def load_runs(experiment: str, uri: str):
    """All runs of `experiment` as mlflow.search_runs' DataFrame."""
    from lopd.core.tracking import _HTTP_DEFAULTS, OFF, probe_server

    if uri == OFF:
        raise CompareError("MLflow tracking is off (tracking.mlflow_uri / LOPD_MLFLOW_URI); pass --uri")
    for key, value in _HTTP_DEFAULTS.items():  # a dead server costs seconds, as in the stages
        os.environ.setdefault(key, value)
    probe_server(uri)
    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # the table is the output
    mlflow.set_tracking_uri(uri)
    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        raise CompareError(f"no MLflow experiment {experiment!r} in {uri}")
    runs = mlflow.search_runs(experiment_ids=[found.experiment_id])
    if runs.empty:
        raise CompareError(f"experiment {experiment!r} has no runs")
    return runs


# --- what to show ---

def _value(row, column: str) -> Any:
    """A cell of a search_runs row; None when the column is absent or empty (NaN, NaT, None)."""
    import pandas as pd

    value = row[column] if column in row.index else None
    return None if value is None or pd.isna(value) else value


def _prefixed(row, prefix: str) -> dict[str, Any]:
    return {k.removeprefix(prefix): v for k in row.index if k.startswith(prefix) and (v := _value(row, k)) is not None}


def select_parents(runs, names: list[str] | None):
    """The invocations' parent runs, oldest first, optionally only those named in `names`."""
    from lopd.core.tracking import INVOCATION_TAG

    column = f"tags.{INVOCATION_TAG}"
    if column not in runs.columns or runs[column].isna().all():
        raise CompareError("no pipeline invocations (parent runs) in this experiment; stages run outside DVC and "
                           "runs logged before parent runs existed have none")
    parents = runs[runs[column].notna()].sort_values("start_time")
    if names:
        def wanted(row) -> bool:
            return (_label(row) in names or _value(row, "tags.mlflow.runName") in names
                    or any(row["run_id"].startswith(n) for n in names))

        parents = parents[parents.apply(wanted, axis=1)]
        if parents.empty:
            raise CompareError(f"no invocation named {', '.join(names)}")
    return parents


def _label(row) -> str:
    return _value(row, "tags.dvc.experiment") or _value(row, "tags.mlflow.runName") or row["run_id"][:8]


def stage_runs(runs, parent_id: str, stage: re.Pattern) -> dict[str, Any]:
    """The newest child run of `parent_id` per stage matching `stage`."""
    from lopd.core.tracking import PARENT_TAG

    column = f"tags.{PARENT_TAG}"
    if column not in runs.columns:
        return {}
    children = runs[runs[column] == parent_id].sort_values("start_time")
    chosen = {}
    for _, child in children.iterrows():
        name = _value(child, "tags.dvc.stage") or _value(child, "tags.mlflow.runName") or ""
        if stage.search(name):
            chosen[name] = child  # sorted oldest first: the newest wins
    return chosen


def build_table(runs, parents, stage: re.Pattern, metrics: re.Pattern | None, all_params: bool,
                all_metrics: bool = False) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, rows and footnotes of the comparison."""
    rows, params, scores, stages = [], [], [], set()
    for _, parent in parents.iterrows():
        children = stage_runs(runs, parent["run_id"], stage)
        stages.update(children)
        own = _prefixed(parent, "params.")
        params.append(own or next((_prefixed(c, "params.") for c in children.values()), {}))
        scores.append({(name, key): value for name, child in children.items()
                       for key, value in _prefixed(child, "metrics.").items()
                       if (metrics.search(key) if metrics else not key.startswith("system/"))})
        commit = str(_value(parent, "tags.git.commit") or MISSING)[:7]
        dirty = "*" if _value(parent, "tags.git.dirty") == "true" else ""
        started = _value(parent, "start_time")  # a pandas Timestamp in UTC
        started = None if started is None else started.to_pydatetime()
        rows.append([_label(parent), _when(started), parent["status"], commit + dirty])

    keys = sorted({k for p in params for k in p})
    varying = [k for k in keys if all_params or len({p.get(k) for p in params}) > 1]
    measured = sorted({k for s in scores for k in s})
    metric_keys = [k for k in measured if all_metrics or len(rows) < 2 or len({s.get(k) for s in scores}) > 1]
    one_stage = len({name for name, _ in metric_keys}) <= 1
    header = (["run", "started", "status", "commit"] + varying
              + [key if one_stage else f"{name}:{key}" for name, key in metric_keys])
    for row, p, s in zip(rows, params, scores):
        row += [_fmt(p.get(k)) for k in varying] + [_fmt(s.get(k)) for k in metric_keys]

    notes = []
    if not all_params and len(keys) > len(varying):
        notes.append(f"{len(keys) - len(varying)} params equal in every row (--all-params shows them)")
    if len(measured) > len(metric_keys):
        notes.append(f"{len(measured) - len(metric_keys)} metrics equal in every row (--all-metrics shows them)")
    if not stages:
        notes.append(f"no stage run matches --stage {stage.pattern!r}")
    elif not measured:
        notes.append(f"no metrics{' matching ' + repr(metrics.pattern) if metrics else ''} in stage runs "
                     f"{', '.join(sorted(stages))}")
    else:
        notes.append(f"metrics from stage run(s): {', '.join(sorted(stages))}")
    if any(r[3].endswith("*") for r in rows):
        notes.append("commit*: run with uncommitted code changes")
    return header, rows, notes


def _when(started: datetime | None) -> str:
    return started.astimezone().strftime("%Y-%m-%d %H:%M") if started else MISSING  # local time, as the UI shows


def _fmt(value: Any) -> str:
    """3-4 significant digits for numbers (params arrive as strings), cut long text; MISSING for none."""
    if value is None:
        return MISSING
    if isinstance(value, str):
        if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)", value.strip()):
            value = float(value)  # a float param: formatted like a metric; ints and names stay as written
        else:
            return value if len(value) <= _MAX_CELL else value[:_MAX_CELL - 1] + "…"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# --- how it prints ---

def render(header: list[str], rows: list[list[str]], width: int) -> str:
    """An aligned text table; when wider than `width`, the columns continue in further blocks, each led by `run`."""
    widths = [max(len(c) for c in column) for column in zip(header, *rows)]
    numeric = [all(_is_number(r[i]) for r in rows) for i in range(len(header))]
    blocks, current = [], [0, 1, 2, 3]  # the first block carries run, started, status and commit
    for i in range(4, len(header)):
        used = sum(widths[j] + len(_GAP) for j in current)
        if used + widths[i] > width and current[-1] >= 4:  # full, and it shows at least one value column
            blocks.append(current)
            current = [0]
        current.append(i)
    blocks.append(current)

    def line(block: list[int], cells: list[str]) -> str:
        aligned = (c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]) for i, c in zip(block, cells))
        return _GAP.join(aligned).rstrip()

    tables = []
    for block in blocks:
        lines = [line(block, [header[i] for i in block]), line(block, ["-" * widths[i] for i in block])]
        tables.append("\n".join(lines + [line(block, [row[i] for i in block]) for row in rows]))
    return "\n\n".join(tables)


def _is_number(cell: str) -> bool:
    if cell == MISSING:
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        stage = re.compile(args.stage)
        metrics = re.compile(args.metrics) if args.metrics else None
    except re.error as err:
        print(f"error: bad regex: {err}", file=sys.stderr)
        return 2
    try:
        experiment, uri = resolve_target(args.experiment, args.uri)
        runs = load_runs(experiment, uri)
        header, rows, notes = build_table(runs, select_parents(runs, args.runs), stage, metrics, args.all_params,
                                          args.all_metrics)
    except CompareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - an unreadable store or a server error: one line, no traceback
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        print(f"error: cannot read the MLflow runs ({detail})", file=sys.stderr)
        return 2
    print(f"{experiment} ({uri}): {len(rows)} invocation(s)\n")
    print(render(header, rows, shutil.get_terminal_size().columns))
    for note in notes:
        print(f"  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
