"""HumanEval+ / MBPP+ scoring with the official evalplus harness inside the project sandbox."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from evaluation import evalplus_bench as eb
from evaluation.stats import wilson_interval

SHARED = Path(os.environ.get("LOPD_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DATA_DIR = SHARED / "evalplus"
needs_data = pytest.mark.skipif(
    not (DATA_DIR / "HumanEvalPlus-v0.1.10.jsonl.gz").is_file()
    or not (DATA_DIR / "MbppPlus-v0.2.0.jsonl.gz").is_file(),
    reason=f"EvalPlus release files not in {DATA_DIR} (set LOPD_SHARED_DATA)",
)


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nIt runs in linear time."


def canonical(problem: dict, benchmark: str) -> str:
    if benchmark == "humaneval_plus":
        return problem["prompt"] + problem["canonical_solution"]
    return problem["canonical_solution"]


def spread(problems: dict, k: int = 5) -> dict:
    """k tasks evenly spaced over the release order, from the second (deterministic; for
    HumanEval+ this avoids HumanEval/32, see test_evalplus_0_3_1_find_zero_bug)."""
    ids = list(problems)
    return {tid: problems[tid] for tid in ids[1 :: len(ids) // k][:k]}


@pytest.fixture(scope="module")
def all_problems():
    return {b: eb.load_problems(b, DATA_DIR) for b in eb.BENCHMARKS}


@pytest.fixture(scope="module")
def gt_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("evalplus-groundtruth")


# ----------------------------------------------------------------------- no data


def test_messages_follow_evalplus_chat_protocol_without_system_prompt():
    problem = {"prompt": '\ndef add(a, b):\n    """Add two numbers."""\n'}
    for bench in eb.BENCHMARKS:
        messages = eb.build_messages(problem, bench)
        assert [m["role"] for m in messages] == ["user"]
        assert messages[0]["content"] == (
            "Please provide a self-contained Python script that solves the following problem "
            "in a markdown code block:\n```\n"
            'def add(a, b):\n    """Add two numbers."""\n```\n'
        )
        prefilled = eb.build_messages(problem, bench, prefill_response=True)
        assert [m["role"] for m in prefilled] == ["user", "assistant"]
        assert prefilled[1]["content"] == eb.RESPONSE_PREFIX + "\n```python\n"
    with pytest.raises(ValueError):
        eb.build_messages(problem, "humaneval")


def test_prefilled_prompt_is_evalplus_chat_prompt_left_open(tokenizer):
    """Rendered with `continue_final`, the prefilled turn is token for token the prompt EvalPlus' HF and vLLM providers
    give a chat model (`make_raw_chat_prompt`): it ends with the opened python fence, no end-of-turn after it."""
    from evalplus.provider.utility import make_raw_chat_prompt

    from lopd.core.rollout import chat_text, encode_prompt

    problem = {"prompt": '\ndef add(a, b):\n    """Add two numbers."""\n'}
    messages = eb.build_messages(problem, "humaneval_plus", prefill_response=True)
    text = chat_text(tokenizer, messages, continue_final=True)
    assert text == make_raw_chat_prompt(problem["prompt"].strip() + "\n", eb.INSTRUCTION_PREFIX, eb.RESPONSE_PREFIX,
                                        tokenizer)
    assert text.endswith("<|im_start|>assistant\n" + eb.RESPONSE_PREFIX + "\n```python\n")
    ids = encode_prompt(tokenizer, messages, continue_final=True)
    assert tokenizer.decode(ids) == text and tokenizer.convert_tokens_to_ids("<|im_end|>") not in ids[-12:]


def test_chat_solution_is_what_evalplus_keeps_of_a_chat_models_output():
    """evalplus' providers cut the output before the earliest of their stop strings and turn tabs into 4 spaces;
    codegen keeps that (no prefix) as the raw solution, which its sanitizer reads."""
    from evalplus.provider.utility import EOS

    assert eb.STOP_STRINGS == (*EOS, "\n```\n")
    generated = "def add(a, b):\n\treturn a + b\n```\n\nThis adds two numbers:\n```python\nprint(add(1, 2))\n```\n"
    assert eb.chat_solution(generated) == "def add(a, b):\n    return a + b"
    assert eb.chat_solution("def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n```\n") == (
        "def add(a, b):\n    return a + b\n")
    assert eb.chat_solution("def add(a, b):\n    return a") == "def add(a, b):\n    return a"  # out of budget
    assert eb.sanitize_completion(eb.chat_solution(generated), "add") == "def add(a, b):\n    return a + b"


@pytest.mark.parametrize("benchmark", eb.BENCHMARKS)
def test_missing_data_gives_one_line_error_and_never_downloads(benchmark, tmp_path, monkeypatch):
    import evalplus.data.utils as du

    downloads = []
    monkeypatch.setattr(du.wget, "download", lambda url, out=None, bar=None: downloads.append(url))
    missing = tmp_path / "nowhere"
    with pytest.raises(eb.EvalPlusDataUnavailable) as err:
        eb.load_problems(benchmark, missing)
    message = str(err.value)
    assert "\n" not in message and str(missing) in message and "data.shared_dir" in message
    assert downloads == []


@pytest.mark.parametrize("benchmark", eb.BENCHMARKS)
def test_a_truncated_release_file_gives_one_line_error(benchmark, tmp_path):
    import gzip

    path = tmp_path / eb._SPECS[benchmark].filename
    whole = gzip.compress(b"".join(b'{"task_id": "T/%d", "prompt": "def f():\\n"}\n' % i for i in range(200)))
    path.write_bytes(whole[:len(whole) // 2])  # an interrupted copy
    with pytest.raises(eb.EvalPlusDataUnavailable) as err:
        eb.load_problems(benchmark, tmp_path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{benchmark}: {path} is unreadable (EOFError: ")


def test_pass_at_1_is_mean_of_per_task_fractions():
    per_task = {
        "T/0": {"base": [True, False], "plus": [False, False], "status": ["plus:fail", "base:fail"]},
        "T/1": {"base": [True, True, True], "plus": [True, False, True], "status": ["pass", "plus:fail", "pass"]},
        "T/2": {"base": [False, False], "plus": [False, False], "status": ["base:fail"] * 2},
    }
    out = eb.summarize("mbpp_plus", per_task)
    assert out["n_tasks"] == 3 and out["n_samples_per_task"] == 2
    assert out["pass@1_base"] == pytest.approx((1 / 2 + 3 / 3 + 0) / 3 * 100)
    assert out["pass@1_plus"] == pytest.approx((0 + 2 / 3 + 0) / 3 * 100)
    low, high = wilson_interval(out["pass@1_plus"] / 100, 3)  # 95% CI over the 3 tasks, in percent
    assert (out["pass@1_plus_ci_low"], out["pass@1_plus_ci_high"]) == pytest.approx((100 * low, 100 * high))


def test_a_timeout_is_checked_once_more_and_the_second_verdict_counts():
    """Only a verdict that failed by a time limit is checked again, once, whatever the second says."""
    for verdicts, timed_out, expected in ((["timeout", "pass"], True, ("pass", True)),
                                          (["timeout", "timeout", "pass"], True, ("timeout", True)),
                                          (["fail", "pass"], False, ("fail", False)),
                                          (["pass", "pass"], False, ("pass", False))):
        runs = iter(verdicts)
        calls = []
        got = eb.rechecked(lambda: calls.append(1) or next(runs), lambda v: v == "timeout")
        assert got == expected and len(calls) == (2 if timed_out else 1)


def test_response_budget_is_evalplus_own_default():
    """EvalPlus' providers sample at most `max_new_tokens` (their default; evalplus.codegen never passes another)."""
    import inspect

    from evalplus.codegen import run_codegen
    from evalplus.provider import make_model
    from evalplus.provider.base import DecoderBase

    assert "max_new_tokens" not in inspect.signature(run_codegen).parameters
    assert "max_new_tokens" not in inspect.signature(make_model).parameters
    assert eb.MAX_NEW_TOKENS == inspect.signature(DecoderBase.__init__).parameters["max_new_tokens"].default


