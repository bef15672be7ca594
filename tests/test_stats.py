"""The intervals against independent references: Wilson inverted by brute force (every p whose score test accepts
the mean); the bootstrap as a plain loop over the same index draws, and against the exact distribution of all n^n
resamples; the paired difference on data whose answer is known."""

import itertools
import math

import numpy as np
import pytest

from evaluation.stats import Z_95, bootstrap_ci, is_single_proportion, paired_bootstrap_diff, score_ci, wilson_interval


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


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default quantile), written out."""
    position = q * (len(sorted_values) - 1)
    below = math.floor(position)
    above = min(below + 1, len(sorted_values) - 1)
    return sorted_values[below] + (position - below) * (sorted_values[above] - sorted_values[below])


def _loop_bootstrap(a: list[float], b: list[float] | None, resamples: int, seed: int, level: float):
    """Mean (of a, or of a - b) over each resample, one resample at a time, with the documented draws."""
    rows = np.random.default_rng(seed).integers(0, len(a), size=(resamples, len(a))).tolist()
    means = sorted(sum(a[i] for i in row) / len(row) - (0.0 if b is None else sum(b[i] for i in row) / len(row))
                   for row in rows)
    return _percentile(means, (1 - level) / 2), _percentile(means, (1 + level) / 2)


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_bootstrap_ci_is_the_percentile_of_resampled_means(level):
    scores = np.random.default_rng(3).random(23).round(2).tolist()
    low, high = bootstrap_ci(np.array(scores), resamples=500, seed=7, level=level)
    ref_low, ref_high = _loop_bootstrap(scores, None, 500, 7, level)
    assert low == pytest.approx(ref_low, abs=1e-12) and high == pytest.approx(ref_high, abs=1e-12)
    assert low < float(np.mean(scores)) < high


@pytest.mark.parametrize("level", [0.5, 0.8, 0.95])
def test_bootstrap_ci_converges_to_the_exact_resampling_distribution(level):
    scores = [0.0, 0.2, 1.0]  # all 27 resample means distinct, and no CDF step within 0.009 of a bound's level
    means = sorted(sum(scores[i] for i in idx) / 3 for idx in itertools.product(range(3), repeat=3))

    def exact_quantile(q):  # the smallest resample mean whose CDF reaches q, each resample weighing 1/27
        return next(m for k, m in enumerate(means, start=1) if k / len(means) >= q)

    low, high = bootstrap_ci(np.array(scores), resamples=200_000, seed=1, level=level)
    assert low == pytest.approx(exact_quantile((1 - level) / 2), abs=1e-9)
    assert high == pytest.approx(exact_quantile((1 + level) / 2), abs=1e-9)


def test_paired_bootstrap_diff_resamples_both_with_the_same_tasks():
    rng = np.random.default_rng(5)
    a, b = rng.random(17).round(2).tolist(), rng.random(17).round(2).tolist()
    diff, low, high = paired_bootstrap_diff(np.array(a), np.array(b), resamples=400, seed=2, level=0.9)
    ref_low, ref_high = _loop_bootstrap(a, b, 400, 2, 0.9)
    assert diff == pytest.approx(sum(a) / 17 - sum(b) / 17, abs=1e-12)
    assert low == pytest.approx(ref_low, abs=1e-12) and high == pytest.approx(ref_high, abs=1e-12)


def test_paired_bootstrap_diff_on_known_answers():
    rng = np.random.default_rng(11)
    b = rng.random(50)
    assert paired_bootstrap_diff(b + 0.25, b, resamples=1000) == pytest.approx((0.25, 0.25, 0.25))  # degenerate
    assert paired_bootstrap_diff(b, b.copy(), resamples=1000) == (0.0, 0.0, 0.0)
    better, worse = (rng.random(80) < 0.8).astype(float), (rng.random(80) < 0.3).astype(float)
    _, low, _ = paired_bootstrap_diff(better, worse, resamples=2000)
    assert low > 0
    x, y, coin = rng.random(80), rng.random(80), rng.random(80) < 0.5  # each task's pair shown in random order
    _, low, high = paired_bootstrap_diff(np.where(coin, x, y), np.where(coin, y, x), resamples=2000)
    assert low < 0 < high


def test_pairing_removes_the_variance_the_tasks_share():
    rng = np.random.default_rng(0)
    difficulty = rng.random(100)  # easy tasks are easy for both methods
    a, b = difficulty + 0.02 * rng.random(100), difficulty + 0.02 * rng.random(100)
    _, low, high = paired_bootstrap_diff(a, b, resamples=2000)
    a_low, a_high = bootstrap_ci(a, resamples=2000)
    assert high - low < (a_high - a_low) / 10


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="aligned by task"):
        paired_bootstrap_diff(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci(np.array([]))


def test_score_ci_uses_wilson_for_a_single_proportion_else_the_bootstrap():
    passes = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    assert is_single_proportion(passes) and score_ci(passes) == pytest.approx(wilson_interval(0.6, 10))
    assert score_ci(np.zeros(164))[1] == pytest.approx(Z_95**2 / (164 + Z_95**2))  # not the bootstrap's [0, 0]
    rates = np.array([0.25, 0.5, 1.0, 0.0, 0.75])  # 4 samples per task: not a single proportion
    assert not is_single_proportion(rates)
    assert score_ci(rates, resamples=300, seed=4) == bootstrap_ci(rates, resamples=300, seed=4)
    assert score_ci(passes, level=0.8) == pytest.approx(wilson_interval(0.6, 10, z=1.2815515655446004))
