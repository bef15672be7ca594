"""The harness check (evaluation/harness_check.py, stage check_harness): a scripted policy writing each task's ground
truth through the multi-turn driver, parser and scorers scores 1.0 wherever the ground truth replays and fits the caps,
a null policy scores the floor, each shortfall is explained, and a broken parser or scorer shows in the table.

The tokenizer is the tiny model's (SmolLM2's) with a small local ChatML template that writes an assistant's tool calls
as Qwen2.5's does: SmolLM2's own template writes none (the check refuses it: tested), and the Qwen tokenizer is not
available offline here. Needs the BFCL v3 and ACEBench data in <shared> ($LOPD_SHARED_DATA, else <repo>/../shared/data).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import os
import sys
from pathlib import Path

import pytest

from evaluation import harness_check as hc
from evaluation.agentic.bfcl import load_bfcl
from evaluation.coding import taco
from lopd.core import multiturn
from lopd.core.config import AGENTIC_BENCHMARKS, resolve
from lopd.core.multiturn import TASK_COMPLETED, ParsedStep, ToolCall, parse_step
from lopd.core.sampling import SamplingParams
from pipelines import check_harness

SHARED = Path(os.environ.get("LOPD_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
pytestmark = pytest.mark.skipif(not (SHARED / "bfcl_v3").is_dir() or not (SHARED / "acebench").is_dir(),
                                reason=f"BFCL v3 or ACEBench data not in {SHARED} (set LOPD_SHARED_DATA)")
TOOL_ROWS = (AGENTIC_BENCHMARKS[0], check_harness.TRAIN_ROW, *AGENTIC_BENCHMARKS[1:])
PAPER_CAPS = {"max_steps": 30, "acebench_max_steps": 20, "max_step_tokens": 2048, "max_context_tokens": 40960}

CHATML_WITH_TOOL_CALLS = (
    r"{%- for message in messages %}{{ '<|im_start|>' + message.role }}"
    r"{%- if message.content %}{{ '\n' + message.content }}{%- endif %}"
    r"{%- for call in message.tool_calls or [] %}{{ '\n<tool_call>\n' }}"
    r"{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}{{ '\n</tool_call>' }}"
    r"{%- endfor %}{{ '<|im_end|>\n' }}{%- endfor %}"
    r"{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}")
"""ChatML that writes an assistant's tool calls as Qwen2.5-Coder's template does."""


@pytest.fixture(scope="module")
def chat_tokenizer(tokenizer):
    chat = copy.deepcopy(tokenizer)
    chat.chat_template = CHATML_WITH_TOOL_CALLS
    return chat


def config(task_limit: int = 3, **agentic):
    return resolve({"profile": "cpu", "data": {"shared_dir": str(SHARED)},
                    "agentic": {"task_limit": task_limit, **agentic}})


@pytest.fixture(scope="module")
def paper_rows(chat_tokenizer):
    """The first 3 tasks of every tool-use row under the paper's caps (every script fits them)."""
    return {row.benchmark: row for row in check_harness.run(config(**PAPER_CAPS), chat_tokenizer, TOOL_ROWS)}


# --------------------------------------------------------------------------- the policies


def test_the_scripted_policy_writes_a_call_as_the_template_does_and_the_parser_reads_it_back(chat_tokenizer):
    writer = hc.ScriptWriter(chat_tokenizer, "tiny")
    call = ToolCall("get_order", {"order_id": "A-7", "items": [1, 2], "note": "café"})
    text = writer.text(call)
    assert text == ('<tool_call>\n{"name": "get_order", "arguments": {"order_id": "A-7", "items": [1, 2], "note": '
                    '"café"}}\n</tool_call><|im_end|>')
    decoded = chat_tokenizer.decode(writer.ids(call), skip_special_tokens=True)
    assert parse_step(decoded, "strict") == ParsedStep([call], [])
    assert writer.ids(call)[-1] == writer.end_of_turn and writer.text(TASK_COMPLETED) == "Task Completed<|im_end|>"


def test_a_template_that_writes_no_tool_call_stops_the_check_naming_the_model(tokenizer):
    with pytest.raises(hc.TemplateError, match=r"^model tiny-random: its chat template does not write an assistant "
                                               r"tool call") as raised:
        hc.ScriptWriter(tokenizer, "tiny-random")  # SmolLM2's own template drops tool_calls
    assert "\n" not in str(raised.value)


def test_the_scripted_policy_plays_its_script_then_replies_and_a_step_past_the_budget_is_cut():
    policy = hc.ScriptedPolicy([[1, 2, 3], [4, 5, 6, 7, 8]], after=[9, 0])
    params = SamplingParams(max_new_tokens=4)
    steps = [policy.generate([[5]], params, seed=0)[0] for _ in range(4)]
    assert [(s.token_ids, s.stopped) for s in steps] == [([1, 2, 3], True), ([4, 5, 6, 7], False), ([9, 0], True),
                                                         ([9, 0], True)]
    assert all(s.logprobs == [0.0] * len(s.token_ids) for s in steps)
    with pytest.raises(ValueError, match="one episode at a time"):
        policy.generate([[1], [2]], params, seed=0)


