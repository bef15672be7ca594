"""Where a DVC stage's fixed cost goes, and what the smoke DAG and an ablation of it take end to end.

A smoke-profile stage does a second or two of work; the rest of its wall time is start-up. Measured side by side in
one run (median of --repeats), for a stage that loads nothing (`eval@vanilla` on a LiveCodeBench window without a
release: n/a), in a scratch folder so that no output of the repository is touched:
- `python -c "import pipelines.<module>"` for each stage module: the interpreter and the imports (torch,
  transformers, accelerate);
- the stage itself with MLflow off and with a sqlite store: the difference is MLflow's import, its store's set-up
  (SQLAlchemy's models) and the run's writes;
- DVC's YAML work per stage: after a stage it reads dvc.lock for update and writes it back (round-trip ruamel), and
  at start-up it reads dvc.yaml and dvc.lock; timed on this repository's files with DVC's own functions;
- the rollout engine's start, which every stage that samples pays once (training, validation, bank, evaluation):
  the cpu profile's engine (`make_backend`, vLLM) built on models/base in a fresh process, the model's weights
  loaded, its KV cache allocated and its warm-up run (n/a without vLLM or models/base), glibc serving its blocks as
  in a stage (`engine_malloc`: lopd.core.device.reuse_freed_memory).
`--dag` instead clones the repository into a scratch folder (../shared beside it, as for CI) and times
`dvc exp run -S profile=smoke`, then `-S margin=0.02` on top (MLflow on, a fresh store): the numbers in
docs/experiments.md.

Run: python scripts/bench/bench_stage_startup.py [--repeats 3]   (writes reports/perf/stage_startup.json)
     python scripts/bench/bench_stage_startup.py --dag           (~12 min; writes reports/perf/smoke_dag.json)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
OUT = REPO_ROOT / "reports" / "perf" / "stage_startup.json"
DAG_OUT = REPO_ROOT / "reports" / "perf" / "smoke_dag.json"
MODULES = ("prepare_model", "train", "evaluate", "evaluate_agentic", "report")
ISOLATED = ("import dataclasses, runpy, sys; from pathlib import Path; import pipelines.common as c\n"
            "root = Path(sys.argv.pop(1))\n"
            "for name, d in list(c.DOMAINS.items()):\n"
            "    c.DOMAINS[name] = dataclasses.replace(d, metrics=root / name / 'm', results=root / name / 'r')\n"
            "runpy.run_module('pipelines.evaluate', run_name='__main__', alter_sys=True)\n")
"""The n/a evaluation with its results and metrics under a scratch root instead of the repository's."""


def seconds(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = REPO_ROOT) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"error: {' '.join(cmd[:4])}...: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return time.perf_counter() - start


def median(fn, repeats: int) -> float:
    return round(statistics.median(fn() for _ in range(repeats)), 2)


def stage_costs(repeats: int, scratch: Path) -> dict:
    from dvc.utils.hydra import compose_and_dump

    from lopd.core.config import CONF_DIR

    params = scratch / "params.yaml"
    compose_and_dump(params, str(CONF_DIR), None, "config", str(scratch),
                     ["profile=smoke", "benchmarks=[lcb_v5]", "data.livecodebench_path=no-release-here"])
    stage = [sys.executable, "-c", ISOLATED, str(scratch / "out"), "--params", str(params), "--method", "vanilla"]
    imports = {m: median(lambda m=m: seconds([sys.executable, "-c", f"import pipelines.{m}"]), repeats)
               for m in MODULES}
    off = median(lambda: seconds(stage, {**os.environ, "LOPD_MLFLOW_URI": "off"}), repeats)
    store = f"sqlite:///{scratch / 'mlflow.db'}"
    seconds(stage, {**os.environ, "LOPD_MLFLOW_URI": store})  # the store's schema is made once, by the first run
    on = median(lambda: seconds(stage, {**os.environ, "LOPD_MLFLOW_URI": store}), repeats)
    return {"imports_s": imports, "n_a_eval_stage_mlflow_off_s": off, "n_a_eval_stage_mlflow_on_s": on,
            "mlflow_s": round(on - off, 2)}