def test_fast_sanitizer_matches_evalplus_sanitize():
    from evalplus.sanitize import sanitize

    text = "\n".join(
        ["Let me think about the problem first.", "We need a helper.", ""]
        + ["```python", "def helper(x):", "    return x * 2", "```", "Now the main part:", "```python", "import math"]
        + [f"C{i} = {i}" for i in range(20)]
        + ["def solve(x):", "    return helper(x) + math.floor(C3)", "", "print(solve(3))", "```"]
        + [f"Step {i}: check the edge case." for i in range(25)]
    )
    assert len(text.split("\n")) > 40  # exercises the segment-wise path
    for entry in ("solve", "helper", "missing"):
        assert eb.sanitize_completion(text, entry) == sanitize(text, entry)
    assert eb.sanitize_completion("no code at all", "f") == sanitize("no code at all", "f")


def test_sanitizer_stays_fast_on_degenerate_long_outputs():
    code = "def solve(x):\n    return x + 1"
    text = "\n".join(f"I will now repeat myself, take {i}." for i in range(1500)) + f"\n```python\n{code}\n```\n"
    started = time.monotonic()
    assert eb.sanitize_completion(text, "solve") == code
    assert time.monotonic() - started < 30  # evalplus' own sanitize: minutes on this text


def test_score_rejects_completions_that_do_not_match_the_tasks():
    problems = {"HumanEval/0": {}, "HumanEval/1": {}}
    with pytest.raises(ValueError, match="missing"):
        eb.score("humaneval_plus", problems, {"HumanEval/0": ["x"]})
    with pytest.raises(ValueError, match="unknown"):
        eb.score("humaneval_plus", problems, {"HumanEval/0": ["x"], "HumanEval/1": ["y"], "HumanEval/9": ["z"]})


