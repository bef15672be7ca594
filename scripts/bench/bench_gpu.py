"""GPU benchmark -> reports/perf/gpu.json (`make bench-gpu`; sized for under 5 minutes on one GPU; not yet run on one).

Random weights of real architectures (conf/architectures/*.json: Qwen2.5-Coder-0.5B, the cpu profile's model, and
Qwen3-4B, the paper's; their config.json's architecture fields), built on the device from the config: no hub, no
tokenizer. Every figure is measured side by side in this one run:
1. device: the measured copy bandwidth (bytes read + written per second) and bf16 GEMM throughput (MFU's peak).
2. rollout: sampled tokens/s of each engine on random prompts, against the memory-bandwidth bound (a decode step reads
   the weights once and each row's keys and values up to its length; bound = rows x copy bandwidth / those bytes):
     loop    HFBackend's CPU decode loop (sampling.hf_decode=loop);
     static  HFBackend with the StaticDecoder (hf_decode=static: a static cache, CUDA graphs); its first call, which
             captures the graph, is timed apart (`capture_s`); the rate is that of the next call;
     vllm    VLLMBackend, where vllm is installed and --tokenizer names a tokenizer folder for the engine.
   At the first setting (0.5B) it also checks the engines' log-probs against the trainer's recompute (fp32 master
   weights, bf16 autocast): `trainer_logprob_gap`.
3. update: the project's own update steps at the cpu and paper profiles' micro-batches and sequence lengths (cpu:
   Qwen2.5-Coder-0.5B, 200 + 384 tokens; paper: Qwen3-4B, 1,024 + 16,384), in tokens/s and MFU (6 x parameters x
   tokens / time / the measured bf16 peak; attention FLOPs and recomputation not counted):
     plain   a Hugging Face forward with labels + backward + AdamW step on the same tokens (the reference);
     grpo    `lopd.core.loop.update` with GRPO on the same tokens (the student alone);
     lopd    LOPD's update as `LOPD.loss` computes it: the composer (LoRA encoder + QFormer) encodes J retrieved items
             per trajectory, the frozen backbone (adapter off) reads the teacher view with the J x K latent tokens,
             the top-M + tail reverse KL and the privileged margin, backward into the student and the composer.
             The items are random tokens of the composer's item length (no bank or tokenizer: a stand-in tokenizer).
   Each update's peak device memory is recorded: at the paper's length these are the student's alone (grpo) and
   LOPD's with its teacher and composer.
`--size tiny` runs the same code on tiny versions of the architectures and lengths (the CPU check in `make test`:
code paths only, no numbers worth keeping). A part that fails (out of memory, an engine missing) is recorded with
its reason; the script still writes the rest.
Run: python scripts/bench/bench_gpu.py [--size real|tiny] [--parts rollout update] [--tokenizer DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
import transformers
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from transformers import AutoConfig, AutoModelForCausalLM

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from baselines.grpo import GRPO  # noqa: E402
from lopd.core.config import resolve  # noqa: E402
from lopd.core.device import device, mixed_precision  # noqa: E402
from lopd.core.domain import Domain  # noqa: E402
from lopd.core.loop import micro_batches, policy_optimizer, policy_outputs, update  # noqa: E402
from lopd.core.losses import TopkTailReverseKL, chunked_distillation  # noqa: E402
from lopd.core.sampling import ROLLOUT_ATTENTION, Completion, HFBackend, SamplingParams  # noqa: E402
from lopd.core.static_decode import STATIC_ATTENTION, StaticDecoder  # noqa: E402
from lopd.core.trajectory import Trajectory, Turn, collate, with_prompt  # noqa: E402
from lopd.core.vllm_backend import vllm_available  # noqa: E402
from lopd.latent.composer import Composer  # noqa: E402
from lopd.latent.config import LOPDConfig  # noqa: E402
from lopd.latent.losses import lopd_loss  # noqa: E402

OUT = REPO / "reports" / "perf" / "gpu.json"
ARCHITECTURES = REPO / "conf" / "architectures"
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, bos_token_id=1, eos_token_id=2)
ROLLOUTS = [("qwen2.5-coder-0.5b", 16, 200, 384), ("qwen2.5-coder-0.5b", 64, 200, 384), ("qwen3-4b", 32, 1024, 128)]
"""(architecture, prompts, prompt tokens, new tokens): issue 42's settings."""
UPDATES = [("cpu", "qwen2.5-coder-0.5b", 200, 384), ("paper", "qwen3-4b", 1024, 16384)]
"""(profile, architecture, prompt tokens, response tokens): the profile's model and longest rollout."""
TINY_SCALE = 64
"""--size tiny divides prompts, lengths and item lengths by this (at least 2 each)."""


