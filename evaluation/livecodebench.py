"""LiveCodeBench code generation (the `code_generation_lite` releases): reading the official files, the version
windows, the official prompt and the official output comparison.

A release file is JSONL, one problem per line: `question_title`, `question_content`, `platform` (leetcode,
codeforces, atcoder), `question_id`, `contest_id`, `contest_date` (ISO date-time), `starter_code` (LeetCode-style
problems: a `class Solution` stub; else empty), `difficulty`, `public_test_cases` (a JSON list of {"input",
"output", "testtype": "stdin" | "functional"}), `private_test_cases` (the same list as a JSON string, pickled,
zlib-compressed and base64-encoded) and `metadata` (a JSON object; `func_name` for functional problems).

The private tests are never unpickled: `decode_private_tests` walks the pickle's opcodes (`pickletools.genops`,
which parses and executes nothing) and accepts only a protocol header, framing, memo bookkeeping and one string;
anything else (a global, a call, a container) is refused with a one-line error.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import pickletools
import zlib
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from evaluation.coding.taco import CodingTask, TestReport, run_tests
from evaluation.sandbox import SandboxLimits
from lopd.core.config import repo_relative
from lopd.core.jsonl import read_jsonl_objects

BENCHMARKS = ("lcb_v5", "lcb_v6")
"""The versions, by contest-date window (`data.lcb_v5_window`, `data.lcb_v6_window`)."""
HOW_TO_GET = ("download a code_generation_lite release (test5.jsonl, test6.jsonl, ...; the livecodebench/"
              "code_generation_lite dataset, release_v6) and set data.livecodebench_path to the file or its folder")
TEST_TYPES = ("stdin", "functional")
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_HARMLESS_OPS = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT", "STOP"}
_FIELDS = {"question_title": str, "question_content": str, "platform": str, "question_id": str,
           "contest_date": str, "starter_code": str, "difficulty": str, "public_test_cases": str,
           "private_test_cases": str, "metadata": str}


@dataclass(frozen=True)
class TestCase:
    __test__ = False  # not a pytest test class

    input: str
    output: str
    testtype: str


@dataclass(frozen=True)
class Problem:
    question_id: str
    title: str
    content: str
    platform: str
    contest_date: date
    difficulty: str
    starter_code: str
    func_name: str | None
    """The method a functional (LeetCode-style) problem calls on `Solution()`; None for stdin problems."""
    tests: tuple[TestCase, ...]
    """Public tests first, then private ones: all are scored."""
    n_public: int
    """How many of `tests` are public."""


def decode_private_tests(blob: str, where: str) -> str:
    """The JSON text inside a private-test blob (base64 -> zlib -> a pickle of one string), read opcode by opcode
    without unpickling; ValueError naming `where` for anything else."""
    try:
        raw = zlib.decompress(base64.b64decode(blob, validate=True))
    except (binascii.Error, zlib.error, ValueError) as err:
        raise ValueError(f"{where}: private_test_cases is not base64 of zlib data ({err})") from None
    strings = []
    try:
        for op, arg, _ in pickletools.genops(raw):
            if op.name in _STRING_OPS:
                strings.append(arg)
            elif op.name not in _HARMLESS_OPS:
                raise ValueError(f"{where}: private_test_cases refused: its pickle holds {op.name}, not just a string")
    except (ValueError, EOFError) as err:
        if str(err).startswith(where):
            raise
        raise ValueError(f"{where}: private_test_cases is not a valid pickle ({err})") from None
    if len(strings) != 1:
        raise ValueError(f"{where}: private_test_cases refused: its pickle holds {len(strings)} strings, not one")
    return strings[0]


def _tests(text: str, where: str, what: str) -> list[TestCase]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: {what} is not JSON ({err.msg})") from None
    if not isinstance(items, list):
        raise ValueError(f"{where}: {what} is not a JSON list")
    out = []
    for item in items:
        if not (isinstance(item, dict) and isinstance(item.get("input"), str) and isinstance(item.get("output"), str)
                and item.get("testtype") in TEST_TYPES):
            raise ValueError(f"{where}: {what}: a test is not {{input, output, testtype: stdin|functional}}")
        out.append(TestCase(item["input"], item["output"], item["testtype"]))
    return out


def parse_problem(row: dict[str, Any], where: str) -> Problem:
    """One release line as a Problem; ValueError naming `where` and the field when it does not fit the format."""
    for name, kind in _FIELDS.items():
        if not isinstance(row.get(name), kind):
            raise ValueError(f"{where}: field {name!r} missing or not a string")
    try:
        contest_date = datetime.fromisoformat(row["contest_date"]).date()
    except ValueError:
        raise ValueError(f"{where}: field 'contest_date' is not an ISO date ({row['contest_date']!r})") from None
    try:
        metadata = json.loads(row["metadata"] or "{}")
    except json.JSONDecodeError:
        raise ValueError(f"{where}: field 'metadata' is not JSON") from None
    public = _tests(row["public_test_cases"], where, "public_test_cases")
    tests = [*public, *_tests(decode_private_tests(row["private_test_cases"], where), where, "private_test_cases")]
    kinds = {t.testtype for t in tests}
    if len(kinds) > 1:
        raise ValueError(f"{where}: mixes stdin and functional tests")
    func_name = metadata.get("func_name") if isinstance(metadata, dict) else None
    if kinds == {"functional"} and not isinstance(func_name, str):
        raise ValueError(f"{where}: a functional problem without metadata.func_name")
    return Problem(row["question_id"], row["question_title"], row["question_content"], row["platform"], contest_date,
                   row["difficulty"], row["starter_code"], func_name if kinds == {"functional"} else None,
                   tuple(tests), len(public))


def load_problems(path: str | Path, window: tuple[date, date]) -> list[Problem]:
    """The problems of a release file (or a folder of `test*.jsonl` files, read in name order) whose contest date
    falls in [start, end). FileNotFoundError when nothing is there; ValueError naming file and line when a line
    does not fit the format."""
    path = Path(path)
    files = sorted(path.glob("test*.jsonl")) if path.is_dir() else [path] if path.is_file() else []
    if not files:
        raise FileNotFoundError(f"LiveCodeBench: no release file at {repo_relative(path)} (a code_generation_lite "
                                "test*.jsonl, or a folder of them)")
    start, end = window
    problems = []
    for file in files:
        for number, row in read_jsonl_objects(file):
            problem = parse_problem(row, f"{file}: line {number}")
            if start <= problem.contest_date < end:
                problems.append(problem)
    return problems


SYSTEM_MESSAGE = ("You are an expert Python programmer. You will be given a question (problem specification) and "
                  "will generate a correct Python program that matches the specification and passes all tests.")
STARTER_INSTRUCTION = ("You will use the following starter code to write the solution to the problem and enclose "
                       "your code within delimiters.")
STDIN_INSTRUCTION = ("Read the inputs from stdin solve the problem and write the answer to stdout (do not directly "
                     "test on the sample inputs). Enclose your code within delimiters as follows. Ensure that when "
                     "the python program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.")


def build_messages(problem: Problem) -> list[dict[str, str]]:
    """LiveCodeBench's own chat prompt for instruct models: the question, then the starter code (functional) or the
    stdin/stdout instruction, with the fenced block to fill."""
    if problem.starter_code:
        tail = f"### Format: {STARTER_INSTRUCTION}\n```python\n{problem.starter_code}\n```"
    else:
        tail = f"### Format: {STDIN_INSTRUCTION}\n```python\n# YOUR CODE HERE\n```"
    user = f"### Question:\n{problem.content}\n\n{tail}\n\n### Answer: (use the provided format with backticks)\n\n"
    return [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": user}]


def stdout_matches(expected: str, got: str) -> bool:
    """LiveCodeBench's stdin/stdout comparison: the outputs, stripped, split into lines (each stripped); equal line
    for line, or else, line by line, equal as whitespace-separated tokens read as decimal numbers."""
    want = [line.strip() for line in expected.strip().split("\n")]
    have = [line.strip() for line in got.strip().split("\n")]
    if len(want) != len(have):
        return False
    for a, b in zip(want, have):
        if a == b:
            continue
        try:
            if [Decimal(x) for x in a.split()] != [Decimal(x) for x in b.split()]:
                return False
        except InvalidOperation:
            return False
    return True


def value_matches(expected: Any, got: Any) -> bool:
    """LiveCodeBench's functional comparison: the returned value (tuples as lists, which the sandbox's report
    already does) equals the expected output read as JSON, exactly."""
    return expected == got


COMPARISON = (stdout_matches, value_matches)
PER_TEST_SECONDS = 6.0
"""LiveCodeBench's per-test timeout."""
MAX_NEW_TOKENS = 2000
"""LiveCodeBench's response budget: its runner's default `--max_tokens` (lcb_runner/runner/parser.py)."""


