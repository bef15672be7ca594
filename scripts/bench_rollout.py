"""Rollout throughput benchmark -> reports/perf/rollout.json.

Measures on the same batch of coding prompts (batch 32 by default):
- prefill: tokens/s of one forward pass over [batch, prompt + response] tokens (the ceiling);
- the loop's sampler (HFBackend): decode-only tokens/s (the target is >= 0.6 of prefill) and end-to-end
  tokens/s including its prompt prefill, against plain `model.generate` end-to-end on the same batch;
- one GRPO step's wall time split into sampling / reward (sandbox) / update (forward + backward + AdamW).
Run: python scripts/bench_rollout.py [--model-dir models/base] [--batch 32] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from baselines.grpo import GRPO
from lopd.core.config import REPO_ROOT, resolve
from lopd.core.loop import train
from lopd.core.rollout import encode_prompt, make_backend, single_turn
from lopd.core.models import load_model, load_tokenizer
from lopd.core.sampling import SamplingParams
from pipelines.domains.code import coding_training_tasks


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-dir", default=str(REPO_ROOT / "models" / "base"))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--out", default=str(REPO_ROOT / "reports" / "perf" / "rollout.json"))
    args = parser.parse_args()

    cfg = resolve({"profile": "cpu", "sampling": {"batch_size": args.batch, "max_new_tokens": args.new_tokens},
                   "train": {"steps": 1, "rollouts_per_step": args.batch}})
    tokenizer = load_tokenizer(args.model_dir)
    tasks, score = coding_training_tasks(cfg)
    prompts = [encode_prompt(tokenizer, t.messages) for t in tasks[:args.batch]]
    params = SamplingParams(cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.top_k, args.new_tokens)
    backend = make_backend(args.model_dir, tokenizer, cfg, args.batch)
    model = backend.model
    backend.generate(prompts[:2], SamplingParams(max_new_tokens=4), seed=0)  # warm-up

    backend.stats.update(prefill_s=0.0, decode_s=0.0, prompt_tokens=0, sampled_tokens=0)
    completions, sampler_s = timed(lambda: backend.generate(prompts, params, seed=0))
    sampled = sum(len(c.token_ids) for c in completions)
    decode_tps = backend.stats["sampled_tokens"] / backend.stats["decode_s"]

    # Prefill ceiling: one forward over the same prompts followed by their sampled responses.
    width = max(len(p) + len(c.token_ids) for p, c in zip(prompts, completions))
    ids = torch.full((len(prompts), width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for row, (p, c) in enumerate(zip(prompts, completions)):
        seq = p + c.token_ids
        ids[row, width - len(seq):], mask[row, width - len(seq):] = torch.tensor(seq), 1
    # Plain Hugging Face model in the same dtype (its default SDPA attention): the prefill ceiling is the
    # faster of its forward and the rollout engine's own.
    plain = load_model(args.model_dir, cfg.sampling.dtype)
    with torch.no_grad():
        prefill_s = min(timed(lambda: m(input_ids=ids, attention_mask=mask, logits_to_keep=1))[1]
                        for m in (model, plain))
    prefill_tps = int(mask.sum()) / prefill_s

    # Plain generate on the same batch, same token budget.
    tokenizer.padding_side = "left"
    enc = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    with torch.no_grad():
        out, generate_s = timed(lambda: plain.generate(
            **enc, do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
            max_new_tokens=args.new_tokens, pad_token_id=tokenizer.pad_token_id))
    generated = int(((out[:, enc["input_ids"].shape[1]:] != tokenizer.pad_token_id)).sum())

    # One GRPO step of the real loop on the same budget.
    with tempfile.TemporaryDirectory() as step_dir:
        step = train(cfg, GRPO(cfg.grpo), tasks, single_turn(score), args.model_dir, step_dir)["history"][0]

    result = {
        "model_dir": str(Path(args.model_dir).name), "batch": args.batch, "max_new_tokens": args.new_tokens,
        "rollout_dtype": cfg.sampling.dtype, "threads": torch.get_num_threads(), "cpu": platform.processor(),
        "prefill_tokens_per_s": round(prefill_tps, 1),
        "sampler_decode_tokens_per_s": round(decode_tps, 1),
        "sampler_decode_over_prefill": round(decode_tps / prefill_tps, 3),
        "sampler_end_to_end_tokens_per_s": round(sampled / sampler_s, 1),
        "generate_end_to_end_tokens_per_s": round(generated / generate_s, 1),
        "sampler_speedup_over_generate": round((sampled / sampler_s) / (generated / generate_s), 2),
        "grpo_step": {"rollouts": cfg.train.rollouts_per_step, "sampling_s": round(step["time_sampling_s"], 2),
                      "reward_s": round(step["time_reward_s"], 2), "update_s": round(step["time_update_s"], 2),
                      "completions/mean_length": round(step["completions/mean_length"], 1),
                      "trained_fraction": step["trained_fraction"]},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
