"""What more held-out validation tasks cost -> reports/perf/validation_cost.json.

One validation point (the base model's greedy reward on the `data.validation_tasks` held-out coding tasks, scored in
the sandbox, as the training loop runs it) at each of several counts, side by side on one engine in one run. The
held-out sets are nested (the tasks with the smallest id hashes), so a larger count adds tasks to the smaller set.
From these and the recorded default run (reports/perf/default_run_wall_time.json; its validation count from
dvc.lock) it predicts the default run's end-to-end time at each count, on the machine that recorded it: every training
stage's validation points (step 0, every `train.val_every` steps and the last) cost the difference of a point, scaled
by that machine's speed over this one's (both sampling the recorded run's first GRPO batch: the same tasks, seed and
settings), the bank samples fewer training tasks, and DVC's own work adds DVC_STAGE_OVERHEAD_S a stage (measured on
the recorded run: docs/results.md).
Run: python scripts/bench/bench_validation.py [--profile cpu] [--counts 32 64 96]  (about 10 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from accelerate import Accelerator

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from baselines.config import GRPOConfig  # noqa: E402
from evaluation.stats import score_ci  # noqa: E402
from lopd.core.config import resolve  # noqa: E402
from lopd.core.device import device  # noqa: E402
from lopd.core.loop import tasks_for_step, validate  # noqa: E402
from lopd.core.models import load_tokenizer  # noqa: E402
from lopd.core.rollout import greedy_params, make_backend, sampling_params, step_seed  # noqa: E402
from lopd.core.sampling import SamplingParams  # noqa: E402
from pipelines.common import BASE_MODEL_DIR, run_stage  # noqa: E402
from pipelines.domains.code import training_tasks  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from estimate import recorded_file, train_stage, validation_points  # noqa: E402

OUT = REPO / "reports" / "perf" / "validation_cost.json"
RECORD = REPO / "reports" / "perf" / "default_run_wall_time.json"
"""The recorded default run the prediction is for: the complete one (scripts/wall_time.py's default output)."""
LOCK = REPO / "dvc.lock"
DVC_STAGE_OVERHEAD_S = 10.0
"""DVC's own work around a stage (hashing, caching, starting its process): the recorded run's last `dvc repro` ran
25 stages with 85.7 min of stage time in 89.7 min."""


def recorded_validation_tasks(lock: dict) -> int | None:
    """The validation count the recorded run's GRPO training ran with (its dvc.lock params)."""
    params = ((lock.get("stages") or {}).get("train@grpo") or {}).get("params", {}).get("params.yaml", {})
    return params.get("data", {}).get("validation_tasks", params.get("data.validation_tasks"))


def first_grpo_batch(backend, tokenizer, cfg) -> dict:
    """Sampling the first step of GRPO's training as `cfg` runs it (its tasks, seed and settings): seconds of sampling
    (the engine's own clock, as the history's time_sampling_s) and the completions' mean length (a check that the
    batch is the recorded one)."""
    with training_tasks(cfg) as split:
        group = cfg.section(GRPOConfig).group_size
        tasks = tasks_for_step(split.tasks, cfg.train.rollouts_per_step // group, cfg.seed, 0)
        before = backend.stats["sampling_s"]
        played = split.collect(backend, tokenizer, tasks, sampling_params(cfg, cfg.sampling.max_new_tokens),
                               step_seed(cfg.seed, 0), group)
    return {"sampling_s": round(backend.stats["sampling_s"] - before, 1),
            "mean_length": sum(t.num_action_tokens for t in played) / len(played)}


def predict(points: dict[int, dict], recorded: dict, reference: int, per_stage: dict[str, int],
            speed: float) -> dict:
    """The default run's end-to-end hours at each measured count: the recorded run (its stage time, plus
    DVC_STAGE_OVERHEAD_S a stage), which validated on `reference` tasks, with each validation point costing the
    measured difference times `speed` (the recording machine's time over this one's) and the bank's sampling scaled
    by the training tasks left."""
    ref = points[reference]
    bank_per_task_s = recorded["stages"]["build_bank"]["seconds"] / ref["train_tasks"]
    base_s = recorded["total_s"] + DVC_STAGE_OVERHEAD_S * len(recorded["stages"])
    return {"recorded_end_to_end_h": round(base_s / 3600, 2), "recorded_validation_tasks": reference,
            "validation_points": per_stage, "bank_s_per_training_task": round(bank_per_task_s, 1),
            "speed": round(speed, 3),
            "end_to_end_h": {count: round((base_s + sum(per_stage.values()) * (p["wall_s"] - ref["wall_s"]) * speed
                                           + (p["train_tasks"] - ref["train_tasks"]) * bank_per_task_s) / 3600, 2)
                             for count, p in points.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--counts", type=int, nargs="+", default=[32, 64, 96])
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    cfg = resolve({"profile": args.profile})
    tokenizer = load_tokenizer(BASE_MODEL_DIR)
    backend = make_backend(BASE_MODEL_DIR, tokenizer, cfg, cfg.sampling.batch_size)
    backend.generate([tokenizer("warm-up")["input_ids"]] * 2, SamplingParams(max_new_tokens=4), seed=0)
    accelerator = Accelerator(cpu=device().type == "cpu")
    points = {}
    for count in args.counts:
        counted = resolve({"profile": args.profile, "data": {"validation_tasks": count}})
        with training_tasks(counted) as split:
            before, start = backend.stats["sampled_tokens"], time.perf_counter()
            scored = validate(backend, tokenizer, split.collect, split.validation,
                              greedy_params(counted.sampling.max_new_tokens), 1, counted.seed, accelerator)
            wall_s = time.perf_counter() - start
            train_tasks = len(split.tasks)
        low, high = score_ci(np.asarray(scored["val_rewards"]))
        tokens = backend.stats["sampled_tokens"] - before
        points[count] = {"wall_s": round(wall_s, 1), "sampled_tokens": tokens, "mean_tokens": round(tokens / count, 1),
                         "train_tasks": train_tasks, "base_val_reward": scored["val_reward"],
                         "base_val_ci": [round(low, 3), round(high, 3)]}
        print(f"{count} tasks: {wall_s:.1f} s, base reward {scored['val_reward']:.3f} [{low:.3f}, {high:.3f}]")
    result = {"profile": cfg.profile, "model": cfg.model.name, "backend": type(backend).__name__,
              "written": time.strftime("%Y-%m-%dT%H:%M:%S"), "points": points}
    recorded = json.loads(RECORD.read_text())
    reference = recorded_validation_tasks(yaml.safe_load(LOCK.read_text()))
    if reference in points and recorded.get("complete"):
        first = json.loads(recorded_file(recorded, "train@grpo", "plots/train/grpo.json"))[0]
        here = first_grpo_batch(backend, tokenizer, resolve({"profile": args.profile,
                                                             "data": {"validation_tasks": reference}}))
        result["first_grpo_batch"] = {"here": here, "recorded": {"sampling_s": round(first["time_sampling_s"], 1),
                                                                 "mean_length": first["completions/mean_length"]}}
        result["prediction"] = predict(points, recorded, reference,
                                       {train_stage(m): validation_points(cfg, m)
                                        for m in cfg.methods if m != "vanilla"},
                                       first["time_sampling_s"] / here["sampling_s"])
    else:
        result["prediction"] = (f"n/a: the recorded run validated on {reference} tasks, not measured here (--counts)"
                                if recorded.get("complete") else "n/a: the recorded run is incomplete")
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    run_stage(main)
