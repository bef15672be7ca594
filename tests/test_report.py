"""The report stage's Fig. 4 (training dynamics): which methods it draws and the points its CSV holds."""

from __future__ import annotations

import csv
import math

from pipelines import report


def _steps(*rewards: float) -> list[dict]:
    return [{"step": i + 1, "cumulative_rollouts": 16 * (i + 1), "reward": r} for i, r in enumerate(rewards)]


def _validation(*passed: int, n: int = 4) -> list[dict]:
    return [{"cumulative_rollouts": 32 * i, "val_reward": p / n, "val_n": n, "val_rewards": [1.0] * p + [0.0] * (n - p)}
            for i, p in enumerate(passed)]


def test_fig4_draws_lopd_grpo_and_the_two_baselines_with_the_best_final_validation():
    trained = {"vanilla": [], "grpo": _steps(0.5), "lopd": _steps(0.2), "sdft": _steps(0.9), "opsd": _steps(0.1),
               "sdpo": _steps(0.3), "skill_sd": _steps(0.4), "unvalidated": _steps(1.0), "untrained": None}
    validated = {"sdft": _validation(2, 1), "opsd": _validation(2, 3), "sdpo": _validation(0, 3),
                 "skill_sd": _validation(4, 2), "grpo": _validation(0, 0), "lopd": []}
    # finals: opsd 0.75 and sdpo 0.75 (tie: by name), skill_sd 0.5, sdft 0.25, unvalidated none; the first-point
    # scores (skill_sd 1.0) and the training rewards (sdft 0.9) do not count
    assert report.dynamics_methods(trained, validated) == ["lopd", "grpo", "opsd", "sdpo"]


def test_fig4_without_validation_ranks_by_name_and_skips_what_did_not_train():
    trained = {"sdpo": _steps(0.1), "opsd": _steps(0.2), "sdft": _steps(0.3), "lopd": None, "grpo": []}
    assert report.dynamics_methods(trained, {}) == ["opsd", "sdft"]


def test_fig4_rows_hold_every_training_step_and_each_validation_point_with_its_wilson_interval():
    trained = {"lopd": _steps(0.25, 0.5), "grpo": _steps(0.75)}
    validated = {"lopd": _validation(1, 3)}
    rows = report.dynamics_rows(["lopd", "grpo"], trained, validated)
    train = [(r["method"], r["rollouts"], r["value"]) for r in rows if r["curve"] == "train"]
    assert train == [("lopd", 16, 0.25), ("lopd", 32, 0.5), ("grpo", 16, 0.75)]
    points = [r for r in rows if r["curve"] == "validation"]
    assert [(r["method"], r["rollouts"], r["value"], r["n"]) for r in points] == [("lopd", 0, 0.25, 4),
                                                                                  ("lopd", 32, 0.75, 4)]
    z = 1.959963984540054
    for r in points:  # Wilson's score interval for p of n, written out
        p, n = r["value"], r["n"]
        centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (
            1 + z * z / n)
        assert math.isclose(r["ci_low"], centre - half, abs_tol=1e-9)
        assert math.isclose(r["ci_high"], centre + half, abs_tol=1e-9)


def test_fig4_files_are_written_and_its_csv_reads_back(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "FIGURES_DIR", tmp_path)
    trained = {"lopd": _steps(0.25, 0.5), "grpo": _steps(0.75), "sdpo": _steps(0.0)}
    files = report.draw_fig4(trained, {"lopd": _validation(1, 3)}, "Fig. 4 test")
    assert sorted(p.name for p in files) == ["fig4.csv", "fig4.pdf", "fig4.png"]
    assert (tmp_path / "fig4.png").read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader((tmp_path / "fig4.csv").open()))
    assert {r["method"] for r in rows} == {"lopd", "grpo", "sdpo"} and len(rows) == 6
    assert [r["ci_low"] for r in rows if r["curve"] == "train"] == [""] * 4


def test_tool_use_title_names_envscalers_own_size():
    from lopd.core.config import resolve

    def subset(task_limit, envscaler_task_limit):
        agentic = {"task_limit": task_limit, "envscaler_task_limit": envscaler_task_limit}
        return report.tool_use_subset(resolve({"profile": "cpu", "agentic": agentic}).agentic)

    assert subset(5, 48) == "first 5 tasks per benchmark (first 48 of EnvScaler's test split)"
    assert subset(5, None) == "first 5 tasks per benchmark"
    assert subset(None, None) == "all tasks"
