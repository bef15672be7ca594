"""Coding tasks in the TACO format, and the paper's binary test reward.

A TACO record (BAAI/TACO on the Hugging Face hub) is one JSON object per problem:
  question        the problem statement
  starter_code    code to complete ("" for stdin/stdout programs)
  input_output    a JSON *string*: {"inputs": [...], "outputs": [...], "fn_name": "..." (optional)}
  solutions       a JSON *string*: list of reference programs
  difficulty, source, tags, ...
Without fn_name a test runs the whole program: inputs[i] is its stdin, outputs[i] its expected
stdout. With fn_name a test is the call fn_name(*inputs[i]) (a method of `class Solution` when the
starter code says so); TACO stores the expected return value wrapped in a one-element list, so both
[v] and v are accepted, as TACO's own checker does. The DeepCoder-Preview `taco` subset keeps the
same tests under `tests` and the statement under `problem`; both spellings load, from JSONL, a JSON
list, or a single JSON object.

All tests of a task run in one sandbox process (`_HARNESS`, the text of evaluation/harness/taco_check.py).
The expected outputs never enter it: the harness reports what the program printed/returned and the
comparison happens here, so model code cannot game the checker (e.g. with an object whose __eq__
always says True).
"""

from __future__ import annotations

import decimal
import json
import math
import re
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from evaluation.coding.code_blocks import extract_code
from evaluation.harness import taco_check
from evaluation.sandbox import SandboxLimits, SandboxResult, SandboxUnavailable, isolation_mode, run_python
from lopd.core.jsonl import read_text

SYSTEM_PROMPT = (
    "You are an expert Python programmer. You will be given a question (problem specification) and "
    "will generate a correct Python program that matches the specification and passes all tests."
)
BUILTIN_FILE = Path(__file__).resolve().parent / "data" / "builtin_taco.jsonl"
PER_TEST_SECONDS = 4.0   # wall clock per test (our choice; TACO's own limits are per-problem, for C++)
MAX_RUN_SECONDS = 60.0   # cap on one task's sandbox run
FLOAT_TOLERANCE = 1e-6   # relative and absolute, for tokens/values that are not integers


@dataclass(frozen=True)
class CodingTask:
    task_id: str
    question: str
    starter_code: str
    fn_name: str | None            # None → stdin/stdout program
    inputs: tuple                  # per test: stdin text, or list of positional args
    outputs: tuple                 # per test: expected stdout text, or expected return value
    solutions: tuple[str, ...]     # reference solutions (may be empty for user data)
    source: str


@dataclass(frozen=True)
class TestReport:
    __test__ = False  # not a pytest test class

    passed: bool
    n_passed: int
    n_total: int
    status: str   # "ok" | "wrong_answer" | "no_code" | "error" | "timeout" | "memory" | "killed"
    detail: str   # one line about the first failing test ("" when all pass)
    first_failed: int | None = None  # index of the first failing test (0 when the code did not load); None: all pass


# -----------------------------------------------------------------------------
# Loading

def load_taco_file(path: str | Path, *, id_prefix: str = "taco") -> list[CodingTask]:
    """Read TACO (or DeepCoder `taco`) records from a .jsonl / .json file; ValueError naming the file when it
    holds no record."""
    path = Path(path)
    tasks = [_to_task(rec, i, where, id_prefix) for i, (where, rec) in enumerate(_read_records(path))]
    if not tasks:
        raise ValueError(f"{path}: no TACO records in the file")
    seen = set()
    for task in tasks:
        if task.task_id in seen:
            raise ValueError(f"{path}: duplicate task_id {task.task_id!r}")
        seen.add(task.task_id)
    return tasks


def load_builtin_tasks() -> list[CodingTask]:
    """The small task set shipped with the project (evaluation/coding/data/builtin_taco.jsonl)."""
    if not BUILTIN_FILE.exists():
        raise FileNotFoundError(f"built-in coding tasks not found: {BUILTIN_FILE}")
    return load_taco_file(BUILTIN_FILE, id_prefix="builtin")


def _json_loads(text: str) -> Any:
    # Python refuses str->int beyond 4300 digits; big-number problems have such outputs.
    return json.loads(text, parse_int=lambda s: int(s) if len(s) < 4000 else int(decimal.Decimal(s)))


