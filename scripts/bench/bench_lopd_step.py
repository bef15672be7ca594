"""LOPD step cost benchmark -> reports/perf/lopd_step.json (one entry per model; other models' entries are kept).

1. Waste. One batch of real rollouts (the profile's rollouts_per_step, its sampling settings) is sampled once. On
   those trajectories, in the loop's micro-batches, each pass an LOPD update needs is timed alone:
     student   the policy's forward + backward (target log-probs at the action positions, chunked LM head);
     teacher   a plain frozen copy of the backbone (no adapter) reading the teacher's view with the latent span,
               its LM head at the action positions, backward to the latent inputs only;
     composer  `Composer.encode` over the J retrieved items of every trajectory (the LoRA-wrapped backbone, the
               task's shared tokens encoded once, then the QFormer), backward to the adapter and the QFormer.
   Then one full `update()` of LOPD and of GRPO on the same trajectories. waste = LOPD update / sum of the passes
   (target <= 1.15); the LOPD/GRPO ratios of update and step (sampling + update) are kept too, and the composer
   pass with every item in its own row (`composer_items_alone_s`: what sharing the task's tokens saves).
2. KL memory. Peak memory of the top-M + tail KL (forward + backward) over `--positions` action tokens, chunked as
   in training, against the same loss on full-vocabulary log-probs, each in a fresh process: the allocator's own
   peak (torch.profiler's running "Total Allocated") and the peak RSS above the inputs. Target: chunked <= 0.25x.

The composer is a seeded initialisation (its cost does not depend on its weights), so no cold start is needed.
Needs models/base (or --model NAME, built once into ~/.cache/lopd-suite/bench-models/) and bank/.
Run: python scripts/bench/bench_lopd_step.py [--model smollm2-135m] [--rollouts N] [--positions 4096] [--skip-step]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Callable

import torch
from accelerate import Accelerator
from transformers import AutoConfig

from baselines.config import GRPOConfig
from baselines.grpo import GRPO
from lopd.core.config import REPO_ROOT, load_config
from lopd.core.device import device, malloc_mode, mixed_precision, use_cpu_matmul
from lopd.core.domain import Domain
from lopd.core.loop import micro_batches, policy_optimizer, policy_outputs, update
from lopd.core.losses import TopkTailReverseKL, chunked_distillation, token_logprobs, topk_tail_reverse_kl
from lopd.core.methods import MethodContext
from lopd.core.models import load_model, load_tokenizer, prepare_base_model
from lopd.core.rollout import make_backend, sampling_params, single_turn
from lopd.core.trajectory import collate
from lopd.latent.bank import task_text
from lopd.latent.cold_start import COMPOSER_FILE, build_composer
from lopd.latent.composer import encoder_text, inject_latents, teacher_batch
from lopd.latent.config import LOPDConfig
from lopd.latent.method import LOPD
from pipelines.common import BANK_DIR, BASE_MODEL_DIR, run_stage
from pipelines.domains.code import coding_training_tasks

BENCH_MODELS = Path.home() / ".cache" / "lopd-suite" / "bench-models"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def allocator_peak_mb(fn: Callable[[], None]) -> float:
    """Run `fn` under torch.profiler and return the allocator's peak of bytes allocated during it (MB)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    return max((e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"), default=0) / 2**20