def test_a_bfcl_script_is_each_question_turns_calls_then_its_reply():
    for subset in ("base", "miss_func"):
        for entry in load_bfcl(subset, SHARED / "bfcl_v3", limit=5):
            script = hc.bfcl_script(entry)
            replies = [i for i, step in enumerate(script) if step == TASK_COMPLETED]
            # brute force: reply i comes after the calls of turns 0..i, and the calls are the turns' own, in order
            turns = range(len(entry.question))
            ends = [sum(len(entry.ground_truth[t]) for t in range(turn + 1)) + turn for turn in turns]
            assert replies == ends
            calls = [(name, args) for turn in entry.ground_truth[:len(entry.question)] for name, args in turn]
            assert [(s.name, s.arguments) for s in script if isinstance(s, ToolCall)] == calls


# --------------------------------------------------------------------------- shortfalls


CAPS = hc.Caps(max_steps=5, max_step_tokens=128, max_context_tokens=8192)
SCRIPT = [ToolCall("a", {}), ToolCall("b", {}), TASK_COMPLETED, ToolCall("c", {}), ToolCall("d", {}),
          ToolCall("e", {}), TASK_COMPLETED]
FULL = hc.Played(1.0)


@pytest.mark.parametrize("tokens, capped, fitted, direct, kind, detail", [
    ([30] * 7, hc.Played(0.0, "step_cap", 5), FULL, FULL, "step cap", "7 steps (5 calls + 2 replies) for a cap of 5"),
    ([30, 500, 30, 30, 30, 30, 30], hc.Played(0.0, "step_cap", 5), FULL, FULL, "step cap + step budget",
     "a step of 500 tokens for a budget of 128"),
    ([30] * 7, hc.Played(0.0, "context", 2, 6000), FULL, FULL, "context",
     "after 2 steps (a prompt of 6000 tokens) the context would pass 8192"),
    ([30] * 7, hc.Played(0.0, "step_cap", 5), FULL, hc.Played(0.0, notes="invalid_reason: x"), "ground truth fails",
     "scores 0.00 (invalid_reason: x)"),
    ([30] * 7, hc.Played(0.0, "step_cap", 5), hc.Played(0.0, "completed", 7, 0, 0, 5), FULL, "harness",
     "the parser read 0 of 5 calls, 5 malformed"),
    ([30] * 7, hc.Played(0.5, "completed", 4), FULL, FULL, "unexplained", "ended completed"),
])
def test_every_shortfall_is_named(tokens, capped, fitted, direct, kind, detail):
    found = hc.shortfall(SCRIPT, tokens, CAPS, capped, fitted, direct)
    assert found[0] == kind and detail in found[1]


# --------------------------------------------------------------------------- whole benchmarks


def no_action_score(row: str, task_id: str) -> float:
    """An EnvScaler task's checks on the state it starts in, read straight from its environment."""
    with (check_harness.training_benchmark(config(None)) if row == check_harness.TRAIN_ROW
          else check_harness.evaluation_benchmark(config(None), row)) as bench:
        env = dict(bench.episodes)[task_id]
        env.reset()
        try:
            return env.score()["reward"]
        finally:
            env.close()


@pytest.mark.parametrize("row", TOOL_ROWS)
def test_the_scripted_policy_scores_1_wherever_its_ground_truth_replays_and_the_null_policy_the_floor(paper_rows,
                                                                                                      row):
    checked = paper_rows[row]
    assert len(checked.tasks) == 3 and not hc.faults(checked) and checked.note == ""
    for task in checked.tasks:
        assert task.scripted == (1.0 if task.direct == 1.0 else task.direct), task
        assert task.null < 1.0
        if row.startswith("envscaler"):
            assert task.null == pytest.approx(no_action_score(row, task.task_id))
        else:
            assert task.null == 0.0
    assert any(task.scripted == 1.0 for task in checked.tasks)


def test_a_ground_truth_longer_than_the_step_cap_is_named_and_caps_that_fit_score_it_1(chat_tokenizer):
    [row] = check_harness.run(config(max_steps=5), chat_tokenizer, ("bfcl_base",))
    entries = {e.entry_id: e for e in load_bfcl("base", SHARED / "bfcl_v3", limit=3)}
    for task in row.tasks:
        entry = entries[task.task_id]
        steps = sum(len(turn) for turn in entry.ground_truth) + len(entry.question)
        assert steps > 5 and task.scripted == 0.0 and task.fitted == 1.0
        assert task.why == ("step cap", f"{steps} steps ({steps - len(entry.question)} calls + "
                                        f"{len(entry.question)} replies) for a cap of 5"), task


