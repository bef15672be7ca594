"""Compare runs in a terminal: pipeline invocations from MLflow (`make compare`) or DVC experiments (`make exps`).

One column per run, then one line per param and per metric that differs between the columns:
- MLflow (default): each invocation's parent run (one `dvc repro` or `dvc exp run`; see lopd/core/tracking.py) with
  its start time, status and commit (`*`: uncommitted code changes); the params it overrode, and the metrics of the
  stages that ran in it (its parent holds every stage's summary under the stage's name).
- DVC (`--dvc`): the experiments of the workspace's commit, each compared with its own baseline, the run of the same
  profile without overrides (or the commit itself when it ran that profile): one table per profile. Experiments DVC
  named at random are first renamed after their overrides (`dvc exp rename`, e.g. `smoke_margin-0.02`).
Timings (wall_s, sampling_s, ...), CI bounds and task counts are left out unless --all-metrics.

Run: python scripts/compare.py [--dvc] [--runs NAME ...] [--stage REGEX] [--metrics REGEX] [--all-params]
                               [--all-metrics] [--experiment NAME] [--uri URI]
The MLflow experiment defaults to `<tracking.experiment_prefix>-<profile>` of params.yaml and the store to its
`tracking.mlflow_uri` (env LOPD_MLFLOW_URI overrides), as the stages log them.
"""

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
MISSING = "-"
_MAX_CELL = 24  # wider values are cut: the table must fit a terminal
_GAP = "  "
NOISE = re.compile(r"(^|[._])(wall_s|sampling_s|scoring_s|time_\w+|\w+_per_s|n_tasks|n_train_tasks|generated_tokens)$"
                   r"|_ci_(low|high)$|\.ci_(low|high)$")
"""Metrics left out unless --all-metrics: they differ in every re-run (timings) or restate another metric's n and CI."""


class CompareError(Exception):
    """A problem worth one line to the user (no traceback)."""


@dataclass
class Column:
    """One run to compare: its name, what to say about it (start, status, commit), its params (flat) and its metrics
    by (stage, name); `ran` are the stages it ran (None: unknown, every stage counts)."""
    name: str
    about: dict[str, str]
    params: dict[str, Any]
    metrics: dict[tuple[str, str], float]
    ran: set[str] | None = None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dvc", action="store_true", help="compare DVC experiments (dvc exp show) instead of MLflow")
    parser.add_argument("--experiment", help="MLflow experiment (default: <tracking.experiment_prefix>-<profile>)")
    parser.add_argument("--uri", help="tracking URI (default: params.yaml's tracking.mlflow_uri; env LOPD_MLFLOW_URI)")
    parser.add_argument("--runs", nargs="+", metavar="NAME",
                        help="only these: experiment or parent run names, or run-id / commit prefixes")
    parser.add_argument("--stage", help="regex of the stages whose metrics to show (default: every stage that ran)")
    parser.add_argument("--metrics", help="regex of the metric names to show (default: all but timings, CIs, counts)")
    parser.add_argument("--all-params", action="store_true", help="show every param, not only those that differ")
    parser.add_argument("--all-metrics", action="store_true",
                        help="also the metrics equal in every column, and timings, CI bounds and counts")
    return parser.parse_args(argv)


# --- MLflow: one column per pipeline invocation ---

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


def _value(row, column: str) -> Any:
    """A cell of a search_runs row; None when the column is absent or empty (NaN, NaT, None)."""
    import pandas as pd

    value = row[column] if column in row.index else None
    return None if value is None or pd.isna(value) else value


def _prefixed(row, prefix: str) -> dict[str, Any]:
    return {k.removeprefix(prefix): v for k in row.index if k.startswith(prefix) and (v := _value(row, k)) is not None}


def _stage_of(metric: str) -> tuple[str, str]:
    """(stage, metric) of a parent run's metric: stage names hold no dot, and MLflow spells their `@` as `_at_`."""
    stage, _, key = metric.partition(".")
    return stage.replace("_at_", "@"), key


