"""Memory and time of one agentic training update -> reports/perf/agentic_update.json.

One `update()` of a method on a cpu-profile-sized agentic batch: 8 episodes of envscaler-mini training tasks
from different environments, each its real first prompt (tool list included, ~1.5-2k tokens) plus 3 steps of 64
action tokens and 80 observation tokens (random ids: memory and time depend on shapes, not content). Each (method,
activation checkpointing) variant runs in a fresh process and reports its peak RSS and update time; a variant may be
given a memory cap, above which it is reported as not fitting instead of taking the machine down; a variant that
fails otherwise stops the script there, with its error.
LOPD uses a bank of 5 oracle-pool traces (so the composer trains and the teacher needs its graph) and the
agentic composer checkpoint. Needs models/base, pool_agentic/ and checkpoints/agentic/composer.
Run: python scripts/bench/bench_agentic_update.py [--variants grpo:on grpo:off lopd:on] [--cap-gb 20]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from lopd.core.config import REPO_ROOT, load_config

OUT = REPO_ROOT / "reports" / "perf" / "agentic_update.json"
EPISODES, STEPS, ACTION_TOKENS, OBSERVATION_TOKENS = 8, 3, 64, 80
MEMORY_ERRORS = ("MemoryError", "out of memory", "Cannot allocate memory", "std::bad_alloc")
"""What a variant stopped by the address-space cap prints (Python's, torch's and the C++ runtime's words)."""


def episodes(tokenizer, tasks):
    from lopd.core.rollout import encode_prompt
    from lopd.core.trajectory import Trajectory, Turn
    rng = random.Random(0)
    out = []
    spread = tasks[::max(1, len(tasks) // EPISODES)][:EPISODES]  # different environments, different tool lists
    for i, task in enumerate(spread):
        prompt = encode_prompt(tokenizer, task.messages, task.tools)
        turns = [Turn(prompt if i == 0 else [rng.randrange(1000) for _ in range(OBSERVATION_TOKENS)],
                      [rng.randrange(1000) for _ in range(ACTION_TOKENS)], [-1.0] * ACTION_TOKENS)
                 for i in range(STEPS)]
        # groups of 4 with distinct rewards: GRPO's advantages are non-zero, so every episode is trained on
        out.append(Trajectory(task.task_id, turns, reward=rng.random(), group=i // 4, response="x"))
    return out


def lopd_bank(cfg_bank_dir: Path, work: Path, tokenizer) -> Path:
    """A bank of 5 oracle-pool traces (their text as one action) over the agentic query embeddings."""
    import numpy as np

    from baselines.pool import load_pool
    from lopd.latent.bank import BankEntry, write_bank
    from lopd.latent.retrieval import BANK_FILE, DOCUMENTS_FILE, QUERIES_FILE, load_vectors, save_vectors
    ids, queries = load_vectors(cfg_bank_dir / QUERIES_FILE)
    demos = list(load_pool(REPO_ROOT / "pool_agentic" / "oracle.jsonl").values())[:5]
    entries = [BankEntry(d.task_id, d.task, d.text, d.text, 1.0,
                         [[[], tokenizer(d.text, add_special_tokens=False)["input_ids"]]]) for d in demos]
    write_bank(work / BANK_FILE, entries, {})
    save_vectors(work / DOCUMENTS_FILE, [e.task_id for e in entries],
                 np.stack([queries[ids.index(e.task_id)] for e in entries]))
    save_vectors(work / QUERIES_FILE, ids, queries)
    return work


def run_variant(method_name: str, checkpointing: bool) -> dict:
    """In this process: one update; returns time and peak RSS."""
    import torch
    from accelerate import Accelerator

    from lopd.core.config import build_config, load_config
    from lopd.core.device import malloc_mode, mixed_precision, use_cpu_matmul
    from lopd.core.loop import policy_optimizer, update
    from lopd.core.methods import MethodContext
    from lopd.core.models import load_model, load_tokenizer
    from lopd.latent.method import LOPD
    from pipelines.common import BASE_MODEL_DIR, DOMAINS, build_method, for_domain, training_domain

    raw = for_domain(load_config(REPO_ROOT / "params.yaml"), "agentic").to_dict()
    raw["train"]["activation_checkpointing"] = checkpointing
    cfg = build_config(raw)
    cpu_matmul = use_cpu_matmul(cfg.model.cpu_matmul)  # the stages' path (pipelines.common.parse_args)
    domain = DOMAINS["agentic"]
    torch.manual_seed(cfg.seed)
    with training_domain(cfg, "agentic") as split, tempfile.TemporaryDirectory() as work:
        tasks = split.tasks
        tokenizer = load_tokenizer(BASE_MODEL_DIR)
        trajectories = episodes(tokenizer, tasks)
        method = (LOPD(cfg, replace(domain, bank=lopd_bank(domain.bank, Path(work), tokenizer)))
                  if method_name == "lopd" else build_method(method_name, cfg, "agentic"))
        accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision(cfg.train.mixed_precision))
        model = load_model(BASE_MODEL_DIR)
        if checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        method.setup(MethodContext(cfg, accelerator, tokenizer, BASE_MODEL_DIR, model, tasks))
        optimizer = policy_optimizer(model, method, cfg)
        model, optimizer = accelerator.prepare(model, optimizer)
        before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        start = time.perf_counter()
        metrics = update(model, optimizer, accelerator, method, trajectories, tokenizer.pad_token_id, cfg)
        return {"update_s": round(time.perf_counter() - start, 1), "cpu_matmul": cpu_matmul, "malloc": malloc_mode(),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "peak_rss_before_update_mb": round(before_mb),
                "sequence_tokens": sorted(len(t.token_ids) for t in trajectories),
                "loss": metrics["loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["grpo:on", "lopd:on", "grpo:off"],
                        help="method:on|off (activation checkpointing)")
    parser.add_argument("--cap-gb", type=float, default=20.0, help="address-space cap per variant process")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        method, mode = args.child.split(":")
        print(json.dumps(run_variant(method, mode == "on")))
        return
    cap = int(args.cap_gb * 2**30)
    sys.path.insert(0, str(REPO_ROOT))  # run as a script: the repository's scripts/ as a package
    from scripts.wall_time import this_cpu

    model = load_config(REPO_ROOT / "params.yaml").model.name  # the variants' (run_variant reads the same file)
    results = {}
    for variant in args.variants:
        proc = subprocess.run([sys.executable, __file__, "--child", variant], capture_output=True, text=True,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
        last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        if proc.returncode == 0:
            results[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
        elif any(sign in proc.stderr for sign in MEMORY_ERRORS):
            results[variant] = {"error": f"did not fit in {args.cap_gb:g} GB of address space "
                                         f"(exit {proc.returncode}): {last}"}
        else:  # a bug, not a measurement: the file keeps what it held
            sys.exit(f"error: variant {variant} failed (exit {proc.returncode}): {last}")
        print(variant, results[variant], flush=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)  # after every variant: a long run keeps what it measured
        modes = {r["malloc"] for r in results.values() if "malloc" in r}  # every variant runs as a stage (run_stage)
        OUT.write_text(json.dumps({"model": model, "machine": this_cpu(),
                                   **({"malloc": modes.pop()} if len(modes) == 1 else {}), "episodes": EPISODES,
                                   "steps": STEPS, "action_tokens_per_step": ACTION_TOKENS,
                                   "observation_tokens_per_step": OBSERVATION_TOKENS, "cap_gb": args.cap_gb,
                                   "variants": results}, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    from pipelines.common import run_stage  # late, as every import of the code it measures

    run_stage(main)