# -------------------------------------------------------------------- with data


@needs_data
def test_load_problems_limit_takes_the_first_task_ids(all_problems):
    assert len(all_problems["humaneval_plus"]) == 164
    assert len(all_problems["mbpp_plus"]) == 378
    for bench in eb.BENCHMARKS:
        head = eb.load_problems(bench, DATA_DIR, limit=3)
        assert list(head) == list(all_problems[bench])[:3]
    assert list(eb.load_problems("humaneval_plus", DATA_DIR, limit=2)) == ["HumanEval/0", "HumanEval/1"]
    mbpp = all_problems["mbpp_plus"]["Mbpp/2"]  # evalplus deserialises MBPP+ inputs (tuples)
    assert isinstance(mbpp["base_input"][0][0], tuple)


@needs_data
@pytest.mark.parametrize("benchmark", eb.BENCHMARKS)
def test_canonical_solutions_score_100(benchmark, all_problems, gt_cache):
    problems = spread(all_problems[benchmark])
    completions = {tid: [fenced(canonical(p, benchmark))] for tid, p in problems.items()}
    out = eb.score(benchmark, problems, completions, data_dir=DATA_DIR, cache_dir=gt_cache)
    statuses = {tid: v["status"] for tid, v in out["per_task"].items()}
    assert statuses == {tid: ["pass"] for tid in problems}
    assert out["pass@1_base"] == 100.0 and out["pass@1_plus"] == 100.0
    assert out["benchmark"] == benchmark and out["n_tasks"] == 5 and out["n_samples_per_task"] == 1