def mlflow_columns(runs, names: list[str] | None) -> list[Column]:
    """The invocations' parent runs, oldest first (only those named in `names`, if given), as columns. A parent
    logged before parents held metrics contributes its child runs' metrics instead."""
    from lopd.core.tracking import INVOCATION_TAG, PARENT_TAG, STAGE_TAG

    column = f"tags.{INVOCATION_TAG}"
    if column not in runs.columns or runs[column].isna().all():
        raise CompareError("no pipeline invocations (parent runs) in this experiment; stages run outside DVC and "
                           "runs logged before parent runs existed have none")
    parents = runs[runs[column].notna()].sort_values("start_time")
    children_of = runs.groupby(f"tags.{PARENT_TAG}") if f"tags.{PARENT_TAG}" in runs.columns else None
    columns = []
    for _, parent in parents.iterrows():
        name = _value(parent, "tags.mlflow.runName") or parent["run_id"][:8]
        if names and not (name in names or _value(parent, "tags.dvc.experiment") in names
                          or any(parent["run_id"].startswith(n) for n in names)):
            continue
        children = ([] if children_of is None or parent["run_id"] not in children_of.groups
                    else [c for _, c in children_of.get_group(parent["run_id"]).sort_values("start_time").iterrows()])
        ran = {_value(c, f"tags.{STAGE_TAG}") for c in children}
        metrics = {_stage_of(k): v for k, v in _prefixed(parent, "metrics.").items()}
        if not metrics:  # newest child per stage wins
            metrics = {(_value(c, f"tags.{STAGE_TAG}"), k): v for c in children
                       for k, v in _prefixed(c, "metrics.").items() if not k.startswith("system/")}
        # the parent holds the profile and the overrides; a stage's run every value it ran with
        params = {**(_prefixed(children[0], "params.") if children else {}), **_prefixed(parent, "params.")}
        commit = str(_value(parent, "tags.git.commit") or MISSING)[:7]
        dirty = "*" if _value(parent, "tags.git.dirty") == "true" else ""
        started = _value(parent, "start_time")  # a pandas Timestamp in UTC
        about = {"started": _when(None if started is None else started.to_pydatetime()), "status": parent["status"],
                 "commit": commit + dirty}
        columns.append(Column(name, about, params, metrics, ran))
    if not columns:
        raise CompareError(f"no invocation named {', '.join(names or [])}")
    return columns


def _when(started: datetime | None) -> str:
    return started.astimezone().strftime("%Y-%m-%d %H:%M") if started else MISSING  # local time, as the UI shows


# --- DVC: one table per baseline commit and profile ---

def dvc(*args: str) -> str:
    """Output of a `dvc` command in the repository; its last error line as a CompareError."""
    proc = subprocess.run(["dvc", *args], cwd=REPO_ROOT, capture_output=True, text=True)
    if proc.returncode:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise CompareError(f"dvc {args[0]} {args[1] if len(args) > 1 else ''}: {lines[-1] if lines else 'failed'}")
    return proc.stdout


