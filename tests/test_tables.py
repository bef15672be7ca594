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


def _agentic(score, n):
    return {"score": score, "n_tasks": n}


def test_tool_use_table_averages_by_task_count_and_explains_gaps():
    from evaluation.tables import tool_use_table
    bfcl = {f"bfcl_{s}": _agentic(v, 200) for s, v in zip(("base", "miss_func", "miss_param", "long_context"),
                                                          (30.0, 20.0, 25.0, 21.0))}
    metrics = {"vanilla": {"envscaler": _agentic(48.6, 200), **bfcl, "acebench_multi_step": _agentic(48.3, 20),
                           "acebench_multi_turn": _agentic(52.2, 30)},
               "grpo": {"envscaler": _agentic(61.8, 200), "acebench_multi_step": {"note": "n/a: data missing"}}}
    table = tool_use_table(metrics, ["grpo", "vanilla", "lopd"])
    rows = dict(table.rows)
    assert [label for label, _ in table.rows] == ["Vanilla", "GRPO", "LOPD"]
    assert rows["Vanilla"]["bfcl_avg"] == (30 + 20 + 25 + 21) / 4
    assert abs(rows["Vanilla"]["acebench_avg"] - (48.3 * 20 + 52.2 * 30) / 50) < 1e-9  # the paper's 50.6
    assert rows["GRPO"]["acebench_multi_step"] is None and rows["GRPO"]["acebench_avg"] is None
    assert any(n.startswith("LOPD: n/a: no agentic evaluation") for n in table.notes)
    assert any("ACE M-Step: n/a: data missing." in n for n in table.notes)
    assert not any("n/a: n/a" in n for n in table.notes)


def test_behaviour_table_is_unranked():
    from evaluation.tables import behaviour_table
    metrics = {"vanilla": {"envscaler": {"reward_mean": 0.486, "steps": 11.12, "tool_calls_per_step": 3.5,
                                         "first_step_tokens": 9937, "reward_per_tool_call": 0.038,
                                         "repeated_calls": 8.89}}}
    md = to_markdown(behaviour_table(metrics, ["vanilla", "lopd"]), "B")
    assert "| Vanilla | 0.486 | 11.120 | 3.500 | 9937.000 | 0.038 | 8.890 |" in md
    assert "| LOPD | n/a |" in md and "**" not in md
    assert "counting an episode without calls as one" in md
