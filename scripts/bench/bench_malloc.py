"""glibc's heap for tensor memory against its default mappings, side by side -> reports/perf/malloc.json.

Every stage calls `lopd.core.device.reuse_freed_memory` first: blocks of up to 1 GiB come from glibc's heap and what
is freed stays there for reuse (until `release_freed_memory` at a phase's end). By default a block over 32 MB is a
fresh mapping, unmapped when freed, so each sampling step and micro-batch faults its temporaries in again.
Each variant runs in a fresh process (the setting is per process), `mapped` (glibc's default) then `heap`, on the
prepared model (models/base) with the cpu profile:
- update: --updates GRPO updates (the loop's `update`: forward, backward, AdamW) of a fixed batch of --sequences
  sequences (bench_cpu's batch); the first update (AdamW's state allocated) and the mean of the later ones, and the
  weights' sha256 after the last;
- sampling: a code training step's rollouts (bench_profile_rollouts' train_step: 16 rows, whose blocks are mostly
  under 32 MB, so glibc's default already reuses them), then the first --eval-tasks tasks of each code benchmark
  sampled in one call, as the evaluation stage does (`pipelines.evaluate.evaluate_together`, scored): its sampling
  seconds and the completions' sha256; the engine's start is timed after the updates, in the same process;
- the process's peak RSS.
`heap_over_mapped` holds the ratios (`sampling`: the evaluation's call; `train_step_sampling`: the training step's);
`same_weights`, `same_completions` and `same_train_step_tokens` say whether the numbers are the same.
Run: python scripts/bench/bench_malloc.py [--sequences 4] [--updates 3] [--eval-tasks 64] [--out PATH]   (~12 min)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

VARIANTS = ("mapped", "heap")
OUT = REPO / "reports" / "perf" / "malloc.json"


def measure_updates(sequences: int, updates: int) -> dict:
    from accelerate import Accelerator

    from baselines.grpo import GRPO
    from lopd.core.config import resolve
    from lopd.core.device import use_cpu_matmul
    from lopd.core.domain import Domain
    from lopd.core.loop import load_student, policy_optimizer, update
    from pipelines.common import BASE_MODEL_DIR
    from scripts.bench.bench_cpu import batch

    cfg = resolve({"profile": "cpu"})
    use_cpu_matmul(cfg.model.cpu_matmul)
    model = load_student(cfg, str(BASE_MODEL_DIR), sharded=False)
    if cfg.train.activation_checkpointing:  # as the loop's setup
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    method = GRPO(cfg, Domain.scratch("unused"))
    optimizer = policy_optimizer(model, method, cfg)
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    trajectories = batch(model.config.vocab_size, sequences, prompt_tokens=150, response_tokens=300)
    seconds = []
    for _ in range(updates):
        start = time.perf_counter()
        update(model, optimizer, accelerator, method, trajectories, pad_id=0, cfg=cfg)
        seconds.append(round(time.perf_counter() - start, 2))
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    return {"update_s": seconds, "first_update_s": seconds[0], "later_update_s": round(statistics.mean(seconds[1:]), 2),
            "weights_sha256": digest.hexdigest()}


def measure_sampling(eval_tasks: int) -> dict:
    from accelerate import PartialState

    from lopd.core.config import resolve
    from lopd.core.models import load_tokenizer
    from lopd.core.rollout import make_backend
    from pipelines.common import BASE_MODEL_DIR
    from pipelines.domains.code import training_tasks
    from pipelines.evaluate import code_benchmark, evaluate_together, protocol_groups
    from scripts.bench.bench_profile_rollouts import measure_train_step

    cfg = resolve({"profile": "cpu", "eval": {"task_limit": eval_tasks}})
    tokenizer = load_tokenizer(BASE_MODEL_DIR)
    start = time.perf_counter()
    backend = make_backend(BASE_MODEL_DIR, tokenizer, cfg, cfg.eval.batch_size)
    engine_s = time.perf_counter() - start
    with training_tasks(cfg) as split:
        step = measure_train_step(cfg, backend, tokenizer, split)
    benchmarks = {name: code_benchmark(cfg, name) for name in ("humaneval_plus", "mbpp_plus")}
    (together,) = protocol_groups(benchmarks)
    results = evaluate_together(cfg, "bench", {name: benchmarks[name] for name in together}, backend, tokenizer,
                                None, PartialState())
    completions = {name: {tid: task["completions"] for tid, task in results[name]["per_task"].items()}
                   for name in together}
    summaries = [results[name]["summary"] for name in together]
    return {"engine_start_s": round(engine_s, 2), "train_step_s": step["wall_s"],
            "train_step_tokens": step["sampled_tokens"], "sampling_s": summaries[0]["sampling_s"],
            "sampled_tokens": sum(s["generated_tokens"] for s in summaries),
            "tasks": sum(s["n_tasks"] for s in summaries),
            "completions_sha256": hashlib.sha256(json.dumps(completions, sort_keys=True).encode()).hexdigest()}


def child(variant: str, args) -> None:
    from lopd.core.device import reuse_freed_memory

    if variant == "heap":
        reuse_freed_memory()
    result = {"update": measure_updates(args.sequences, args.updates), "sampling": measure_sampling(args.eval_tasks)}
    result["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=4, help="sequences per update (150 prompt + 300 response)")
    parser.add_argument("--updates", type=int, default=3, help="updates per variant (the first allocates AdamW's)")
    parser.add_argument("--eval-tasks", type=int, default=64, help="tasks per code benchmark, in one call")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    if args.updates < 2:
        sys.exit("error: --updates: must be >= 2 (the first allocates AdamW's state)")
    if args.child:
        child(args.child, args)
        return
    from lopd.core.vllm_backend import vllm_available
    from pipelines.common import BASE_MODEL_DIR, check_writable
    from scripts.wall_time import this_cpu

    if not vllm_available():
        sys.exit("error: vllm is not installed (make setup): the sampling side needs the CPU engine")
    if not (BASE_MODEL_DIR / "config.json").is_file():
        sys.exit(f"error: {BASE_MODEL_DIR}: no model (dvc repro prepare_model)")
    out = Path(args.out)
    check_writable([out])
    variants = {}
    for variant in VARIANTS:
        proc = subprocess.run([sys.executable, __file__, "--child", variant, "--sequences", str(args.sequences),
                               "--updates", str(args.updates), "--eval-tasks", str(args.eval_tasks)],
                              cwd=REPO, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"error: the {variant} variant: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
        variants[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(variant, json.dumps(variants[variant]), flush=True)
    mapped, heap = variants["mapped"], variants["heap"]
    result = {
        "machine": this_cpu(), "sequences": args.sequences, "updates": args.updates, "eval_tasks": args.eval_tasks,
        "variants": variants,
        "heap_over_mapped": {
            "first_update": round(heap["update"]["first_update_s"] / mapped["update"]["first_update_s"], 3),
            "later_update": round(heap["update"]["later_update_s"] / mapped["update"]["later_update_s"], 3),
            "sampling": round(heap["sampling"]["sampling_s"] / mapped["sampling"]["sampling_s"], 3),
            "train_step_sampling": round(heap["sampling"]["train_step_s"] / mapped["sampling"]["train_step_s"], 3),
            "engine_start": round(heap["sampling"]["engine_start_s"] / mapped["sampling"]["engine_start_s"], 3),
            "peak_rss": round(heap["peak_rss_gib"] / mapped["peak_rss_gib"], 3)},
        "same_weights": heap["update"]["weights_sha256"] == mapped["update"]["weights_sha256"],
        "same_completions": heap["sampling"]["completions_sha256"] == mapped["sampling"]["completions_sha256"],
        "same_train_step_tokens": heap["sampling"]["train_step_tokens"] == mapped["sampling"]["train_step_tokens"]}
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["heap_over_mapped"]), "same weights:", result["same_weights"],
          "same completions:", result["same_completions"])


if __name__ == "__main__":
    if "--child" in sys.argv:  # a variant's process: its malloc mode is the variant's, not run_stage's
        main()
    else:
        from pipelines.common import run_stage

        run_stage(main)
