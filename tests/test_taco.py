"""TACO-format coding tasks: loading, prompting, code extraction, checking and the reward."""

import json
import sys
from pathlib import Path

import pytest

from evaluation.coding.code_blocks import extract_code
from evaluation.coding.taco import (
    CodingTask,
    build_messages,
    load_taco_file,
    reward,
    run_tests,
    stdout_matches,
    value_matches,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def tasks():
    return {t.task_id: t for t in load_taco_file(FIXTURES / "taco_small.jsonl")}


def stdin_task(inputs, outputs):
    return CodingTask("t/stdin", "q", "", None, tuple(inputs), tuple(outputs), (), "test")


def call_task(fn_name, inputs, outputs, starter=""):
    return CodingTask("t/call", "q", starter, fn_name, tuple(inputs), tuple(outputs), (), "test")


# -------------------------------------------------------------------- loading

def test_load_taco_jsonl(tasks):
    assert list(tasks) == ["fx/sum", "fx/add", "fx/pair"]
    s, a, p = tasks["fx/sum"], tasks["fx/add"], tasks["fx/pair"]
    assert s.fn_name is None and s.inputs == ("1 2\n", "10 -3\n") and s.outputs == ("3\n", "7\n")
    assert s.solutions == ("a, b = map(int, input().split())\nprint(a + b)\n",) and s.source == "handwritten"
    assert a.fn_name == "add" and a.inputs == ([1, 2], [0.5, 0.25]) and a.outputs == ([3], [0.75])
    assert a.starter_code.startswith("def add")
    assert p.fn_name == "minMax" and "class Solution" in p.starter_code


def test_load_deepcoder_style():
    loaded = load_taco_file(FIXTURES / "deepcoder_taco_small.json", id_prefix="dc")
    assert [t.task_id for t in loaded] == ["dc/0", "dc/1"]
    assert loaded[0].question.startswith("Print the length") and loaded[0].fn_name is None
    assert loaded[0].solutions == ("print(len(input()))\n",)
    assert loaded[1].fn_name == "double" and loaded[1].solutions == () and loaded[1].source == "dc"


def test_load_single_object_and_lists_of_lines(tmp_path):
    record = {"question": "q", "input_output": {"inputs": [["1", "2"]], "outputs": [["3"]]}}
    path = tmp_path / "one.json"
    path.write_text(json.dumps(record))
    (task,) = load_taco_file(path)
    assert task.task_id == "taco/0" and task.inputs == ("1\n2\n",) and task.outputs == ("3\n",)


def _record(**changes):
    rec = {"task_id": "bad/1", "question": "q", "starter_code": "",
           "input_output": json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]}), "solutions": "[]"}
    rec.update(changes)
    return json.dumps({k: v for k, v in rec.items() if v is not None})


@pytest.mark.parametrize("line, field", [
    ("{not json", "line 2"),
    ("[1, 2]", "expected a JSON object"),
    (_record(question=None), "'question (or problem)'"),
    (_record(question=""), "'question'"),
    (_record(input_output="{broken"), "'input_output'"),
    (_record(input_output=None), "'input_output (or tests)'"),
    (_record(input_output=json.dumps({"inputs": ["1"], "outputs": []})), "'input_output'"),
    (_record(input_output=json.dumps({"inputs": [], "outputs": []})), "'input_output'"),
    (_record(input_output=json.dumps({"inputs": [[1]], "outputs": ["x"]})), "'input_output'"),
    (_record(input_output=json.dumps({"fn_name": "not valid", "inputs": [[1]], "outputs": [1]})), "'input_output'"),
    (_record(solutions=json.dumps([1, 2])), "'solutions'"),
    (_record(starter_code=5), "'starter_code'"),
])
def test_malformed_record_errors_name_record_and_field(tmp_path, line, field):
    path = tmp_path / "tasks.jsonl"
    path.write_text(_record(task_id="ok/0") + "\n" + line + "\n")
    with pytest.raises(ValueError) as info:
        load_taco_file(path)
    message = str(info.value)
    assert "\n" not in message and field in message and "line 2" in message