def architecture(name: str, tiny: bool):
    fields = json.loads((ARCHITECTURES / f"{name}.json").read_text())
    return AutoConfig.for_model(**{**fields, **(TINY if tiny else {})})


def build(config, dtype: torch.dtype, attention: str, seed: int = 0) -> torch.nn.Module:
    """Seeded random weights of `config`'s architecture, initialised on the device."""
    torch.manual_seed(seed)
    with torch.device(device()):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)
    return model.eval()


def sync() -> None:
    if device().type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def device_rates(tiny: bool) -> tuple[dict, float, float]:
    """(summary, copy bandwidth in bytes/s (read + write), bf16 GEMM FLOP/s), best of 3."""
    n = 2**20 if tiny else 2**30
    src = torch.empty(n, dtype=torch.uint8, device=device())
    dst = torch.empty_like(src)
    copy_s = min(timed(lambda: dst.copy_(src))[1] for _ in range(3))
    size = 256 if tiny else 8192
    a = torch.randn(size, size, dtype=torch.bfloat16, device=device())
    gemm_s = min(timed(lambda: a @ a)[1] for _ in range(3))
    copy_bps, flops = 2 * n / copy_s, 2 * size**3 / gemm_s
    return ({"name": torch.cuda.get_device_name() if device().type == "cuda" else platform.processor() or "cpu",
             "torch": torch.__version__, "transformers": transformers.__version__,
             "copy_GB_per_s": round(copy_bps / 1e9, 1), "bf16_gemm_TFLOP_per_s": round(flops / 1e12, 1)},
            copy_bps, flops)


def parameter_count(config) -> int:
    """Parameters of `config`'s architecture (counted on the meta device: nothing allocated)."""
    with torch.device("meta"):
        return sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())


def decode_bytes(config, dtype: torch.dtype, rows: int, context: float) -> float:
    """Bytes one decode step reads: the weights (the input embedding only where untied: one row per token) and each
    row's keys and values at mean length `context`."""
    width = torch.finfo(dtype).bits // 8
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    params = parameter_count(config)
    if not config.tie_word_embeddings:
        params -= config.vocab_size * config.hidden_size
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * width
    return params * width + rows * context * kv


def engine_rate(backend, prompts, params: SamplingParams) -> tuple[dict, list[Completion]]:
    completions, seconds = timed(lambda: backend.generate(prompts, params, seed=0))
    sampled = sum(len(c.token_ids) for c in completions)
    rate = {"sampled_tokens": sampled, "wall_s": round(seconds, 2), "tokens_per_s": round(sampled / seconds, 1)}
    return rate, completions


def trainer_gap(model, prompts, completions: list[Completion], temperature: float, rows: int = 4) -> dict:
    """|the engine's log-prob - the trainer's recompute| over the sampled tokens of the first `rows` rollouts. The
    trainer holds fp32 master weights and computes under bf16 autocast (the paper profile), as `update` does when it
    logs `sampler_logp_abs_gap`."""
    master = copy.deepcopy(model).float()
    master.set_attn_implementation("sdpa")
    batch = collate([Trajectory(task_id=str(i), turns=[Turn(list(p), c.token_ids, c.logprobs)])
                     for i, (p, c) in enumerate(zip(prompts[:rows], completions[:rows]))], 0, device())
    with torch.no_grad(), torch.autocast(device().type, dtype=torch.bfloat16):
        logp_B_T = policy_outputs(master, batch, temperature, 1024).logp_B_T()
    gap = (logp_B_T - batch.sampler_logprobs_B_T).abs()[batch.action_mask_B_T > 0]
    return {"tokens": gap.numel(), "mean": round(gap.mean().item(), 4), "max": round(gap.max().item(), 4)}


