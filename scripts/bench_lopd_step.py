"""LOPD step cost benchmark -> reports/perf/lopd_step.json.

1. Step time at equal tokens: one batch of real rollouts (the cpu profile's 32 x 256 tokens) is sampled
   once; the same trajectories then go through one `update()` of GRPO (all rollouts contributing) and of
   LOPD (composer encoding + teacher forward/backward + student). Step = that sampling time + reward-free
   update, so the ratio isolates what LOPD adds. Targets: LOPD step <= 1.5x GRPO step.
2. Peak memory of the top-M + tail KL loss (forward + backward) chunked as in training, against the same
   loss on full-vocabulary log-probs for the whole sequence; each variant runs in a fresh process and
   reports its peak RSS above the inputs. Target: chunked <= 1/4 of full.
Needs models/base, bank/ and checkpoints/composer (`dvc repro cold_start`).
Run: python scripts/bench_lopd_step.py [--positions 4096]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch
from accelerate import Accelerator

from baselines.grpo import GRPO
from lopd.latent.composer import FRAMINGS
from lopd.core.config import REPO_ROOT, load_config
from lopd.latent.method import LOPD
from lopd.core.loop import update
from lopd.core.losses import chunked_distillation, topk_tail_reverse_kl
from lopd.core.methods import MethodContext
from lopd.core.models import load_model, load_tokenizer
from lopd.core.rollout import make_backend, sampling_params, single_turn
from pipelines.common import BANK_DIR, BASE_MODEL_DIR, COMPOSER_DIR
from pipelines.domains.code import coding_training_tasks


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def memory_probe(variant: str, positions: int, chunk: int, top_m: int) -> dict:
    """Peak RSS (MB) of one forward + backward of the KL loss over `positions` action tokens."""
    model = load_model(BASE_MODEL_DIR, "float32")
    weight_V_D = model.get_output_embeddings().weight.detach()
    g = torch.Generator().manual_seed(0)
    hidden_s = torch.randn(positions, weight_V_D.shape[1], generator=g, requires_grad=True)
    hidden_t = torch.randn(positions, weight_V_D.shape[1], generator=g, requires_grad=True)
    targets = torch.randint(0, weight_V_D.shape[0], (positions,), generator=g)
    before = rss_mb()
    if variant == "chunked":
        kl, _, _ = chunked_distillation(hidden_s, weight_V_D, hidden_t, weight_V_D, targets,
                                        partial(topk_tail_reverse_kl, top_k=top_m), 0.7, chunk)
    else:
        kl = topk_tail_reverse_kl((hidden_s @ weight_V_D.T / 0.7).log_softmax(-1),
                                  (hidden_t @ weight_V_D.T / 0.7).log_softmax(-1), top_m)
    kl.mean().backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": variant, "peak_above_inputs_mb": round(peak - before, 1)}


def step_times(cfg) -> dict:
    tokenizer = load_tokenizer(BASE_MODEL_DIR)
    tasks, score = coding_training_tasks(cfg)
    n = cfg.train.rollouts_per_step
    backend = make_backend(BASE_MODEL_DIR, tokenizer, cfg, cfg.sampling.batch_size)
    start = time.perf_counter()
    trajectories = single_turn(score)(backend, tokenizer, tasks[:n], sampling_params(cfg, cfg.sampling.max_new_tokens), 0, 1)
    sampling_s = time.perf_counter() - start
    for i, traj in enumerate(trajectories):
        traj.reward, traj.group = float(i % 2), i // cfg.grpo.group_size  # every GRPO group has signal

    def one_update(method) -> float:
        accelerator = Accelerator(cpu=True, mixed_precision=cfg.train.mixed_precision)
        model = load_model(BASE_MODEL_DIR)
        model.train()
        method.setup(MethodContext(cfg, accelerator, tokenizer, BASE_MODEL_DIR, model, tasks))
        optimizer = torch.optim.AdamW([{"params": list(model.parameters())}, *method.param_groups()],
                                      lr=cfg.train.lr)
        model, optimizer = accelerator.prepare(model, optimizer)
        start = time.perf_counter()
        update(model, optimizer, accelerator, method, trajectories, tokenizer.pad_token_id, cfg)
        return time.perf_counter() - start

    grpo_s = one_update(GRPO(cfg.grpo))
    lopd_s = one_update(LOPD(cfg, BANK_DIR, COMPOSER_DIR, FRAMINGS["code"], trace_of=str))
    tokens = sum(t.num_action_tokens for t in trajectories)
    return {"rollouts": n, "action_tokens": tokens, "sampling_s": round(sampling_s, 2),
            "grpo_update_s": round(grpo_s, 2), "lopd_update_s": round(lopd_s, 2),
            "grpo_step_s": round(sampling_s + grpo_s, 2), "lopd_step_s": round(sampling_s + lopd_s, 2),
            "lopd_over_grpo_step": round((sampling_s + lopd_s) / (sampling_s + grpo_s), 3),
            "lopd_over_grpo_update": round(lopd_s / grpo_s, 3), "target_step_ratio": 1.5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--positions", type=int, default=4096, help="action tokens in the memory probe")
    parser.add_argument("--chunk-size", type=int, help="positions per chunk (default: train.loss_chunk_size)")
    parser.add_argument("--probe", choices=("chunked", "full"), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(REPO_ROOT / "reports" / "perf" / "lopd_step.json"))
    args = parser.parse_args()
    cfg = load_config()
    chunk = args.chunk_size or cfg.train.loss_chunk_size
    if args.probe:
        print(json.dumps(memory_probe(args.probe, args.positions, chunk, cfg.lopd.top_m)))
        return
    memory = {}
    for variant in ("chunked", "full"):
        out = subprocess.run([sys.executable, __file__, "--probe", variant, "--positions", str(args.positions),
                              "--chunk-size", str(chunk)],
                             capture_output=True, text=True, check=True, cwd=REPO_ROOT)
        memory[variant] = json.loads(out.stdout.strip().splitlines()[-1])["peak_above_inputs_mb"]
    result = {
        "profile": cfg.profile, "model": cfg.model.name, "threads": torch.get_num_threads(),
        "step": step_times(cfg),
        "kl_memory": {"positions": args.positions, "chunk_size": chunk, "top_m": cfg.lopd.top_m,
                      "chunked_peak_mb": memory["chunked"], "full_vocab_peak_mb": memory["full"],
                      "chunked_over_full": round(memory["chunked"] / memory["full"], 3), "target_ratio": 0.25},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