def memory_probe(variant: str, model_dir: Path, positions: int, chunk: int, top_m: int, allocator: bool) -> dict:
    """Peak memory (MB) of one forward + backward of the KL loss over `positions` action tokens, for weights of the
    model's shape (the values do not matter to memory)."""
    config = AutoConfig.from_pretrained(model_dir)
    g = torch.Generator().manual_seed(0)
    weight_V_D = torch.randn(config.vocab_size, config.hidden_size, generator=g) / config.hidden_size ** 0.5
    hidden_s = torch.randn(positions, config.hidden_size, generator=g, requires_grad=True)
    hidden_t = torch.randn(positions, config.hidden_size, generator=g, requires_grad=True)
    targets = torch.randint(0, config.vocab_size, (positions,), generator=g)

    def run() -> None:
        if variant == "chunked":
            kl, _, lt = chunked_distillation(hidden_s, weight_V_D, hidden_t, weight_V_D, targets,
                                             TopkTailReverseKL(top_m), 0.7, chunk)
        else:
            logp_s = (hidden_s @ weight_V_D.T / 0.7).log_softmax(-1)
            logp_t = (hidden_t @ weight_V_D.T / 0.7).log_softmax(-1)
            kl, lt = topk_tail_reverse_kl(logp_s, logp_t, top_m), logp_t[torch.arange(positions), targets]
        (kl.mean() + lt.mean()).backward()

    if allocator:
        return {"allocator_peak_mb": round(allocator_peak_mb(run), 1)}
    before = rss_mb()
    run()
    return {"rss_peak_above_inputs_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before, 1)}


def kl_memory(model_dir: Path, positions: int, chunk: int, top_m: int) -> dict:
    out = {"positions": positions, "chunk_size": chunk, "top_m": top_m}
    for variant in ("chunked", "full"):
        for allocator in (True, False):  # separate processes: the profiler's own memory stays out of the RSS
            cmd = [sys.executable, __file__, "--probe", variant, "--model-dir", str(model_dir),
                   "--positions", str(positions), "--chunk-size", str(chunk), *(["--allocator"] if allocator else [])]
            result = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO_ROOT)
            for key, value in json.loads(result.stdout.strip().splitlines()[-1]).items():
                out[f"{variant}_{key}"] = value
    out["chunked_over_full_allocator"] = round(out["chunked_allocator_peak_mb"] / out["full_allocator_peak_mb"], 3)
    out["chunked_over_full_rss"] = round(out["chunked_rss_peak_above_inputs_mb"] /
                                         out["full_rss_peak_above_inputs_mb"], 3)
    out["target_ratio"] = 0.25
    return out


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def necessary_passes(cfg, model_dir: Path, tokenizer, batches, lopd: LOPD) -> dict[str, float]:
    """Seconds of each pass an LOPD update needs, run alone over the update's micro-batches."""
    temperature, chunk = cfg.sampling.temperature, cfg.train.loss_chunk_size
    student = load_model(model_dir).to(device())
    teacher = load_model(model_dir).to(device()).requires_grad_(False)
    for model in (student, teacher):
        if cfg.train.activation_checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.train()
    dim = lopd.composer.backbone.config.hidden_size
    g = torch.Generator().manual_seed(0)
    seconds = {"student": 0.0, "teacher": 0.0, "composer": 0.0, "composer_items_alone": 0.0}
    for chunk_trajectories in batches:
        batch = collate(chunk_trajectories, tokenizer.pad_token_id, device())

        def student_pass() -> None:
            out = policy_outputs(student, batch, temperature, chunk)
            out.logp_B_T().sum().backward()

        retrieved = [lopd.retriever.retrieve(t.task_id, cfg.n_ret) for t in chunk_trajectories]
        latents = [torch.randn(len(idx) * cfg.latent_tokens, dim, generator=g).requires_grad_() for idx in retrieved]
        view, starts = teacher_batch(tokenizer, chunk_trajectories,
                                     [lopd.messages[t.task_id] for t in chunk_trajectories], lopd.framing,
                                     [lat.shape[0] for lat in latents], tokenizer.pad_token_id,
                                     [lopd.tools[t.task_id] for t in chunk_trajectories], device())

        def teacher_pass() -> None:
            embeds = inject_latents(teacher.get_input_embeddings()(view.input_ids_B_L), latents, starts)
            hidden = teacher.get_decoder()(inputs_embeds=embeds, attention_mask=view.attention_mask_B_L,
                                           use_cache=False).last_hidden_state
            where = view.action_mask_B_T > 0
            token_logprobs(hidden[:, :-1][where], teacher.get_output_embeddings().weight, view.target_ids_B_T[where],
                           temperature, chunk).sum().backward()

        groups = [[encoder_text(task_text(lopd.messages[t.task_id]), lopd.bank[i].trace) for i in idx]
                  for t, idx in zip(chunk_trajectories, retrieved)]

        def composer_pass() -> None:
            sum(lat.sum() for lat in lopd.composer.encode(groups)).backward()

        def composer_items_alone() -> None:  # the lever's counterfactual: every item its own row, the task J times
            sum(lat.sum() for lat in lopd.composer.encode([[text] for g in groups for text in g])).backward()

        for name, fn in (("student", student_pass), ("teacher", teacher_pass), ("composer", composer_pass),
                         ("composer_items_alone", composer_items_alone)):
            seconds[name] += timed(fn)
    return {name: round(s, 2) for name, s in seconds.items()}


def seeded_composer_dir(cfg, model_dir: Path, out: Path) -> Path:
    """A composer folder as the cold start writes it, from the seeded initialisation."""
    build_composer(cfg, model_dir)[0].save(out / COMPOSER_FILE)
    return out


