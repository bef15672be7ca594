"""The default pipeline's wall time, summed over its stages' MLflow runs.

Every stage logs one MLflow run under its dvc.yaml name (lopd/core/tracking.py); its duration (end - start) less the
time it spent interrupted (a training stage resumed from its checkpoint continues its run: tag `lopd.paused_s`) is the
stage's wall time on the machine that ran it. Per stage of the DAG this takes the newest FINISHED run made in the
workspace (runs inside DVC experiments, e.g. sweep points, are not the default run), sums them and writes
reports/perf/default_run_wall_time.json. A stage with no such run (it ran elsewhere, or DVC restored it from its
cache) is listed as missing and the total is then a lower bound, as the file says. DVC's own work around a stage
(hashing its inputs, caching its outputs) is not in the runs.

MLflow's store lives on the machine (~/.cache/lopd-suite), so a recording spread over sessions on fresh machines
keeps each session's stages in a file of its own (`--out`) and the last session sums them: `--merge FILE...` fills a
stage this machine has no run for from those files (the newest `finished` wins), and the entry says which file.
Each stage names the CPU it ran on (`machine`): `scripts/estimate.py --check` lists a domain's stages that ran on
another CPU than the one its speed ratio was measured on.

`--since TIME` keeps the runs started then or later: a re-timing of some stages, apart from older runs of the others.

Run: python scripts/wall_time.py [--experiment NAME] [--uri URI] [--out PATH] [--merge FILE ...] [--since TIME]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from lopd.core.config import load_config  # noqa: E402
from lopd.core.device import stage_malloc_mode, use_cpu_matmul  # noqa: E402
from lopd.core.vllm_backend import CPU_SAMPLER  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "reports" / "perf" / "default_run_wall_time.json"


def stage_wall_times(runs: Iterable[dict[str, Any]], stages: list[str],
                     since: datetime | None = None) -> dict[str, Any]:
    """Per stage in `stages`, the newest finished workspace run's duration (of those started at `since` or later,
    given one); their sum; the stages without one.

    `runs` are dicts with `stage`, `status`, `start` and `end` (datetimes), `paused_s` (seconds interrupted),
    `experiment` (a DVC experiment name or None) and `commit`."""
    newest: dict[str, dict[str, Any]] = {}
    for run in runs:
        if run["stage"] not in stages or run["status"] != "FINISHED" or run["experiment"] or run["end"] is None:
            continue
        if since is not None and run["start"] < since:
            continue
        if run["stage"] not in newest or run["start"] > newest[run["stage"]]["start"]:
            newest[run["stage"]] = run
    return summarise({s: {"seconds": round((r["end"] - r["start"]).total_seconds() - r["paused_s"], 1),
                          "finished": r["end"].isoformat(), "commit": r["commit"]}
                      for s in stages if (r := newest.get(s))}, stages)


def cpu_name(cpuinfo: str) -> str:
    """The CPU named by /proc/cpuinfo's text: model name, family and model numbers, its widest vector unit and whether
    that unit has bf16 (a record spread over machines says which stage ran on which; a virtual CPU's model name alone
    can be generic, and one model was seen here with and without AVX512-BF16 exposed)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags", "").split()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    vector += " with BF16" if "avx512_bf16" in flags else ""
    numbers = f"family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}"
    return f"{fields.get('model name', 'unknown')} ({numbers}, {vector})"


def this_cpu() -> str:
    """`cpu_name` of the machine at hand ('unknown' where there is no /proc/cpuinfo)."""
    cpuinfo = Path("/proc/cpuinfo")
    return cpu_name(cpuinfo.read_text()) if cpuinfo.exists() else "unknown"


def merge_earlier(result: dict[str, Any], earlier: dict[str, dict[str, Any]], stages: list[str]) -> dict[str, Any]:
    """`result` (from `stage_wall_times`) with each of its missing stages taken from `earlier` (file name -> an
    earlier output of this script) where one has it: the newest `finished` among them, marked with its file."""
    per_stage = dict(result["stages"])
    for stage in result["missing"]:
        found = [{**entries["stages"][stage], "from": name} for name, entries in earlier.items()
                 if stage in entries["stages"]]
        if found:
            per_stage[stage] = max(found, key=lambda entry: entry["finished"])
    return summarise({s: per_stage[s] for s in stages if s in per_stage}, stages)


