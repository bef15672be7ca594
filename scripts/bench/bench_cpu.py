"""The CPU's fast paths for updates and sampling, side by side in one run -> reports/perf/cpu.json (`make bench`).

On the machine at hand and the model in --model-dir (models/base: the cpu profile's Qwen2.5-Coder-0.5B):
- machine: the CPU, the ISA flags that decide the paths (AVX-512, bf16 units, AMX), torch's kernel capability;
- bounds: float32 GEMM GFLOP/s through torch's BLAS and through oneDNN (`model.cpu_matmul`: lopd/core/device.py), at
  the shape of the model's MLP over the update's tokens; bf16 GEMM where the CPU has bf16 units; memory bandwidth
  (the faster of reading and copying 1 GiB);
- update: --updates GRPO updates (forward, backward, AdamW) of the model on one fixed batch of --batch sequences, on
  each path: float32 through BLAS (`model.cpu_matmul: blas`), float32 through oneDNN (`auto`, where this CPU takes
  it), bf16 autocast (`train.mixed_precision: bf16`, where the CPU has bf16 units); the last update's seconds, its
  model FLOP/s as a fraction of the path's GEMM rate, the first update's gradient error against the same gradients
  computed in float64 (largest difference over the largest gradient), and the weights after the last against the
  BLAS path's;
- AdamW: a step over the model's parameters with torch's per-tensor loop (the loop's optimizer before) and its fused
  kernel (now), against the memory bound (bytes a step reads and writes / bandwidth), and the weights after three
  steps against each other;
- sampling (with vLLM): the same prompts in calls of --call-size against one call, and in one call the engine's
  top-k / top-p through each row's top k (the backend's) against vLLM's sort over the vocabulary (the same draws),
  and the one call on a bfloat16 engine (`sampling.dtype: bfloat16`) where the CPU has bf16 units.
`pays` says which path is faster here. Every ratio comes from this one run. Run:
  python scripts/bench/bench_cpu.py [--model-dir models/base] [--batch 8] [--response-tokens 256]
      [--sections update adamw sampling]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import time
from pathlib import Path
from typing import Callable

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from baselines.grpo import GRPO
from lopd.core.config import REPO_ROOT, resolve
from lopd.core.device import malloc_mode, use_cpu_matmul
from lopd.core.domain import Domain
from lopd.core.loop import load_student, policy_optimizer, update
from lopd.core.models import load_model, load_tokenizer
from lopd.core.trajectory import Trajectory, Turn
from lopd.core.vllm_backend import vllm_available, vocabulary_sort_sampler
from pipelines.common import run_stage

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The ISA flags that decide which paths a CPU has."""


def cpu_info() -> dict:
    """The CPU's model name and the deciding flags (Linux's /proc/cpuinfo; 'unknown' elsewhere)."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]  # the first processor's block
    except OSError:
        return {"model": platform.processor() or "unknown", "flags": {}}
    fields = {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in first.splitlines()
                                                             if ":" in line)}
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", "unknown"), "flags": {f: f in flags for f in FLAGS}}


def seconds(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of `repeat` timed calls after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def gemm_gflops(m: int, k: int, n: int, dtype: torch.dtype, repeat: int = 3) -> float:
    """GFLOP/s of an [m, k] x [k, n] product in `dtype` on the current matmul path."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
    return round(2 * m * k * n / seconds(lambda: a @ b.T, repeat) / 1e9, 1)