def rollout(name: str, rows: int, prompt_len: int, new: int, tiny: bool, copy_bps: float,
            tokenizer_dir: str | None, check_logprobs: bool) -> dict:
    config = architecture(name, tiny)
    dtype = torch.bfloat16
    model = build(config, dtype, ROLLOUT_ATTENTION)
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, config.vocab_size, (rows, prompt_len), generator=g).tolist()
    params = SamplingParams(temperature=0.7, top_p=0.95, top_k=20, max_new_tokens=new)
    never = [config.vocab_size]  # no stop token: every row decodes the whole budget
    out = {"architecture": name, "prompts": rows, "prompt_tokens": prompt_len, "new_tokens": new, "dtype": "bfloat16",
           "bound_tokens_per_s": round(rows * copy_bps / decode_bytes(config, dtype, rows, prompt_len + new / 2))}

    loop = HFBackend(model, stop_ids=never, pad_id=0, batch_size=rows)
    loop.generate(prompts[:2], SamplingParams(max_new_tokens=4), seed=0)  # warm-up
    out["loop"], loop_completions = engine_rate(loop, prompts, params)

    model.set_attn_implementation(STATIC_ATTENTION)
    decoder = StaticDecoder(model, pad_id=0, graphs=device().type == "cuda")
    static = HFBackend(model, stop_ids=never, pad_id=0, batch_size=rows, decoder=decoder)
    engines = {"loop": loop_completions}
    try:
        first, _ = engine_rate(static, prompts, params)
        rate, engines["static"] = engine_rate(static, prompts, params)
        out["static"] = {**rate, "first_call_s": first["wall_s"], "capture_s": round(decoder.stats["capture_s"], 2),
                         "captures": decoder.stats["captures"], "graphs": decoder.graphs}
    except (RuntimeError, torch.OutOfMemoryError) as error:  # recorded: the other engines still run
        out["static"] = f"error: {type(error).__name__}: {str(error).splitlines()[0]}"
    decoder.release()
    if check_logprobs:
        out["trainer_logprob_gap"] = {engine: trainer_gap(model, prompts, completions, params.temperature)
                                      for engine, completions in engines.items()}
    del model, loop, static, decoder
    out["vllm"] = vllm_rate(config, prompts, params, tokenizer_dir, never)
    for engine in ("loop", "static", "vllm"):
        if isinstance(out[engine], dict):
            out[engine]["of_bound"] = round(out[engine]["tokens_per_s"] / out["bound_tokens_per_s"], 3)
    if isinstance(out["static"], dict):
        out["static_over_loop"] = round(out["static"]["tokens_per_s"] / out["loop"]["tokens_per_s"], 2)
    empty_cache()
    return out


def vllm_rate(config, prompts, params: SamplingParams, tokenizer_dir: str | None, stop_ids: list[int]) -> dict | str:
    if not vllm_available():
        return "n/a: vllm is not installed"
    if device().type != "cuda":
        return "n/a: measured on CUDA only (docs/performance.md has the CPU comparison)"
    if tokenizer_dir is None:
        return "n/a: the engine needs a tokenizer folder (--tokenizer DIR)"
    from transformers import AutoTokenizer

    from lopd.core.vllm_backend import VLLMBackend

    with tempfile.TemporaryDirectory() as folder:
        build(config, torch.bfloat16, "sdpa").save_pretrained(folder)
        AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(folder)
        empty_cache()
        engine = VLLMBackend(folder, stop_ids=stop_ids, dtype="bfloat16", gpu_memory_utilization=0.8)
        engine.generate(prompts[:2], SamplingParams(max_new_tokens=4), seed=0)
        return engine_rate(engine, prompts, params)[0]


def empty_cache() -> None:
    if device().type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