def as_task(problem: Problem) -> CodingTask:
    """A problem as the sandbox harness runs it: stdin tests as program input, functional tests as the call
    `Solution().<func_name>(*args)` with one JSON argument per input line."""
    if problem.func_name is None:
        inputs, outputs = [t.input for t in problem.tests], [t.output for t in problem.tests]
    else:
        inputs = [[json.loads(line) for line in t.input.split("\n")] for t in problem.tests]
        outputs = [json.loads(t.output) for t in problem.tests]
    return CodingTask(problem.question_id, problem.content, problem.starter_code, problem.func_name, tuple(inputs),
                      tuple(outputs), (), f"livecodebench:{problem.platform}")


def run_problem(code: str, problem: Problem, per_test_seconds: float = PER_TEST_SECONDS) -> TestReport:
    """All of a problem's tests (public and private) against `code` in the sandbox, judged as LiveCodeBench does,
    within its time limits: `per_test_seconds` per test and (per_test_seconds + 1) x tests + 5 s for the run."""
    wall = (per_test_seconds + 1) * len(problem.tests) + 5
    limits = SandboxLimits(wall_seconds=wall, cpu_seconds=math.ceil(wall))
    return run_tests(code, as_task(problem), limits, per_test_seconds=per_test_seconds, compare=COMPARISON)


