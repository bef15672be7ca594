"""scripts/paired_validation.py: two runs' last validation points compared task by task."""

import json

import pytest


@pytest.fixture(scope="module")
def paired(load_script):
    return load_script("paired_validation")


def _run(tmp_path, name, rewards, step=16):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps([{"step": 0, "cumulative_rollouts": 0, "val_rewards": [0.0] * len(rewards)},
                                {"step": step, "cumulative_rollouts": 16 * step, "val_rewards": rewards}]))
    return path


def test_the_last_points_are_compared_task_by_task(paired, tmp_path):
    a = paired.final_point(_run(tmp_path, "a", [1.0] * 16 + [0.0] * 4))
    b = paired.final_point(_run(tmp_path, "b", [0.0] * 20))
    got = paired.compare(a, b)
    assert got["n"] == 20 and got["means"] == [0.8, 0.0] and got["difference"] == pytest.approx(0.8)
    assert got["called"] and got["difference_ci"][0] > 0
    same = paired.compare(a, a)
    assert same["difference"] == 0 and not same["called"]


def test_runs_on_different_tasks_are_refused(paired, tmp_path):
    with pytest.raises(ValueError, match="different task counts"):
        paired.compare(paired.final_point(_run(tmp_path, "a", [1.0] * 3)),
                       paired.final_point(_run(tmp_path, "b", [1.0] * 4)))