@needs_data
def test_wrong_and_hostile_solutions_score_zero(all_problems, gt_cache, tmp_path):
    problem = all_problems["humaneval_plus"]["HumanEval/0"]
    entry = problem["entry_point"]
    canary = tmp_path / "escaped"
    header = f"def {entry}(numbers, threshold):\n"
    bad = {
        "none": header + "    return None\n",
        "syntax": header + "    return (numbers\n",
        "loop": header + "    while True:\n        pass\n    return True\n",
        "hostile": "import os\n" + header + f"    os.system('touch {canary}')\n"
        f"    open('{canary}', 'w').write('x')\n    return True\n",
        "exit": "import os\n" + header + "    os._exit(0)\n    return True\n",
        "spoof": "import os\n" + header
        + "    os.write(1, b'\\n@@LOPD-EVALPLUS-VERDICT {\"ok\": true, \"base\": \"pass\", \"plus\": \"pass\"}\\n')\n"
        "    return True\n",
        "prose": "I cannot solve this problem.",
    }
    completions = {"HumanEval/0": [fenced(code) for code in bad.values()]}
    out = eb.score("humaneval_plus", {"HumanEval/0": problem}, completions, data_dir=DATA_DIR, cache_dir=gt_cache)
    verdict = out["per_task"]["HumanEval/0"]
    assert verdict["base"] == [False] * len(bad) and verdict["plus"] == [False] * len(bad)
    assert all(s != "pass" for s in verdict["status"]), verdict["status"]
    # the loop overruns its per-test time limit, and evalplus calls a child that died without a verdict a timeout
    assert verdict["rechecked"] == [name in ("loop", "exit") for name in bad] and out["n_timeout_rechecks"] == 2
    assert out["pass@1_base"] == 0.0 and out["pass@1_plus"] == 0.0
    assert not canary.exists()


@needs_data
def test_a_timed_out_check_is_run_once_more(all_problems, gt_cache):
    """Code that hangs while loading outlives evalplus' stage limit: a timeout, checked twice, still a fail."""
    problem = all_problems["humaneval_plus"]["HumanEval/34"]  # one base test: a 2 s stage limit
    hang = "FOREVER = sum(1 for _ in iter(int, 1))\n\ndef unique(l: list):\n    return sorted(set(l)) + [FOREVER]\n"
    out = eb.score("humaneval_plus", {"HumanEval/34": problem}, {"HumanEval/34": [fenced(hang)]}, data_dir=DATA_DIR,
                   cache_dir=gt_cache)
    verdict = out["per_task"]["HumanEval/34"]
    assert (verdict["status"], verdict["rechecked"], out["n_timeout_rechecks"]) == (["base:timeout"], [True], 1)
    assert out["pass@1_base"] == 0.0


@needs_data
def test_a_sample_that_timed_out_once_passes_on_its_recheck(all_problems, gt_cache, monkeypatch):
    """A correct solution whose first check times out (as on a loaded machine) is checked again and counts as a
    pass; a wrong one is checked once."""
    real, calls = eb._run_sample, []
    problem = all_problems["humaneval_plus"]["HumanEval/0"]
    right = fenced(canonical(problem, "humaneval_plus"))
    wrong = fenced("def has_close_elements(numbers, threshold):\n    return None\n")

    def first_check_of_right_times_out(run, completion):
        calls.append(completion)
        if completion == right and calls.count(right) == 1:
            return False, False, "base:timeout"
        return real(run, completion)

    monkeypatch.setattr(eb, "_run_sample", first_check_of_right_times_out)
    out = eb.score("humaneval_plus", {"HumanEval/0": problem}, {"HumanEval/0": [right, wrong]}, data_dir=DATA_DIR,
                   cache_dir=gt_cache)
    verdict = out["per_task"]["HumanEval/0"]
    assert (verdict["status"], verdict["rechecked"], out["n_timeout_rechecks"]) == (["pass", "base:fail"],
                                                                                     [True, False], 1)
    assert out["pass@1_plus"] == 50.0 and (calls.count(right), calls.count(wrong)) == (2, 1)


