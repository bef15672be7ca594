"""`make gpu-check`: does the scale path work on this machine's GPUs? One command, about 10 minutes.

1. The GPU tests of the suite: device placement (tests/test_device.py) and the vLLM backend on CUDA
   (tests/test_vllm_backend.py; needs `pip install -r requirements-gpu.txt`).
2. The smoke DAG on CUDA with the vLLM rollout backend (`dvc exp run -S profile=smoke -S sampling.backend=vllm` in a
   copy of the repository), checking that every training stage reported training on cuda.
3. scripts/ddp_check.py on the embedded SmolLM2-135M with one process per GPU (torchrun, NCCL): 2 steps of GRPO,
   SDPO, Skill-SD and LOPD; every student on cuda, every loss finite, all ranks identical (one GPU: one rank).
Writes reports/perf/gpu_check.json and exits non-zero if any part failed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lopd.core.models import prepare_base_model  # noqa: E402

OUT = REPO / "reports" / "perf" / "gpu_check.json"
SHARED = Path(os.environ.get("LOPD_SHARED_DATA", REPO.parent / "shared" / "data"))


def run(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[bool, str]:
    proc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    return proc.returncode == 0, proc.stdout + proc.stderr


def suite_tests() -> dict:
    ok, out = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_device.py",
                   "tests/test_vllm_backend.py"], REPO)
    return {"ok": ok and " skipped" not in out.splitlines()[-1], "summary": out.strip().splitlines()[-1]}


def smoke_dag(tmp: Path) -> dict:
    repo = tmp / "repo"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns(".venv", ".git", "models", "checkpoints", "bank*", "pool*",
                                                              "results", "metrics", "plots", "cache", "__pycache__"))
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "LOPD_MLFLOW_URI": "off"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=gpu", "-c", "user.email=gpu@check", "commit", "-qm", "copy"]):
        run(cmd, repo, env)
    start = time.perf_counter()
    ok, out = run(["dvc", "exp", "run", "-S", "profile=smoke", "-S", "sampling.backend=vllm",
                   "-S", f"data.shared_dir={SHARED}"], repo, env)
    placed = re.findall(r"\] training on (\S+) x \d+ process\(es\), rollouts by (\w+)", out)
    on_gpu = bool(placed) and all(dev.startswith("cuda") and backend == "VLLMBackend" for dev, backend in placed)
    return {"ok": ok and on_gpu, "training_stages": len(placed), "placement": sorted(set(placed)),
            "wall_s": round(time.perf_counter() - start, 1), **({} if ok else {"tail": out[-3000:]})}


def ddp_check(tmp: Path) -> dict:
    sys.path.insert(0, str(REPO / "scripts"))
    import ddp_check as check  # noqa: PLC0415

    model = prepare_base_model("smollm2-135m", tmp / "smollm2", seed=0)
    work = tmp / "ddp"
    check.prepare_inputs(model, work)
    n = torch.cuda.device_count()
    ok, out = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n),
                   str(REPO / "scripts" / "ddp_check.py"), str(model), str(work)], REPO,
                  {"PYTHONPATH": str(REPO), "LOPD_MLFLOW_URI": "off"})
    if not ok:
        return {"ok": False, "processes": n, "tail": out[-3000:]}
    ranks = check.load_ranks(work, n)
    result = {"processes": n, "methods": {}}
    for name in ("grpo", "sdpo", "skill_sd", "lopd"):
        first = ranks[0][name]
        agree = all(all(torch.equal(first["weights"][k], r[name]["weights"][k]) for k in first["weights"])
                    for r in ranks[1:])
        result["methods"][name] = {"device": first["device"], "finite": all(r[name]["finite"] for r in ranks),
                                   "ranks_agree": agree, "reward": [h["reward"] for h in first["history"]]}
    result["ok"] = all(m["device"] == "cuda" and m["finite"] and m["ranks_agree"] for m in result["methods"].values())
    return result


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu-check: no CUDA device visible (torch.cuda.is_available() is False); nothing was run")
    report = {"device": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        for name, part in (("suite_tests", suite_tests), ("smoke_dag_vllm", smoke_dag), ("ddp_check", ddp_check)):
            print(f"gpu-check: {name} ...", flush=True)
            report[name] = part() if name == "suite_tests" else part(Path(tmp))
            print(f"gpu-check: {name} {'ok' if report[name]['ok'] else 'FAILED'}", flush=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT}")
    if not all(report[k]["ok"] for k in ("suite_tests", "smoke_dag_vllm", "ddp_check")):
        sys.exit("gpu-check: FAILED (see the report)")


if __name__ == "__main__":
    main()
