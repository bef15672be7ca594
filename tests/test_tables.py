"""Result tables from per-task scores: cells and their CIs against evaluation.stats, paired differences aligned by
task id, marks only where the paired differences separate the methods, tie notes, n/a handling and the renderings."""

import csv
import io

import numpy as np
import pytest

from evaluation.stats import bootstrap_ci, paired_bootstrap_diff, wilson_interval
from evaluation.tables import (
    Estimate,
    Scores,
    behaviour_table,
    code_table,
    describe,
    rank_column,
    to_csv,
    to_latex,
    to_markdown,
    tool_use_table,
)

R = 500
"""Bootstrap resamples in these tests (the report uses 10,000)."""


def _passes(rate: float, n: int, seed: int, prefix: str = "t") -> dict[str, float]:
    """n pass/fail tasks passing at about `rate`."""
    rng = np.random.default_rng(seed)
    return {f"{prefix}/{i}": float(rng.random() < rate) for i in range(n)}


def _code(he: dict[str, float] | None, mbpp: dict[str, float] | None, samples: int = 1) -> dict[str, Scores]:
    return {b: Scores(t, samples) for b, t in (("humaneval_plus", he), ("mbpp_plus", mbpp)) if t is not None}


def _rows(table):
    return dict(table.rows)


def test_rows_follow_paper_order_and_averages_pool_the_tasks():
    he, mbpp = _passes(0.3, 20, 0), _passes(0.5, 30, 1)
    scores = {"vanilla": _code(he, mbpp), "lopd": _code(he, None)}
    table = code_table(scores, ["lopd", "vanilla"], resamples=R)
    assert [label for label, _ in table.rows] == ["Vanilla", "LOPD"]
    avg = _rows(table)["Vanilla"]["evalplus_avg"]
    pooled = [*he.values(), *mbpp.values()]
    assert avg.value == pytest.approx(100 * (np.mean(list(he.values())) * 20 + np.mean(list(mbpp.values())) * 30) / 50)
    assert (avg.low, avg.high) == pytest.approx(tuple(100 * x for x in wilson_interval(np.mean(pooled), 50)))
    assert avg.n == 50
    assert _rows(table)["LOPD"]["evalplus_avg"] is None and _rows(table)["LOPD"]["mbpp_plus"] is None  # no MBPP+


def test_fractional_scores_get_the_bootstrap_over_tasks_whatever_the_file_order():
    rates = {f"HumanEval/{i}": (i % 5) / 4 for i in range(12)}  # 4 samples per task
    cell = _rows(code_table({"grpo": _code(rates, None, 4)}, ["grpo"], resamples=R, seed=3))["GRPO"]["humaneval_plus"]
    low, high = bootstrap_ci(np.array([rates[t] for t in sorted(rates)]), resamples=R, seed=3)
    assert (cell.value, cell.low, cell.high, cell.n) == pytest.approx((100 * np.mean(list(rates.values())),
                                                                       100 * low, 100 * high, 12))
    shuffled = dict(reversed(list(rates.items())))
    assert _rows(code_table({"grpo": _code(shuffled, None, 4)}, ["grpo"], resamples=R, seed=3))["GRPO"][
        "humaneval_plus"] == cell


def test_paired_differences_align_by_task_id_over_the_tasks_both_evaluated():
    rng = np.random.default_rng(7)
    grpo = {f"HumanEval/{i}": float(rng.random() < 0.4) for i in range(40)}
    lopd = {f"HumanEval/{i}": float(rng.random() < 0.6) for i in range(45)}  # 5 tasks GRPO did not evaluate
    shuffled = {t: lopd[t] for t in np.random.default_rng(0).permutation(list(lopd))}
    assert list(shuffled) != list(lopd)
    table = code_table({"grpo": _code(grpo, None), "lopd": _code(shuffled, None)}, ["grpo", "lopd"], resamples=R)
    got = table.diffs["GRPO"]["LOPD"]["humaneval_plus"]
    common = sorted(grpo)
    diff, low, high = paired_bootstrap_diff(np.array([lopd[t] for t in common]), np.array([grpo[t] for t in common]),
                                            resamples=R)
    assert (got.value, got.low, got.high, got.n) == pytest.approx((100 * diff, 100 * low, 100 * high, 40))
    assert table.diffs["GRPO"]["LOPD"]["mbpp_plus"] is None  # neither has MBPP+
    assert "Vanilla" not in table.diffs and set(table.diffs["GRPO"]) == {"LOPD"}


