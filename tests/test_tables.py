from evaluation.tables import code_table, ranks, to_csv, to_latex, to_markdown


def _summary(plus, n):
    return {"pass@1_plus": plus, "n_tasks": n}


METRICS = {
    "vanilla": {"humaneval_plus": _summary(10.0, 164), "mbpp_plus": _summary(20.0, 378)},
    "grpo": {"humaneval_plus": _summary(12.5, 164), "mbpp_plus": _summary(19.0, 378)},
    "lopd": {"humaneval_plus": _summary(12.5, 164)},
}


def test_rows_follow_paper_order_and_average_weights_by_task_count():
    table = code_table(METRICS, ["lopd", "grpo", "vanilla"])
    assert [label for label, _ in table.rows] == ["Vanilla", "GRPO", "LOPD"]
    vanilla = dict(table.rows)["Vanilla"]
    assert abs(vanilla["evalplus_avg"] - (10.0 * 164 + 20.0 * 378) / 542) < 1e-9
    assert dict(table.rows)["LOPD"]["evalplus_avg"] is None  # MBPP+ missing -> no average
    assert dict(table.rows)["LOPD"]["mbpp_plus"] is None


def test_best_and_second_best_with_ties():
    r = ranks(code_table(METRICS, ["vanilla", "grpo", "lopd"]))
    assert r["humaneval_plus"] == {"GRPO": 1, "LOPD": 1, "Vanilla": 2}
    assert r["mbpp_plus"] == {"Vanilla": 1, "GRPO": 2}


def test_renderings_mark_ranks_and_explain_missing_columns():
    table = code_table(METRICS, ["vanilla", "grpo"])
    md = to_markdown(table, "T")
    assert "| Vanilla | n/a | n/a | n/a | _10.00_ | **20.00** |" in md
    assert "LCB v5: n/a: LiveCodeBench is not available offline" in md
    assert to_csv(table).splitlines()[1].startswith("Vanilla,n/a,n/a,n/a,10.00,20.00,")
    tex = to_latex(table, "T")
    assert r"\textbf{20.00}" in tex and r"\underline{10.00}" in tex and r"\item LCB v5" in tex