class ItemTokenizer:
    """Stands in for a tokenizer where the composer tokenises its items: text "task:i item:j" becomes a shared
    prefix of `task_tokens` ids seeded by i, then `item_tokens` ids seeded by (i, j)."""

    pad_token_id = 0

    def __init__(self, vocab: int, task_tokens: int, item_tokens: int):
        self.vocab, self.task_tokens, self.item_tokens = vocab, task_tokens, item_tokens

    def __call__(self, texts: list[str], truncation: bool, max_length: int) -> dict:
        def ids(seed: int, n: int) -> list[int]:
            return torch.randint(1, self.vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()

        def encode(text: str) -> list[int]:
            task, item = (int(part.split(":")[1]) for part in text.split())
            return (ids(task, self.task_tokens) + ids(1000 * task + item + 1, self.item_tokens))[:max_length]

        return {"input_ids": [encode(t) for t in texts]}


def trajectories(config, count: int, prompt_len: int, response_len: int) -> list[Trajectory]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(count):
        prompt = torch.randint(1, config.vocab_size, (prompt_len,), generator=g).tolist()
        response = torch.randint(1, config.vocab_size, (response_len,), generator=g).tolist()
        out.append(Trajectory(task_id=f"t{i}", group=i // 2, turns=[Turn(prompt, response, [0.0] * response_len)],
                              reward=float(i % 2), response=""))
    return out


def lopd_update(model, composer: Composer, optimizer, accelerator: Accelerator, cfg, batch_trajectories,
                frame_tokens: int) -> None:
    """One optimizer step of LOPD's objective over the trajectories, as `LOPD.loss` computes it per micro-batch
    (retrieval and the chat template aside: the teacher view is `frame_tokens` ids, the J x K latent span, the
    trajectory)."""
    optimizer.zero_grad(set_to_none=True)
    lopd = cfg.section(LOPDConfig)
    n_latent = cfg.n_ret * cfg.latent_tokens
    for traj in batch_trajectories:
        traj.advantage = 2.0 * traj.reward - 1.0
    for chunk in micro_batches(batch_trajectories, cfg.train.micro_batch_size):
        batch = collate(chunk, 0, device())
        student = policy_outputs(model, batch, cfg.sampling.temperature, cfg.train.loss_chunk_size)
        with accelerator.autocast():
            groups = [[f"task:{i} item:{j}" for j in range(cfg.n_ret)] for i in range(len(chunk))]
            latents = [lat.reshape(n_latent, -1) for lat in composer.encode(groups)]
            view = collate([with_prompt(t, [1] * frame_tokens + [0] * n_latent) for t in chunk], 0, device())
            hidden_B_L_D = composer.teacher_hidden(view, latents, [frame_tokens] * len(chunk))
        hidden_t_N_D = hidden_B_L_D[:, :-1][view.action_mask_B_T > 0]
        kl_N, logp_s_N, logp_t_N = chunked_distillation(
            student.hidden_N_D, student.weight_V_D, hidden_t_N_D, composer.backbone.get_output_embeddings().weight,
            student.targets_N, TopkTailReverseKL(lopd.top_m, support="teacher"), student.temperature,
            student.chunk_size)
        loss, _ = lopd_loss(kl_N, logp_t_N, logp_s_N, student.sequence_N, batch.advantages_B, lopd.beta_init,
                            cfg.margin, kl_N.new_zeros(()), lopd.anchor_weight, None)
        accelerator.backward(loss * len(chunk) / len(batch_trajectories))
    accelerator.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
    optimizer.step()


def update_rates(profile: str, name: str, prompt_len: int, response_len: int, tiny: bool, peak_flops: float) -> dict:
    cfg = resolve({"profile": profile})
    config = architecture(name, tiny)
    micro = cfg.train.micro_batch_size
    rows = trajectories(config, max(2, micro), prompt_len, response_len)  # a GRPO group of 2 with rewards 0 and 1
    tokens = len(rows) * (prompt_len + response_len)
    AcceleratorState._reset_state()  # the profiles differ in mixed precision, which accelerate fixes per process
    accelerator = Accelerator(cpu=device().type == "cpu", mixed_precision=mixed_precision(cfg.train.mixed_precision))
    n_params = parameter_count(config)
    out = {"profile": profile, "architecture": name, "sequences": len(rows), "micro_batch": micro,
           "sequence_tokens": prompt_len + response_len,
           "mixed_precision": cfg.train.mixed_precision, "activation_checkpointing": cfg.train.activation_checkpointing,
           "loss_chunk_size": cfg.train.loss_chunk_size}

    def student():
        model = build(config, torch.float32, "sdpa").train()  # fp32 master weights
        if cfg.train.activation_checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        return model

    def plain_step(model, optimizer):
        optimizer.zero_grad(set_to_none=True)
        for chunk in micro_batches(rows, micro):
            ids = collate(chunk, 0, device()).input_ids_B_L
            with accelerator.autocast():
                loss = model(input_ids=ids, labels=ids).loss
            accelerator.backward(loss * len(chunk) / len(rows))
        optimizer.step()

    def measure(run: Callable[[], None]) -> dict:
        try:
            run()  # warm-up: AdamW's state, kernels' autotuning
            empty_cache()
            _, seconds = timed(run)
        except torch.OutOfMemoryError as error:
            return {"error": f"out of memory: {str(error).splitlines()[0]}"}
        result = {"step_s": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
                  "mfu": round(6 * n_params * tokens / seconds / peak_flops, 3)}
        if device().type == "cuda":
            result["peak_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
        return result

    def one(kind: str) -> dict:
        """Build the student (and LOPD's composer) and measure one update kind; they are freed on return."""
        model = student()
        if kind == "lopd":
            scale = TINY_SCALE if tiny else 1
            composer = Composer(build(config, torch.float32, "sdpa"), ItemTokenizer(
                config.vocab_size, 64 // scale, cfg.composer.max_item_tokens // scale), cfg.composer,
                cfg.latent_tokens).to(device())
            for param_name, p in composer.named_parameters():
                p.requires_grad_("lora_" in param_name or param_name.startswith("qformer."))
            optimizer = torch.optim.AdamW([{"params": list(model.parameters())}, {
                "params": [p for p in composer.parameters() if p.requires_grad],
                "lr": cfg.section(LOPDConfig).composer_lr}],
                lr=cfg.train.lr, foreach=device().type != "cpu")
            return measure(lambda: lopd_update(model, composer, optimizer, accelerator, cfg, rows, 16))
        method = GRPO(cfg, Domain.scratch("unused"))
        optimizer = policy_optimizer(model, method, cfg)
        if kind == "plain":
            return measure(lambda: plain_step(model, optimizer))
        return measure(lambda: update(model, optimizer, accelerator, method, rows, 0, cfg))

    for kind in ("plain", "grpo", "lopd"):
        empty_cache()
        try:
            out[kind] = one(kind)
        except torch.OutOfMemoryError as error:
            out[kind] = {"error": f"out of memory: {str(error).splitlines()[0]}"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=("real", "tiny"), default="real")
    parser.add_argument("--parts", nargs="+", choices=("rollout", "update"), default=["rollout", "update"])
    parser.add_argument("--tokenizer", help="a tokenizer folder for the vLLM engine (e.g. models/base)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    tiny = args.size == "tiny"
    if not tiny and device().type != "cuda":
        sys.exit("bench_gpu: no CUDA device (--size tiny runs the code paths on a CPU)")
    rates, copy_bps, peak_flops = device_rates(tiny)
    result: dict = {"size": args.size, "device": rates, "rollout": [], "update": []}
    scale = TINY_SCALE if tiny else 1
    if "rollout" in args.parts:
        for i, (name, rows, prompt_len, new) in enumerate(ROLLOUTS):
            result["rollout"].append(rollout(name, max(2, rows // scale), max(2, prompt_len // scale),
                                             max(2, new // scale), tiny, copy_bps, args.tokenizer, i == 0))
            print(json.dumps(result["rollout"][-1]), flush=True)
    if "update" in args.parts:
        for profile, name, prompt_len, response_len in UPDATES:
            result["update"].append(update_rates(profile, name, max(2, prompt_len // scale),
                                                 max(2, response_len // scale), tiny, peak_flops))
            print(json.dumps(result["update"][-1]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