def test_rank_column_marks_only_separated_places():
    def diff_of(separated: set[tuple[str, str]]):
        return lambda a, b: Estimate(1.0, 0.5 if (a, b) in separated else -0.5, 2.0, 10)

    means = {"A": 3.0, "B": 9.0, "C": 5.0, "D": 1.0}
    assert rank_column(means, diff_of({("B", "A"), ("B", "C"), ("B", "D"), ("C", "A"), ("C", "D")})) == (
        {"B": 1, "C": 2}, [])
    assert rank_column(means, diff_of({("B", "A"), ("B", "C"), ("B", "D"), ("C", "D")})) == ({"B": 1}, ["C", "A"])
    assert rank_column(means, diff_of({("B", "A"), ("B", "D")})) == ({}, ["B", "C"])
    assert rank_column({"A": 3.0}, diff_of(set())) == ({}, [])  # nothing to be told apart from
    assert rank_column({"A": 2.0, "B": 1.0}, lambda a, b: None) == ({}, ["A", "B"])  # no common tasks


def test_bold_only_when_separated_else_a_tie_note():
    strong, weak = _passes(0.9, 80, 1), _passes(0.2, 80, 2)
    close = _passes(0.9, 80, 9)  # as good as `strong`: they differ both ways on a few tasks
    scores = {"vanilla": _code(weak, strong), "grpo": _code(close, weak), "lopd": _code(strong, _passes(0.5, 80, 3))}
    table = code_table(scores, ["vanilla", "grpo", "lopd"], resamples=R)
    assert table.marks["mbpp_plus"] == {"Vanilla": 1, "LOPD": 2}
    assert table.marks["humaneval_plus"] == {}
    assert ("HumanEval+: tie between LOPD, GRPO (95% CIs of the paired differences to LOPD include 0)."
            in table.notes)
    md = to_markdown(table, "T")
    mbpp = _rows(table)["Vanilla"]["mbpp_plus"]
    assert f"**{mbpp.value:.1f} [{mbpp.low:.1f}, {mbpp.high:.1f}]**" in md
    lopd = _rows(table)["LOPD"]["mbpp_plus"]
    assert f"_{lopd.value:.1f} [{lopd.low:.1f}, {lopd.high:.1f}]_" in md
    assert md.count("**") == 2 * 2 + 2  # MBPP+'s best, EvalPlus Avg's best (pooled), the legend
    assert rf"\textbf{{{mbpp.value:.1f}" in to_latex(table, "T")


def test_tie_for_second_place_is_noted():
    best, mid = _passes(0.95, 80, 1), _passes(0.4, 80, 2)
    scores = {"vanilla": _code(mid, None), "grpo": _code(best, None), "lopd": _code(dict(mid), None)}
    table = code_table(scores, ["vanilla", "grpo", "lopd"], resamples=R)
    assert table.marks["humaneval_plus"] == {"GRPO": 1}
    assert "HumanEval+: tie for second place between Vanilla, LOPD" in " ".join(table.notes)


def test_markdown_cells_differences_and_missing_data():
    he, mbpp = _passes(0.3, 20, 0), _passes(0.5, 30, 1)
    scores = {"vanilla": _code(he, mbpp), "grpo": _code(_passes(0.4, 20, 4), mbpp), "lopd": _code(he, None)}
    no_release = "n/a: no LiveCodeBench release at /data/livecodebench"  # what an LCB stage without data writes
    scores["vanilla"]["lcb_v5"] = Scores({}, 0, no_release)
    table = code_table(scores, ["vanilla", "grpo", "lopd"], resamples=R)
    md = to_markdown(table, f"Code ({describe(table)})")
    assert ("### Code (n = 20 HumanEval+ / 30 MBPP+ tasks, 1 sample per task, 95% CIs: Wilson (single proportions) "
            "or bootstrap over tasks (500 resamples))") in md
    v = _rows(table)["Vanilla"]["humaneval_plus"]
    assert f"| Vanilla | n/a | n/a | n/a | {v.value:.1f} [{v.low:.1f}, {v.high:.1f}] |" in md
    assert "LCB v5: n/a: no LiveCodeBench release at /data/livecodebench." in md and "LCB Avg: n/a: needs LCB v5" in md
    assert "LCB v6: n/a: no evaluation stage has produced it" in md
    d = table.diffs["GRPO"]["Vanilla"]["mbpp_plus"]
    assert (d.value, d.low, d.high) == (0.0, 0.0, 0.0)  # the same MBPP+ verdicts
    assert "| Method − GRPO | LCB v5 |" in md and "| Method − Vanilla | LCB v5 |" in md
    assert "| LOPD | n/a | n/a | n/a | +0.0 [0.0, 0.0] | n/a | n/a |" in md.split("Method − Vanilla")[1]
    lopd_vs_grpo = table.diffs["GRPO"]["LOPD"]["humaneval_plus"]
    star = "*" if lopd_vs_grpo.separated else ""
    assert f"{lopd_vs_grpo.value:+.1f} [{lopd_vs_grpo.low:.1f}, {lopd_vs_grpo.high:.1f}]{star} |" in md


