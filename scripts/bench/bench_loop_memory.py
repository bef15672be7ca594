"""Resident memory of each phase of the real training loop -> reports/perf/loop_memory.json.

Runs `lopd.core.loop.train` for a method (default LOPD) on the code domain with the params file's settings, except
`--steps` steps (default 2: AdamW's state appears at the end of step 1, so step 2 is the first to hold everything)
of `--rollouts` rollouts each (default 4: two of the cpu profile's micro-batches) and no validation, into a scratch
folder. A thread samples the process's RSS (GiB) every 20 ms; every phase (engine start, method setup, sampling, the
student forward, the method's loss, backward, the optimizer step, the weight sync, the checkpoint) reports RSS before,
its peak, and RSS after.
A phase's `step` counts the weight syncs before it, plus one (so the checkpoint written after the last step's sync
shows as the step after it).
Each variant runs in a fresh process:
- `shipped`: the loop as it is;
- `unreleased`: without its two CPU memory measures (glibc's freed memory handed back after sampling, every
  backward, optimizer step and weight sync; AdamW one tensor at a time instead of torch's multi-tensor path), to show
  what they save;
- `lora`: the loop as it is with a LoRA student (`train.lora_rank` = `--lora-rank`, default 16): no gradients or
  AdamW state for the base weights, and the EMA or frozen teacher shares the student's base instead of a copy.
Needs models/base, and for LOPD bank/ and checkpoints/composer (`dvc repro cold_start`).
Run: python scripts/bench/bench_loop_memory.py [--method lopd] [--rollouts 4] [--variants shipped unreleased]
                                              [--out PATH]
e.g. the LoRA comparison: --method sdpo --variants shipped lora --out reports/perf/loop_memory_lora.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from lopd.core.config import REPO_ROOT

OUT = REPO_ROOT / "reports" / "perf" / "loop_memory.json"
VARIANTS = ("shipped", "unreleased", "lora")


def rss_gib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


class PhaseRecorder:
    """RSS before, peak during and after each wrapped call, in call order."""

    def __init__(self):
        self.phases: list[dict] = []
        self.peak = 0.0
        self.step = 1
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, rss_gib())
            time.sleep(0.02)

    @contextlib.contextmanager
    def phase(self, name: str):
        before = rss_gib()
        outer = self.peak
        self.peak = before
        try:
            yield
        finally:
            after = rss_gib()
            self.phases.append({"phase": name, "step": self.step, "before_gib": round(before, 2),
                                "peak_gib": round(max(self.peak, after), 2), "after_gib": round(after, 2)})
            self.peak = max(outer, self.peak)  # an enclosing phase keeps its own peak

    def wrap(self, owner, attr: str, name: str, ends_step: bool = False) -> None:
        """Record `owner.attr`'s calls as phase `name`; `ends_step`: each call also ends a training step."""
        original = getattr(owner, attr)

        @functools.wraps(original)
        def wrapped(*args, **kwargs):
            with self.phase(name):
                result = original(*args, **kwargs)
            self.step += ends_step
            return result
        setattr(owner, attr, wrapped)


def run_variant(variant: str, method_name: str, params: Path, steps: int, rollouts: int, lora_rank: int) -> dict:
    """In this process: the loop's first `steps` steps, phase by phase."""
    import torch
    import yaml
    from accelerate import Accelerator

    from lopd.core import device as device_module
    from lopd.core import loop, rollout
    from lopd.core.config import load_config
    from pipelines.common import BASE_MODEL_DIR, build_method, training_domain

    raw = yaml.safe_load(params.read_text())
    raw["train"].update(rollouts_per_step=rollouts, steps=steps, save_every=steps,
                        lora_rank=lora_rank if variant == "lora" else raw["train"]["lora_rank"])
    if isinstance(raw.get(method_name), dict) and "steps" in raw[method_name]:
        raw[method_name]["steps"] = steps
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as short:
        yaml.safe_dump(raw, short)
    cfg = load_config(short.name)
    Path(short.name).unlink()
    method = build_method(method_name, cfg, "code")
    if variant == "unreleased":
        loop.release_freed_memory = lambda: None
        original_optimizer = loop.policy_optimizer

        def multi_tensor(model, method, cfg):
            optimizer = original_optimizer(model, method, cfg)
            for group in optimizer.param_groups:
                group["foreach"] = True
            return optimizer
        loop.policy_optimizer = multi_tensor

    recorder = PhaseRecorder()
    original_backend = rollout.make_backend

    def recorded_backend(*args, **kwargs):
        with recorder.phase("rollout engine start"):
            backend = original_backend(*args, **kwargs)
        recorder.wrap(backend, "generate", "sampling")
        recorder.wrap(backend, "load_weights", "weight sync", ends_step=True)
        return backend
    loop.make_backend = recorded_backend
    recorder.wrap(loop, "policy_outputs", "  student forward (micro-batch)")
    recorder.wrap(type(method), "setup", "method setup")
    recorder.wrap(type(method), "loss", "  method loss (micro-batch)")
    recorder.wrap(Accelerator, "backward", "  backward (micro-batch)")
    recorder.wrap(torch.optim.AdamW, "step", "  optimizer step")
    recorder.wrap(loop, "save", "checkpoint save")
    recorder.wrap(loop, "update", "update")

    with training_domain(cfg, "code") as (tasks, collect, _, _), tempfile.TemporaryDirectory() as scratch:
        loop.train(cfg, method, tasks, collect, BASE_MODEL_DIR, Path(scratch) / "run", None, validation=())
    peaks = [p for p in recorder.phases if not p["phase"].startswith(" ")]
    return {"device": str(device_module.device()), "torch_threads": torch.get_num_threads(),
            "peak_gib": max(p["peak_gib"] for p in recorder.phases), "lora_rank": cfg.train.lora_rank,
            "update_peak_gib": max(p["peak_gib"] for p in peaks if p["phase"] == "update"),
            "resident_after_each_update_gib": [p["after_gib"] for p in peaks if p["phase"] == "update"],
            "phases": recorder.phases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="lopd")
    parser.add_argument("--params", default=str(REPO_ROOT / "params.yaml"))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per step")
    parser.add_argument("--variants", nargs="+", default=["shipped", "unreleased"], choices=VARIANTS)
    parser.add_argument("--lora-rank", type=int, default=16, help="the lora variant's train.lora_rank")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_variant(args.child, args.method, Path(args.params), args.steps,
                                                 args.rollouts, args.lora_rank)))
        return
    results = {}
    for variant in args.variants:
        proc = subprocess.run([sys.executable, __file__, "--child", variant, "--method", args.method,
                               "--params", args.params, "--steps", str(args.steps), "--rollouts", str(args.rollouts),
                               "--lora-rank", str(args.lora_rank)],
                              capture_output=True, text=True)
        found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode == 0 and found:
            results[variant] = json.loads(found[-1].removeprefix("RESULT "))
        else:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
            results[variant] = {"error": f"failed (exit {proc.returncode}): {tail}"}
        print(variant, {k: v for k, v in results[variant].items() if k != "phases"}, flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)  # after every variant: a long run keeps what it measured
        args.out.write_text(json.dumps({"method": args.method, "steps": args.steps, "rollouts_per_step": args.rollouts,
                                        "params": Path(args.params).name, "variants": results}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    from pipelines.common import run_stage  # late, as every import of the code it measures

    run_stage(main)
