"""LiveCodeBench: release files in the official format, written here by the tests themselves (no copy is reachable
offline): both problem kinds, the private-test blob, a hostile pickle, the version windows and the comparison."""

import base64
import json
import os
import pickle
import zlib
from datetime import date

import pytest

from evaluation.livecodebench import (
    build_messages,
    decode_private_tests,
    load_problems,
    run_problem,
    score,
    stdout_matches,
)
from lopd.core.config import ConfigError, resolve

CONFIG = resolve({"profile": "smoke"})
V5, V6 = CONFIG.data.livecodebench_window("lcb_v5"), CONFIG.data.livecodebench_window("lcb_v6")


def _blob(payload) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(payload))).decode()


def _row(qid, contest_date, tests, private, func_name=None, starter=""):
    public = [t for t in tests if t is not None]
    return {"question_title": f"T{qid}", "question_content": f"Problem {qid}.", "platform": "atcoder",
            "question_id": qid, "contest_id": "c1", "contest_date": contest_date, "starter_code": starter,
            "difficulty": "easy", "public_test_cases": json.dumps(public),
            "private_test_cases": _blob(json.dumps(private)),
            "metadata": json.dumps({"func_name": func_name} if func_name else {})}


STDIN = _row("abc001_a", "2024-09-01T00:00:00", [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}],
             [{"input": "5 7\n", "output": "12\n", "testtype": "stdin"}])
CALL = _row("leet-1", "2025-03-02T00:00:00", [{"input": "[1, 2]\n3", "output": "[0, 1]", "testtype": "functional"}],
            [{"input": "[3, 3]\n6", "output": "[0, 1]", "testtype": "functional"}], func_name="twoSum",
            starter="class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ")
OLD = _row("abc000_a", "2023-01-01T00:00:00", [{"input": "", "output": "x", "testtype": "stdin"}], [])


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_both_problem_kinds_with_their_private_tests_and_the_version_windows(tmp_path):
    release = _write(tmp_path / "test5.jsonl", [STDIN, CALL, OLD])
    v5 = load_problems(release, V5)
    v6 = load_problems(release, V6)
    assert [p.question_id for p in v5] == ["abc001_a"] and [p.question_id for p in v6] == ["leet-1"]
    stdin, call = v5[0], v6[0]
    assert stdin.func_name is None and [t.input for t in stdin.tests] == ["1 2\n", "5 7\n"]
    assert call.func_name == "twoSum" and [t.output for t in call.tests] == ["[0, 1]", "[0, 1]"]
    assert stdin.contest_date == date(2024, 9, 1)
    assert load_problems(tmp_path, (date(2000, 1, 1), date(2100, 1, 1)))[2].question_id == "abc000_a"  # a folder
    user = build_messages(call)[1]["content"]
    assert "def twoSum" in user and "starter code" in user and "stdin" in build_messages(stdin)[1]["content"]


class _Touch:
    def __reduce__(self):
        return (os.mkdir, ("/tmp/lcb-pickle-ran",))


@pytest.mark.parametrize("payload, message", [
    (_Touch(), "refused: its pickle holds"),             # a call: never made
    (["a list"], "refused: its pickle holds"),             # a container, not the string
    ({"input": "x"}, "refused: its pickle holds"),
])
def test_a_private_blob_that_is_not_a_plain_string_is_refused_without_running_it(tmp_path, payload, message):
    row = {**STDIN, "private_test_cases": _blob(payload)}
    release = _write(tmp_path / "test.jsonl", [STDIN, row])
    with pytest.raises(ValueError, match=rf"test.jsonl: line 2: private_test_cases {message}") as err:
        load_problems(release, V5)
    assert "\n" not in str(err.value) and not os.path.exists("/tmp/lcb-pickle-ran")


