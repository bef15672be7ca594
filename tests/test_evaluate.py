"""pipelines/evaluate.py: the code benchmarks of one protocol are sampled in one engine call and scored apart."""

from accelerate import PartialState

from lopd.core.config import resolve
from lopd.core.sampling import Completion
from pipelines.evaluate import CodeBenchmark, evaluate_together, protocol_groups


class _EchoBackend:
    """Answers each prompt with its own last token, so a completion names the prompt it came from; records calls."""

    def __init__(self):
        self.calls, self.stats = [], {"sampled_tokens": 0}

    def generate(self, prompts, params, seed):
        self.calls.append((len(prompts), params.stop))
        return [Completion([p[-1]], [0.0], True) for p in prompts]


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


def _bench(task_ids, stop):
    def score(done):
        return {"per_task": {tid: {"kept": texts} for tid, texts in done.items()}, "n_tasks": len(done)}

    return CodeBenchmark({tid: [{"role": "user", "content": f"solve {tid}"}] for tid in task_ids}, True, stop,
                         lambda text: text.upper(), score, "test")


def test_benchmarks_of_one_protocol_share_one_call_and_are_scored_apart(monkeypatch):
    import pipelines.evaluate as evaluate

    monkeypatch.setattr(evaluate, "encode_prompt", lambda tokenizer, messages, **kw: tokenizer.apply_chat_template(
        messages))
    he, mbpp, lcb = _bench(["h0", "h1"], ("```",)), _bench(["m0", "m1", "m2"], ("```",)), _bench(["l0"], ())
    groups = protocol_groups({"he": he, "lcb": lcb, "mbpp": mbpp})
    assert groups == [["he", "mbpp"], ["lcb"]]
    cfg = resolve({"profile": "smoke", "eval": {"n_samples": 2}})
    backend, tokenizer = _EchoBackend(), _LastWordTokenizer()
    results = evaluate_together(cfg, "m", {"he": he, "mbpp": mbpp}, backend, tokenizer, None, PartialState())
    assert backend.calls == [(10, ("```",))]  # 5 tasks x 2 samples, one call
    assert results["he"]["per_task"]["h1"]["completions"] == ["SOLVE H1", "SOLVE H1"]
    assert list(results["mbpp"]["per_task"]) == ["m0", "m1", "m2"]
    assert results["mbpp"]["per_task"]["m2"]["kept"] == ["SOLVE M2", "SOLVE M2"]
    for name, bench in (("he", he), ("mbpp", mbpp)):
        summary = results[name]["summary"]
        assert summary["n_tasks"] == len(bench.messages) and summary["benchmark"] == name
        assert summary["generated_tokens"] == 2 * len(bench.messages)
        assert summary["sampled_together"] == ["he", "mbpp"]