def step_costs(cfg, model_dir: Path, rollouts: int) -> dict:
    tokenizer = load_tokenizer(model_dir)
    tasks, score = coding_training_tasks(cfg)
    tasks = tasks[:rollouts]
    backend = make_backend(model_dir, tokenizer, cfg, cfg.sampling.batch_size)
    start = time.perf_counter()
    trajectories = single_turn(score)(backend, tokenizer, tasks, sampling_params(cfg, cfg.sampling.max_new_tokens),
                                      0, 1)
    sampling_s = time.perf_counter() - start
    backend.sleep()
    del backend
    for i, traj in enumerate(trajectories):
        traj.reward, traj.group = float(i % 2), i // cfg.section(GRPOConfig).group_size  # every GRPO group has signal

    def one_update(method) -> float:
        accelerator = Accelerator(cpu=device().type == "cpu",
                                  mixed_precision=mixed_precision(cfg.train.mixed_precision))
        model = load_model(model_dir).to(device())
        if cfg.train.activation_checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        method.setup(MethodContext(cfg, accelerator, tokenizer, model_dir, model, tasks))
        optimizer = policy_optimizer(model, method, cfg)
        model, optimizer = accelerator.prepare(model, optimizer)
        seconds = timed(partial(update, model, optimizer, accelerator, method, trajectories, tokenizer.pad_token_id,
                                cfg))
        del model, optimizer
        accelerator.free_memory()  # the policy and its AdamW state go (the method keeps the accelerator): 0.5B fits
        return seconds

    grpo_s = one_update(GRPO(cfg, Domain.scratch("unused")))
    with tempfile.TemporaryDirectory() as tmp:
        lopd = LOPD(cfg, Domain.scratch(tmp, bank=BANK_DIR,
                                        composer=seeded_composer_dir(cfg, model_dir, Path(tmp))))
        lopd_s = one_update(lopd)
        lopd.prepare(trajectories)
        passes = necessary_passes(cfg, model_dir, tokenizer, micro_batches(trajectories, cfg.train.micro_batch_size),
                                  lopd)
    unshared = passes.pop("composer_items_alone")
    necessary = sum(passes.values())
    return {"rollouts": len(trajectories), "action_tokens": sum(t.num_action_tokens for t in trajectories),
            "micro_batch_size": cfg.train.micro_batch_size, "n_ret": cfg.n_ret, "latent_tokens": cfg.latent_tokens,
            "sampling_s": round(sampling_s, 2), "grpo_update_s": round(grpo_s, 2), "lopd_update_s": round(lopd_s, 2),
            "passes_s": passes, "necessary_s": round(necessary, 2), "waste": round(lopd_s / necessary, 3),
            "composer_items_alone_s": unshared,  # the same composer pass without the shared task prefix
            "target_waste": 1.15,
            "lopd_over_grpo_update": round(lopd_s / grpo_s, 3),
            "lopd_over_grpo_step": round((sampling_s + lopd_s) / (sampling_s + grpo_s), 3)}


def model_dir_for(name: str, profile_model: str, seed: int) -> Path:
    if name == profile_model:
        return BASE_MODEL_DIR
    out = BENCH_MODELS / name
    if not (out / "config.json").exists():
        prepare_base_model(name, out, seed=seed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="registry name (default: the profile's model)")
    parser.add_argument("--rollouts", type=int, help="rollouts in the batch (default: train.rollouts_per_step)")
    parser.add_argument("--positions", type=int, default=4096, help="action tokens in the memory probe")
    parser.add_argument("--chunk-size", type=int, help="positions per chunk (default: train.loss_chunk_size)")
    parser.add_argument("--skip-step", action="store_true", help="measure the KL memory only")
    parser.add_argument("--out", default=str(REPO_ROOT / "reports" / "perf" / "lopd_step.json"))
    parser.add_argument("--probe", choices=("chunked", "full"), help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--allocator", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cfg = load_config()
    chunk, top_m = args.chunk_size or cfg.train.loss_chunk_size, cfg.section(LOPDConfig).top_m
    if args.probe:
        print(json.dumps(memory_probe(args.probe, Path(args.model_dir), args.positions, chunk, top_m, args.allocator)))
        return
    name = args.model or cfg.model.name
    model_dir = model_dir_for(name, cfg.model.name, cfg.seed)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    models = result.get("models", {})
    entry = {"threads": torch.get_num_threads(), "device": str(device()), "malloc": malloc_mode(),
             "cpu_matmul": use_cpu_matmul(cfg.model.cpu_matmul),  # the stages' path (pipelines.common.parse_args)
             "kl_memory": kl_memory(model_dir, args.positions, chunk, top_m)}
    if not args.skip_step:
        entry["step"] = step_costs(cfg, model_dir, args.rollouts or cfg.train.rollouts_per_step)
    models[name] = entry
    result = {"profile": cfg.profile, "models": models}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(entry, indent=2))


if __name__ == "__main__":
    run_stage(main)
