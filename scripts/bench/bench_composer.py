"""LOPD's composer passes outside a training step, timed on this machine -> reports/perf/composer.json.

`make estimate` prices Base + Composer's evaluation and the cold start from these (their passes are not a training
step's, which lopd_step.json times). Through the stages' own code, on the repository's bank and composer weights
(LOPD's checkpoint, else phi_0, else a fresh composer: the amount of computation is the same):
- compose: each evaluation task's latent context as Base + Composer builds it (lopd.latent.context: retrieval, one
  encoder pass over the task with its n_ret retrieved bank entries, the QFormer), forward only, for the first --tasks
  of HumanEval+ and of MBPP+: seconds per task;
- cold_start: the stage's function (lopd.latent.cold_start.cold_start) run with --steps steps into a scratch folder:
  a step's seconds (the mean of the steps after the first, which also allocates AdamW's state; a step's batch is
  the bank entries the stage's seeded order picks), the NLL measurement's seconds per bank entry (forward only),
  and the bank's size;
each with the positions the backbone computed (padding included) and its model FLOP rate against this CPU's float32
GEMM rate on the stages' matmul path (`model.cpu_matmul`) at the encoder's width. Model FLOPs: 2 per decoder weight
per position for a forward pass; a pass with gradients counts 3 forward passes (the forward, activation
checkpointing's recomputation, the backward to the inputs: the backbone is frozen, the adapter's own gradients are
small). Attention and the output layer are not counted.
Run: python scripts/bench/bench_composer.py [--tasks 32] [--steps 3] [--out reports/perf/composer.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import torch
from transformers import AutoConfig

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import lopd.latent.cold_start as cold_start_module  # noqa: E402
from lopd.core.config import resolve  # noqa: E402
from lopd.core.device import malloc_mode, use_cpu_matmul  # noqa: E402
from lopd.core.models import load_tokenizer  # noqa: E402
from lopd.core.rollout import Task  # noqa: E402
from lopd.latent.composer import FRAMINGS  # noqa: E402
from lopd.latent.context import LatentContextBackend, trained_composer  # noqa: E402
from lopd.latent.retrieval import TextEmbedder, load_bank  # noqa: E402
from pipelines.common import BASE_MODEL_DIR, DOMAINS, run_stage, training_domain  # noqa: E402
from pipelines.evaluate import code_benchmark  # noqa: E402
from scripts.bench.bench_cpu import cpu_info, gemm_gflops  # noqa: E402

BENCHMARKS = ("humaneval_plus", "mbpp_plus")


@contextlib.contextmanager
def counted_positions(decoder: torch.nn.Module, positions: list[int]) -> Iterator[list[int]]:
    """Within: the positions each forward call of `decoder` computes (batch x length, padding included), appended to
    `positions`; checkpointing's recomputation runs the layers, not this call, and is not counted."""

    def count(_module, args, kwargs):
        inputs = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else kwargs.get("inputs_embeds")
        positions.append(inputs.shape[0] * inputs.shape[1])

    handle = decoder.register_forward_pre_hook(count, with_kwargs=True)
    try:
        yield positions
    finally:
        handle.remove()


def decoder_weights(decoder: torch.nn.Module) -> int:
    """Weights of the decoder's linear layers (the adapter's low-rank factors included)."""
    return sum(m.weight.numel() for m in decoder.modules() if isinstance(m, torch.nn.Linear))


def rate(positions: float, passes: float, weights: int, seconds: float, bound: float) -> dict:
    """Model GFLOP/s of `positions` computed in `passes` forward-pass equivalents, and its fraction of `bound`."""
    gflops = 2 * weights * positions * passes / seconds / 1e9
    return {"model_gflops": round(gflops, 1), "fraction_of_gemm_bound": round(gflops / bound, 3)}


def bench_compose(cfg, tasks_per_benchmark: int, bound: float) -> dict:
    """Seconds per evaluation task to compose its latent context, as Base + Composer does before sampling."""
    domain = DOMAINS["code"]
    bank, retriever = load_bank(domain.bank, cfg.bank.self_retrieval)
    composer, tokenizer, source = trained_composer(cfg, BASE_MODEL_DIR, domain.composer, domain.checkpoints / "lopd")
    embedder = TextEmbedder(cfg.bank.embedder)
    decoder = composer.backbone.get_decoder()
    out = {"composer": source, "bank_entries": len(bank), "n_ret": cfg.n_ret, "per_benchmark": {}}
    for name in BENCHMARKS:
        messages = list(code_benchmark(cfg, name).messages.items())[:tasks_per_benchmark]
        backend = LatentContextBackend(None, tokenizer, composer, bank, retriever, embedder, cfg, FRAMINGS["code"])
        with counted_positions(decoder, []) as positions:
            start = time.perf_counter()
            backend.add_tasks([Task(tid, m) for tid, m in messages])
            wall = time.perf_counter() - start
        out["per_benchmark"][name] = {"tasks": len(messages), "wall_s": round(wall, 2),
                                      "seconds_per_task": round(wall / len(messages), 3),
                                      "positions_per_task": round(sum(positions) / len(messages), 1),
                                      **rate(sum(positions), 1, decoder_weights(decoder), wall, bound)}
        print(f"compose {name}: {wall / len(messages):.2f} s a task", flush=True)
    tasks = sum(b["tasks"] for b in out["per_benchmark"].values())
    out["seconds_per_task"] = round(sum(b["wall_s"] for b in out["per_benchmark"].values()) / tasks, 3)
    return out


