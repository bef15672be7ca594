"""Checks for the built-in coding training set (evaluation/coding/data/builtin_taco.jsonl).

(a) structure: record count, unique stable task ids, required TACO fields, difficulty/format mix;
(b) every reference solution passes all of its tests through the project's sandboxed runner;
(c) no statement duplicates a HumanEval+ / MBPP+ prompt (shared data read via LOPD_SHARED_DATA).
"""
from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from itertools import combinations
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "evaluation" / "coding" / "data" / "builtin_taco.jsonl"
SHARED = Path(os.environ.get("LOPD_SHARED_DATA", str(ROOT / ".." / "shared" / "data")))
EVALPLUS_FILES = ("HumanEvalPlus-v0.1.10.jsonl.gz", "MbppPlus-v0.2.0.jsonl.gz")

REQUIRED = {
    "task_id": str,
    "question": str,
    "starter_code": str,
    "input_output": str,
    "solutions": str,
    "difficulty": str,
    "source": str,
    "tags": list,
}
DIFFICULTIES = {"VERY_EASY", "EASY", "MEDIUM"}
MIN_RECORDS = 150
MIN_TESTS = 4


@lru_cache(maxsize=None)
def _records() -> tuple[dict, ...]:
    with DATA.open(encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def _io(rec: dict) -> dict:
    return json.loads(rec["input_output"])


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _ngrams(text: str, n: int = 5) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if (a or b) else 0.0


# ---------------------------------------------------------------- (a) structure

def test_record_count_and_fields():
    recs = _records()
    assert len(recs) >= MIN_RECORDS
    for r in recs:
        for key, typ in REQUIRED.items():
            assert key in r, f"{r.get('task_id')}: missing {key}"
            assert isinstance(r[key], typ), f"{r['task_id']}: {key} should be {typ.__name__}"
        assert r["difficulty"] in DIFFICULTIES, r["task_id"]
        assert r["source"] == "lopd-suite builtin", r["task_id"]
        assert r["tags"] and all(isinstance(t, str) and t for t in r["tags"]), r["task_id"]
        assert 0 < len(r["question"]) <= 1000, r["task_id"]
        assert "Example" in r["question"], r["task_id"]


def test_task_ids_unique_and_stable():
    ids = [r["task_id"] for r in _records()]
    assert len(ids) == len(set(ids))
    assert ids == [f"builtin/{i:03d}" for i in range(len(ids))]


def test_difficulty_and_format_mix():
    recs = _records()
    n = len(recs)
    diff = Counter(r["difficulty"] for r in recs)
    assert 0.30 <= diff["VERY_EASY"] / n <= 0.50, diff
    assert 0.30 <= diff["EASY"] / n <= 0.50, diff
    assert 0.12 <= diff["MEDIUM"] / n <= 0.30, diff
    n_call = sum(1 for r in recs if "fn_name" in _io(r))
    assert 0.20 <= n_call / n <= 0.40, (n_call, n)


def test_io_and_solutions_well_formed():
    fn_names = []
    for r in _records():
        tid = r["task_id"]
        io = _io(r)
        ins, outs = io["inputs"], io["outputs"]
        assert len(ins) == len(outs) >= MIN_TESTS, tid
        assert len({json.dumps(x) for x in ins}) == len(ins), f"{tid}: duplicate test inputs"
        sols = json.loads(r["solutions"])
        assert isinstance(sols, list) and len(sols) >= 1 and all(isinstance(s, str) for s in sols), tid
        compile(sols[0], tid, "exec")
        if "fn_name" in io:  # call-based: inputs are lists of positional args, outputs plain values
            fn = io["fn_name"]
            fn_names.append(fn)
            assert r["starter_code"].startswith(f"def {fn}("), tid
            assert all(isinstance(x, list) for x in ins), tid
            assert f"def {fn}(" in sols[0], tid
        else:  # stdin/stdout: full texts, newline-terminated
            assert r["starter_code"] == "", tid
            assert all(isinstance(x, str) and x.endswith("\n") for x in ins), tid
            assert all(isinstance(x, str) and x.endswith("\n") for x in outs), tid
    assert len(fn_names) == len(set(fn_names)), "duplicate fn_name"


def test_no_near_duplicates_within_set():
    grams = [(r["task_id"], _ngrams(r["question"])) for r in _records()]
    worst = max(((_jaccard(a, b), x, y) for (x, a), (y, b) in combinations(grams, 2)), default=(0.0,))
    assert worst[0] < 0.5, worst


# ---------------------------------------------------------------- (b) reference solutions

def test_reference_solutions_pass_sandboxed_runner():
    from evaluation.coding.taco import load_builtin_tasks, run_tests

    tasks = load_builtin_tasks()
    assert [t.task_id for t in tasks] == [r["task_id"] for r in _records()]

    def check(task):
        report = run_tests(task.solutions[0], task)
        return task, report

    failures = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for task, rep in pool.map(check, tasks):
            assert rep.n_total == len(task.inputs), task.task_id
            if not rep.passed or rep.n_passed != rep.n_total:
                failures.append(f"{task.task_id}: {rep.n_passed}/{rep.n_total} {rep.status} {str(rep.detail)[:300]}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- (c) contamination vs HumanEval+/MBPP+

def _evalplus_prompts() -> list[dict]:
    missing = [f for f in EVALPLUS_FILES if not (SHARED / "evalplus" / f).is_file()]
    if missing:
        pytest.skip(f"EvalPlus data not found under {SHARED / 'evalplus'} (missing {', '.join(missing)}); "
                    "set LOPD_SHARED_DATA to the shared data directory to run the contamination check")
    rows = []
    for f in EVALPLUS_FILES:
        with gzip.open(SHARED / "evalplus" / f, "rt", encoding="utf-8") as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


def test_no_overlap_with_humaneval_mbpp():
    ref = _evalplus_prompts()
    entry_points = {row["entry_point"] for row in ref}
    ref_grams = [(row["task_id"], _ngrams(row["prompt"])) for row in ref]
    problems = []
    for r in _records():
        fn = _io(r).get("fn_name")
        if fn is not None and fn in entry_points:
            problems.append(f"{r['task_id']}: fn_name {fn!r} is an EvalPlus entry_point")
        g = _ngrams(r["question"])
        score, ref_id = max((_jaccard(g, h), tid) for tid, h in ref_grams)
        if score >= 0.2:
            problems.append(f"{r['task_id']}: word 5-gram Jaccard {score:.2f} with {ref_id}")
    assert not problems, "\n".join(problems)