def test_a_parser_that_finds_no_call_shows_as_a_harness_fault(chat_tokenizer, monkeypatch):
    monkeypatch.setattr(multiturn, "parse_step", lambda text, mode: ParsedStep([], []))
    rows = check_harness.run(config(**PAPER_CAPS), chat_tokenizer, ("envscaler", "bfcl_base", "acebench_multi_turn"))
    for row in rows:
        replayed = [task for task in row.tasks if task.direct == 1.0]
        assert replayed and row.mean("scripted") == row.mean("null") < 1
        assert {task.why[0] for task in replayed} == {"harness"}
        assert len(hc.faults(row)) == len(replayed)


def test_a_scorer_that_always_says_0_empties_the_scripted_row(chat_tokenizer, monkeypatch):
    from evaluation.agentic.envscaler import EnvScalerEnvironment

    monkeypatch.setattr(EnvScalerEnvironment, "score", lambda self: {"reward": 0.0})
    [row] = check_harness.run(config(**PAPER_CAPS), chat_tokenizer, ("envscaler",))
    assert row.mean("scripted") == row.mean("direct") == 0.0
    assert all(task.why[0] == "ground truth fails" for task in row.tasks)


def test_a_benchmark_without_its_data_is_a_row_of_n_a_naming_the_path(chat_tokenizer, tmp_path):
    cfg = resolve({"profile": "cpu", "data": {"shared_dir": str(tmp_path)}})
    rows = check_harness.run(cfg, chat_tokenizer, ("bfcl_base", "acebench_multi_step"))
    assert [(row.tasks, row.note) for row in rows] == [
        ((), f"n/a: BFCL data dir not found: {tmp_path / 'bfcl_v3'}"), ((), rows[1].note)]
    assert rows[1].note.startswith("n/a: ") and str(tmp_path) in rows[1].note
    assert hc.csv_text(rows).splitlines()[1:] == ["bfcl_base,0,n/a,n/a", "acebench_multi_step,0,n/a,n/a"]


# --------------------------------------------------------------------------- code, and the files


def test_a_coding_tasks_reference_solution_scores_1_and_an_empty_answer_0():
    tasks = taco.load_builtin_tasks()[:3]
    broken = dataclasses.replace(tasks[0], task_id="broken", solutions=("print('no')",))
    row = hc.check_coding_tasks("code_train", [*tasks, broken], workers=2)
    assert [(t.task_id, t.scripted, t.null) for t in row.tasks] == [
        *((t.task_id, 1.0, 0.0) for t in tasks), ("broken", 0.0, 0.0)]
    assert row.tasks[-1].why[0] == "reference fails" and row.tasks[-1].why[1].startswith("wrong_answer")


def test_a_model_whose_template_writes_no_tool_call_stops_the_stage_before_it_writes(tiny_model_dir, tmp_path,
                                                                                     monkeypatch):
    monkeypatch.setattr(check_harness, "BASE_MODEL_DIR", tiny_model_dir)
    monkeypatch.setattr(check_harness, "TABLE", tmp_path / "harness_check")
    monkeypatch.setattr(sys, "argv", ["check_harness", "--task-limit", "1"])
    with pytest.raises(SystemExit, match=r"^error: model qwen2.5-coder-0.5b: its chat template does not write an "
                                         r"assistant tool call"):
        check_harness.main()
    assert list(tmp_path.iterdir()) == []


def test_the_stage_writes_the_table_and_its_reasons(chat_tokenizer, tiny_model_dir, tmp_path, monkeypatch):
    model = tmp_path / "model"
    chat_tokenizer.save_pretrained(model)
    (model / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    monkeypatch.setattr(check_harness, "BASE_MODEL_DIR", model)
    monkeypatch.setattr(check_harness, "TABLE", tmp_path / "tables" / "harness_check")
    monkeypatch.setattr(check_harness, "ROWS", ("envscaler", "bfcl_base", "code_train", "lcb_v5"))
    monkeypatch.setattr(sys, "argv", ["check_harness", "--task-limit", "2"])
    check_harness.main()
    table = list(csv.reader(io.StringIO((tmp_path / "tables" / "harness_check.csv").read_text())))
    assert table[0] == ["benchmark", "n", "scripted", "null"]
    assert [row[:2] for row in table[1:]] == [["envscaler", "2"], ["bfcl_base", "2"], ["code_train", "2"],
                                              ["lcb_v5", "0"]]
    assert table[3][2:] == ["1.0000", "0.0000"] and table[4][2:] == ["n/a", "n/a"]
    report = (tmp_path / "tables" / "harness_check.md").read_text()
    for task in load_bfcl("base", SHARED / "bfcl_v3", limit=2):  # both exceed the cpu profile's 5 steps
        assert f"`{task.entry_id}` 0.00: " in report
    assert "n/a: a LiveCodeBench release holds no reference solutions" in report