def dvc_yaml_costs(repeats: int) -> dict:
    """DVC's reads and the rewrite of dvc.lock after each stage, with its own ruamel round trip."""
    from dvc.utils.serialize import dumps_yaml, parse_yaml, parse_yaml_for_update

    lock, pipeline = (REPO_ROOT / "dvc.lock").read_text(), (REPO_ROOT / "dvc.yaml").read_text()

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    update = median(lambda: timed(lambda: dumps_yaml(parse_yaml_for_update(lock, "dvc.lock"))), repeats)
    load = median(lambda: timed(lambda: (parse_yaml(lock, "dvc.lock"), parse_yaml(pipeline, "dvc.yaml"))), repeats)
    return {"dvc_lock_lines": lock.count("\n"), "dvc_yaml_lines": pipeline.count("\n"),
            "lock_rewrite_after_each_stage_s": update, "read_dvc_yaml_and_lock_s": load}


ENGINE = ("import sys, time; sys.argv = ['x']\n"
          "from lopd.core.device import reuse_freed_memory\n"
          "reuse_freed_memory()  # as run_stage does first\n"
          "from pipelines.common import BASE_MODEL_DIR, parse_args\n"
          "from lopd.core.models import load_tokenizer\n"
          "from lopd.core.rollout import make_backend\n"
          "_, cfg = parse_args('x')\n"
          "tokenizer = load_tokenizer(BASE_MODEL_DIR)\n"
          "start = time.perf_counter()\n"
          "make_backend(BASE_MODEL_DIR, tokenizer, cfg, cfg.eval.batch_size)\n"
          "print('engine_s', time.perf_counter() - start)\n")
"""The cpu profile's rollout engine built as a stage builds it (glibc's heap for its blocks first), its seconds printed
last."""


def engine_costs(repeats: int) -> dict:
    """The rollout engine's start in a fresh process (the median of `repeats`), or why it is n/a."""
    from lopd.core.device import stage_malloc_mode
    from lopd.core.vllm_backend import vllm_available

    if not vllm_available():
        return {"engine_start_s": "n/a: vllm is not installed"}
    if not (REPO_ROOT / "models" / "base").is_dir():
        return {"engine_start_s": "n/a: no models/base (dvc repro prepare_model)"}

    def start() -> float:
        proc = subprocess.run([sys.executable, "-c", ENGINE], cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"error: the engine's start: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
        return float(proc.stdout.split()[-1])

    return {"engine_start_s": median(start, repeats), "engine_malloc": stage_malloc_mode()}


def dag_costs(shared: Path) -> dict:
    """`dvc exp run -S profile=smoke`, then the margin ablation on it, in a fresh clone; stage count and seconds."""
    with tempfile.TemporaryDirectory(dir=REPO_ROOT.parent) as scratch:
        clone = Path(scratch) / "repo"
        subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
        (Path(scratch) / "shared").symlink_to(shared)
        env = {**os.environ, "LOPD_MLFLOW_URI": f"sqlite:///{Path(scratch) / 'mlflow.db'}"}
        runs = {}
        for name, flags in (("smoke", ["-S", "profile=smoke"]),
                            ("smoke_margin_ablation", ["-S", "profile=smoke", "-S", "margin=0.02"])):
            start = time.perf_counter()
            proc = subprocess.run(["dvc", "exp", "run", *flags], cwd=clone, env=env, capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"error: dvc exp run {' '.join(flags)}: {proc.stderr.strip().splitlines()[-1:]}")
            ran = re.findall(r"Running stage '([^']+)'", proc.stdout)
            runs[name] = {"command": f"dvc exp run {' '.join(flags)}", "seconds": round(time.perf_counter() - start),
                          "stages_run": len(ran), "stages": ran}
        return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dag", action="store_true", help="time the smoke DAG and a margin ablation (~12 min)")
    parser.add_argument("--shared", type=Path, default=REPO_ROOT.parent / "shared",
                        help="the shared data folder a clone needs beside it (default: ../shared)")
    args = parser.parse_args()
    if args.dag:
        if not (args.shared / "data").is_dir():
            sys.exit(f"error: {args.shared}: no data/ folder to put beside the clone (pass --shared)")
        out, result = DAG_OUT, {"cpus": os.cpu_count(), "commit": _commit(), **dag_costs(args.shared.resolve())}
    else:
        with tempfile.TemporaryDirectory() as scratch:
            out, result = OUT, {"cpus": os.cpu_count(), "repeats": args.repeats, "commit": _commit(),
                                **stage_costs(args.repeats, Path(scratch)), **dvc_yaml_costs(args.repeats),
                                **engine_costs(args.repeats)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(REPO_ROOT)}")


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
