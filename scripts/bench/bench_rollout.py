"""Rollout throughput benchmark -> reports/perf/rollout.json.

Measures on the same batch of coding prompts (batch 32 by default):
- prefill: tokens/s of one forward pass over [batch, prompt + response] tokens (the ceiling);
- the loop's sampler (HFBackend): decode-only tokens/s (the target is >= 0.6 of prefill) and end-to-end
  tokens/s including its prompt prefill, against plain `model.generate` end-to-end on the same batch;
- one GRPO step's wall time split into sampling / reward (sandbox) / update (forward + backward + AdamW);
- `vllm` (when vllm is installed): the in-process vLLM engine (VLLMBackend) against HFBackend on the same prompts at
  the training setting (the measurement above), an evaluation setting (a longer budget, rollouts stop at EOS, all
  prompts submitted at once: vLLM's continuous batching), and an agentic-style multi-turn episode (each turn's prompt
  is the previous one + the completion + a tool message) with and without prefix caching.
It measures the model in --model-dir (models/base: the configured model, Qwen2.5-Coder-0.5B on the cpu profile) and
records its origin; on 2 cores the defaults take long with a 0.5B model (HF decodes ~10 tokens/s), so smaller
--batch / --new-tokens give a quicker look.
Run: python scripts/bench/bench_rollout.py [--model-dir models/base] [--batch 32] [--new-tokens 128] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

from baselines.grpo import GRPO
from lopd.core.config import REPO_ROOT, resolve
from lopd.core.domain import Domain
from lopd.core.loop import train
from lopd.core.models import load_model, load_tokenizer
from lopd.core.multiturn import continuation_ids, end_of_turn_id
from lopd.core.rollout import encode_prompt, make_backend, single_turn
from lopd.core.sampling import HFBackend, RolloutBackend, SamplingParams
from lopd.core.split_gguf import PROVENANCE_FILE
from lopd.core.vllm_backend import vllm_available
from pipelines.common import run_stage
from pipelines.domains.code import coding_training_tasks

TOOL_MESSAGE = ('{"status": "ok", "stdout": "3 tests passed, 1 failed: test_empty_input expected 0, got None", '
                '"hint": "handle the empty case before the loop"}')


def origin(model_dir: str) -> str:
    """Which model the folder holds: its GGUF provenance if it has one, else the name its config records."""
    folder = Path(model_dir)
    if (provenance := folder / PROVENANCE_FILE).exists():
        record = json.loads(provenance.read_text())
        return f"{record['upstream']} ({record['file']})"
    config = json.loads((folder / "config.json").read_text())
    return config.get("_model_name_or_path") or config.get("_name_or_path") or "unknown"


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-dir", default=str(REPO_ROOT / "models" / "base"))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default=None, help="rollout dtype of both backends (default: sampling.dtype)")
    parser.add_argument("--eval-new-tokens", type=int, default=256, help="vllm section: evaluation-setting budget")
    parser.add_argument("--episodes", type=int, default=8, help="vllm section: multi-turn episodes run together")
    parser.add_argument("--turns", type=int, default=4, help="vllm section: turns per episode")
    parser.add_argument("--turn-tokens", type=int, default=48, help="vllm section: new tokens per turn")
    parser.add_argument("--out", default=str(REPO_ROOT / "reports" / "perf" / "rollout.json"))
    args = parser.parse_args()

    sampling = {"batch_size": args.batch, "max_new_tokens": args.new_tokens, "backend": "hf"}
    if args.dtype:
        sampling["dtype"] = args.dtype
    cfg = resolve({"profile": "cpu", "sampling": sampling, "train": {"steps": 1, "rollouts_per_step": args.batch}})
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

    vllm = bench_vllm(args, cfg, tokenizer, prompts, params, backend, sampled / sampler_s) if vllm_available() else None

    # One GRPO step of the real loop on the same budget (HFBackend).
    with tempfile.TemporaryDirectory() as step_dir:
        step = train(cfg, GRPO(cfg, Domain.scratch("unused")), tasks, single_turn(score), args.model_dir,
                     step_dir)["history"][0]

    result = {
        "model_dir": str(Path(args.model_dir).name), "model": origin(args.model_dir), "batch": args.batch,
        "max_new_tokens": args.new_tokens, "rollout_dtype": cfg.sampling.dtype, "threads": torch.get_num_threads(),
        "cpu": platform.processor(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
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
        "vllm": vllm or "not installed",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def tokens_per_s(backend: RolloutBackend, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seed: int) -> dict:
    """End-to-end sampled tokens/s of one `generate` call over all prompts (prompt prefill included)."""
    completions, seconds = timed(lambda: backend.generate(prompts, params, seed))
    sampled = sum(len(c.token_ids) for c in completions)
    return {"sampled_tokens": sampled, "wall_s": round(seconds, 2), "tokens_per_s": round(sampled / seconds, 1)}


def episode(backend: RolloutBackend, tokenizer, prompts: Sequence[Sequence[int]], params: SamplingParams,
            turns: int) -> dict:
    """Wall time of `turns` batched steps of multi-turn episodes, as run_episodes plays them: each turn's prompt is
    the last prompt + the completion (+ end of turn) + a tool message."""
    end_of_turn = end_of_turn_id(tokenizer)
    observation = continuation_ids(tokenizer, [{"role": "tool", "content": TOOL_MESSAGE}], end_of_turn)
    contexts = [list(p) for p in prompts]
    prompt_tokens = sampled = 0
    start = time.perf_counter()
    for turn in range(turns):
        prompt_tokens += sum(len(c) for c in contexts)
        completions = backend.generate(contexts, params, seed=100 + turn)
        for context, c in zip(contexts, completions):
            closing = [] if c.token_ids[-1:] == [end_of_turn] else [end_of_turn]
            context += [*c.token_ids, *closing, *observation]
            sampled += len(c.token_ids)
    return {"wall_s": round(time.perf_counter() - start, 2), "prompt_tokens": prompt_tokens, "sampled_tokens": sampled}


def bench_vllm(args, cfg, tokenizer, prompts, params: SamplingParams, hf: HFBackend, hf_train_tps: float) -> dict:
    """VLLMBackend against HFBackend on the same prompts, stop tokens, dtype and sampling parameters."""
    from lopd.core.vllm_backend import VLLMBackend

    def engine(prefix_caching: bool):
        return VLLMBackend(args.model_dir, stop_ids=hf.stop_ids.tolist(), dtype=cfg.sampling.dtype,
                           kv_cache_gib=cfg.sampling.kv_cache_gib, prefix_caching=prefix_caching)

    vllm, load_s = timed(lambda: engine(True))
    vllm.generate(prompts[:2], SamplingParams(max_new_tokens=4), seed=0)  # warm-up, as for HFBackend
    vllm.llm.reset_prefix_cache()
    train = tokens_per_s(vllm, prompts, params, seed=0)
    train["hf_tokens_per_s"] = round(hf_train_tps, 1)

    eval_params = SamplingParams(params.temperature, params.top_p, params.top_k, args.eval_new_tokens)
    vllm.llm.reset_prefix_cache()  # new prompts in a real evaluation: no hits from the run above
    evaluation = {"prompts": len(prompts), "max_new_tokens": args.eval_new_tokens, "vllm": tokens_per_s(
        vllm, prompts, eval_params, seed=1), "hf": tokens_per_s(hf, prompts, eval_params, seed=1)}

    turn_params = SamplingParams(params.temperature, params.top_p, params.top_k, args.turn_tokens)
    episodes = prompts[:args.episodes]
    vllm.llm.reset_prefix_cache()
    cached = vllm.stats["cached_prompt_tokens"]
    with_cache = episode(vllm, tokenizer, episodes, turn_params, args.turns)
    with_cache["cached_prompt_tokens"] = vllm.stats["cached_prompt_tokens"] - cached
    without = episode(engine(False), tokenizer, episodes, turn_params, args.turns)
    multi_turn = {"episodes": len(episodes), "turns": args.turns, "new_tokens_per_turn": args.turn_tokens,
                  "vllm_prefix_caching": with_cache, "vllm_no_prefix_caching": without,
                  "hf": episode(hf, tokenizer, episodes, turn_params, args.turns)}
    faster = {"train_setting": "vllm" if train["tokens_per_s"] > train["hf_tokens_per_s"] else "hf",
              "eval_setting": max(("vllm", "hf"), key=lambda b: evaluation[b]["tokens_per_s"]),
              "multi_turn": min(("vllm_prefix_caching", "hf"), key=lambda b: multi_turn[b]["wall_s"])}
    return {"engine": {"dtype": cfg.sampling.dtype, "enforce_eager": not torch.cuda.is_available(),
                       "kv_cache_gib": cfg.sampling.kv_cache_gib, "load_s": round(load_s, 1)},
            "train_setting": {"prompts": len(prompts), "max_new_tokens": params.max_new_tokens, **train},
            "eval_setting": evaluation, "multi_turn": multi_turn, "faster_backend": faster}


if __name__ == "__main__":
    run_stage(main)
