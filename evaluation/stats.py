"""Confidence intervals for benchmark scores: of one method's mean over tasks, and of the paired difference of two
methods on the same tasks. Scores are per task, in [0, 1]; tasks are the unit of resampling, since they, not the
samples drawn per task, are what a benchmark samples from a population of problems."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

Z_95 = 1.959963984540054
"""The two-sided 95% normal quantile."""


def wilson_interval(mean: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a mean of n per-task scores in [0, 1] (pass@1, an episode's reward).

    Exact Wilson for 0/1 scores; for scores strictly inside [0, 1] it is conservative, since a variable in [0, 1]
    with mean p has variance at most p(1 - p). Unlike the normal interval it stays inside [0, 1] and is not
    degenerate at 0 or 1 (e.g. 0 of 164 tasks gives [0, 0.023]), which matters for small models."""
    if n < 1:
        raise ValueError(f"wilson_interval: n must be >= 1, got {n}")
    if not 0.0 <= mean <= 1.0:
        raise ValueError(f"wilson_interval: mean must be in [0, 1], got {mean}")
    z2_n = z * z / n
    centre = (mean + z2_n / 2) / (1 + z2_n)
    half = z / (1 + z2_n) * math.sqrt(mean * (1 - mean) / n + z2_n / (4 * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _z(level: float) -> float:
    """The two-sided normal quantile of a confidence level (1.96 for 0.95)."""
    return NormalDist().inv_cdf((1 + level) / 2)


def bootstrap_ci(scores_N: np.ndarray, resamples: int = 10_000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-task scores: resample the tasks with replacement.

    Makes no assumption on the scores' distribution (fractional pass rates over several samples, partial rewards),
    where the Wilson interval only bounds it. Resample r takes the tasks `indices_RN[r]`, with
    `indices_RN = np.random.default_rng(seed).integers(0, N, size=(resamples, N))`, so a seed fixes the draws and
    two calls on equally many tasks draw the same ones; the bounds are `np.quantile` (linear) of the R means."""
    scores_N = np.asarray(scores_N, dtype=float)
    if scores_N.ndim != 1 or len(scores_N) == 0:
        raise ValueError(f"bootstrap_ci: expected a non-empty 1-d array of per-task scores, got shape {scores_N.shape}")
    indices_RN = np.random.default_rng(seed).integers(0, len(scores_N), size=(resamples, len(scores_N)))
    means_R = scores_N[indices_RN].mean(axis=1)
    low, high = np.quantile(means_R, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def paired_bootstrap_diff(a_N: np.ndarray, b_N: np.ndarray, resamples: int = 10_000, seed: int = 0,
                          level: float = 0.95) -> tuple[float, float, float]:
    """Mean of a - b over tasks with its percentile bootstrap CI, both resampled with the same tasks (paired).

    Pairing removes the between-task variance the two methods share (easy tasks are easy for both), so the CI of
    the difference is much narrower than one from two independent CIs. a_N[i] and b_N[i] must be the same task:
    the caller aligns them by task id. Draws as in `bootstrap_ci` (the mean of resampled differences is the
    difference of the means resampled with the same tasks)."""
    a_N, b_N = np.asarray(a_N, dtype=float), np.asarray(b_N, dtype=float)
    if a_N.shape != b_N.shape:
        raise ValueError(f"paired_bootstrap_diff: the two score arrays must be aligned by task, got shapes "
                         f"{a_N.shape} and {b_N.shape}")
    diff_N = a_N - b_N
    low, high = bootstrap_ci(diff_N, resamples, seed, level)
    return float(diff_N.mean()), low, high


def is_single_proportion(scores_N: np.ndarray) -> bool:
    """Every per-task score is 0 or 1 (e.g. pass/fail with one sample per task): the mean is a proportion of tasks."""
    return bool(np.isin(np.asarray(scores_N, dtype=float), (0.0, 1.0)).all())


def score_ci(scores_N: np.ndarray, resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """The CI of a mean of per-task scores in [0, 1]: Wilson for a single proportion, else the bootstrap over tasks.

    For 0/1 scores Wilson is exact in form and keeps its coverage at 0 of n or n of n, where the bootstrap collapses
    to [0, 0] or [1, 1]; for fractional scores the bootstrap is tighter than Wilson's worst-case variance."""
    scores_N = np.asarray(scores_N, dtype=float)
    if len(scores_N) and is_single_proportion(scores_N):
        return wilson_interval(float(scores_N.mean()), len(scores_N), _z(level))
    return bootstrap_ci(scores_N, resamples, seed, level)
