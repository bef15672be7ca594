"""Stage `<race>@<run>` (a learning race, pipelines/learn/dvc.yaml; `--race learn`: coding tasks, `--race learn_tool`:
tool-use episodes): one run of `<race>.runs` trains its method with the shared loop on the held-in tasks (stage
<race>_select) and measures it on those same tasks before the first step, every `<race>.eval_every` steps and after
the last: the mean reward of `<race>.eval_samples` samples (episodes) per task at the training temperature, drawn from
`<race>.eval_seed` (the same draws in every run; step 0 is the select stage's where that was measured as the run
measures: `reusable_step0`). The run's config is its domain's with the race's budgets and the run's seed, learning rate
and step count (`race_config`).
Writes the measurement points (plots/<race>/<run>.json), the per-step history with the method's own objective
(plots/<race>/<run>_steps.json) and the run's summary (results/<race>/metrics/<run>.json); the checkpoint
(checkpoints/<race>/<run>; a killed run resumes from checkpoints/<race>/.resume/) is removed once they are written."""

from __future__ import annotations

import shutil
import sys

from accelerate import PartialState

from evaluation.learning_race import race_row, reusable_step0
from lopd.core.config import Config, ConfigError, build_config
from lopd.core.distributed import ProcessSplitError
from lopd.core.jsonl import read_json
from lopd.core.loop import MethodInputError, SampledValidation, train
from lopd.core.methods import Method
from lopd.core.rollout import Task, check_backend
from lopd.core.tracking import Tracker
from pipelines.common import (
    BASE_MODEL_DIR,
    RACE_ARG,
    RACES,
    Race,
    build_method,
    check_sandbox,
    check_writable,
    parse_args,
    race_domain_config,
    replacing,
    run_stage,
    stage_modules,
    training_domain,
    write_history,
    write_metrics,
)

CALLS = {"up": 1, "no change": 0, "down": -1}
"""A run's call (`evaluation.learning_race.verdict`) as the number its metrics file holds."""


def race_config(cfg: Config, race: Race, name: str) -> Config:
    """The config run `name` of the race's runs trains with: its domain's with the race's response budget
    (`race_domain_config`; tool use: per policy step), the run's seed, the race's rollouts per step and measurement
    cadence (checkpoints at each measurement), and the method's step budget and learning rate set to the run's (a null
    lr keeps the method's own)."""
    learn = race.settings(cfg)
    if name not in learn.runs:
        raise ConfigError(f"{race.section}.runs: no run named {name!r} (runs: {', '.join(learn.runs)})")
    run = learn.runs[name]
    raw = race_domain_config(cfg, race).to_dict()
    raw["seed"] = run.seed
    raw["train"].update(rollouts_per_step=learn.rollouts_per_step, val_every=learn.eval_every,
                        save_every=learn.eval_every)
    raw[run.method]["steps"] = run.steps or learn.steps
    if run.lr is not None:
        raw[run.method]["lr"] = run.lr
    return build_config(raw)


def negate_advantages(method: Method, where: str) -> Method:
    """The broken control: `method` with every advantage its `prepare` computes sign-flipped, so its policy gradient
    climbs down the reward. A method that computes no advantages is refused (the control would not be broken; `where`:
    the run's key, `learn.runs.grpo_negated`)."""
    if not method.uses_advantages:
        raise ConfigError(f"{where}.negate_advantages: {method.name}'s loss uses no advantages to negate")
    prepare = method.prepare

    def negated(trajectories) -> None:
        prepare(trajectories)
        for trajectory in trajectories:
            trajectory.advantage = -trajectory.advantage

    method.prepare = negated
    return method


def held_in_tasks(tasks: list[Task], held_in: list[str], race: Race) -> list[Task]:
    """The training split's held-in tasks, in the selection's order."""
    by_id = {t.task_id: t for t in tasks}
    if missing := [task for task in held_in if task not in by_id]:
        raise ConfigError(f"{race.selection}: held-in task {missing[0]!r} is not in the training split (run: dvc "
                          f"repro pipelines/learn/dvc.yaml:{race.stage('select')})")
    return [by_id[task] for task in held_in]


def main() -> None:
    args, cfg = parse_args(__doc__, race=RACE_ARG,
                           run={"required": True, "help": "the run's name in the race's runs, e.g. grpo_seed1"})
    race = RACES[args.race]
    check_backend(cfg, BASE_MODEL_DIR)  # before any work: the rollout engine can run this model
    check_sandbox(race.domain)  # and the sandbox can score the race's tasks
    learn = race.settings(cfg)
    run_cfg = race_config(cfg, race, args.run)
    spec = learn.runs[args.run]
    method = build_method(spec.method, run_cfg, race.domain)
    if spec.negate_advantages:
        method = negate_advantages(method, f"{race.section}.runs.{args.run}")
    stage, checkpoint = race.stage(args.run), race.checkpoints / args.run
    points_path, history_path = (race.plots / f"{args.run}{suffix}.json" for suffix in ("", "_steps"))
    outputs = (points_path, history_path, race.results / "metrics" / f"{args.run}.json")
    check_writable(outputs)
    with (Tracker(run_cfg, stage, system_metrics=True, resumable=True) as tracker,
          training_domain(run_cfg, race.domain) as (tasks, collect, _, _)):
        selection = read_json(race.selection)
        held_in = held_in_tasks(tasks, selection["held_in"], race)
        reads = method.inputs
        method.inputs = lambda: [*reads(), race.selection]  # another selection: a checkpoint to start afresh from
        try:
            result = train(run_cfg, method, held_in, collect, BASE_MODEL_DIR, checkpoint, tracker,
                           stage_modules("pipelines.learn_race", domain=race.domain), held_in,
                           SampledValidation(learn.eval_samples, learn.eval_seed),
                           reusable_step0(selection, learn, race.max_steps(cfg)))
        except (FileNotFoundError, MethodInputError, ProcessSplitError) as err:  # e.g. a missing upstream output
            sys.exit(f"error: {err}")
        if not PartialState().is_main_process:  # one process writes the run's outputs
            return
        history, points = result["history"], result["validation"]
        row = race_row(points, history, [])
        summary = {**{k: v for k, v in row.items() if k != "call"}, "call": CALLS[row["call"]], "seed": spec.seed,
                   "lr": method.lr(run_cfg), "wall_s": round(result["elapsed_s"], 1)}
        with replacing(*outputs) as (points_file, history_file, metrics_file):
            write_history(points_file, points)
            write_history(history_file, history)
            summary = write_metrics(metrics_file, stage, summary)
        tracker.log_metrics(summary)
        tracker.log_to_parent(summary)
        for path in outputs:
            tracker.log_artifact(path)
    shutil.rmtree(checkpoint)  # only a killed run needs it: the weights are not an output of the race
    print(f"{stage}: held-in reward {row['start']:.3f} -> {row['end']:.3f} ({row['change']:+.3f} "
          f"[{row['change_low']:+.3f}, {row['change_high']:+.3f}], {row['call']}); wrote {points_path}")


if __name__ == "__main__":
    run_stage(main)