def bandwidth_gbs(gib: float = 1.0) -> float:
    """GB/s from memory: the faster of a large read (a sum) and a large copy (bytes read + written; a copy's stores
    also read their lines first, which it does not count, so alone it understates what a stream achieves)."""
    src = torch.ones(int(gib * 2**30) // 4)
    dst = torch.empty_like(src)
    nbytes = src.numel() * 4
    return round(max(nbytes / seconds(src.sum, 3), 2 * nbytes / seconds(lambda: dst.copy_(src), 3)) / 1e9, 1)


def batch(vocab: int, sequences: int, prompt_tokens: int, response_tokens: int) -> list[Trajectory]:
    """A fixed GRPO batch of random tokens: groups of 4 with mixed rewards, so every sequence carries gradient."""
    gen = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(vocab, (n,), generator=gen).tolist()  # noqa: E731
    return [Trajectory(f"t{i // 4}", [Turn(ids(prompt_tokens), ids(response_tokens), [-1.0] * response_tokens)],
                       reward=float(i % 2), group=i // 4) for i in range(sequences)]


def update_path(model_dir: str, cfg, mixed_precision: str, cpu_matmul: str, trajectories: list[Trajectory],
                updates: int, exact: list[torch.Tensor], reference: list[torch.Tensor] | None) -> dict:
    """`updates` GRPO updates on one path: the last one's seconds, the first one's gradient error against `exact`
    (`float64_gradients`; every path starts from the same weights), and the weights after the last, returned where
    there is no `reference` yet (the BLAS path), else compared with it. Nothing else is kept: a 0.5B model's weights,
    gradients and AdamW state take 10 GB a path."""
    use_cpu_matmul(cpu_matmul)
    model = load_student(cfg, model_dir, sharded=False)
    method = GRPO(cfg, Domain.scratch("unused"))
    optimizer = policy_optimizer(model, method, cfg)
    AcceleratorState._reset_state()  # accelerate keeps one mixed precision per process; each path sets its own
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    model, optimizer = accelerator.prepare(model, optimizer)  # as the loop's setup: the autocast wraps the forward
    out = {}
    for step in range(updates):
        start = time.perf_counter()
        update(model, optimizer, accelerator, method, trajectories, pad_id=0, cfg=cfg)
        out["update_s"] = time.perf_counter() - start
        print(f"update on {cpu_matmul}/{mixed_precision}: {out['update_s']:.1f} s", flush=True)
        if step == 0:
            out["grad_error"] = max_difference([p.grad for p in model.parameters()], exact, relative=True)
    weights = [p.detach() for p in model.parameters()]
    if reference is None:
        out["weights"] = [w.clone() for w in weights]
    else:
        out["weight_difference"] = max_difference(weights, reference)
    del model, optimizer, weights
    gc.collect()
    return out


def float64_gradients(model_dir: str, cfg, trajectories: list[Trajectory]) -> list[torch.Tensor]:
    """The first update's gradients computed in float64 (the loss still takes its log-softmax over the vocabulary in
    float32, as it casts the logits), kept in float32: what each path's gradient error is measured against."""
    use_cpu_matmul("blas")
    model = load_student(cfg, model_dir, sharded=False).double()
    AcceleratorState._reset_state()
    update(model, torch.optim.SGD(model.parameters(), lr=0.0), Accelerator(cpu=True, mixed_precision="no"),
           GRPO(cfg, Domain.scratch("unused")), trajectories, pad_id=0, cfg=cfg)
    grads = [p.grad.float() for p in model.parameters()]
    del model
    gc.collect()
    return grads


@torch.no_grad()
def max_difference(a: list[torch.Tensor], b: list[torch.Tensor], relative: bool = False) -> float:
    """The largest absolute difference between two lists of tensors (relative: over b's largest magnitude)."""
    diff = max((x - y).abs().max().item() for x, y in zip(a, b))
    return diff / max(y.abs().max().item() for y in b) if relative else diff


def bench_updates(args, cfg, flags: dict) -> dict:
    """The update on each path this CPU has, with its GEMM bound, its gradient error against float64 and its
    weights against the BLAS path's."""
    model = load_model(args.model_dir)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    vocab, hidden = model.get_input_embeddings().weight.shape
    mlp = model.config.intermediate_size
    del model
    trajectories = batch(vocab, args.batch, args.prompt_tokens, args.response_tokens)
    tokens = args.batch * (args.prompt_tokens + args.response_tokens)
    # 6 FLOPs per weight per token (forward 2, backward 4) over the decoder's Linear layers, plus the vocabulary
    # projection over the action tokens; activation checkpointing's recomputation is not counted (MFU-style).
    flops = 6 * (linear * tokens + vocab * hidden * args.batch * args.response_tokens)
    onednn = use_cpu_matmul("auto") == "onednn"
    use_cpu_matmul("blas")
    bounds = {"fp32_blas": gemm_gflops(tokens, hidden, mlp, torch.float32)}
    paths = [("fp32_blas", "no", "blas")]
    if onednn:
        use_cpu_matmul("auto")
        bounds["fp32_onednn"] = gemm_gflops(tokens, hidden, mlp, torch.float32)
        paths.append(("fp32_onednn", "no", "auto"))
    if flags.get("avx512_bf16") or flags.get("amx_bf16"):
        bounds["bf16"] = gemm_gflops(tokens, hidden, mlp, torch.bfloat16)
        paths.append(("bf16", "bf16", "auto"))
    exact = float64_gradients(args.model_dir, cfg, trajectories)
    results, reference = {}, None
    for name, mixed_precision, matmul in paths:
        run = update_path(args.model_dir, cfg, mixed_precision, matmul, trajectories, args.updates, exact, reference)
        reference = reference or run.pop("weights")
        wall = run["update_s"]
        results[name] = {"update_s": round(wall, 2), "tokens_per_s": round(tokens / wall, 1),
                         "gflops": round(flops / wall / 1e9, 1),
                         "fraction_of_gemm_bound": round(flops / wall / 1e9 / bounds[name], 3),
                         "first_grad_error_vs_float64": run["grad_error"],
                         "weight_difference_vs_fp32_blas": run.get("weight_difference", 0.0)}
        del run
    del reference, exact
    gc.collect()
    use_cpu_matmul("blas")
    fastest = min(results, key=lambda k: results[k]["update_s"])
    return {"tokens": tokens, "sequences": args.batch, "updates": args.updates, "model_flops": flops,
            "gemm_gflops": bounds, "paths": results,
            "speedup_over_fp32_blas": {k: round(results["fp32_blas"]["update_s"] / v["update_s"], 2)
                                       for k, v in results.items()},
            "pays": fastest}


def bench_adamw(model_dir: str, bandwidth: float) -> dict:
    """AdamW's step over the model's parameters: torch's per-tensor loop against its fused kernel, from the same
    weights with the same gradients."""
    out, before = {}, None
    for name, options in (("per_tensor", {"foreach": False}), ("fused", {"fused": True})):
        params = list(load_model(model_dir).parameters())
        gen = torch.Generator().manual_seed(0)
        optimizer = torch.optim.AdamW(params, lr=1e-5, **options)
        times = []
        for _ in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen)
            start = time.perf_counter()
            optimizer.step()
            times.append(time.perf_counter() - start)
        numel = sum(p.numel() for p in params)
        floor = numel * 4 * 7 / bandwidth / 1e9  # reads weight, grad, 2 moments; writes weight, 2 moments
        out[name] = {"first_step_s": round(times[0], 3), "step_s": round(min(times[1:]), 3),
                     "fraction_of_memory_bound": round(floor / min(times[1:]), 3)}
        print(f"AdamW {name}: {times}", flush=True)
        if before is None:
            before = [p.detach().clone() for p in params]
        else:
            out["max_weight_difference"] = max_difference(params, before)
        del optimizer, params
        gc.collect()
    out["parameters"] = numel
    out["speedup"] = round(out["per_tensor"]["step_s"] / out["fused"]["step_s"], 2)
    return out


SECTIONS = ("update", "adamw", "sampling")


def bench_sampling(args, flags: dict) -> dict:
    """vLLM on --prompts random prompts of 64 tokens at the cpu profile's sampling settings (`sampling_paths`), and
    in one call on a bfloat16 engine where the CPU has bf16 units (`engine_dtypes`)."""
    from lopd.core.rollout import make_backend
    from lopd.core.sampling import SamplingParams

    tokenizer = load_tokenizer(args.model_dir)
    engine_cfg = resolve({"profile": "cpu", "sampling": {"backend": "vllm", "max_new_tokens": args.new_tokens}})
    backend = make_backend(args.model_dir, tokenizer, engine_cfg, args.prompts)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(100, 20000, (64,), generator=gen).tolist() for _ in range(args.prompts)]
    params = SamplingParams(engine_cfg.sampling.temperature, engine_cfg.sampling.top_p, engine_cfg.sampling.top_k,
                            args.new_tokens)
    backend.generate(prompts[:2], SamplingParams(max_new_tokens=4), seed=0)  # warm-up
    result = sampling_paths(backend, prompts, params, args.call_size)
    if flags.get("avx512_bf16") or flags.get("amx_bf16"):
        del backend
        gc.collect()
        bf16_cfg = resolve({"profile": "cpu", "sampling": {"backend": "vllm", "max_new_tokens": args.new_tokens,
                                                            "dtype": "bfloat16"}})
        bf16 = make_backend(args.model_dir, tokenizer, bf16_cfg, args.prompts)
        # the prompts in its prefix cache, as they are in the float32 engine's by its earlier calls
        bf16.generate(prompts, SamplingParams(max_new_tokens=1), seed=0)
        result["engine_dtype"] = engine_dtypes(bf16, prompts, params, result["one_call"])
    return result


def engine_dtypes(bf16_engine, prompts: list[list[int]], params, float32_call: dict) -> dict:
    """The same call as `sampling_paths`' one call on a bfloat16 engine against the float32 engine's: tokens/s and
    whether bf16 pays. The draws differ (other logits), so only the rates are compared."""
    start = time.perf_counter()
    sampled = sum(len(c.token_ids) for c in bf16_engine.generate(prompts, params, 0))
    wall = time.perf_counter() - start
    print(f"sampling in one call, bfloat16 engine: {sampled / wall:.1f} tokens/s", flush=True)
    bf16_call = {"sampled_tokens": sampled, "wall_s": round(wall, 2), "tokens_per_s": round(sampled / wall, 1)}
    speedup = round(bf16_call["tokens_per_s"] / float32_call["tokens_per_s"], 2)  # the verdict is the recorded ratio's
    return {"float32": float32_call, "bfloat16": bf16_call, "bf16_speedup": speedup,
            "pays": "bfloat16" if speedup > 1 else "float32"}


def sampling_paths(backend, prompts: list[list[int]], params, call_size: int) -> dict:
    """The same prompts at the same seed: in calls of `call_size` against one call, and in one call the engine's
    top-k / top-p on each row's top k (`top_k_top_p_cpu`, the backend's) against vLLM's sort over the vocabulary
    (end-to-end sampled tokens/s; the two samplers must draw the same tokens)."""
    def run(size: int, sort_vocabulary: bool = False) -> tuple[dict, list[list[int]]]:
        start, tokens = time.perf_counter(), []
        with vocabulary_sort_sampler() if sort_vocabulary else contextlib.nullcontext():
            for first in range(0, len(prompts), size):
                tokens += [c.token_ids for c in backend.generate(prompts[first:first + size], params, 0)]
        wall, sampled = time.perf_counter() - start, sum(map(len, tokens))
        print(f"sampling in calls of {size}{' (vocabulary sort)' if sort_vocabulary else ''}: "
              f"{sampled / wall:.1f} tokens/s", flush=True)
        return {"calls": -(-len(prompts) // size), "sampled_tokens": sampled, "wall_s": round(wall, 2),
                "tokens_per_s": round(sampled / wall, 1)}, tokens

    (split, _), (whole, drawn) = run(call_size), run(len(prompts))
    sorted_run, sorted_drawn = run(len(prompts), sort_vocabulary=True)
    return {"prompts": len(prompts), "max_new_tokens": params.max_new_tokens, "split": split, "one_call": whole,
            "speedup": round(whole["tokens_per_s"] / split["tokens_per_s"], 2),
            "one_call_vocabulary_sort": sorted_run,
            "top_k_first_speedup": round(whole["tokens_per_s"] / sorted_run["tokens_per_s"], 2),
            "same_tokens_as_vocabulary_sort": drawn == sorted_drawn}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default=str(REPO_ROOT / "models" / "base"))
    parser.add_argument("--batch", type=int, default=8, help="sequences per update (the learning race's step: 8)")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--response-tokens", type=int, default=256)
    parser.add_argument("--updates", type=int, default=2, help="updates per path (the last is timed)")
    parser.add_argument("--prompts", type=int, default=128, help="sampling: prompts (an evaluation's batch)")
    parser.add_argument("--call-size", type=int, default=8, help="sampling: prompts per call on the split side")
    parser.add_argument("--new-tokens", type=int, default=64, help="sampling: tokens per completion")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="what to measure (default: all); the JSON holds those measured in this run")
    parser.add_argument("--out", default=str(REPO_ROOT / "reports" / "perf" / "cpu.json"))
    args = parser.parse_args()
    load_tokenizer(args.model_dir)  # a missing model is a one-line error before any measurement
    cfg = resolve({"profile": "cpu"})  # the cpu profile's update: its micro-batches, loss chunks, checkpointing
    cpu = cpu_info()
    bandwidth = bandwidth_gbs()
    result = {"model_dir": Path(args.model_dir).name, "cpu": cpu, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "bandwidth_gbs": bandwidth, "malloc": malloc_mode()}
    if "update" in args.sections:
        result["update"] = bench_updates(args, cfg, cpu["flags"])
    if "adamw" in args.sections:
        result["adamw"] = bench_adamw(args.model_dir, bandwidth)
    if "sampling" in args.sections:
        result["sampling"] = bench_sampling(args, cpu["flags"]) if vllm_available() else "n/a: vllm not installed"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    run_stage(main)
