"""Stage `learn_select` (the learning race, pipelines/learn/dvc.yaml): the held-in tasks every method of the race
trains and is measured on. The base model samples `learn.selection_samples` completions per candidate training task
(the code domain's training split: never a benchmark task, never a validation task); the tasks whose pass rate lies
strictly between 0 and 1 qualify, and the `learn.tasks` closest to 1/2 are held in (evaluation/learning_race.py).
Then it measures the base model on them as every run of the race measures its policy (fresh draws, from
`learn.eval_seed`: a task's selection samples would flatter the tasks that drew well), the step 0 all runs share.
Writes results/learn/selection.json (every candidate's pass rate, the held-in ids and step 0) and its summary."""

from __future__ import annotations

import sys
import time

from accelerate import Accelerator

from evaluation.learning_race import pass_rates, select_tasks, step0_measurement
from lopd.core.device import device
from lopd.core.loop import SampledValidation, validate
from lopd.core.models import load_tokenizer
from lopd.core.rollout import check_backend, make_backend, sampling_params
from lopd.core.tracking import Tracker
from pipelines.common import (
    BASE_MODEL_DIR,
    LEARN_DIR,
    LEARN_SELECTION,
    check_sandbox,
    parse_args,
    record_metrics,
    run_stage,
    training_domain,
    write_json,
)


def main() -> None:
    args, cfg = parse_args(__doc__)
    check_backend(cfg, BASE_MODEL_DIR)  # before any work: the rollout engine can run this model
    check_sandbox("code")  # and the sandbox can score code
    learn = cfg.learn
    with Tracker(cfg, "learn_select") as tracker, training_domain(cfg, "code") as (tasks, collect, source, _):
        start = time.perf_counter()
        candidates = tasks[:learn.candidates]
        tokenizer = load_tokenizer(BASE_MODEL_DIR)
        backend = make_backend(BASE_MODEL_DIR, tokenizer, cfg, cfg.sampling.batch_size)
        # the pipeline's seed: not a run's measurement seed (learn.eval_seed), so step 0's measurement is fresh
        params = sampling_params(cfg, learn.max_new_tokens)
        sampled = collect(backend, tokenizer, candidates, params, cfg.seed, learn.selection_samples)
        rates = pass_rates([t.task_id for t in sampled], [t.reward for t in sampled])
        held_in = select_tasks(rates, learn.tasks)
        if not held_in:
            sys.exit(f"error: learn_select: no candidate task has a pass rate strictly between 0 and 1 over "
                     f"{learn.selection_samples} samples ({len(candidates)} tasks of {source}); raise "
                     "learn.selection_samples or learn.candidates")
        by_id = {t.task_id: t for t in candidates}
        step0 = validate(backend, tokenizer, collect, [by_id[t] for t in held_in], params, learn.eval_samples,
                         SampledValidation(learn.eval_samples, learn.eval_seed).point_seed(0),
                         Accelerator(cpu=device().type == "cpu"))
        write_json(LEARN_SELECTION, {"data": source, "model": cfg.model.name, "samples": learn.selection_samples,
                                     "pass_rates": rates, "held_in": held_in, "step0": step0,
                                     "step0_measurement": step0_measurement(learn)})
        qualifying = sum(0 < r < 1 for r in rates.values())
        summary = {"candidates": len(candidates), "qualifying": qualifying, "held_in": len(held_in),
                   "candidate_pass_rate": sum(rates.values()) / len(rates),
                   "held_in_pass_rate": sum(rates[t] for t in held_in) / len(held_in),
                   "step0_held_in_reward": step0["val_reward"],
                   "wall_s": round(time.perf_counter() - start, 1)}
        record_metrics(tracker, LEARN_DIR / "metrics" / "select.json", "learn_select", summary)
        tracker.log_artifact(LEARN_SELECTION)
    print(f"learn_select: {len(held_in)} held-in tasks of {qualifying} qualifying ({len(candidates)} candidates); "
          f"wrote {LEARN_SELECTION}")


if __name__ == "__main__":
    run_stage(main)
