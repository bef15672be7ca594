"""The eval_agentic summary (benchmark score and behaviour means, robust to empty benchmarks and failed scoring) and
how it plays the benchmarks: those with one step cap in one batch of episodes."""

import json

import pytest
from accelerate import PartialState

from evaluation.agentic.benchmarks import Benchmark
from evaluation.stats import wilson_interval
from lopd.core.config import resolve
from lopd.core.sampling import Completion, SamplingParams
from lopd.core.trajectory import EpisodeBehaviour, Trajectory, Turn
from pipelines.evaluate_agentic import chunks, episode_record, play, play_groups, summarise


def _episode(reward, calls, steps, scores, ended="step_cap", **extra):
    behaviour = EpisodeBehaviour(ended=ended, steps=steps, tool_calls=calls, invalid_calls=1, repeated_calls=0,
                                 tool_calls_per_step=calls / max(steps, 1), first_step_tokens=7,
                                 reward_per_tool_call=reward / max(calls, 1), scores={"reward": reward, **scores},
                                 **extra)
    return Trajectory("t", [Turn([1, 2], [3], [0.0])], reward=reward, response="1. get() -> {}", stopped=True,
                      behaviour=behaviour)


def test_summary_means_and_extra_scores():
    episodes = [_episode(1.0, 2, 4, {"end_to_end": 1.0, "process": 1.0}, "completed"),
                _episode(0.5, 0, 2, {"end_to_end": 0.0, "process": 0.5})]
    out = summarise(episodes)
    assert out["score"] == 75.0 and out["reward_mean"] == 0.75 and out["n_tasks"] == 2
    # fractional rewards: the bootstrap over the 2 episodes, whose resampled means are 0.5, 0.75 or 1.0
    assert (out["score_ci_low"], out["score_ci_high"]) == (50.0, 100.0)
    assert out["steps"] == 3 and out["tool_calls_mean"] == 1 and out["tool_calls_per_step"] == 0.25
    assert out["reward_per_tool_call"] == (0.5 + 0.5) / 2
    assert out["end_to_end"] == 50.0 and out["process"] == 75.0
    assert out["ended"] == {"completed": 1, "step_cap": 1}


def test_summary_of_pass_fail_rewards_has_the_wilson_interval():
    out = summarise([_episode(1.0, 1, 1, {}), _episode(0.0, 1, 1, {}), _episode(0.0, 1, 1, {})])
    low, high = wilson_interval(1 / 3, 3)  # keeps its coverage where the bootstrap of 0/1 scores would not
    assert (out["score_ci_low"], out["score_ci_high"]) == pytest.approx((100 * low, 100 * high))


def test_summary_of_failed_scoring_counts_zero_not_crash():
    # An episode whose score() raised carries only {"reward": 0, "score_error": 1}, even when it is not the first.
    episodes = [_episode(1.0, 1, 1, {"end_to_end": 1.0}), _episode(0.0, 1, 1, {"score_error": 1.0})]
    out = summarise(episodes)
    assert out["end_to_end"] == 50.0 and "process" not in out


def test_summary_reports_well_formed_and_malformed_call_rates():
    """Shares of all policy steps, pooled: a step counts at most once (a step with two calls is one call step)."""
    episodes = [_episode(1.0, 2, 4, {}), _episode(0.0, 0, 3, {}), _episode(0.0, 5, 3, {}),  # 5 calls in 3 steps
                _episode(0.0, 0, 0, {}, "context")]  # no step fit: counts nothing
    out = summarise(episodes)
    assert out["n_policy_steps"] == 10
    assert out["well_formed_call_rate"] == (2 + 0 + 3) / 10
    assert out["malformed_call_rate"] == (1 + 1 + 1 + 0) / 10  # one invalid call per episode that took a step
    assert summarise([_episode(0.0, 0, 0, {}, "context")])["well_formed_call_rate"] == 0.0


def test_summary_of_no_episodes_is_a_note():
    assert summarise([]) == {"note": "n/a: the benchmark has no tasks", "n_tasks": 0}


def test_episode_record_keeps_the_results_file_layout():
    plain = episode_record(_episode(1.0, 2, 4, {}, "completed"))
    assert json.dumps(plain) == json.dumps({
        "task_id": "t", "reward": 1.0, "stopped": True, "ended": "completed", "steps": 4, "tool_calls": 2,
        "invalid_calls": 1, "repeated_calls": 0, "tool_calls_per_step": 0.5, "first_step_tokens": 7,
        "reward_per_tool_call": 0.5, "scores": {"reward": 1.0}, "response": "1. get() -> {}"})
    failed = episode_record(_episode(0.0, 1, 1, {}, "env_error", score_notes={"why": "x"}, env_error="E: boom"))
    assert list(failed)[-3:] == ["response", "score_notes", "env_error"]
    assert (failed["score_notes"], failed["env_error"]) == ({"why": "x"}, "E: boom")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 32])
def test_chunks_cover_the_items_in_as_few_even_chunks_as_fit(size):
    for n in range(0, 80):
        got = chunks(n, size)
        assert [i for chunk in got for i in chunk] == list(range(n))  # consecutive, each item once, in order
        fewest = (n + size - 1) // size
        assert len(got) == fewest
        lengths = [len(chunk) for chunk in got]
        assert all(0 < length <= size for length in lengths)
        assert not lengths or max(lengths) - min(lengths) <= 1
    assert [len(c) for c in chunks(35, 32)] == [17, 18]


class _TargetEnv:
    """Ends on the first reply; its reward names the episode (so a trajectory can be matched to its environment)."""

    def __init__(self, reward):
        self.reward, self.closed = reward, 0

    def reset(self):
        return [{"role": "user", "content": "Finish."}], []

    def reply(self, text):
        return None

    def score(self):
        return {"reward": self.reward}

    def close(self):
        self.closed += 1


class _RowCounter:
    """Answers every prompt with a short text, recording how many rows each call sampled."""

    def __init__(self, tokenizer):
        self.tokenizer, self.rows = tokenizer, []

    def generate(self, prompts, params, seed):
        self.rows.append(len(prompts))
        ids = self.tokenizer("done", add_special_tokens=False)["input_ids"]
        return [Completion(ids, [0.0] * len(ids), True) for _ in prompts]


def test_benchmarks_with_one_step_cap_are_played_in_one_batch_and_split_back(tokenizer):
    cfg = resolve({"profile": "smoke", "eval": {"batch_size": 6}})
    first = Benchmark("first", [(f"a{i}", _TargetEnv(i / 10)) for i in range(3)], max_steps=2, source="test")
    second = Benchmark("second", [(f"b{i}", _TargetEnv(1 + i / 10)) for i in range(5)], max_steps=2, source="test")
    other_cap = Benchmark("third", [], max_steps=5, source="test")
    assert play_groups({"first": first, "third": other_cap, "second": second}) == [["first", "second"], ["third"]]

    backend = _RowCounter(tokenizer)
    played = play(cfg, [first, second], backend, tokenizer, SamplingParams(max_new_tokens=8),
                  lambda task_id, env: env, PartialState())
    assert backend.rows == [4, 4]  # 8 episodes in two even chunks of at most 6 (apart: 3 and 5)
    assert [(t.task_id, t.reward) for t in played["first"]] == [("a0", 0.0), ("a1", 0.1), ("a2", 0.2)]
    assert [(t.task_id, t.reward) for t in played["second"]] == [(f"b{i}", 1 + i / 10) for i in range(5)]
    assert all(env.closed == 1 for bench in (first, second) for _, env in bench.episodes)
