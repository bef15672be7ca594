"""pipelines/evaluate.py: the code benchmarks of one protocol are sampled in one engine call and scored apart, each
to its own protocol's response budget unless `eval.max_new_tokens` sets one."""

import base64
import inspect
import json
import pickle
import zlib
from pathlib import Path

import pytest
from accelerate import PartialState

from lopd.core.config import resolve
from lopd.core.sampling import Completion
from pipelines.evaluate import CodeBenchmark, code_benchmark, evaluate_together, protocol_groups


class _EchoBackend:
    """Answers each prompt with its own last token, so a completion names the prompt it came from; records calls."""

    def __init__(self):
        self.calls, self.stats = [], {"sampled_tokens": 0}

    def generate(self, prompts, params, seed):
        self.calls.append((len(prompts), params.stop, params.max_new_tokens))
        return [Completion([p[-1]], [0.0], p[-1] != 0) for p in prompts]  # the first task's prompt: cut at the budget


class _LastWordTokenizer:
    """A prompt is its task's text as one id; decoding gives the text back."""

    def __init__(self):
        self.words: list[str] = []

    def apply_chat_template(self, messages, **kwargs):
        text = messages[-1]["content"]
        if text not in self.words:
            self.words.append(text)
        return [self.words.index(text)]

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(self.words[i] for i in ids)


def _bench(task_ids, stop, max_new_tokens=768):
    def score(done):
        return {"per_task": {tid: {"kept": texts} for tid, texts in done.items()}, "n_tasks": len(done)}

    return CodeBenchmark({tid: [{"role": "user", "content": f"solve {tid}"}] for tid in task_ids}, True, stop,
                         lambda text: text.upper(), score, "test", max_new_tokens)


def test_benchmarks_of_one_protocol_share_one_call_and_are_scored_apart(monkeypatch):
    import pipelines.evaluate as evaluate

    monkeypatch.setattr(evaluate, "encode_prompt", lambda tokenizer, messages, **kw: tokenizer.apply_chat_template(
        messages))
    he, mbpp, lcb = _bench(["h0", "h1"], ("```",)), _bench(["m0", "m1", "m2"], ("```",)), _bench(["l0"], ())
    groups = protocol_groups({"he": he, "lcb": lcb, "mbpp": mbpp})
    assert groups == [["he", "mbpp"], ["lcb"]]
    assert protocol_groups({"he": he, "mbpp": _bench(["m0"], ("```",), 384)}) == [["he"], ["mbpp"]]
    cfg = resolve({"profile": "smoke", "eval": {"n_samples": 2}})
    backend, tokenizer = _EchoBackend(), _LastWordTokenizer()
    results = evaluate_together(cfg, "m", {"he": he, "mbpp": mbpp}, backend, tokenizer, None, PartialState())
    assert backend.calls == [(10, ("```",), 768)]  # 5 tasks x 2 samples, one call, at the benchmarks' budget
    assert results["he"]["per_task"]["h1"]["completions"] == ["SOLVE H1", "SOLVE H1"]
    assert list(results["mbpp"]["per_task"]) == ["m0", "m1", "m2"]
    assert results["mbpp"]["per_task"]["m2"]["kept"] == ["SOLVE M2", "SOLVE M2"]
    for name, bench in (("he", he), ("mbpp", mbpp)):
        summary = results[name]["summary"]
        assert summary["n_tasks"] == len(bench.messages) and summary["benchmark"] == name
        assert summary["generated_tokens"] == 2 * len(bench.messages)
        assert summary["sampled_together"] == ["he", "mbpp"]
        assert summary["max_new_tokens"] == 768
    assert (results["he"]["summary"]["capped_outputs"], results["mbpp"]["summary"]["capped_outputs"]) == (2, 0)


EVALPLUS_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "evalplus"


@pytest.mark.skipif(not (EVALPLUS_DATA / "HumanEvalPlus-v0.1.10.jsonl.gz").is_file(),
                    reason=f"EvalPlus release files not in {EVALPLUS_DATA}")
def test_each_benchmark_samples_to_its_own_protocols_budget_unless_one_is_set(tmp_path):
    """The cpu profile leaves the budget to each benchmark: EvalPlus' own default (read from evalplus, which
    evalplus.codegen never overrides) and LiveCodeBench's runner's; `eval.max_new_tokens` sets one for all."""
    from evalplus.provider.base import DecoderBase

    from evaluation import livecodebench

    evalplus_default = inspect.signature(DecoderBase.__init__).parameters["max_new_tokens"].default
    release = tmp_path / "test6.jsonl"
    release.write_text(json.dumps({
        "question_title": "T", "question_content": "Print 1.", "platform": "atcoder", "question_id": "abc1_a",
        "contest_id": "c", "contest_date": "2025-03-01T00:00:00", "starter_code": "", "difficulty": "easy",
        "public_test_cases": json.dumps([{"input": "", "output": "1", "testtype": "stdin"}]),
        "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps("[]"))).decode(), "metadata": "{}"}) + "\n")
    for raw, expected in (({}, {"humaneval_plus": evalplus_default, "mbpp_plus": evalplus_default,
                                "lcb_v6": livecodebench.MAX_NEW_TOKENS}),
                          ({"max_new_tokens": 384}, dict.fromkeys(("humaneval_plus", "mbpp_plus", "lcb_v6"), 384))):
        cfg = resolve({"profile": "cpu", "eval": {"task_limit": 1, **raw},
                       "data": {"livecodebench_path": str(release)}})
        assert {name: code_benchmark(cfg, name).max_new_tokens for name in expected} == expected
