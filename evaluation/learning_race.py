"""The learning races (`make learn`: coding tasks; `make learn-tool`: tool-use episodes): which held-in tasks a race
trains on, and what its curves show.

Every method trains on the same few held-in tasks and is measured on those same tasks as it goes (the mean reward of k
samples per task). The task set is chosen from the spread of the base model's rewards over its samples of each
candidate; a run's curve is judged by the paired change of its held-in reward from step 0, and by the rollouts it
needed to reach GRPO's final held-in reward.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction
from typing import Sequence

import numpy as np

from evaluation.curves import rollouts_to_reach, slope_ci
from evaluation.stats import paired_bootstrap_diff

OBJECTIVES = (("kl_mean", "KL to teacher"), ("privilege_margin", "Δ"), ("beta_next", "β"))
"""The per-step history keys of a method's own objective, where the method logs them: the distillation methods' KL
to their teacher, and LOPD's privileged margin Δ and dual β (after the step)."""


def sample_rewards(task_ids: Sequence[str], rewards: Sequence[float]) -> dict[str, list[float]]:
    """Each task's samples' rewards (`task_ids[i]` is the task of sample i), tasks in first-seen order."""
    samples: dict[str, list[float]] = {}
    for task, reward in zip(task_ids, rewards):
        samples.setdefault(task, []).append(reward)
    return samples


def pass_rates(samples: dict[str, Sequence[float]]) -> dict[str, float]:
    """Each task's mean reward over its samples (for 0/1 rewards, its pass rate)."""
    return {task: sum(values) / len(values) for task, values in samples.items()}


def reward_variance(rewards: Sequence[float]) -> Fraction:
    """The population variance of `rewards`, exactly (two tasks whose rewards spread alike tie, whatever their order or
    float rounding): for 0/1 rewards p(1 - p), p the pass rate."""
    values = [Fraction(r) for r in rewards]
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


def select_tasks(samples: dict[str, Sequence[float]], n: int) -> list[str]:
    """The held-in tasks: of those whose samples' rewards are not all equal (a group of rollouts can disagree: GRPO
    has signal, also with partial-credit rewards), the `n` whose rewards vary most (`reward_variance`), ties by the
    sha256 of the task id; in that order. For 0/1 rewards: the pass rates strictly between 0 and 1 nearest 1/2."""
    qualifying = [task for task, rewards in samples.items() if len(set(rewards)) > 1]
    ranked = sorted(qualifying, key=lambda task: (-reward_variance(samples[task]),
                                                  hashlib.sha256(task.encode()).hexdigest()))
    return ranked[:n]


def step0_measurement(learn, max_steps: int | None = None) -> dict[str, int]:
    """How a held-in measurement samples besides the weights (`learn`: the race's LearnConfig; `max_steps`: a tool-use
    race's policy steps per episode, None for single-turn tasks): the race's select stage records it with its step-0
    point."""
    return {"eval_samples": learn.eval_samples, "eval_seed": learn.eval_seed, "max_new_tokens": learn.max_new_tokens,
            **({"max_steps": max_steps} if max_steps is not None else {})}


def reusable_step0(selection: dict, learn, max_steps: int | None = None) -> dict | None:
    """The select stage's step-0 point where it was measured as a run with `learn` (and `max_steps`) measures, else
    None (the run measures its own): a sweep that changes the measurement reruns only its run's stage (`dvc exp run
    -s`), and a selection written before the measurement was recorded says nothing of it."""
    return selection["step0"] if selection.get("step0_measurement") == step0_measurement(learn, max_steps) else None


def verdict(low: float, high: float) -> str:
    """A change's call from its 95% CI: up or down only where the CI excludes 0."""
    return "up" if low > 0 else "down" if high < 0 else "no change"


def race_row(points: list[dict], history: list[dict], reference: list[dict]) -> dict[str, float | str | None]:
    """One run's result: its held-in reward at step 0 and at its last point, the paired change with its bootstrap 95%
    CI over the tasks and its call, the rollouts at which it first reached the reference run's (GRPO's) final held-in
    reward (None: never), and its objective's first and last per-step values with the OLS slope per 1,000 rollouts and
    its 95% t-interval."""
    first, last = points[0], points[-1]
    change, low, high = paired_bootstrap_diff(np.asarray(last["val_rewards"]), np.asarray(first["val_rewards"]))
    row: dict[str, float | str | None] = {
        "rollouts": last["cumulative_rollouts"], "n": last["val_n"], "start": first["val_reward"],
        "end": last["val_reward"], "change": change, "change_low": low, "change_high": high,
        "call": verdict(low, high),
        "rollouts_to_grpo_final": rollouts_to_reach(points, reference[-1]["val_reward"]) if reference else None}
    for key, _ in (("reward", "training reward"), *OBJECTIVES):
        values = [(h["cumulative_rollouts"], h[key]) for h in history if h.get(key) is not None]
        if not values:
            continue
        row[f"{key}_first"], row[f"{key}_last"] = values[0][1], values[-1][1]
        fit = slope_ci(*zip(*values))
        if fit:
            row[f"{key}_slope"], row[f"{key}_slope_low"], row[f"{key}_slope_high"] = (1000 * v for v in fit)
    return row
