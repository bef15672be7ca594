"""A tuning sweep of the learning race (issue: a method that does not learn at its own settings): one DVC experiment
per value of one setting of one race run (its lr or steps, or a numeric or true/false param its stage reads, e.g.
lopd.composer_lr or bank.self_retrieval), each re-running that run's stage alone on the held-in tasks
(`-s`: the selection and the paper pipeline's stages come from the workspace), then a table of every finished point
beside the run's committed result.

  python scripts/learn_sweep.py queue grpo lr 1e-5 3e-5    # then: dvc queue start (one at a time: 2 cores)
  python scripts/learn_sweep.py table grpo lr              # reports/tables/learning_race_sweep_grpo_lr.{md,csv}

A point is experiment `learn-<run>-<setting><value>` (e.g. learn-grpo-lr3e-05); the table takes every finished
experiment of that name pattern whose params differ from the workspace's only in that run's entry, with the commit it
ran on. Tune only here, on the held-in tasks, never on a benchmark.

`--measure eval_samples=16` (repeatable) measures every point of a sweep more finely than the workspace's race does:
the points are named with it (learn-grpo-steps24-eval_samples16), and their table (`..._eval_samples16`) leaves out the
committed result, measured otherwise. Only the measurement's settings may change this way (MEASUREMENT): the held-in
tasks come from the workspace's selection. `--hold steps=24` fixes the run's other setting for every point (an lr
sweep at 24 steps: learn-lopd-lr3e-05-steps24); its table takes any finished experiment of the run at those settings,
so the steps sweep's point at 24 steps is the lr sweep's point at the run's own lr.

A param of a stage upstream of the race (`bank.*`, `composer.*`) changes only what the race's run reads of it: with
`-s` the bank and the cold-start composer stay the workspace's (dvc.lock says so), so `learn_sweep.py queue lopd
bank.self_retrieval true` lets LOPD's teacher retrieve the task's own bank entries during the race, from the same φ0.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evaluation.learning_race import verdict  # noqa: E402
from evaluation.sweeps import experiments  # noqa: E402
from evaluation.tables import Table, to_csv, to_markdown  # noqa: E402
from lopd.core import registry  # noqa: E402
from lopd.core.config import ConfigError, load_config  # noqa: E402
from pipelines.dag import race_params  # noqa: E402

SETTINGS = {"lr": float, "steps": int}
"""The run settings (LearnRun's fields), with their types; a sweep varies one of them or a numeric or true/false
param."""
STAGE_PARAMS = ("margin", "latent_tokens", "n_ret", "composer", "bank")
"""Params beside a method's own section that a sweep may vary, where the run's stage reads them (pipelines/learn/
dvc.yaml: its method's, e.g. LOPD's margin, not GRPO's)."""
MEASUREMENT = ("eval_samples", "eval_every")
"""The learn settings `--measure` may fix for a whole sweep: how the held-in reward is measured, not what trains."""
COLUMNS = (("lr", "lr"), ("rollouts", "Rollouts"), ("start", "Held-in, step 0"),
           ("end", "Held-in, end"), ("change", "Change"), ("change_ci", "95% CI"), ("call", "Call"),
           ("commit", "Commit"))
TABLES = REPO / "reports" / "tables"


def fixed_suffix(fixed: dict[str, float | int]) -> str:
    """`-eval_samples16-steps24`: how a sweep's points name the settings they fix for the whole sweep ('' for none)."""
    return "".join(f"-{key}{value:g}" for key, value in sorted(fixed.items()))


def setting_path(run: str, setting: str) -> str:
    """The params path a setting changes: a run setting's is in the run's entry; any other names a param itself."""
    return f"learn.runs.{run}.{setting}" if setting in SETTINGS else setting


def spelled(value: float | int | bool) -> str:
    """How names, `-S` overrides and tables write a setting's value: `3e-05`, `24`, `true`."""
    return str(value).lower() if isinstance(value, bool) else f"{value:g}"


def parse_value(kind: type, text: str) -> float | int | bool:
    """A value of a setting of type `kind` from the command line (`true` or `false` for a switch); a ValueError
    names it."""
    if kind is bool:
        if text not in ("true", "false"):
            raise ValueError(f"{text}: a true/false setting takes true or false")
        return text == "true"
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{text}: the setting takes a {kind.__name__}") from None


def short_name(setting: str) -> str:
    """`lopd.composer_lr` -> `composer_lr`: how experiment and table names spell a setting."""
    return setting.rsplit(".", 1)[-1]


def experiment_name(run: str, setting: str, value: float | int | bool, measure: dict[str, int] | None = None,
                    hold: dict[str, float | int] | None = None) -> str:
    """`learn-grpo-lr3e-05`: the DVC experiment of one sweep point."""
    return f"learn-{run}-{short_name(setting)}{spelled(value)}{fixed_suffix({**(measure or {}), **(hold or {})})}"


def point_args(run: str, setting: str, value: float | int | bool, measure: dict[str, int] | None = None,
               hold: dict[str, float | int] | None = None) -> list[str]:
    """`dvc exp run` arguments of one sweep point: that run's stage alone, with the one setting changed (and the
    measurement's settings `measure` and the run's settings `hold`, fixed for the whole sweep)."""
    changed = {setting_path(run, setting): value, **{setting_path(run, k): v for k, v in sorted((hold or {}).items())},
               **{f"learn.{k}": v for k, v in sorted((measure or {}).items())}}
    args = [arg for path, v in changed.items()
            for arg in ("-S", f"{path}={spelled(v) if isinstance(v, bool) else repr(v)}")]
    return ["-n", experiment_name(run, setting, value, measure, hold), "-s", *args,
            f"pipelines/learn/dvc.yaml:learn@{run}"]


def param(params: dict[str, Any], path: str) -> Any:
    """The value at a dotted params path (a KeyError where there is none)."""
    for key in path.split("."):
        params = params[key]
    return params


def _blank(params: dict[str, Any], path: str) -> dict[str, Any]:
    """`params` with the value at `path` set to None (copies along the path; absent keys are added)."""
    key, _, rest = path.partition(".")
    return {**params, key: _blank(params.get(key) or {}, rest) if rest else None}


def sweep_rows(run: str, setting: str, exps: list[dict], params: dict[str, Any],
               committed: dict[str, Any] | None, measure: dict[str, int] | None = None,
               hold: dict[str, float | int] | None = None) -> list[dict]:
    """The sweep's table rows, ordered by the setting's value: the workspace's committed result of `run` (its
    metrics section, or None; left out under `measure` or `hold`, which measure or train otherwise) and each finished
    experiment (`evaluation.sweeps.experiments`) of `run` (named learn-<run>-...) whose params equal `params` (the
    workspace's, with `measure`'s learn settings and `hold`'s in the run's entry) but for `setting`; the first
    experiment of a name wins (DVC lists the newest first)."""
    stage, path = f"learn@{run}", setting_path(run, setting)
    points = [("workspace", param(params, path), committed)] if committed and not measure and not hold else []
    runs = {**params["learn"]["runs"], run: {**params["learn"]["runs"][run], **(hold or {})}}
    expected = _blank({**params, "learn": {**params["learn"], **(measure or {}), "runs": runs}}, path)
    seen = set()
    for exp in exps:
        if not exp["name"].startswith(f"learn-{run}-") or exp["name"] in seen:
            continue
        if _blank(exp["params"], path) != expected:
            continue
        metrics = exp["metrics"].get(f"results/learn/metrics/{run}.json", {}).get(stage)
        if metrics:
            seen.add(exp["name"])
            points.append((f"{exp['name']} ({exp['baseline'][:7]})", param(exp["params"], path), metrics))
    method = registry.label(params["learn"]["runs"][run]["method"])
    rows = []
    for commit, value, m in points:
        rows.append({"point": f"{method} · {setting} {'null (its own)' if value is None else spelled(value)}",
                     "lr": f"{m['lr']:g}",
                     "rollouts": m["rollouts"], "start": m["start"], "end": m["end"], "change": m["change"],
                     "change_ci": f"[{m['change_low']:+.3f}, {m['change_high']:+.3f}]",
                     "call": verdict(m["change_low"], m["change_high"]), "commit": commit,
                     "_order": {"lr": m["lr"], "steps": m["rollouts"]}.get(setting, value)})
    return sorted(rows, key=lambda r: r["_order"])


def setting_type(params: dict[str, Any], run: str, setting: str) -> type:
    """The type of a setting's values: a run setting's (SETTINGS), or that of the numeric or true/false param it names
    (a ValueError for a param the run's stage does not read or one of another kind)."""
    if setting in SETTINGS:
        return SETTINGS[setting]
    method = params["learn"]["runs"][run]["method"]
    reads = [key for key in race_params(run) if key.split(".")[0] in (method, *STAGE_PARAMS)]
    if not any(setting == key or setting.startswith(f"{key}.") for key in reads):
        raise ValueError(f"{setting}: a run setting ({', '.join(SETTINGS)}) or a param of the run's stage "
                         f"({', '.join(f'{key}.<key>' if key == method else key for key in reads)})")
    try:
        value = param(params, setting)
    except (KeyError, TypeError):
        raise ValueError(f"{setting}: no such param in params.yaml") from None
    if type(value) not in (int, float, bool):
        raise ValueError(f"{setting}: a sweep varies a number or a true/false switch; params.yaml has {value!r}")
    return type(value)


def parse_hold(item: str, setting: str) -> tuple[str, float | int]:
    """`steps=24` -> ("steps", 24): a run setting of SETTINGS, other than the swept `setting`, fixed for the sweep;
    anything else is a ValueError."""
    key, _, value = item.partition("=")
    if key not in SETTINGS or key == setting:
        raise ValueError(f"--hold {item}: one of {', '.join(k for k in SETTINGS if k != setting)} (the run's setting "
                         "the sweep does not vary)")
    try:
        return key, SETTINGS[key](value)
    except ValueError:
        raise ValueError(f"--hold {item}: learn.runs.<run>.{key} must be a {SETTINGS[key].__name__}") from None


def parse_measure(item: str) -> tuple[str, int]:
    """`eval_samples=16` -> ("eval_samples", 16); a key outside MEASUREMENT or a count below 1 is a ValueError."""
    key, _, value = item.partition("=")
    if key not in MEASUREMENT:
        raise ValueError(f"--measure {item}: one of {', '.join(MEASUREMENT)} (what trains changes through the run's "
                         "own settings; the held-in tasks through the selection)")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"--measure {item}: learn.{key} must be a count >= 1")
    return key, int(value)


def dvc(*args: str) -> str:
    proc = subprocess.run(["dvc", *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"error: dvc {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["queue", "table"])
    parser.add_argument("run", help="a run of learn.runs, e.g. grpo")
    parser.add_argument("setting", help="lr, steps, or a numeric or true/false param of the run's stage, e.g. "
                                        "lopd.composer_lr")
    parser.add_argument("values", nargs="*", help="queue: the setting's values, e.g. 1e-5 3e-5 (or true, false)")
    parser.add_argument("--measure", action="append", default=[], metavar="KEY=N",
                        help=f"a measurement setting fixed for every point ({', '.join(MEASUREMENT)}), e.g. "
                             "eval_samples=16")
    parser.add_argument("--hold", action="append", default=[], metavar="KEY=V",
                        help="the run's other setting fixed for every point, e.g. steps=24 (an lr sweep at 24 steps)")
    args = parser.parse_args()
    try:
        cfg = load_config(REPO / "params.yaml")
        if args.run not in cfg.learn.runs:
            raise ConfigError(f"learn.runs: no run named {args.run!r} (runs: {', '.join(cfg.learn.runs)})")
        kind = setting_type(cfg.to_dict(), args.run, args.setting)
        values = [parse_value(kind, v) for v in args.values]
        measure = dict(parse_measure(item) for item in args.measure)
        hold = dict(parse_hold(item, args.setting) for item in args.hold)
    except (ConfigError, ValueError) as err:
        sys.exit(f"error: {err}")
    if args.action == "queue":
        if not values:
            sys.exit("error: queue: give the setting's values, e.g. `queue grpo lr 1e-5 3e-5`")
        for value in values:
            dvc("exp", "run", "--queue", *point_args(args.run, args.setting, value, measure, hold))
        again = "".join(f" --measure {item}" for item in args.measure) + "".join(f" --hold {i}" for i in args.hold)
        print(f"queued {len(values)} point(s) of learn@{args.run}; run them with `dvc queue start` (one worker), "
              f"then `python scripts/learn_sweep.py table {args.run} {args.setting}{again}`")
        return
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps/"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.split()
    baselines = sorted({m[1] + m[2] for r in refs if (m := re.fullmatch(r"refs/exps/(\w\w)/(\w{38})/[^/]+", r))})
    show = json.loads(dvc("exp", "show", "--json", *(a for b in baselines or ["HEAD"] for a in ("--rev", b))))
    metrics_file = REPO / "results" / "learn" / "metrics" / f"{args.run}.json"
    committed = json.loads(metrics_file.read_text()).get(f"learn@{args.run}") if metrics_file.exists() else None
    rows = sweep_rows(args.run, args.setting, experiments(show), cfg.to_dict(), committed, measure, hold)
    notes = ["Each point re-ran only its run's stage (the same held-in tasks, selection and step 0); Change: end "
             "minus step 0 with its paired bootstrap 95% CI over the tasks, called only where it excludes 0.",
             "Commit: the workspace's committed result, or the experiment and the commit it ran on."]
    if measure:
        fixed = ", ".join(f"learn.{k} = {v} (the race's: {getattr(cfg.learn, k)})" for k, v in sorted(measure.items()))
        notes.insert(0, f"Every point, step 0 included, measured with {fixed}; the committed result, measured "
                        "otherwise, is left out.")
    if hold:
        fixed = ", ".join(f"{k} = {v:g}" for k, v in sorted(hold.items()))
        notes.insert(0, f"Every point trained with {fixed}; the committed result, trained otherwise, is left out.")
    table = Table(COLUMNS, [(row["point"], row) for row in rows], notes, digits=3)
    suffix = fixed_suffix({**measure, **hold}).replace("-", "_")
    out = TABLES / f"learning_race_sweep_{args.run}_{short_name(args.setting)}{suffix}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(to_markdown(table, f"Learning race sweep: {args.run}'s {args.setting} "
                                                         f"({cfg.profile} profile, model {cfg.model.name})"))
    out.with_suffix(".csv").write_text(to_csv(table))
    print(f"{len(rows)} point(s); wrote {out.with_suffix('.md').relative_to(REPO)} and .csv")


if __name__ == "__main__":
    main()