@pytest.mark.parametrize("change, message", [
    ({"private_test_cases": "not base64!"}, "not base64 of zlib data"),
    ({"private_test_cases": base64.b64encode(zlib.compress(b"\x80\x04garbage")).decode()}, "not a valid pickle"),
    ({"public_test_cases": "[{"}, "public_test_cases is not JSON"),
    ({"public_test_cases": json.dumps([{"input": "1", "output": "2", "testtype": "other"}])}, "a test is not"),
    ({"contest_date": "yesterday"}, "'contest_date' is not an ISO date"),
    ({"question_id": 7}, "'question_id' missing or not a string"),
    ({"metadata": "{}", "public_test_cases": json.dumps([{"input": "1", "output": "2", "testtype": "functional"}]),
      "private_test_cases": _blob("[]")}, "without metadata.func_name"),
])
def test_malformed_lines_are_one_line_errors_naming_file_line_and_field(tmp_path, change, message):
    release = _write(tmp_path / "test.jsonl", [{**STDIN, **change}])
    with pytest.raises(ValueError, match=message) as err:
        load_problems(release, V5)
    assert str(err.value).startswith(f"{release}: line 1: ") and "\n" not in str(err.value)


def test_a_missing_release_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        load_problems(tmp_path / "nowhere", V5)


def test_the_private_payload_is_read_opcode_by_opcode():
    text = json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}])
    for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
        blob = base64.b64encode(zlib.compress(pickle.dumps(text, protocol=protocol))).decode()
        assert decode_private_tests(blob, "x") == text


@pytest.mark.parametrize("expected, got, same", [
    ("3\n", "3", True), ("1 2\n3\n", "1 2 \n 3", True), ("0.5\n", "0.50", True), ("1e3", "1000", True),
    ("3", "4", False), ("1 2", "1 2 3", False), ("a\nb", "a", False), ("yes", "YES", False), ("1.0", "x", False),
])
def test_stdout_comparison_is_livecodebenchs(expected, got, same):
    assert stdout_matches(expected, got) is same


RIGHT_STDIN = "a, b = map(int, input().split())\nprint(a + b)\n"
WRONG_STDIN = "a, b = map(int, input().split())\nprint(a * b)\n"
RIGHT_CALL = ("class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
              "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
              "                return (seen[target - x], i)\n            seen[x] = i\n")
WRONG_CALL = "class Solution:\n    def twoSum(self, nums, target):\n        return [1, 0]\n"


def test_a_correct_and_a_wrong_solution_per_problem_kind_in_the_sandbox(tmp_path):
    release = _write(tmp_path / "test.jsonl", [STDIN, CALL])
    stdin, call = load_problems(release, (date(2024, 1, 1), date(2026, 1, 1)))
    assert run_problem(RIGHT_STDIN, stdin).passed and run_problem(RIGHT_CALL, call).passed  # a tuple is a list
    wrong = run_problem(WRONG_STDIN, stdin)
    assert not wrong.passed and wrong.n_passed == 0 and "wrong_answer" in wrong.detail
    assert not run_problem(WRONG_CALL, call).passed
    # the private test counts: right on the public test only is wrong
    only_public = "a, b = map(int, input().split())\nprint(3 if (a, b) == (1, 2) else 0)\n"
    report = run_problem(only_public, stdin)
    assert not report.passed and report.n_passed == 1 and report.n_total == 2


def test_scores_are_pass_at_1_on_all_tests_with_the_public_ones_as_base(tmp_path):
    release = _write(tmp_path / "test.jsonl", [STDIN, CALL])
    problems = {p.question_id: p for p in load_problems(release, (date(2024, 1, 1), date(2026, 1, 1)))}
    only_public = "a, b = map(int, input().split())\nprint(3 if (a, b) == (1, 2) else 0)\n"
    fenced = lambda code: f"Here it is:\n```python\n{code}```\nDone."  # noqa: E731
    out = score(problems, {"abc001_a": [fenced(RIGHT_STDIN), fenced(only_public)], "leet-1": [fenced(WRONG_CALL)]})
    assert out["per_task"]["abc001_a"]["plus"] == [True, False] and out["per_task"]["abc001_a"]["base"] == [True, True]
    assert out["per_task"]["leet-1"]["plus"] == [False] and out["per_task"]["leet-1"]["base"] == [False]
    assert out["pass@1_plus"] == pytest.approx(25.0) and out["pass@1_base"] == pytest.approx(50.0)
    assert out["n_tasks"] == 2 and out["pass@1_plus_ci_low"] < 25.0 < out["pass@1_plus_ci_high"]