def test_duplicate_ids_are_rejected(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(_record() + "\n" + _record() + "\n")
    with pytest.raises(ValueError, match="duplicate"):
        load_taco_file(path)


@pytest.mark.parametrize("name, content", [("tasks.jsonl", ""), ("tasks.jsonl", "\n  \n"), ("tasks.json", "[]")])
def test_a_file_without_records_is_a_one_line_error_naming_it(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError) as info:
        load_taco_file(path)
    assert str(info.value) == f"{path}: no TACO records in the file"


def test_a_file_that_is_not_utf8_is_a_one_line_error_naming_file_and_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(_record(task_id="ok/0").encode() + b"\n{\"question\": \"caf\xe9\"}\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl: line 2: not UTF-8 text") as info:
        load_taco_file(path)
    assert "\n" not in str(info.value)


# -------------------------------------------------------------------- prompting and extraction

def test_build_messages(tasks):
    system = ("You are an expert Python programmer. You will be given a question (problem specification) "
              "and will generate a correct Python program that matches the specification and passes all tests.")
    messages = build_messages(tasks["fx/sum"])
    assert [m["role"] for m in messages] == ["system", "user"] and messages[0]["content"] == system
    assert messages[1]["content"].startswith("Read two integers") and "standard input" in messages[1]["content"]
    assert "```python" in messages[1]["content"]
    user = build_messages(tasks["fx/pair"])[1]["content"]
    assert "`minMax`" in user and "class Solution" in user and "def minMax(self, nums):" in user
    user = build_messages(tasks["fx/add"])[1]["content"]
    assert "`add`" in user and "def add(a, b):" in user and "standard input" in user  # "do not read from it"


@pytest.mark.parametrize("completion, expected", [
    ("Here:\n```python\nprint(1)\n```\nDone.", "print(1)"),
    ("```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```", "print(2)"),
    ("```python\ndef f(x):\n    return x * 2\n\nprint(f(int(input())))\n```\nUsage:\n```python\nf(3)\n```",
     "def f(x):\n    return x * 2\n\nprint(f(int(input())))"),
    ("Sure\n```python\nimport sys\nprint(sys.stdin.read())", "import sys\nprint(sys.stdin.read())"),
    ("```py\nx = 1\n```", "x = 1"),
    ("Input:\n```\n3 4\n```\n```python\nprint(7)\n```", "print(7)"),
    ("```\nprint(3)\n```", "print(3)"),
    ("```text\nhello\n```\n```python\nprint(4)\n```\n```bash\nls\n```", "print(4)"),
    ("```python\nprint(5)```", "print(5)"),
    ("<think>try\n```python\nprint(0)\n```\n</think>\nFinal:\n```python\nprint(6)\n```", "print(6)"),
    ("print('raw')\n", "print('raw')"),
    ("", ""),
])
def test_extract_code(completion, expected):
    assert extract_code(completion) == expected


# -------------------------------------------------------------------- comparison (pure)

@pytest.mark.parametrize("expected, actual, same", [
    ("3\n", "3", True),
    ("1 2 3\n", "1  2 3   \n\n", True),
    ("1 2\n3\n", "1\n2 3", True),          # line structure is not enforced
    ("0.5\n", "0.5000000001", True),
    ("0.5\n", "0.51", False),
    ("1000000\n", "1000001\n", False),      # integers are exact
    ("YES\n", "yes\n", False),
    ("a b\n", "a b c\n", False),
    ("", "\n", True),
])
def test_stdout_matches(expected, actual, same):
    assert stdout_matches(expected, actual) is same


@pytest.mark.parametrize("expected, actual, same", [
    ([3], 3, True),                         # TACO's one-element wrapping
    (3, 3, True),
    ([[1, 3]], [1, 3], True),               # a tuple arrives as a list
    ([1, 3], [1, 3], True),
    ([0.75], 0.7500000001, True),
    ([0.75], 0.76, False),
    ([1, 2], 1, False),                     # only a one-element list is unwrapped
    (["a"], "a", True),
    ("1", 1, False),
    ([{"1": 2}], {"1": 2}, True),
    ([True], True, True),
    ([None], None, True),
    ([[1, 2]], [2, 1], False),
])
def test_value_matches(expected, actual, same):
    assert value_matches(expected, actual) is same


# -------------------------------------------------------------------- running tests

def test_stdin_task_pass_and_wrong_answer(tasks):
    task = tasks["fx/sum"]
    report = run_tests(task.solutions[0], task)
    assert (report.passed, report.n_passed, report.n_total, report.status) == (True, 2, 2, "ok")
    report = run_tests("a, b = map(int, input().split())\nprint(a - b)", task)
    assert (report.passed, report.n_passed, report.status) == (False, 0, "wrong_answer")
    assert report.detail.startswith("test 1/2: wrong_answer")


def test_stdin_task_io_styles():
    task = stdin_task(["2\n3 4\n", "1\n9\n"], ["7\n", "9\n"])
    for code in ["import sys\nn = int(sys.stdin.buffer.readline())\n"
                 "print(sum(map(int, sys.stdin.buffer.readline().split())))",
                 "data = open(0).read().split()\nprint(sum(map(int, data[1:])))",
                 "import os, sys\nn = int(input())\n"
                 "os.write(1, (str(sum(map(int, input().split()))) + '\\n').encode())",
                 "def main():\n    input()\n    print(sum(map(int, input().split())))\n    exit()\n"
                 "if __name__ == '__main__':\n    main()",
                 "import threading, sys\nthreading.stack_size(1 << 26)\n"
                 "def main():\n    input()\n    print(sum(map(int, input().split())))\n"
                 "threading.Thread(target=main).start()"]:
        report = run_tests(code, task)
        assert report.passed, (code, report)


def test_stdin_task_partial_error_and_timeout():
    task = stdin_task(["1\n", "2\n", "3\n"], ["1\n", "2\n", "3\n"])
    report = run_tests("n = int(input())\nif n == 2:\n    raise ValueError('two')\nprint(n)", task)
    assert (report.n_passed, report.status) == (2, "error") and "ValueError: two" in report.detail
    report = run_tests("n = int(input())\nwhile n == 2:\n    pass\nprint(n)", task, per_test_seconds=0.5)
    assert (report.passed, report.n_passed, report.status) == (False, 1, "timeout")
    report = run_tests("n = int(input())\nwhile n >= 2:\n    try:\n        pass\n"
                       "    except BaseException:\n        pass\nprint(n)", task, per_test_seconds=0.5)
    assert report.status == "timeout"  # swallowing the timeout does not help


def test_call_task_function_and_solution_class(tasks):
    for task in (tasks["fx/add"], tasks["fx/pair"]):
        report = run_tests(task.solutions[0], task)
        assert (report.passed, report.n_passed, report.n_total) == (True, 2, 2), report
    report = run_tests("class Solution:\n    def minMax(self, nums):\n        return [max(nums), min(nums)]",
                       tasks["fx/pair"])
    assert (report.n_passed, report.status) == (1, "wrong_answer")


def test_call_task_failures():
    task = call_task("f", [[1], [2]], [[1], [2]])
    assert run_tests("def f(x):\n    return x", task).passed
    assert run_tests("def g(x):\n    return x", task).status == "error"             # fn_name missing
    assert run_tests("def f(x)\n    return x", task).status == "error"              # syntax error
    report = run_tests("def f(x):\n    if x == 2:\n        raise KeyError(x)\n    return x", task)
    assert (report.n_passed, report.status) == (1, "error") and "KeyError" in report.detail
    report = run_tests("def f(x):\n    while x == 2:\n        pass\n    return x", task, per_test_seconds=0.5)
    assert (report.n_passed, report.status) == (1, "timeout")
    report = run_tests("import time\ntime.sleep(5)\ndef f(x):\n    return x", task, per_test_seconds=0.5)
    assert (report.n_passed, report.status) == (0, "timeout")                      # slow module body
    report = run_tests("def f(x):\n    print('debug', x)\n    return {x}", task)
    assert report.status == "wrong_answer"                                         # a set is not a list


def test_cheating_attempts_fail():
    task = call_task("f", [[1]], [[1]])
    always_equal = "class Eq:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Eq()"
    assert not run_tests(always_equal, task).passed
    stdin = stdin_task(["1\n"], ["42\n"])
    fake_reports = ("import sys, os\nfor i in range(3):\n"
                    "    os.write(1, b'deadbeef {\"i\": 0, \"status\": \"ok\", \"output\": \"42\"}\\n')")
    assert not run_tests(fake_reports, stdin).passed
    assert not run_tests("import os\nos._exit(0)", stdin).passed


def test_no_code_and_hostile_code():
    task = stdin_task(["1\n"], ["1\n"])
    assert run_tests("   \n", task).status == "no_code"
    report = run_tests("import os\nwhile True:\n    os.fork()", task, per_test_seconds=1.0)
    assert not report.passed
    report = run_tests("while True:\n    print('x' * 10000)", task, per_test_seconds=1.0)
    assert not report.passed


def test_big_integers_and_floats():
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # Python won't print ints beyond 4300 digits by default
    try:
        big = str(3 ** 20000)
    finally:
        sys.set_int_max_str_digits(limit)
    task = stdin_task(["\n"], [big + "\n"])
    assert run_tests("print(3 ** 20000)", task).passed
    task = call_task("f", [[]], [[3 ** 20000]])
    assert run_tests("def f():\n    return 3 ** 20000", task).passed
    assert run_tests("def f():\n    return 3 ** 20000 + 1", task).status == "wrong_answer"
    task = call_task("f", [[2.0]], [[1.4142135623730951]])
    assert run_tests("def f(x):\n    return x ** 0.5 + 1e-12", task).passed


def test_reward(tasks):
    task = tasks["fx/sum"]
    good = "Let me think.\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert reward(good, task) == 1.0
    assert reward(good.replace("a + b", "a * b"), task) == 0.0
    assert reward("", task) == 0.0
    assert reward("I don't know.", task) == 0.0
