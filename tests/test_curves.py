"""Training-curve evidence (evaluation/curves.py) against references computed another way."""

import random

import numpy as np
import pytest
from scipy import stats

from evaluation.curves import evidence_row, rollouts_to_reach, slope_ci


def test_slope_ci_matches_scipy_linregress_and_a_hand_t_interval():
    rng = random.Random(0)
    x = [32 * (i + 1) for i in range(12)]
    y = [0.2 + 0.0005 * xi + rng.gauss(0, 0.05) for xi in x]
    slope, low, high = slope_ci(x, y)
    ref = stats.linregress(x, y)
    assert slope == pytest.approx(ref.slope, rel=1e-12)
    half = stats.t.ppf(0.975, len(x) - 2) * ref.stderr
    assert (low, high) == pytest.approx((ref.slope - half, ref.slope + half), rel=1e-9)
    # a noiseless line: the interval collapses onto the slope
    assert slope_ci([1, 2, 3, 4], [1.0, 3.0, 5.0, 7.0]) == pytest.approx((2.0, 2.0, 2.0))


def test_slope_ci_needs_three_points_with_spread():
    assert slope_ci([1, 2], [0.1, 0.2]) is None
    assert slope_ci([5, 5, 5], [0.1, 0.2, 0.3]) is None


def test_rollouts_to_reach_is_the_first_point_at_or_above_the_target():
    points = [{"cumulative_rollouts": r, "val_reward": v} for r, v in [(0, 0.3), (64, 0.35), (128, 0.5), (192, 0.4)]]
    assert rollouts_to_reach(points, 0.35) == 64
    assert rollouts_to_reach(points, 0.45) == 128
    assert rollouts_to_reach(points, 0.6) is None


def test_evidence_row_pairs_the_validation_change_by_task():
    history = [{"cumulative_rollouts": 32 * (i + 1), "reward": 0.1 * i} for i in range(4)]
    start = [0.0, 1.0, 0.0, 0.0, 1.0]
    end = [1.0, 1.0, 1.0, 0.0, 1.0]
    validation = [{"cumulative_rollouts": 0, "val_reward": np.mean(start), "val_rewards": start},
                  {"cumulative_rollouts": 128, "val_reward": np.mean(end), "val_rewards": end}]
    row = evidence_row(history, validation, reference=[])
    assert row["rollouts"] == 128
    assert row["reward_slope"] == pytest.approx(1000 * 0.1 / 32)
    assert row["val_change"] == pytest.approx(0.4)
    # per-task changes are [1, 0, 1, 0, 0]: every resample's mean lies in [0, 1]
    assert 0.0 <= row["val_change_low"] <= 0.4 <= row["val_change_high"] <= 1.0
    assert row["rollouts_to_final"] is None and row["vs_final"] is None and row["vs_best"] is None
    bare = evidence_row(history[:2], [], reference=validation)
    assert bare["reward_slope"] is None and bare["val_change"] is None and bare["rollouts_to_final"] is None


def point(rollouts: int, rewards: list[float]) -> dict:
    return {"cumulative_rollouts": rollouts, "val_reward": sum(rewards) / len(rewards), "val_rewards": rewards}


def test_evidence_row_compares_with_the_reference_final_and_best_where_first_reached():
    # best 5/6 at 128 (the first of two), final 4/6
    reference = [point(0, [0, 0, 1, 0, 1, 0]), point(128, [1, 1, 1, 1, 1, 0]), point(192, [1, 1, 1, 1, 0, 1]),
                 point(256, [1, 0, 1, 1, 1, 0])]
    validation = [point(0, [0, 0, 1, 0, 1, 0]), point(32, [1, 1, 1, 1, 0, 0]), point(64, [1, 1, 1, 1, 1, 1])]
    row = evidence_row([], validation, reference)
    assert row["rollouts_to_final"] == 32 and row["final_share"] == pytest.approx(32 / 256)
    # at 32 rollouts against the final, task by task: [0, 1, 0, 0, -1, 0]; the paired mean, not the 64-point's 2/6
    assert row["vs_final"] == pytest.approx(0.0)
    assert -1.0 <= row["vs_final_low"] < 0.0 < row["vs_final_high"] <= 1.0
    # the best is first reached at 64, a quarter of the reference's rollouts: [0, 0, 0, 0, 0, 1] against 128's
    assert row["rollouts_to_best"] == 64 and row["best_share"] == pytest.approx(0.25)
    assert row["vs_best"] == pytest.approx(1 / 6) and 0.0 <= row["vs_best_low"] <= 1 / 6 <= row["vs_best_high"]
    # never reached: the last point's difference, task by task [0, 0, 0, -1, -1, 0], not the first point's -4/6
    below = evidence_row([], [point(0, [0] * 6), point(64, [1, 0, 1, 0, 0, 0])], reference)
    assert below["rollouts_to_final"] is None and below["final_share"] is None
    assert below["vs_final"] == pytest.approx(-2 / 6)
    assert -1.0 <= below["vs_final_low"] <= -2 / 6 <= below["vs_final_high"] <= 0.0
    # validation sets of different sizes cannot be paired
    other = evidence_row([], [point(64, [1] * 8)], reference)
    assert other["rollouts_to_final"] == 64 and other["vs_final"] is None