def test_csv_has_numeric_columns_for_scores_and_differences():
    he, mbpp = _passes(0.3, 20, 0), _passes(0.5, 30, 1)
    table = code_table({"vanilla": _code(he, mbpp), "lopd": _code(_passes(0.6, 20, 5), None)}, ["vanilla", "lopd"],
                       resamples=R)
    rows = {(r["method"], r["column"]): r for r in csv.DictReader(io.StringIO(to_csv(table)))}
    assert list(next(iter(rows.values()))) == [
        "method", "column", "value", "ci_low", "ci_high", "n", "mark", "diff_grpo", "diff_grpo_ci_low",
        "diff_grpo_ci_high", "diff_grpo_n", "diff_vanilla", "diff_vanilla_ci_low", "diff_vanilla_ci_high",
        "diff_vanilla_n"]
    cell, row = _rows(table)["LOPD"]["humaneval_plus"], rows[("LOPD", "humaneval_plus")]
    assert [float(row[k]) for k in ("value", "ci_low", "ci_high")] == pytest.approx([cell.value, cell.low, cell.high],
                                                                                    abs=1e-4)
    diff = table.diffs["Vanilla"]["LOPD"]["humaneval_plus"]
    assert float(row["diff_vanilla"]) == pytest.approx(diff.value, abs=1e-4) and row["diff_vanilla_n"] == "20"
    assert row["diff_grpo"] == "n/a"  # GRPO not evaluated
    assert rows[("LOPD", "mbpp_plus")]["value"] == "n/a"
    assert rows[("Vanilla", "humaneval_plus")]["diff_vanilla"] == "n/a"  # no difference to itself
    assert len(rows) == 2 * 6


def test_without_reference_methods_the_markdown_has_one_table():
    table = code_table({"sdpo": _code(_passes(0.3, 4, 0), _passes(0.3, 4, 1)), "lopd": _code(_passes(0.5, 4, 2), None)},
                       ["sdpo", "lopd"], resamples=R)
    md = to_markdown(table, "T")
    rows = [line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["Method", "SDPO", "LOPD"] and table.diffs == {}


def _tasks(score: float, n: int) -> Scores:
    return Scores({f"task{i}": score for i in range(n)})


def test_tool_use_table_pools_averages_and_explains_gaps():
    bfcl = {f"bfcl_{s}": _tasks(v, 4) for s, v in zip(("base", "miss_func", "miss_param", "long_context"),
                                                       (0.25, 0.5, 0.75, 1.0))}
    scores = {"vanilla": {"envscaler": _tasks(0.5, 6), **bfcl, "acebench_multi_step": _tasks(0.2, 2),
                          "acebench_multi_turn": _tasks(0.6, 3)},
              "grpo": {"envscaler": _tasks(0.75, 6), "acebench_multi_step": Scores({}, 0, "n/a: data missing")}}
    table = tool_use_table(scores, ["grpo", "vanilla", "lopd"], resamples=R)
    rows = _rows(table)
    assert [label for label, _ in table.rows] == ["Vanilla", "GRPO", "LOPD"]
    assert rows["Vanilla"]["bfcl_avg"].value == pytest.approx(62.5) and rows["Vanilla"]["bfcl_avg"].n == 16
    assert rows["Vanilla"]["acebench_avg"].value == pytest.approx((20 * 2 + 60 * 3) / 5)
    assert rows["GRPO"]["acebench_multi_step"] is None and rows["GRPO"]["acebench_avg"] is None
    assert any(n.startswith("LOPD: n/a: no agentic evaluation") for n in table.notes)
    assert any("ACE M-Step: n/a: data missing." in n for n in table.notes)
    assert not any("n/a: n/a" in n for n in table.notes)
    assert table.diffs["Vanilla"]["GRPO"]["envscaler"] == Estimate(25.0, 25.0, 25.0, 6)  # every task 0.25 higher
    assert table.marks["envscaler"] == {"GRPO": 1, "Vanilla": 2}


def test_behaviour_table_is_unranked():
    metrics = {"vanilla": {"envscaler": {"reward_mean": 0.486, "steps": 11.12, "tool_calls_per_step": 3.5,
                                         "first_step_tokens": 9937, "reward_per_tool_call": 0.038,
                                         "repeated_calls": 8.89}}}
    table = behaviour_table(metrics, ["vanilla", "lopd"])
    md = to_markdown(table, "B")
    assert "| Vanilla | 0.486 | 11.120 | 3.500 | 9937.000 | 0.038 | 8.890 |" in md
    assert "| LOPD | n/a |" in md and "**" not in md
    assert "counting an episode without calls as one" in md
    assert to_csv(table).splitlines()[1] == "Vanilla,0.486,11.120,3.500,9937.000,0.038,8.890"
