"""Confidence intervals for benchmark scores."""

from __future__ import annotations

import math

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
