"""Evidence from training curves: is a method's training reward rising beyond noise, how far its held-out validation
reward moved, and how many rollouts one method needs to reach another's final (or best) validation reward (the paper's
sample-efficiency claim, checked on the validation curve rather than on the noisy per-step batch reward)."""

from __future__ import annotations

import numpy as np
from scipy import stats

from evaluation.stats import paired_bootstrap_diff


def slope_ci(x_N, y_N, level: float = 0.95) -> tuple[float, float, float] | None:
    """Ordinary least-squares slope of y on x with its t-interval (n - 2 degrees of freedom, i.i.d. normal errors
    about the line); None with fewer than 3 points or no spread in x."""
    x_N, y_N = np.asarray(x_N, dtype=float), np.asarray(y_N, dtype=float)
    n = len(x_N)
    if n < 3 or np.ptp(x_N) == 0:
        return None
    dx_N = x_N - x_N.mean()
    sxx = float(dx_N @ dx_N)
    slope = float(dx_N @ (y_N - y_N.mean())) / sxx
    residual_N = y_N - y_N.mean() - slope * dx_N
    se = float(np.sqrt(residual_N @ residual_N / (n - 2) / sxx))
    half = stats.t.ppf(0.5 + level / 2, n - 2) * se
    return slope, slope - half, slope + half


def rollouts_to_reach(validation: list[dict], target: float) -> int | None:
    """Rollouts at the first validation point whose reward is at least `target` (None if none is)."""
    return next((v["cumulative_rollouts"] for v in validation if v["val_reward"] >= target), None)


EVIDENCE_COLUMNS = (("rollouts", "Rollouts"), ("reward_slope", "Reward slope / 1k rollouts"),
                    ("reward_slope_low", "low"), ("reward_slope_high", "high"),
                    ("val_initial", "Val. reward, start"), ("val_final", "Val. reward, end"),
                    ("val_change", "Val. change"), ("val_change_low", "low"), ("val_change_high", "high"),
                    ("rollouts_to_final", "Rollouts to GRPO's final val."), ("final_share", "Share of GRPO's rollouts"),
                    ("vs_final", "There − GRPO's final"), ("vs_final_low", "low"), ("vs_final_high", "high"),
                    ("rollouts_to_best", "Rollouts to GRPO's best val."), ("best_share", "Share of GRPO's rollouts"),
                    ("vs_best", "There − GRPO's best"), ("vs_best_low", "low"), ("vs_best_high", "high"))
"""The training-evidence table: per trained method, the per-step reward's OLS slope with its 95% CI, the held-out
validation reward before and after training with the paired 95% CI of the change, and the sample-efficiency check
against two of the reference's (GRPO's) validation points, its final and its best (the first of its highest): the
rollouts at which the method first reached that reward, as a share of the reference's rollouts, and the paired
difference there (at the method's last point where it never reached it)."""


def reference_comparison(validation: list[dict], target: dict, reference_rollouts: int) -> tuple:
    """Against one validation point of the reference: the rollouts at the method's first point at or above its
    reward (None if none is), those as a share of `reference_rollouts`, and the method's reward there (at its last
    point where it never reached it) minus the target's, paired by task: (mean, CI low, CI high), or Nones for
    validation sets of different sizes."""
    reached = rollouts_to_reach(validation, target["val_reward"])
    share = reached / reference_rollouts if reached is not None and reference_rollouts else None
    there = next((v for v in validation if v["cumulative_rollouts"] == reached), validation[-1])
    if len(there["val_rewards"]) != len(target["val_rewards"]):
        return reached, share, None, None, None
    return reached, share, *paired_bootstrap_diff(np.asarray(there["val_rewards"]), np.asarray(target["val_rewards"]))


def evidence_row(history: list[dict], validation: list[dict], reference: list[dict]) -> dict[str, float | None]:
    """One method's row of EVIDENCE_COLUMNS against the reference method's validation points (None where it has no
    data: too few steps, no validation points, no reference, or validation sets that differ in size)."""
    row: dict[str, float | None] = dict.fromkeys(k for k, _ in EVIDENCE_COLUMNS)
    row["rollouts"] = history[-1]["cumulative_rollouts"] if history else 0
    fit = slope_ci([h["cumulative_rollouts"] for h in history], [h["reward"] for h in history])
    if fit:
        row["reward_slope"], row["reward_slope_low"], row["reward_slope_high"] = (1000 * v for v in fit)
    if len(validation) >= 2:
        first, last = validation[0], validation[-1]
        change = paired_bootstrap_diff(np.asarray(last["val_rewards"]), np.asarray(first["val_rewards"]))
        row.update(val_initial=first["val_reward"], val_final=last["val_reward"], val_change=change[0],
                   val_change_low=change[1], val_change_high=change[2])
    if validation and reference:
        best = max(reference, key=lambda v: v["val_reward"])  # max keeps the first of equal rewards
        for name, target in (("final", reference[-1]), ("best", best)):
            values = reference_comparison(validation, target, reference[-1]["cumulative_rollouts"])
            keys = (f"rollouts_to_{name}", f"{name}_share", f"vs_{name}", f"vs_{name}_low", f"vs_{name}_high")
            row.update(zip(keys, values))
    return row