def summarise(per_stage: dict[str, dict[str, Any]], stages: list[str]) -> dict[str, Any]:
    """The stage times `per_stage` (in `stages` order) with their sum and the stages of `stages` they lack."""
    missing = [s for s in stages if s not in per_stage]
    return {"total_s": round(sum(v["seconds"] for v in per_stage.values()), 1), "complete": not missing,
            "missing": missing, "stages": per_stage}


def dag_stages() -> list[str]:
    """Every stage of dvc.yaml, foreach items expanded, in DVC's order."""
    listed = subprocess.run(["dvc", "stage", "list", "--name-only"], cwd=REPO_ROOT, capture_output=True, text=True)
    if listed.returncode:
        sys.exit(f"error: dvc stage list: {listed.stderr.strip().splitlines()[-1] if listed.stderr else 'failed'}")
    return listed.stdout.split()


def load_compare():
    spec = importlib.util.spec_from_file_location("compare", REPO_ROOT / "scripts" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mlflow_runs(experiment: str | None, uri: str | None) -> tuple[list[dict[str, Any]], str, str]:
    compare = load_compare()
    try:
        experiment, uri = compare.resolve_target(experiment, uri)
        frame = compare.load_runs(experiment, uri)
    except compare.CompareError as err:
        sys.exit(f"error: {err}")

    def cell(row, column: str):
        return compare._value(row, column)

    runs = []
    for _, row in frame.iterrows():
        end = cell(row, "end_time")
        runs.append({"stage": cell(row, "tags.dvc.stage"), "status": row["status"],
                     "start": row["start_time"].to_pydatetime(), "end": end.to_pydatetime() if end else None,
                     "paused_s": float(cell(row, "tags.lopd.paused_s") or 0),
                     "experiment": cell(row, "tags.dvc.experiment"), "commit": cell(row, "tags.git.commit")})
    return runs, experiment, uri


def since_time(text: str) -> datetime:
    """--since's time: ISO 8601, UTC where it names no zone (MLflow's run times are UTC)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not an ISO time: {err}") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", help="MLflow experiment (default: <tracking.experiment_prefix>-<profile>)")
    parser.add_argument("--uri", help="tracking URI (default: params.yaml's tracking.mlflow_uri)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--merge", type=Path, nargs="+", default=[], metavar="FILE",
                        help="earlier outputs of this script (other machines) for the stages with no run here")
    parser.add_argument("--since", type=since_time, metavar="ISO_TIME",
                        help="only runs started then or later, e.g. 2026-12-04T22:30 (UTC unless it says): the "
                             "stages a re-timing ran, not older runs of the others")
    args = parser.parse_args(argv)
    earlier = {}
    for path in args.merge:
        try:
            earlier[path.name] = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            sys.exit(f"error: --merge {path}: {err}")
        if not isinstance(earlier[path.name], dict) or not isinstance(earlier[path.name].get("stages"), dict):
            sys.exit(f"error: --merge {path}: no `stages` (not an output of scripts/wall_time.py)")
    runs, experiment, uri = mlflow_runs(args.experiment, args.uri)
    stages = dag_stages()
    here = stage_wall_times(runs, stages, args.since)
    machine = this_cpu()
    here["stages"] = {stage: {**entry, "machine": machine} for stage, entry in here["stages"].items()}
    result = merge_earlier(here, earlier, stages)
    store = uri.replace(str(Path.home()), "~")  # the file is committed: no machine's absolute path in it
    result = {"experiment": experiment, "cpus": os.cpu_count(), "written": datetime.now().isoformat(timespec="seconds"),
              "sampler": CPU_SAMPLER,  # the CPU engine's, on the code that recorded the run (estimate.py --check)
              "cpu_matmul": use_cpu_matmul(load_config().model.cpu_matmul),  # the updates' path on this machine (same)
              "malloc": stage_malloc_mode(),  # how glibc served the stages' tensors (same)
              "note": ("every stage's newest finished workspace run" if result["complete"] else
                       f"a lower bound: {len(result['missing'])} stages have no finished run in {store}"
                       + (f" started since {args.since.isoformat()}" if args.since else ""))
              + (f" (stages marked `from` were measured on other machines: {', '.join(earlier)})" if earlier else ""),
              **result}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for stage, v in result["stages"].items():
        print(f"{stage:34s} {v['seconds'] / 60:7.1f} min")
    print(f"{'total':34s} {result['total_s'] / 3600:7.2f} h ({result['note']})")
    if result["missing"]:
        print("missing: " + " ".join(result["missing"]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
