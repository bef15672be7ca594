"""The Wilson interval against its definition, inverted by brute force: every p whose score test accepts the mean."""

import numpy as np
import pytest

from evaluation.stats import Z_95, wilson_interval


def _accepted_range(mean: float, n: int, z: float) -> tuple[float, float]:
    p = np.linspace(0.0, 1.0, 2_000_001)
    accepted = p[(mean - p) ** 2 <= z * z * p * (1 - p) / n]
    return float(accepted.min()), float(accepted.max())


@pytest.mark.parametrize("mean,n", [(0.0, 164), (1.0, 4), (0.5, 1), (5 / 164, 164), (0.73, 378), (0.25, 8)])
def test_wilson_interval_is_the_inverted_score_test(mean, n):
    low, high = wilson_interval(mean, n)
    ref_low, ref_high = _accepted_range(mean, n, Z_95)
    assert low == pytest.approx(ref_low, abs=1e-6) and high == pytest.approx(ref_high, abs=1e-6)
    assert low <= mean <= high


def test_wilson_interval_known_value_and_errors():
    assert wilson_interval(0.0, 164)[1] == pytest.approx(Z_95**2 / (164 + Z_95**2))  # 0 of 164 tasks: [0, 2.3%]
    with pytest.raises(ValueError, match="n must be >= 1"):
        wilson_interval(0.5, 0)
    with pytest.raises(ValueError, match=r"mean must be in \[0, 1\]"):
        wilson_interval(1.5, 10)