class Timed:
    """Within: `module.name` wrapped, recording each call's (start, end, gradients on, positions counted before,
    positions counted after) into `calls`."""

    def __init__(self, module, name: str, positions: list[int]):
        self.module, self.name, self.positions, self.calls = module, name, positions, []
        self.original = getattr(module, name)

    def __enter__(self) -> list[tuple[float, float, bool, int, int]]:
        def wrapper(*args, **kwargs):
            start, grad, before = time.perf_counter(), torch.is_grad_enabled(), sum(self.positions)
            try:
                return self.original(*args, **kwargs)
            finally:
                self.calls.append((start, time.perf_counter(), grad, before, sum(self.positions)))

        setattr(self.module, self.name, wrapper)
        return self.calls

    def __exit__(self, *exc) -> None:
        setattr(self.module, self.name, self.original)


def bench_cold_start(cfg, steps: int, bound: float) -> dict:
    """The cold start stage's function at `steps` steps: a step and the NLL measurement per entry."""
    # no task held out: the privilege's passes are NLL measurements of entries, priced per measured entry
    cfg = resolve({"profile": cfg.profile, "cold_start": {"steps": steps, "held_out_tasks": 0}})
    domain = DOMAINS["code"]
    positions: list[int] = []
    build, hooks, weights = cold_start_module.build_composer, contextlib.ExitStack(), []

    def build_counted(*args, **kwargs):  # the stage's composer, its decoder's positions counted
        composer, tokenizer = build(*args, **kwargs)
        decoder = composer.backbone.get_decoder()
        hooks.enter_context(counted_positions(decoder, positions))
        weights.append(decoder_weights(decoder))
        return composer, tokenizer

    with (hooks, Timed(cold_start_module, "_save_progress", positions) as saves,
          Timed(cold_start_module, "latent_nlls", positions) as nlls,
          training_domain(cfg, "code") as split, tempfile.TemporaryDirectory() as scratch):
        cold_start_module.build_composer = build_counted
        try:
            start = time.perf_counter()
            summary = cold_start_module.cold_start(cfg, BASE_MODEL_DIR, domain.bank, split.tasks, scratch,
                                                   FRAMINGS["code"])["summary"]
            wall = time.perf_counter() - start
        finally:
            cold_start_module.build_composer = build
    if not summary["steps"]:
        raise SystemExit("error: bank/: the code bank is empty, the cold start trains nothing (dvc repro build_bank)")
    step_s = (saves[-1][1] - saves[0][1]) / (len(saves) - 1)  # the steps after the first, between their saves
    graded = [after - before for _, _, grad, before, after in nlls if grad]
    step_positions = sum(graded[1:]) / len(graded[1:])
    measured_s = sum(end - begin for begin, end, grad, _, _ in nlls if not grad)
    out = {"bank_entries": summary["n_examples"], "batch_size": cfg.cold_start.batch_size, "steps": summary["steps"],
           "step_s": round(step_s, 2), "step_positions": round(step_positions),
           **rate(step_positions, 3, weights[0], step_s, bound),
           "nll_examples": summary["nll_examples"], "nll_measurement_s": round(measured_s, 2),
           "seconds_per_measured_entry": round(measured_s / (2 * summary["nll_examples"]), 3),
           "wall_s": round(wall, 1)}
    print(f"cold start: a step {step_s:.1f} s, the measurement {out['seconds_per_measured_entry']:.2f} s an entry",
          flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=32, help="evaluation tasks composed per benchmark")
    parser.add_argument("--steps", type=int, default=3, help="cold start steps (those after the first are timed)")
    parser.add_argument("--out", default=str(REPO / "reports" / "perf" / "composer.json"))
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps: at least 2 (the first step also allocates AdamW's state, and is not timed)")
    load_tokenizer(BASE_MODEL_DIR)  # a missing model is a one-line error before any measurement
    cfg = resolve({"profile": "cpu"})
    matmul = use_cpu_matmul(cfg.model.cpu_matmul)
    model = AutoConfig.from_pretrained(BASE_MODEL_DIR)  # the GEMM bound at the model's width and MLP
    bound = gemm_gflops(4096, model.hidden_size, model.intermediate_size, torch.float32)
    result = {"model": cfg.model.name, "cpu": cpu_info(), "threads": torch.get_num_threads(), "cpu_matmul": matmul,
              "malloc": malloc_mode(),
              "fp32_gemm_gflops": bound, "compose": bench_compose(cfg, args.tasks, bound),
              "cold_start": bench_cold_start(cfg, args.steps, bound)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    run_stage(main)
