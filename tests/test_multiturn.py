"""The multi-turn driver: tool-call parsing, token-in/token-out episodes, action masks, error observations,
episode ends, and a fuzz test over generated model outputs."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baselines.grpo import GRPO
from lopd.config import resolve
from lopd.loop import train
from lopd.multiturn import (TASK_COMPLETED, multi_turn, observation_lite, parse_step, run_episodes)
from lopd.rollout import Task, encode_prompt, make_backend
from lopd.sampling import Completion, SamplingParams
from lopd.trajectory import collate

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add n to the counter.",
                                           "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                          "required": ["n"]}}},
         {"type": "function", "function": {"name": "get", "description": "Read the counter.",
                                           "parameters": {"type": "object", "properties": {}}}}]


class CounterEnv:
    """Reach a target count; reward is 1 when the counter equals it. `add` validates its argument."""

    def __init__(self, target=3):
        self.target, self.count, self.closed, self.replies = target, 0, False, 0

    def reset(self):
        return ([{"role": "system", "content": "You are an agent."},
                 {"role": "user", "content": f"Make the counter {self.target}."}], TOOLS)

    def call_tool(self, name, arguments):
        if name == "get":
            return json.dumps({"count": self.count})
        if name == "boom":
            raise RuntimeError("a bug in the environment")
        if name != "add":
            return f"Error: unknown tool {name!r}"
        if not isinstance(arguments.get("n"), int) or isinstance(arguments.get("n"), bool):
            return "Error: n must be an integer"
        self.count += arguments["n"]
        return json.dumps({"count": self.count})

    def reply(self, text):
        self.replies += 1
        return None if TASK_COMPLETED in text else [{"role": "user", "content": "Use a tool."}]

    def score(self):
        return {"reward": float(self.count == self.target)}

    def close(self):
        assert not self.closed
        self.closed = True


class ScriptedBackend:
    """Returns scripted texts in order (one list per episode), recording every prompt it was given."""

    def __init__(self, tokenizer, scripts, stop=True):
        self.tokenizer, self.scripts, self.stop = tokenizer, [list(s) for s in scripts], stop
        self.prompts = []
        self.stats = {"prefill_s": 0.0, "decode_s": 0.0}

    def generate(self, prompts, params, seed):
        self.prompts.append([list(p) for p in prompts])
        out = []
        for _ in prompts:
            script = next(s for s in self.scripts if s is not None)
            text = script.pop(0)
            if not script:
                self.scripts[self.scripts.index(script)] = None
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:params.max_new_tokens]
            if self.stop:
                ids = ids + [self.tokenizer.eos_token_id]
            out.append(Completion(ids, [-0.5] * len(ids), self.stop))
        return out


PARAMS = SamplingParams(max_new_tokens=64)


def _call(name, **arguments):
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_parse_step_reads_json_calls_and_reports_malformed_ones():
    step = parse_step(f'thinking... {_call("add", n=2)} and {_call("get")}')
    assert [(c.name, c.arguments) for c in step.calls] == [("add", {"n": 2}), ("get", {})]
    assert parse_step("no call here").has_call_block is False
    assert parse_step('<tool_call>{"name": "add", "arguments": "{\\"n\\": 1}"}</tool_call>').calls[0].arguments == {"n": 1}
    for bad in ('<tool_call>{"name": "add", "arguments": [1]}</tool_call>', "<tool_call>add(n=1)</tool_call>",
                '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>["add"]</tool_call>',
                '<tool_call>{"name": "add", "arguments": {"n": 1}', "<tool_call>" + "[" * 5000 + "</tool_call>"):
        step = parse_step(bad)
        assert step.calls == [] and len(step.errors) == 1, bad
    assert parse_step('<tool_call>{"name": "__import__(\'os\').system(\'x\')", "arguments": {}}</tool_call>'
                      ).calls[0].name == "__import__('os').system('x')"  # a name is a string, never code


def test_episode_is_token_in_token_out_with_masked_environment_tokens(tokenizer):
    env = CounterEnv()
    script = [_call("add", n=2), _call("add", n=1), "All done. " + TASK_COMPLETED]
    backend = ScriptedBackend(tokenizer, [script])
    (traj,) = run_episodes(backend, tokenizer, [("t0", 0, env)], PARAMS, seed=0, max_steps=10,
                           max_context_tokens=10_000)
    assert traj.reward == 1.0 and env.closed and traj.metadata["ended"] == "completed"
    assert traj.metadata["steps"] == 3 and traj.metadata["tool_calls"] == 2
    # every prompt the sampler saw is exactly the trajectory's tokens up to that turn
    for t, (prompt,) in enumerate(backend.prompts):
        prefix = [i for turn in traj.turns[:t] for i in (*turn.context_ids, *turn.action_ids)]
        assert prompt == prefix + traj.turns[t].context_ids
    messages, tools = CounterEnv().reset()
    assert traj.turns[0].context_ids == encode_prompt(tokenizer, messages, tools)
    # the environment's tokens are the chat template's rendering of the tool message
    tool_text = tokenizer.decode(traj.turns[1].context_ids)
    assert tool_text == '\n<|im_start|>tool\n{"count": 2}<|im_end|>\n<|im_start|>assistant\n'
    # the action mask covers exactly the sampled tokens
    batch = collate([traj], tokenizer.pad_token_id)
    sampled = [i for turn in traj.turns for i in turn.action_ids]
    assert batch.target_ids_B_T[0][batch.action_mask_B_T[0] > 0].tolist() == sampled
    assert traj.metadata["response"].splitlines() == ['1. add(n=2) -> {"count": 2}', '2. add(n=1) -> {"count": 3}']


def test_errors_become_observations_and_episodes_end_on_caps(tokenizer):
    script = ["<tool_call>not json</tool_call>", _call("nope"), _call("add", n="two"), _call("boom"),
              _call("add", n=1) + _call("add", n=1), "just talking", _call("get")]
    backend = ScriptedBackend(tokenizer, [script])
    env = CounterEnv()
    (traj,) = run_episodes(backend, tokenizer, [("t0", 0, env)], PARAMS, 0, max_steps=7, max_context_tokens=10_000)
    observations = [tokenizer.decode(turn.context_ids) for turn in traj.turns[1:]]
    assert "not valid JSON" in observations[0] and "unknown tool" in observations[1]
    assert "must be an integer" in observations[2] and "RuntimeError" in observations[3]
    assert "Only the first of 2 tool calls" in observations[4] and "Use a tool." in observations[5]
    assert env.count == 1 and traj.metadata["ended"] == "step_cap" and traj.reward == 0.0
    assert traj.metadata["invalid_calls"] == 1 and traj.metadata["tool_calls"] == 6

    long_script = [_call("get")] * 50
    (short,) = run_episodes(ScriptedBackend(tokenizer, [long_script]), tokenizer, [("t", 0, CounterEnv())], PARAMS, 0,
                            max_steps=50, max_context_tokens=400)
    assert short.metadata["ended"] == "context" and len(short.token_ids) + PARAMS.max_new_tokens <= 400 + 64
    assert short.metadata["repeated_calls"] == short.metadata["steps"] - 1


def test_truncated_step_gets_an_end_of_turn_token(tokenizer):
    backend = ScriptedBackend(tokenizer, [[_call("get"), TASK_COMPLETED]], stop=False)
    (traj,) = run_episodes(backend, tokenizer, [("t", 0, CounterEnv())], PARAMS, 0, 5, 10_000)
    assert traj.turns[1].context_ids[0] == tokenizer.eos_token_id and traj.metadata["stopped"] is False


def test_real_model_episodes_are_batched_and_train_with_grpo(tiny_model_dir, tokenizer, tmp_path):
    cfg = resolve({"profile": "smoke", "train": {"steps": 1, "rollouts_per_step": 4}})
    backend = make_backend(tiny_model_dir, tokenizer, cfg, batch_size=8)
    calls = []
    original = backend.generate
    backend.generate = lambda prompts, params, seed: calls.append(len(prompts)) or original(prompts, params, seed)
    trajs = run_episodes(backend, tokenizer, [(f"t{i}", i, CounterEnv()) for i in range(4)], PARAMS, 0, 3, 4096)
    assert calls[0] == 4 and len(calls) <= 3  # every active episode of a step in one call
    assert all(len(t.turns) == t.metadata["steps"] for t in trajs)
    tasks = [Task(f"t{i}", CounterEnv().reset()[0], tuple(TOOLS)) for i in range(2)]
    result = train(cfg, GRPO(cfg.grpo), tasks, multi_turn(lambda task: CounterEnv(), 2, 4096, 16), tiny_model_dir,
                   tmp_path / "grpo")
    (step,) = result["history"]
    assert {"steps", "tool_calls_per_step", "first_step_tokens", "repeated_calls"} <= set(step)
    assert step["steps"] <= 2


def test_observation_lite_cuts_long_results():
    from lopd.multiturn import ToolCall
    text = observation_lite([(ToolCall("find", {"q": "x y"}), "a\n b " * 100)], observation_chars=10)
    assert text == '1. find(q="x y") -> a b a b a ...'


FRAGMENTS = st.sampled_from(["<tool_call>", "</tool_call>", "{", "}", '"name"', '"arguments"', ":", ",", '"add"',
                             '"get"', '"boom"', '"n"', "1", "-7", "1e999", "null", "[", "]", TASK_COMPLETED, " ",
                             "\n", "\\u0000", "<|im_end|>", "<|im_start|>tool"])
JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=6)
CALLS = st.builds(lambda name, args: f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>',
                  st.sampled_from(["add", "get", "boom", "", "x" * 300]), JSONS)
OUTPUTS = st.one_of(st.text(max_size=60), st.lists(FRAGMENTS, max_size=20).map("".join), CALLS)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(OUTPUTS, min_size=3, max_size=3))
def test_fuzz_rollouts_never_crash(tokenizer, outputs):
    """400 examples x 3 generated outputs = 1,200 model outputs through parsing, the environment and the
    template: every episode ends with a reward in [0, 1] and a consistent action mask."""
    env = CounterEnv()
    (traj,) = run_episodes(ScriptedBackend(tokenizer, [outputs]), tokenizer, [("t", 0, env)], PARAMS, 0, 3, 10_000)
    assert 0.0 <= traj.reward <= 1.0 and env.closed
    assert sum(traj.action_mask) == traj.num_action_tokens == sum(len(t.action_ids) for t in traj.turns)
