"""Stage `<race>_select` (a learning race, pipelines/learn/dvc.yaml; `--race learn`: coding tasks, `--race learn_tool`:
tool-use episodes): the held-in tasks every method of the race trains and is measured on. The base model samples
`<race>.selection_samples` completions (episodes) of each candidate training task (`<race>.candidates`, evenly spaced
over the race's domain's training split: never a benchmark task, never a validation task); the tasks whose samples'
rewards are not all equal qualify, and the `<race>.tasks` whose rewards vary most are held in
(evaluation/learning_race.py). Then it measures the base model on them as every run of the race measures its policy
(fresh draws, from `<race>.eval_seed`: a task's selection samples would flatter the tasks that drew well), the step 0
all runs share. Writes results/<race>/selection.json (every candidate's sample rewards and their mean, the held-in ids
and step 0) and its summary."""

from __future__ import annotations

import sys
import time

from accelerate import Accelerator

from evaluation.learning_race import pass_rates, sample_rewards, select_tasks, step0_measurement
from lopd.core.device import device
from lopd.core.loop import SampledValidation, validate
from lopd.core.models import load_tokenizer
from lopd.core.rollout import Rollouts, Task, check_backend, evenly_spaced, make_backend, sampling_params
from lopd.core.tracking import Tracker
from pipelines.common import (
    BASE_MODEL_DIR,
    RACE_ARG,
    RACES,
    check_sandbox,
    parse_args,
    race_domain_config,
    record_metrics,
    run_stage,
    training_domain,
    write_json,
)


def screen(collect: Rollouts, backend, tokenizer, candidates: list[Task], params, seed: int,
           samples: int) -> dict[str, list[float]]:
    """Each candidate's rewards over `samples` rollouts of the base model (`collect`: the race domain's), in the
    candidates' order."""
    sampled = collect(backend, tokenizer, candidates, params, seed, samples)
    return sample_rewards([t.task_id for t in sampled], [t.reward for t in sampled])


def main() -> None:
    args, cfg = parse_args(__doc__, race=RACE_ARG)
    race = RACES[args.race]
    check_backend(cfg, BASE_MODEL_DIR)  # before any work: the rollout engine can run this model
    check_sandbox(race.domain)  # and the sandbox can score the race's tasks
    learn, stage = race.settings(cfg), race.stage("select")
    domain_cfg = race_domain_config(cfg, race)
    with Tracker(cfg, stage) as tracker, training_domain(domain_cfg, race.domain) as (tasks, collect, source, _):
        start = time.perf_counter()
        candidates = evenly_spaced(tasks, learn.candidates or len(tasks))
        tokenizer = load_tokenizer(BASE_MODEL_DIR)
        backend = make_backend(BASE_MODEL_DIR, tokenizer, domain_cfg, cfg.sampling.batch_size)
        # the pipeline's seed: not a run's measurement seed (eval_seed), so step 0's measurement is fresh
        params = sampling_params(domain_cfg, learn.max_new_tokens)
        rewards = screen(collect, backend, tokenizer, candidates, params, cfg.seed, learn.selection_samples)
        rates = pass_rates(rewards)
        held_in = select_tasks(rewards, learn.tasks)
        if not held_in:
            sys.exit(f"error: {stage}: no candidate task's rewards differ over its {learn.selection_samples} samples "
                     f"({len(candidates)} tasks of {source}); raise {race.section}.selection_samples or "
                     f"{race.section}.candidates")
        by_id = {t.task_id: t for t in candidates}
        step0 = validate(backend, tokenizer, collect, [by_id[t] for t in held_in], params, learn.eval_samples,
                         SampledValidation(learn.eval_samples, learn.eval_seed).point_seed(0),
                         Accelerator(cpu=device().type == "cpu"))
        write_json(race.selection, {"data": source, "model": cfg.model.name, "samples": learn.selection_samples,
                                    "pass_rates": rates, "rewards": rewards, "held_in": held_in, "step0": step0,
                                    "step0_measurement": step0_measurement(learn, race.max_steps(cfg))})
        qualifying = len(select_tasks(rewards, len(rewards)))
        summary = {"candidates": len(candidates), "qualifying": qualifying, "held_in": len(held_in),
                   "candidate_pass_rate": sum(rates.values()) / len(rates),
                   "held_in_pass_rate": sum(rates[t] for t in held_in) / len(held_in),
                   "step0_held_in_reward": step0["val_reward"],
                   "wall_s": round(time.perf_counter() - start, 1)}
        record_metrics(tracker, race.results / "metrics" / "select.json", stage, summary)
        tracker.log_artifact(race.selection)
    print(f"{stage}: {len(held_in)} held-in tasks of {qualifying} qualifying ({len(candidates)} candidates); "
          f"wrote {race.selection}")


if __name__ == "__main__":
    run_stage(main)
