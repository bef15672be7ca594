"""The learning race (`make learn`): which held-in tasks it trains on, and what its curves show.

Every method trains on the same few held-in coding tasks and is measured on those same tasks as it goes (the mean
reward of k samples per task). The task set is chosen from the base model's pass rates; a run's curve is judged by the
paired change of its held-in reward from step 0, and by the rollouts it needed to reach GRPO's final held-in reward.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from evaluation.curves import rollouts_to_reach, slope_ci
from evaluation.stats import paired_bootstrap_diff

OBJECTIVES = (("kl_mean", "KL to teacher"), ("privilege_margin", "Δ"), ("beta_next", "β"))
"""The per-step history keys of a method's own objective, where the method logs them: the distillation methods' KL
to their teacher, and LOPD's privileged margin Δ and dual β (after the step)."""


def select_tasks(pass_rates: dict[str, float], n: int) -> list[str]:
    """The held-in tasks: of those whose pass rate lies strictly between 0 and 1, the `n` closest to 1/2 (where a
    group of rollouts disagrees most often), ties by the sha256 of the task id; in that order."""
    qualifying = [task for task, rate in pass_rates.items() if 0.0 < rate < 1.0]
    ranked = sorted(qualifying, key=lambda task: (abs(pass_rates[task] - 0.5),
                                                  hashlib.sha256(task.encode()).hexdigest()))
    return ranked[:n]


def pass_rates(task_ids: Sequence[str], rewards: Sequence[float]) -> dict[str, float]:
    """Each task's mean reward over its samples (`task_ids[i]` is the task of sample i), tasks in first-seen order."""
    totals: dict[str, list[float]] = {}
    for task, reward in zip(task_ids, rewards):
        totals.setdefault(task, []).append(reward)
    return {task: sum(values) / len(values) for task, values in totals.items()}


def step0_measurement(learn) -> dict[str, int]:
    """How a held-in measurement samples besides the weights (`learn`: the LearnConfig): learn_select records it with
    its step-0 point."""
    return {"eval_samples": learn.eval_samples, "eval_seed": learn.eval_seed, "max_new_tokens": learn.max_new_tokens}


def reusable_step0(selection: dict, learn) -> dict | None:
    """learn_select's step-0 point where it was measured as a run with `learn` measures, else None (the run measures
    its own): a sweep that changes the measurement reruns only its run's stage (`dvc exp run -s`), and a selection
    written before the measurement was recorded says nothing of it."""
    return selection["step0"] if selection.get("step0_measurement") == step0_measurement(learn) else None


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