def _numbers(tree: dict[str, Any], prefix: str = "") -> dict[str, float]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_numbers(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = value
    return out


def _dvc_column(name: str, about: dict[str, str], data: dict[str, Any]) -> Column:
    """A column of `dvc exp show --json`'s revision `data`: params.yaml flat, and every metrics file's
    `{stage: {...}}` as (stage, key)."""
    from lopd.core.experiments import flatten

    params = flatten((data.get("params") or {}).get("params.yaml", {}).get("data") or {})
    metrics = {}
    for content in (data.get("metrics") or {}).values():
        for stage, numbers in (content.get("data") or {}).items():
            if isinstance(numbers, dict):
                metrics.update({(stage, k): v for k, v in _numbers(numbers).items()})
    return Column(name, about, params, metrics)


def dvc_revisions(show: list[dict[str, Any]]) -> tuple[Column | None, list[tuple[str, Column]]]:
    """The workspace's commit and its experiments (DVC name, column) from `dvc exp show --json`."""
    commit = next((r for r in show if r.get("rev") != "workspace"), None)
    if commit is None:
        return None, []
    head = _dvc_column(commit.get("name") or commit["rev"][:7], {"commit": commit["rev"][:7]}, commit.get("data", {}))
    experiments = []
    for exp in commit.get("experiments") or []:
        for rev in exp.get("revs") or []:
            if rev.get("name") and rev.get("data"):
                created = (rev["data"].get("timestamp") or "")[:16].replace("T", " ")
                experiments.append((rev["name"], _dvc_column(rev["name"], {"created": created or MISSING,
                                                                           "commit": rev["rev"][:7]}, rev["data"])))
    return head, experiments


def readable_names(experiments: list[tuple[str, Column]], baseline: dict[str, Any] | None) -> dict[str, str]:
    """New names for the experiments DVC named at random, after what they changed (`readable_name` against the
    commit's params `baseline`), unique among the experiments' names (`-2`, `-3`, ...)."""
    from lopd.core.experiments import is_dvc_generated, readable_name

    taken, renames = {name for name, _ in experiments}, {}
    for name, column in experiments:
        readable = readable_name(column.params, baseline) if is_dvc_generated(name) else ""
        if not readable:
            continue
        new, n = readable, 1
        while new in taken:
            n += 1
            new = f"{readable}-{n}"
        taken.add(new)
        renames[name] = new
    return renames


def dvc_tables(names: list[str] | None) -> list[tuple[str, list[Column]]]:
    """(title, columns) per profile among the workspace commit's experiments, each led by its baseline: the
    experiment without overrides (or the commit itself when it ran that profile). Renames the experiments DVC
    named at random first, and says so."""
    from lopd.core.experiments import profile_overrides

    head, experiments = dvc_revisions(json.loads(dvc("exp", "show", "--json")))
    if head is None:
        raise CompareError("no commit to compare with (dvc exp show found none)")
    renames = readable_names(experiments, head.params)
    for old, new in renames.items():
        dvc("exp", "rename", old, new)
        print(f"renamed experiment {old} -> {new} (after its overrides)")
    experiments = [(renames.get(name, name), column) for name, column in experiments]
    for name, column in experiments:
        column.name = name
    if names:
        experiments = [(n, c) for n, c in experiments if n in names or c.about["commit"].startswith(tuple(names))]
    if not experiments:
        raise CompareError(f"no experiment {'named ' + ', '.join(names) if names else 'on this commit'} "
                           "(run one: dvc exp run -S key=value)")
    tables = []
    for profile in dict.fromkeys(c.params.get("profile") for _, c in experiments):
        group = [c for _, c in experiments if c.params.get("profile") == profile]
        plain = [c for c in group if not profile_overrides(c.params)]
        if head.params.get("profile") == profile:
            lead = head
        elif plain:
            lead = plain[0]  # the newest run of the profile as composed (DVC lists the newest first)
        else:
            lead = None
        group = ([lead] if lead else []) + [c for c in group if c is not lead]
        title = f"profile {profile}: " + (f"against {lead.name}" if lead else "no baseline run of this profile")
        tables.append((title, group))
    return tables


# --- the table ---

def comparison(columns: list[Column], stage: re.Pattern | None, metrics: re.Pattern | None, all_params: bool,
               all_metrics: bool) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The table's lines (label, one cell per column) and its footnotes."""
    lines = [(key, [c.about.get(key, MISSING) for c in columns]) for key in dict.fromkeys(k for c in columns
                                                                                           for k in c.about)]
    keys = sorted({k for c in columns for k in c.params})
    varying = [k for k in keys if all_params or len({_fmt(c.params.get(k)) for c in columns}) > 1]
    lines += [(k, [_fmt(c.params.get(k)) for c in columns]) for k in varying]

    ran = None if any(c.ran is None for c in columns) else set().union(*(c.ran for c in columns))
    measured = sorted({m for c in columns for m in c.metrics
                       if (ran is None or m[0] in ran) and (stage.search(m[0]) if stage else True)
                       and (metrics.search(m[1]) if metrics else all_metrics or not NOISE.search(m[1]))})
    shown = [m for m in measured if all_metrics or len(columns) < 2
             or len({_fmt(c.metrics.get(m)) for c in columns}) > 1]
    lines += [(f"{s}.{k}", [_fmt(c.metrics.get((s, k))) for c in columns]) for s, k in shown]

    notes = []
    if len(keys) > len(varying):
        notes.append(f"{len(keys) - len(varying)} params equal in every column (--all-params shows them)")
    if len(measured) > len(shown):
        notes.append(f"{len(measured) - len(shown)} metrics equal in every column (--all-metrics shows them, "
                     "with timings, CI bounds and counts)")
    if not measured:
        notes.append("no metrics" + (f" of a stage matching {stage.pattern!r}" if stage else "")
                     + (f" matching {metrics.pattern!r}" if metrics else ""))
    if any(c.about.get("commit", "").endswith("*") for c in columns):
        notes.append("commit*: run with uncommitted code changes")
    return lines, notes


def _fmt(value: Any) -> str:
    """3-4 significant digits for numbers (params may arrive as strings), cut long text; MISSING for none."""
    if value is None:
        return MISSING
    if isinstance(value, str):
        if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)", value.strip()):
            value = float(value)  # a float param: formatted like a metric; ints and names stay as written
        else:
            return value if len(value) <= _MAX_CELL else value[:_MAX_CELL - 1] + "…"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return _fmt(",".join(map(str, value)))
    return str(value)