def score(problems: dict[str, Problem], completions: dict[str, list[str]], workers: int = 2) -> dict:
    """Score raw model outputs (`completions[question_id]`: n samples; the code is the last fenced block) as
    `evalplus_bench.score` does: pass@1 in percent with its 95% CI, "plus" on every test (LiveCodeBench's metric),
    "base" on the public tests only, and per task the verdicts and the first failure of each sample. As there, a
    sample that failed only by a time limit is run once more and its second verdict counts (`rechecked`,
    `n_timeout_rechecks`)."""
    from concurrent.futures import ThreadPoolExecutor

    from evaluation.coding.code_blocks import extract_code
    from evaluation.evalplus_bench import rechecked, summarize
    from lopd.core.progress import progress

    jobs = [(qid, i) for qid in problems for i in range(len(completions[qid]))]

    def run(job: tuple[str, int]) -> tuple[TestReport, bool]:
        qid, i = job
        code = extract_code(completions[qid][i])
        return rechecked(lambda: run_problem(code, problems[qid]), lambda report: report.status == "timeout")

    with ThreadPoolExecutor(max_workers=workers) as pool:
        reports = list(progress(pool.map(run, jobs), desc="score livecodebench", total=len(jobs), unit="sample"))
    per_task: dict[str, dict[str, list]] = {qid: {"base": [], "plus": [], "status": [], "rechecked": []}
                                            for qid in problems}
    for (qid, _), (report, again) in zip(jobs, reports):
        n_public = problems[qid].n_public
        per_task[qid]["plus"].append(report.passed)
        per_task[qid]["base"].append(report.first_failed is None or report.first_failed >= n_public)
        per_task[qid]["status"].append("pass" if report.passed else report.detail)
        per_task[qid]["rechecked"].append(again)
    return {**summarize("livecodebench", per_task), "n_timeout_rechecks": sum(again for _, again in reports)}