def _json_dumps(value: Any) -> str:
    try:
        return json.dumps(value)
    except ValueError:  # an int beyond Python's 4300-digit printing limit: splice in its digits
        digits = []

        def swap(x):
            if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > 10_000:
                digits.append(str(decimal.Decimal(x)))  # Decimal's conversion has no such limit
                return f"\0big{len(digits) - 1}\0"
            if isinstance(x, (list, tuple)):
                return [swap(v) for v in x]
            if isinstance(x, dict):
                return {k: swap(v) for k, v in x.items()}
            return x

        text = json.dumps(swap(value))
        for i, number in enumerate(digits):
            text = text.replace(json.dumps(f"\0big{i}\0"), number)
        return text


def _read_records(path: Path) -> list[tuple[str, Any]]:
    text = read_text(path)
    if path.suffix != ".jsonl":
        try:
            data = _json_loads(text)
            rows = data if isinstance(data, list) else [data]
            return [(f"{path}: record {i}", rec) for i, rec in enumerate(rows)]
        except json.JSONDecodeError as e:
            if not text.lstrip().startswith("{"):
                raise ValueError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None
    records = []  # one object per line
    for line_no, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append((f"{path}: line {line_no}", _json_loads(line)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {line_no}: invalid JSON ({e.msg})") from None
    return records


def _to_task(rec: Any, index: int, where: str, id_prefix: str) -> CodingTask:
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    task_id = rec.get("task_id", rec.get("id"))
    task_id = f"{id_prefix}/{index}" if task_id in (None, "") else str(task_id)

    def bad(field: str, why: str) -> ValueError:
        return ValueError(f"{where} ({task_id}): field {field!r}: {why}")

    q_field = next((f for f in ("question", "problem") if f in rec), "question (or problem)")
    question = rec.get(q_field)
    if not isinstance(question, str) or not question.strip():
        raise bad(q_field, "missing or not a non-empty string")
    starter = rec.get("starter_code") or ""
    if not isinstance(starter, str):
        raise bad("starter_code", "not a string")

    t_field = next((f for f in ("input_output", "tests") if f in rec), "input_output (or tests)")
    tests = rec.get(t_field)
    if isinstance(tests, str):
        try:
            tests = _json_loads(tests)
        except json.JSONDecodeError as e:
            raise bad(t_field, f"invalid JSON ({e.msg})") from None
    if not isinstance(tests, dict):
        raise bad(t_field, 'missing, or not an object {"inputs": [...], "outputs": [...]}')
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise bad(t_field, '"inputs" and "outputs" must be lists')
    if len(inputs) != len(outputs) or not inputs:
        raise bad(t_field, f'needs as many "outputs" as "inputs", at least one ({len(inputs)} vs {len(outputs)})')
    fn_name = tests.get("fn_name") or None
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise bad(t_field, f'"fn_name" is not a Python identifier: {fn_name!r}')

    if fn_name is None:  # stdin/stdout: texts (APPS-style lists of lines are joined)
        try:
            inputs = tuple(_as_text(x) for x in inputs)
            outputs = tuple(_as_text(x) for x in outputs)
        except TypeError as e:
            raise bad(t_field, str(e)) from None
    else:  # call-based: each input is the list of positional arguments
        inputs = tuple(x if isinstance(x, list) else [x] for x in inputs)
        outputs = tuple(outputs)

    solutions = rec.get("solutions")
    if isinstance(solutions, str):
        try:
            solutions = _json_loads(solutions) if solutions.strip() else []
        except json.JSONDecodeError:
            solutions = [solutions]  # a bare program
    if solutions is None:
        solutions = []
    if isinstance(solutions, str):  # a JSON-encoded single program
        solutions = [solutions]
    if not isinstance(solutions, list) or not all(isinstance(s, str) for s in solutions):
        raise bad("solutions", "not a list of strings")

    source = rec.get("source")
    return CodingTask(task_id=task_id, question=question, starter_code=starter, fn_name=fn_name,
                      inputs=inputs, outputs=outputs, solutions=tuple(solutions),
                      source=source if isinstance(source, str) and source else id_prefix)


def _as_text(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, list) and all(isinstance(line, str) for line in x):
        return "\n".join(x) + "\n"
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return str(x)
    raise TypeError(f"a stdin/stdout test must be text, got {type(x).__name__}")


# -----------------------------------------------------------------------------
# Prompting and answer extraction

def build_messages(task: CodingTask) -> list[dict]:
    """Chat messages for one task: the paper's coding system prompt + the question."""
    if task.fn_name is None:
        how = ("Write a complete program that reads the input from standard input and prints the "
               "answer to standard output.")
    else:
        method = "class Solution" in task.starter_code
        target = f"the method `{task.fn_name}` of `class Solution`" if method else f"the function `{task.fn_name}`"
        how = f"Implement {target}; the tests call it with the inputs as arguments and check its return value."
        if task.starter_code.strip():
            how += f" Start from this code:\n```python\n{task.starter_code.rstrip()}\n```"
        how += "\nReturn the answer; do not read from standard input or print it."
    how += "\nAnswer with a single ```python code block that contains the full solution."
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{task.question.strip()}\n\n{how}"}]


# -----------------------------------------------------------------------------
# Comparison (pure; runs on the host)

def stdout_matches(expected: str, actual: str) -> bool:
    """Line-by-line after normalising whitespace; failing that, token by token with a float
    tolerance (so line breaks vs spaces and 0.5 vs 0.500000 do not matter)."""
    if _normalised_lines(expected) == _normalised_lines(actual):
        return True
    exp, act = expected.split(), actual.split()
    return len(exp) == len(act) and all(_token_matches(e, a) for e, a in zip(exp, act))


def _normalised_lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.strip().splitlines()]


def _token_matches(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    if re.fullmatch(r"[+-]?\d+", expected) and re.fullmatch(r"[+-]?\d+", actual):
        return False  # integers must match exactly, however large
    try:
        e, a = float(expected), float(actual)
    except ValueError:
        return False
    return math.isclose(e, a, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)


def value_matches(expected: Any, actual: Any) -> bool:
    """Return-value check: TACO wraps the expected value in a one-element list, so [v] and v both
    count; tuples arrive as lists; floats compare with a tolerance."""
    if _values_equal(expected, actual):
        return True
    return isinstance(expected, list) and len(expected) == 1 and _values_equal(expected[0], actual)


def _values_equal(expected: Any, actual: Any) -> bool:
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(map(_values_equal, expected, actual))
    if isinstance(expected, dict) and isinstance(actual, dict):
        exp = {str(k): v for k, v in expected.items()}
        act = {str(k): v for k, v in actual.items()}
        return exp.keys() == act.keys() and all(_values_equal(exp[k], act[k]) for k in exp)
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers):
        if isinstance(expected, float) or isinstance(actual, float):
            return math.isclose(expected, actual, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
        return expected == actual
    return type(expected) is type(actual) and expected == actual


# -----------------------------------------------------------------------------
# Running the tests

# Runs inside the sandbox as main.py (evaluation/harness/taco_check.py). Reads the job (code, test inputs,
# nonce) from stdin and writes one report line per test, "<nonce> <json>"; it never sees the expected outputs.
_HARNESS = Path(taco_check.__file__).read_text(encoding="utf-8")


Comparison = tuple[Callable[[str, str], bool], Callable[[Any, Any], bool]]
"""How outputs are judged: (expected stdout, printed stdout) -> match, (expected value, returned value) -> match."""
TACO_COMPARISON: Comparison = (stdout_matches, value_matches)


def run_tests(code: str, task: CodingTask, limits: SandboxLimits | None = None, *,
              per_test_seconds: float = PER_TEST_SECONDS, stop_at_first_failure: bool = False,
              compare: Comparison = TACO_COMPARISON) -> TestReport:
    """Run all tests of `task` against `code` in one sandbox process, judged by `compare` (TACO's by default).

    The harness always stops at the first timeout, and at the first runtime error too when
    `stop_at_first_failure`; tests after a stop count as failed."""
    n = len(task.inputs)
    if not code.strip():
        return TestReport(False, 0, n, "no_code", "no code in the completion", 0)
    # Outputs much longer than expected cannot match; cap what comes back to bound memory.
    caps = [2 * len(out if task.fn_name is None else _json_dumps(out)) + 1024 for out in task.outputs]
    if limits is None:
        wall = min(MAX_RUN_SECONDS, 3.0 + per_test_seconds * n)
        limits = SandboxLimits(wall_seconds=wall, cpu_seconds=math.ceil(wall))
    limits = replace(limits, output_bytes=max(limits.output_bytes, 2 * sum(caps) + 256 * n + (1 << 16)))
    nonce = secrets.token_hex(16)
    job = {"nonce": nonce, "code": code, "fn_name": task.fn_name, "method": "class Solution" in task.starter_code,
           "inputs": list(task.inputs), "caps": caps, "seconds": per_test_seconds,
           "stop_at_first_failure": stop_at_first_failure}
    result = run_python(_HARNESS, stdin=_json_dumps(job), limits=limits)
    return _score(task, _parse_reports(result.stdout, nonce), result, compare)


def _parse_reports(stdout: str, nonce: str) -> dict[int, dict]:
    reports = {}
    for line in stdout.splitlines():
        if line.startswith(nonce + " "):
            try:
                report = _json_loads(line[len(nonce) + 1:])
            except ValueError:
                continue
            if isinstance(report, dict) and isinstance(report.get("i"), int):
                reports.setdefault(report["i"], report)  # the first report of a test counts
    return reports


def _score(task: CodingTask, reports: dict[int, dict], result: SandboxResult, compare: Comparison) -> TestReport:
    n = len(task.inputs)
    stdout_match, value_match = compare
    if -1 in reports:  # the code did not even load
        r = reports[-1]
        why = r.get("error") or _last_line(r.get("stderr", ""))
        return TestReport(False, 0, n, r.get("status", "error"), _one_line(f"loading the code: {why}"), 0)
    n_passed, first = 0, None
    for i in range(n):
        r = reports.get(i)
        if r is None:
            status = result.status if result.status not in ("ok", "error") else "error"
            why = result.detail or _last_line(result.stderr) or "the harness stopped before this test"
        elif r.get("status") != "ok":
            status, why = r.get("status", "error"), r.get("error") or _last_line(r.get("stderr", ""))
        elif r.get("truncated"):
            status, why = "wrong_answer", "output far longer than expected"
        elif task.fn_name is None and stdout_match(task.outputs[i], r.get("output", "")):
            n_passed += 1
            continue
        elif task.fn_name is not None and value_match(task.outputs[i], r.get("output")):
            n_passed += 1
            continue
        else:
            status = "wrong_answer"
            why = f"expected {_preview(task.outputs[i])}, got {_preview(r.get('output'))}"
        if first is None:
            first = (i, status, why)
    if first is None:
        return TestReport(True, n, n, "ok", "")
    i, status, why = first
    return TestReport(False, n_passed, n, status, _one_line(f"test {i + 1}/{n}: {status}: {why}"), i)


def _preview(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return "<a very large number>"
    return text if len(text) <= 80 else text[:77] + "..."


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


SANDBOX_CHECK = CodingTask(
    "sandbox-check", "Read two integers and print their sum.", "", None, ("2 3\n", "-4 10\n"), ("5\n", "6\n"),
    ("import json, sys\na, b = map(int, sys.stdin.read().split())\nprint(json.dumps(a + b))",), "sandbox check")
"""A task with a known-correct solution (which imports the stdlib, as model code does) and `SANDBOX_WRONG`."""
SANDBOX_WRONG = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a - b)"


def check_sandbox() -> None:
    """Raise SandboxUnavailable (one line) unless the sandbox scores a known-correct program right and a known-wrong
    one wrong through the harness every code reward goes through. Stages that score code call it before any work:
    a sandbox that cannot run code must stop them, never score correct code 0."""
    right = run_tests(SANDBOX_CHECK.solutions[0], SANDBOX_CHECK)
    if not right.passed:
        raise SandboxUnavailable(f"a known-correct program fails in the sandbox ({isolation_mode()} mode): "
                                 f"{right.detail}")
    if run_tests(SANDBOX_WRONG, SANDBOX_CHECK).passed:
        raise SandboxUnavailable(f"a known-wrong program passes in the sandbox ({isolation_mode()} mode)")


def reward(completion: str, task: CodingTask) -> float:
    """The paper's binary TACO reward: 1.0 iff the extracted code passes every test."""
    return 1.0 if run_tests(extract_code(completion), task, stop_at_first_failure=True).passed else 0.0