def render(names: list[str], lines: list[tuple[str, list[str]]], width: int) -> str:
    """An aligned text table with one column per run; when wider than `width`, the columns continue in further
    blocks, each led by the label column."""
    label_w = max([len(label) for label, _ in lines] + [3])
    widths = [max([len(name)] + [len(cells[i]) for _, cells in lines]) for i, name in enumerate(names)]
    blocks, current = [], []
    for i, w in enumerate(widths):
        if current and label_w + sum(widths[j] + len(_GAP) for j in current) + len(_GAP) + w > width:
            blocks.append(current)
            current = []
        current.append(i)
    blocks.append(current)

    def line(label: str, cells: list[str], block: list[int]) -> str:
        return _GAP.join([label.ljust(label_w), *(cells[i].rjust(widths[i]) for i in block)]).rstrip()

    tables = []
    for block in blocks:
        rows = [line("run", names, block), line("-" * label_w, ["-" * w for w in widths], block)]
        tables.append("\n".join(rows + [line(label, cells, block) for label, cells in lines]))
    return "\n\n".join(tables)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        stage = re.compile(args.stage) if args.stage else None
        metrics = re.compile(args.metrics) if args.metrics else None
    except re.error as err:
        print(f"error: bad regex: {err}", file=sys.stderr)
        return 2
    try:
        if args.dvc:
            tables = dvc_tables(args.runs)
        else:
            experiment, uri = resolve_target(args.experiment, args.uri)
            tables = [(f"{experiment} ({uri}): invocations, oldest first", mlflow_columns(load_runs(experiment, uri),
                                                                                          args.runs))]
    except CompareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - an unreadable store or a server error: one line, no traceback
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        print(f"error: cannot read the {'DVC experiments' if args.dvc else 'MLflow runs'} ({detail})",
              file=sys.stderr)
        return 2
    for title, columns in tables:
        lines, notes = comparison(columns, stage, metrics, args.all_params, args.all_metrics)
        print(f"{title}\n")
        print(render([c.name for c in columns], lines, shutil.get_terminal_size().columns))
        for note in notes:
            print(f"  {note}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