def test_a_sample_that_fails_only_by_a_time_limit_is_run_once_more(tmp_path, monkeypatch):
    """A timeout is checked again and the second verdict counts (a right answer whose first run timed out passes); a
    wrong answer is checked once."""
    import evaluation.livecodebench as lcb
    from evaluation.coding.taco import TestReport

    release = _write(tmp_path / "test.jsonl", [STDIN])
    problems = {p.question_id: p for p in load_problems(release, (date(2024, 1, 1), date(2026, 1, 1)))}
    hang = "import time\ntime.sleep(60)\n"
    real, runs = lcb.run_problem, []

    def run(code, problem):  # a 1 s test limit keeps the real timeout short; the right answer's first run times out
        runs.append(code)
        if code.strip() == RIGHT_STDIN.strip() and runs.count(code) == 1:
            return TestReport(False, 0, len(problem.tests), "timeout", "test 1/2: timeout: time limit", 0)
        return real(code, problem, per_test_seconds=1.0)

    monkeypatch.setattr(lcb, "run_problem", run)
    fenced = lambda code: f"```python\n{code}```"  # noqa: E731
    out = score(problems, {"abc001_a": [fenced(hang), fenced(WRONG_STDIN), fenced(RIGHT_STDIN)]})
    verdict = out["per_task"]["abc001_a"]
    assert verdict["plus"] == [False, False, True] and verdict["rechecked"] == [True, False, True]
    assert "timeout" in verdict["status"][0] and out["n_timeout_rechecks"] == 2
    assert sorted(map(runs.count, set(runs))) == [1, 2, 2]


def test_the_version_windows_are_the_common_convention_and_configurable():
    assert (V5, V6) == ((date(2024, 8, 1), date(2025, 2, 1)), (date(2025, 2, 1), date(2025, 5, 1)))
    custom = resolve({"profile": "smoke", "data": {"lcb_v6_window": ["2025-01-01", "2025-06-01"]}})
    assert custom.data.livecodebench_window("lcb_v6") == (date(2025, 1, 1), date(2025, 6, 1))
    for bad in (["2025-05-01", "2025-02-01"], ["2025-02-01"], ["soon", "later"]):
        with pytest.raises(ConfigError, match="data.lcb_v5_window: expected"):
            resolve({"profile": "smoke", "data": {"lcb_v5_window": bad}})


def test_the_overlap_guard_reads_livecodebench_problems_or_says_where_it_looked(tmp_path):
    from pipelines.build_bank import evaluation_prompts
    release = _write(tmp_path / "test6.jsonl", [STDIN, CALL, OLD])
    cfg = resolve({"profile": "smoke", "benchmarks": ["lcb_v5", "lcb_v6"],
                   "data": {**vars(CONFIG.data), "livecodebench_path": str(release)}})
    prompts, missing = evaluation_prompts(cfg)
    assert prompts == {"abc001_a": "Problem abc001_a.", "leet-1": "Problem leet-1."} and missing == ""
    absent = tmp_path / "nowhere"
    cfg = resolve({"profile": "smoke", "benchmarks": ["lcb_v5"],
                   "data": {**vars(CONFIG.data), "livecodebench_path": str(absent)}})
    prompts, missing = evaluation_prompts(cfg)
    assert prompts == {} and missing.startswith(f"lcb_v5 (LiveCodeBench: no release file at {absent} "), missing