@needs_data
def test_plus_needs_base_and_extra_tests(all_problems, gt_cache):
    """A lookup table of the base tests passes base, fails plus: the EvalPlus+ gap."""
    problem = all_problems["mbpp_plus"]["Mbpp/2"]
    scope: dict = {}
    exec(problem["canonical_solution"], scope)
    fn = scope[problem["entry_point"]]
    table = {repr(tuple(args)): fn(*args) for args in problem["base_input"]}
    memorised = f"TABLE = {table!r}\n\ndef {problem['entry_point']}(*args):\n    return TABLE.get(repr(args))\n"
    completions = {"Mbpp/2": [fenced(memorised), fenced(canonical(problem, "mbpp_plus"))]}
    out = eb.score("mbpp_plus", {"Mbpp/2": problem}, completions, data_dir=DATA_DIR, cache_dir=gt_cache)
    verdict = out["per_task"]["Mbpp/2"]
    assert verdict["base"] == [True, True] and verdict["plus"] == [False, True]
    assert verdict["status"] == ["plus:fail", "pass"]
    assert out["pass@1_base"] == 100.0 and out["pass@1_plus"] == 50.0


@needs_data
def test_evalplus_0_3_1_find_zero_bug(all_problems, gt_cache):
    """evalplus 0.3.1's find_zero oracle (HumanEval/32) `continue`s before recording the
    passed test, so every solution, the canonical one included, is judged `fail`; later
    upstream versions record it. Kept as-is (official 0.3.1 behaviour): HumanEval+ tops out
    at 163/164. If this test fails, evalplus changed and the ceiling is 100% again."""
    problem = all_problems["humaneval_plus"]["HumanEval/32"]
    completions = {"HumanEval/32": [fenced(canonical(problem, "humaneval_plus"))]}
    out = eb.score("humaneval_plus", {"HumanEval/32": problem}, completions, data_dir=DATA_DIR, cache_dir=gt_cache)
    assert out["per_task"]["HumanEval/32"]["status"] == ["base:fail"]


def test_the_harness_unpickles_plain_data_and_refuses_code():
    import collections
    import pickle

    from evaluation.harness.evalplus_check import loads

    data = {"base": [[1, 2.5, complex(1, -2)], collections.Counter("abca")], "plus": ({1, 2}, frozenset("x"), None)}
    for protocol in (3, pickle.HIGHEST_PROTOCOL):  # Python 3 protocols: what evalplus and the host write
        assert loads(pickle.dumps(data, protocol=protocol)) == data

    class Exploit:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with pytest.raises(pickle.UnpicklingError, match="refused posix.system"):
        loads(pickle.dumps(Exploit()))


@needs_data
def test_a_harness_that_cannot_run_in_the_sandbox_stops_the_scoring(all_problems, gt_cache, monkeypatch):
    """Every sample failed with `sandbox:error` when the harness itself could not run: now its check of a
    canonical solution raises before any sample is scored."""
    from evaluation.sandbox import SandboxUnavailable

    problem = all_problems["humaneval_plus"]["HumanEval/0"]
    monkeypatch.setattr(eb, "_HARNESS", "raise ImportError('No module named evalplus')")
    with pytest.raises(SandboxUnavailable, match="canonical solution of HumanEval/0 scores sandbox:error"):
        eb.score("humaneval_plus", {"HumanEval/0": problem}, {"HumanEval/0": [fenced(canonical(problem,
                 "humaneval_plus"))]}, data_dir=DATA_DIR, cache_dir=gt_cache)


@needs_data
def test_a_test_that_overran_its_time_limit_is_a_timeout_and_checked_once_more(all_problems, gt_cache):
    """evalplus (fast_check) reports a test past its per-test limit as a plain fail, so a sample that a loaded machine
    slowed was never re-checked: the harness now flags the overrun as a timeout."""
    problem = all_problems["humaneval_plus"]["HumanEval/0"]
    slow = ("import time\n\ndef has_close_elements(numbers, threshold):\n    time.sleep(3)\n"
            "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n")
    out = eb.score("humaneval_plus", {"HumanEval/0": problem}, {"HumanEval/0": [fenced(slow)]}, data_dir=DATA_DIR,
                   cache_dir=gt_cache)
    verdict = out["per_task"]["HumanEval/0"]
    assert (verdict["status"], verdict["rechecked"], out["n_timeout_rechecks"]) == (["base:timeout"], [True], 1)
