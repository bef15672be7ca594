"""The multi-turn driver: tool-call parsing, token-in/token-out episodes, action masks, error observations,
episode ends, and a fuzz test over generated model outputs."""

import itertools
import json
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baselines import opsd, sdft, skill_sd
from baselines.grpo import GRPO
from baselines.pool import BASE_MODEL_ROLLOUT, POOL_FILE, Demonstration, write_pool
from lopd.core import multiturn
from lopd.core.config import PROFILES_NAMES, ConfigError, resolve
from lopd.core.domain import Domain, SandboxUnavailable
from lopd.core.loop import train
from lopd.core.models import load_tokenizer
from lopd.core.multiturn import (
    TASK_COMPLETED,
    ParsedStep,
    continuation_ids,
    end_of_turn_id,
    multi_turn,
    observation_lite,
    parse_step,
    run_episodes,
)
from lopd.core.rollout import Task, encode_prompt, make_backend
from lopd.core.sampling import Completion, SamplingParams
from lopd.core.trajectory import BEHAVIOUR_KEYS, Turn, collate, with_prompt
from lopd.latent.retrieval import QUERIES_FILE, TextEmbedder, save_vectors

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

    def __init__(self, tokenizer, scripts, stop=True, stop_id=None):
        self.tokenizer, self.scripts, self.stop = tokenizer, [list(s) for s in scripts], stop
        self.stop_id = tokenizer.eos_token_id if stop_id is None else stop_id
        self.prompts, self.seeds = [], []
        self.stats = {"prefill_s": 0.0, "decode_s": 0.0}

    def generate(self, prompts, params, seed):
        self.prompts.append([list(p) for p in prompts])
        self.seeds.append(seed)
        out = []
        for _ in prompts:
            script = next(s for s in self.scripts if s is not None)
            text = script.pop(0)
            if not script:
                self.scripts[self.scripts.index(script)] = None
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:params.max_new_tokens]
            if self.stop:
                ids = ids + [self.stop_id]
            out.append(Completion(ids, [-0.5] * len(ids), self.stop))
        return out


PARAMS = SamplingParams(max_new_tokens=64)


def _call(name, **arguments):
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_parse_step_reads_json_calls_and_reports_malformed_ones(mode):
    """`<tool_call>` blocks read the same in both formats; a malformed block is an error in both."""
    step = parse_step(f'thinking... {_call("add", n=2)} and {_call("get")}', mode)
    assert [(c.name, c.arguments) for c in step.calls] == [("add", {"n": 2}), ("get", {})]
    assert parse_step("no call here", mode) == ParsedStep([], [])
    assert parse_step('<tool_call>{"name": "add", "arguments": "{\\"n\\": 1}"}</tool_call>', mode
                      ).calls[0].arguments == {"n": 1}
    for bad in ('<tool_call>{"name": "add", "arguments": [1]}</tool_call>', "<tool_call>add(n=1)</tool_call>",
                '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>["add"]</tool_call>',
                '<tool_call>{"name": "add", "arguments": {"n": 1}', "<tool_call>" + "[" * 5000 + "</tool_call>"):
        step = parse_step(bad, mode)
        assert step.calls == [] and len(step.errors) == 1, bad
    assert parse_step('<tool_call>{"name": "__import__(\'os\').system(\'x\')", "arguments": {}}</tool_call>', mode
                      ).calls[0].name == "__import__('os').system('x')"  # a name is a string, never code


FENCED = 'I will check the balance.\n```json\n{"name": "get_balance", "arguments": {"account_id": "A1"}}\n```'
"""What Qwen2.5-Coder-0.5B-Instruct wrote in 23 of 24 samples (no `<tool_call>` tags)."""


def _calls(text, mode="lenient"):
    return [(c.name, c.arguments) for c in parse_step(text, mode).calls]


def test_strict_format_ignores_fenced_and_bare_calls():
    for text in (FENCED, 'Calling {"name": "get", "arguments": {}} now.', '```\n{"name": "get", "arguments": {}}\n```',
                 '```json\n{"name": "get", "arguments": \n```'):
        assert parse_step(text, "strict") == ParsedStep([], []), text


def test_lenient_format_reads_fenced_and_bare_call_objects():
    assert _calls(FENCED) == [("get_balance", {"account_id": "A1"})]
    assert _calls('```\n{"name": "get", "arguments": {}}\n```') == [("get", {})]  # a fence without a language
    assert _calls('```JSON {"name": "get", "arguments": {}}```') == [("get", {})]
    assert _calls('Sure: {"name": "add", "arguments": {"n": 2}} should do it.') == [("add", {"n": 2})]
    assert _calls('{"name": "add", "arguments": "{\\"n\\": 1}"}') == [("add", {"n": 1})]  # arguments as a JSON string
    nested = {"name": "transfer", "arguments": {"to": {"iban": "DE1", "tags": [{"k": "}"}]}, "amount": 5}}
    assert _calls(f"Now {json.dumps(nested)}.") == [("transfer", nested["arguments"])]  # braces balanced by json
    assert _calls(f"```json\n{json.dumps(nested, indent=2)}\n```") == [("transfer", nested["arguments"])]
    # every call is kept in order (the driver runs the first); fenced calls win over bare ones
    assert _calls('{"name": "a", "arguments": {}} then {"name": "b", "arguments": {}}') == [("a", {}), ("b", {})]
    assert _calls('{"name": "bare", "arguments": {}}\n```json\n{"name": "fenced", "arguments": {}}\n```'
                  ) == [("fenced", {})]


def test_lenient_format_prefers_tool_call_blocks():
    assert _calls(_call("get") + FENCED) == [("get", {})]
    step = parse_step("<tool_call>not json</tool_call>" + FENCED, "lenient")  # a malformed block stays an error
    assert step.calls == [] and len(step.errors) == 1 and "not valid JSON" in step.errors[0]


def test_lenient_format_skips_json_that_is_not_a_call():
    for text in ('```json\n{"balance": 12.5, "currency": "EUR"}\n```', '```json\n[1, 2, 3]\n```',
                 'The account {"name": "Alice", "balance": 5} is open.',  # "name" without "arguments": data
                 '```json\n{"name": "Alice"}\n```', "a set {1, 2} and {braces} and {\"unclosed\": ", "{}",
                 "```json\nnot json at all\n```", "```\nprint('hello')\n```",
                 '```python\n{"name": "get", "arguments": {}}\n```',  # other languages are never read
                 '{"name": [' * 5000):  # degenerate repetition: the scan gives up instead of going quadratic
        assert parse_step(text, "lenient") == ParsedStep([], []), text[:80]
    assert _calls('{"a' * 50 + ' ok {"name": "get", "arguments": {}}') == [("get", {})]


def test_lenient_format_reports_malformed_call_attempts():
    for bad in ('```json\n{"name": "add", "arguments": {"n": 1}\n```',  # unbalanced
                '```json\n{"name": "add", "arguments": {"n": 1},}\n```',  # trailing comma
                '```json\n{"name": "add", "arguments": ',  # a truncated step: the fence never closes
                '```json\n{"name": "add", "arguments": [1]}\n```', 'Try {"name": 7, "arguments": {}}.',
                '{"name": "add", "arguments": "n=1"}'):
        step = parse_step(bad, "lenient")
        assert step.calls == [] and len(step.errors) == 1, bad


def test_lenient_format_never_evaluates_code(monkeypatch):
    import builtins

    def refuse(*args, **kwargs):
        raise AssertionError("code was evaluated")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    code = '{"name": "add", "arguments": {"n": __import__("os").getpid() + 1}}'
    fenced = parse_step(f"```json\n{code}\n```", "lenient")  # a call attempt that is not JSON: an error
    assert fenced.calls == [] and len(fenced.errors) == 1
    assert parse_step(f"Run {code} please", "lenient") == ParsedStep([], [])  # bare non-JSON: prose
    assert parse_step("{'name': 'add', 'arguments': {'n': 1}}", "lenient") == ParsedStep([], [])  # a Python dict
    assert parse_step(f"```python\n{code}\n```", "lenient") == ParsedStep([], [])


def test_unknown_tool_call_format_is_refused():
    with pytest.raises(ValueError, match="tool-call format 'loose'"):
        parse_step(FENCED, "loose")
    assert multiturn.TOOL_CALL_FORMATS == ("strict", "lenient")


def test_lenient_episode_runs_a_fenced_call(tokenizer):
    """The driver executes a fenced call only under the lenient format; under strict the step is a reply."""
    fenced = '```json\n{"name": "add", "arguments": {"n": 3}}\n```'
    for mode, count, replies in (("lenient", 3, 1), ("strict", 0, 2)):  # replies: the step(s) without a call
        env = CounterEnv()
        (traj,) = run_episodes(ScriptedBackend(tokenizer, [[fenced, TASK_COMPLETED]]), tokenizer, [("t", 0, env)],
                               PARAMS, 0, 2, 10_000, tool_call_format=mode)
        assert (env.count, env.replies, traj.behaviour.tool_calls) == (count, replies, int(mode == "lenient"))
        assert traj.reward == float(mode == "lenient") and traj.behaviour.ended == "completed"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["```", "```json\n", "```python\n", "\n", " ", "{", "}", '"name"',
                                           '"arguments"', ":", ",", '"add"', "[", "]", "1", "<tool_call>",
                                           "</tool_call>", "\\"]), st.text(max_size=6)), max_size=24).map("".join))
def test_fuzz_lenient_parse_never_raises_and_returns_well_formed_calls(text):
    step = parse_step(text, "lenient")
    assert all(isinstance(c.name, str) and c.name and isinstance(c.arguments, dict) for c in step.calls)
    if "<tool_call>" not in text:
        assert parse_step(text, "strict") == ParsedStep([], [])


def test_episode_is_token_in_token_out_with_masked_environment_tokens(tokenizer):
    env = CounterEnv()
    script = [_call("add", n=2), _call("add", n=1), "All done. " + TASK_COMPLETED]
    backend = ScriptedBackend(tokenizer, [script])
    (traj,) = run_episodes(backend, tokenizer, [("t0", 0, env)], PARAMS, seed=0, max_steps=10,
                           max_context_tokens=10_000, tool_call_format="strict")
    assert traj.reward == 1.0 and env.closed and traj.behaviour.ended == "completed"
    assert traj.behaviour.steps == 3 and traj.behaviour.tool_calls == 2
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
    assert traj.response.splitlines() == ['1. add(n=2) -> {"count": 2}', '2. add(n=1) -> {"count": 3}']


def test_errors_become_observations_and_episodes_end_on_caps(tokenizer):
    script = ["<tool_call>not json</tool_call>", _call("nope"), _call("add", n="two"), _call("boom"),
              _call("add", n=1) + _call("add", n=1), "just talking", _call("get")]
    backend = ScriptedBackend(tokenizer, [script])
    env = CounterEnv()
    (traj,) = run_episodes(backend, tokenizer, [("t0", 0, env)], PARAMS, 0, max_steps=7, max_context_tokens=10_000,
                           tool_call_format="strict")
    observations = [tokenizer.decode(turn.context_ids) for turn in traj.turns[1:]]
    assert "not valid JSON" in observations[0] and "unknown tool" in observations[1]
    assert "must be an integer" in observations[2] and "RuntimeError" in observations[3]
    assert "Only the first of 2 tool calls" in observations[4] and "Use a tool." in observations[5]
    assert env.count == 1 and traj.behaviour.ended == "step_cap" and traj.reward == 0.0
    assert traj.behaviour.invalid_calls == 1 and traj.behaviour.tool_calls == 6

    long_script = [_call("get")] * 50
    (short,) = run_episodes(ScriptedBackend(tokenizer, [long_script]), tokenizer, [("t", 0, CounterEnv())], PARAMS, 0,
                            max_steps=50, max_context_tokens=400, tool_call_format="strict")
    assert short.behaviour.ended == "context" and len(short.token_ids) + PARAMS.max_new_tokens <= 400 + 64
    assert short.behaviour.repeated_calls == short.behaviour.steps - 1


class NoSandboxEnv(CounterEnv):
    """An environment whose machinery cannot run (`where` it says so): a stage-stopping error, not an episode's."""

    def __init__(self, where):
        super().__init__()
        self.where = where

    def call_tool(self, name, arguments):
        if self.where == "call_tool":
            raise SandboxUnavailable("the worker cannot start")
        return super().call_tool(name, arguments)

    def reply(self, text):
        if self.where == "reply":
            raise SandboxUnavailable("the worker cannot start")
        return super().reply(text)

    def score(self):
        if self.where == "score":
            raise SandboxUnavailable("the worker cannot start")
        return super().score()


@pytest.mark.parametrize("where", ["call_tool", "reply", "score"])
def test_an_environment_whose_sandbox_cannot_run_stops_the_episodes(tokenizer, where):
    backend = ScriptedBackend(tokenizer, [[_call("get"), "just talking"]])
    with pytest.raises(SandboxUnavailable):  # was an error observation, or a reward of 0 with a warning
        run_episodes(backend, tokenizer, [("t0", 0, NoSandboxEnv(where))], PARAMS, 0, max_steps=2,
                     max_context_tokens=10_000, tool_call_format="strict")


def test_truncated_step_gets_an_end_of_turn_token(tokenizer):
    backend = ScriptedBackend(tokenizer, [[_call("get"), TASK_COMPLETED]], stop=False)
    (traj,) = run_episodes(backend, tokenizer, [("t", 0, CounterEnv())], PARAMS, 0, 5, 10_000,
                           tool_call_format="strict")
    assert traj.turns[1].context_ids[0] == tokenizer.eos_token_id and traj.stopped is False


def test_real_model_episodes_are_batched_and_train_with_grpo(tiny_model_dir, tokenizer, tmp_path):
    cfg = resolve({"profile": "smoke", "train": {"steps": 1, "rollouts_per_step": 4}})
    backend = make_backend(tiny_model_dir, tokenizer, cfg, batch_size=8)
    calls = []
    original = backend.generate
    backend.generate = lambda prompts, params, seed: calls.append(len(prompts)) or original(prompts, params, seed)
    trajs = run_episodes(backend, tokenizer, [(f"t{i}", i, CounterEnv()) for i in range(4)], PARAMS, 0, 3, 4096,
                         tool_call_format="strict")
    assert calls[0] == 4 and len(calls) <= 3  # every active episode of a step in one call
    assert all(len(t.turns) == t.behaviour.steps for t in trajs)
    tasks = [Task(f"t{i}", CounterEnv().reset()[0], tuple(TOOLS)) for i in range(2)]
    result = train(cfg, GRPO(cfg, Domain.scratch("unused")), tasks,
                   multi_turn(lambda task: CounterEnv(), 2, 4096, 16, tool_call_format=cfg.agentic.tool_call_format),
                   tiny_model_dir, tmp_path / "grpo")
    (step,) = result["history"]
    assert {"steps", "tool_calls_per_step", "first_step_tokens", "repeated_calls"} <= set(step)
    assert step["steps"] <= 2


def test_a_lora_student_plays_the_same_first_episodes_and_losses(tiny_model_dir, tmp_path):
    """The agentic domain with `train.lora_rank`: B = 0, so step 1's episodes and metrics are the full fine-tune's
    (the gradient norm aside: over other parameters)."""
    tasks = [Task(f"t{i}", CounterEnv().reset()[0], tuple(TOOLS)) for i in range(2)]
    steps = []
    for rank in (0, 4):
        cfg = resolve({"profile": "smoke", "train": {"steps": 1, "rollouts_per_step": 4, "lora_rank": rank}})
        episodes = multi_turn(lambda task: CounterEnv(), 2, 4096, 16, tool_call_format=cfg.agentic.tool_call_format)
        (step,) = train(cfg, GRPO(cfg, Domain.scratch("unused")), tasks, episodes, tiny_model_dir,
                        tmp_path / str(rank))["history"]
        steps.append({k: v for k, v in step.items() if not k.startswith("time_") and k != "rollout_tokens_per_s"})
    full, lora = steps
    lora.pop("grad_norm"), full.pop("grad_norm")
    assert lora == full and full["steps"] > 0


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_behaviour_of_a_scripted_episode(tokenizer):
    script = [_call("add", n=1), _call("add", n=1), "<tool_call>oops</tool_call>", _call("get") + _call("add", n=5),
              "All done. " + TASK_COMPLETED]
    (traj,) = run_episodes(ScriptedBackend(tokenizer, [script]), tokenizer, [("t", 0, CounterEnv(target=2))], PARAMS,
                           0, max_steps=10, max_context_tokens=10_000, tool_call_format="strict")
    # add (count 1), the same add again (count 2, a repeat), a malformed block, get + add (only get runs), done
    assert traj.reward == 1.0
    assert {k: getattr(traj.behaviour, k) for k in (*BEHAVIOUR_KEYS, "tool_calls", "ended")} == {
        "steps": 5, "tool_calls": 4, "invalid_calls": 1, "repeated_calls": 1, "tool_calls_per_step": 4 / 5,
        "first_step_tokens": len(_ids(tokenizer, _call("add", n=1))) + 1,  # + the stop token <|im_end|>
        "reward_per_tool_call": 1.0 / 4, "ended": "completed"}


@pytest.mark.parametrize("stop", [True, False])
def test_chatml_episode_tokens_are_the_recorded_ones(tokenizer, stop):
    """SmolLM2 (ChatML, eos = end of turn = <|im_end|> = 2): a stopped step ends with 2 and gets nothing more,
    a truncated one gets 2, and the tool turn is the template's text after <|im_end|>, tokenised on its own."""
    assert end_of_turn_id(tokenizer) == tokenizer.eos_token_id == 2
    backend = ScriptedBackend(tokenizer, [[_call("get"), TASK_COMPLETED]], stop=stop)
    (traj,) = run_episodes(backend, tokenizer, [("t", 0, CounterEnv())], PARAMS, 0, 5, 10_000,
                           tool_call_format="strict")
    messages, tools = CounterEnv().reset()
    assert traj.token_ids == (encode_prompt(tokenizer, messages, tools) + _ids(tokenizer, _call("get")) + [2]
                              + _ids(tokenizer, '\n<|im_start|>tool\n{"count": 0}<|im_end|>\n<|im_start|>assistant\n')
                              + _ids(tokenizer, TASK_COMPLETED) + ([2] if stop else []))
    assert (traj.turns[1].context_ids[0] == 2) is not stop  # the <|im_end|> is sampled, or added after truncation
    for messages, text in [([{"role": "user", "content": "next"}], "\n<|im_start|>user\nnext<|im_end|>\n"),
                           ([{"role": "tool", "content": "r"}, {"role": "user", "content": "u"}],
                            "\n<|im_start|>tool\nr<|im_end|>\n<|im_start|>user\nu<|im_end|>\n")]:
        assert continuation_ids(tokenizer, messages, 2) == _ids(tokenizer, text + "<|im_start|>assistant\n")


ENDOFTEXT_TEMPLATE = ("{% for m in messages %}"
                      "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|endoftext|>\\n' }}{% endfor %}"
                      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.mark.parametrize("stop_id,closing", [(0, []), (2, [0]), (None, [0])], ids=["end-of-turn", "eos", "truncated"])
def test_end_of_turn_comes_from_the_template_not_from_eos(tiny_model_dir, stop_id, closing):
    """A template that closes turns with <|endoftext|> (0) while eos is <|im_end|> (2), as Qwen3 stops on either:
    the context holds the template's end of turn exactly once, whichever token the step stopped on."""
    tok = load_tokenizer(tiny_model_dir)
    tok.chat_template = ENDOFTEXT_TEMPLATE
    assert end_of_turn_id(tok) == 0 and tok.eos_token_id == 2
    backend = ScriptedBackend(tok, [[_call("get"), TASK_COMPLETED]], stop=stop_id is not None, stop_id=stop_id)
    (traj,) = run_episodes(backend, tok, [("t", 0, CounterEnv())], PARAMS, 0, 5, 10_000, tool_call_format="strict")
    assert traj.turns[1].context_ids == closing + _ids(
        tok, '\n<|im_start|>tool\n{"count": 0}<|endoftext|>\n<|im_start|>assistant\n')


def test_seeds_stay_in_range_for_huge_seeds_and_unchanged_for_small_ones(tokenizer):
    seeds = {}
    for seed in (7, 2**64 - 1):
        backend = ScriptedBackend(tokenizer, [[_call("get"), _call("get")]])
        run_episodes(backend, tokenizer, [("t", 0, CounterEnv())], PARAMS, seed, 2, 10_000, tool_call_format="strict")
        seeds[seed] = backend.seeds
    assert seeds[7] == [7 * 1_000_033, 7 * 1_000_033 + 1]
    for s in seeds[2**64 - 1]:
        assert 0 <= s < 2**63
        torch.Generator().manual_seed(s)  # what HFBackend does with it (raises past 2**64 - 1)


class ClosingEnv(CounterEnv):
    def __init__(self, fail_reset=False):
        super().__init__()
        self.fail_reset, self.closes = fail_reset, 0

    def reset(self):
        if self.fail_reset:
            raise RuntimeError("reset failed")
        return super().reset()

    def close(self):
        self.closes += 1


class FailingBackend:
    stats = {"prefill_s": 0.0, "decode_s": 0.0}

    def generate(self, prompts, params, seed):
        raise RuntimeError("backend failed")


def _fail(*args):
    raise RuntimeError("template failed")


@pytest.mark.parametrize("where", ["make_env", "reset", "generate", "continuation", "nowhere"])
def test_every_environment_is_closed_exactly_once(tokenizer, monkeypatch, where):
    envs = []

    def make_env(task):
        if where == "make_env" and len(envs) == 2:
            raise RuntimeError("make_env failed")
        envs.append(ClosingEnv(fail_reset=where == "reset" and len(envs) == 1))
        return envs[-1]

    if where == "continuation":
        monkeypatch.setattr(multiturn, "continuation_ids", _fail)
    backend = FailingBackend() if where == "generate" else ScriptedBackend(tokenizer, [[_call("get")]] * 3)
    collect = multi_turn(make_env, max_steps=1, max_context_tokens=10_000, max_step_tokens=16,
                         tool_call_format="strict")
    tasks = [Task(f"t{i}", []) for i in range(3)]
    if where == "nowhere":
        assert len(collect(backend, tokenizer, tasks, PARAMS, 0, 1)) == 3
    else:
        with pytest.raises(RuntimeError, match="failed"):
            collect(backend, tokenizer, tasks, PARAMS, 0, 1)
    assert [env.closes for env in envs] == [1] * (2 if where == "make_env" else 3)


def test_an_episode_without_room_for_a_step_is_its_prompt_alone(tokenizer):
    messages, tools = CounterEnv().reset()
    prompt = encode_prompt(tokenizer, messages, tools)
    env = CounterEnv()
    (traj,) = run_episodes(ScriptedBackend(tokenizer, []), tokenizer, [("t", 0, env)], PARAMS, 0, 3,
                           len(prompt) + PARAMS.max_new_tokens - 1, tool_call_format="strict")
    assert env.closed and traj.behaviour.ended == "context" and traj.behaviour.steps == 0
    assert traj.behaviour.first_step_tokens == 0 and traj.behaviour.tool_calls_per_step == 0
    assert traj.turns == [Turn(prompt, [], [])] and traj.num_action_tokens == 0
    # what multi-process training does with every trajectory: a teacher's view, collated with the student's
    teacher = with_prompt(traj, [7, 8])
    assert teacher.token_ids == [7, 8] and collate([traj, teacher], 0).action_mask_B_T.sum() == 0


def test_a_step_must_fit_the_context_budget():
    for name in PROFILES_NAMES:
        cfg = resolve({"profile": name})
        assert cfg.agentic.max_step_tokens < cfg.agentic.max_context_tokens
    # judged after the profile: the cpu profile's 128-token steps fit a smaller context the user sets
    assert resolve({"profile": "cpu", "agentic": {"max_context_tokens": 4096}}).agentic.max_step_tokens == 128
    with pytest.raises(ConfigError) as err:
        resolve({"profile": "smoke", "agentic": {"max_step_tokens": 9000}})
    assert str(err.value).startswith("agentic.max_step_tokens: must be < agentic.max_context_tokens (8192)")
    assert "\n" not in str(err.value)


class FixedRewardEnv(CounterEnv):
    def __init__(self, reward):
        super().__init__()
        self.reward = reward

    def score(self):
        return {"reward": self.reward}


@pytest.mark.parametrize("name", ["sdft", "opsd", "skill_sd"])
def test_self_distillation_methods_train_on_episodes(name, tiny_model_dir, tmp_path):
    """One step on two multi-turn episodes: the teacher re-reads whole episodes (tool and user turns masked)."""
    groups = {g: {"group_size": 2} for g in ("grpo", "sdpo", "skill_sd")}
    cfg = resolve({"profile": "smoke", "train": {"steps": 1, "rollouts_per_step": 2}, **groups})
    tasks = [Task(f"t{i}", CounterEnv().reset()[0], tuple(TOOLS)) for i in range(2)]
    if name == "skill_sd":
        save_vectors(tmp_path / QUERIES_FILE, [t.task_id for t in tasks],
                     TextEmbedder(cfg.bank.embedder).embed([t.messages[1]["content"] for t in tasks]))
        method = skill_sd.SkillSD(cfg, Domain.scratch(tmp_path, "agentic", bank=tmp_path))
    else:
        write_pool(tmp_path / POOL_FILE, [Demonstration(t.task_id, "task", '1. add(n=3) -> {"count": 3}',
                                                        BASE_MODEL_ROLLOUT) for t in tasks], {})
        method = (sdft.SDFT if name == "sdft" else opsd.OPSD)(cfg, Domain.scratch(tmp_path, "agentic", pool=tmp_path))
    rewards = itertools.cycle([1.0, 0.0])  # Skill-SD's group gets nonzero advantages, so it trains
    collect = multi_turn(lambda task: FixedRewardEnv(next(rewards)), max_steps=2, max_context_tokens=2048,
                         max_step_tokens=4, tool_call_format="strict")
    (step,) = train(cfg, method, tasks, collect, tiny_model_dir, tmp_path / name)["history"]
    assert step["steps"] == 2 and step["trained_fraction"] == 1 and math.isfinite(step["loss"])
    if name == "skill_sd":  # no skill exists before the first step's summaries
        assert step["privileged_fraction"] == 0 and step["teacher_context_tokens"] == 0
    else:
        assert step["privileged_fraction"] == 1 and step["teacher_context_tokens"] > 0


def test_observation_lite_cuts_long_results():
    from lopd.core.multiturn import ToolCall
    text = observation_lite([(ToolCall("find", {"q": "x y"}), "a\n b " * 100)], observation_chars=10)
    assert text == '1. find(q="x y") -> a b a b a ...'


FRAGMENTS = st.sampled_from(["<tool_call>", "</tool_call>", "{", "}", '"name"', '"arguments"', ":", ",", '"add"',
                             '"get"', '"boom"', '"n"', "1", "-7", "1e999", "null", "[", "]", TASK_COMPLETED, " ",
                             "\n", "\\u0000", "<|im_end|>", "<|im_start|>tool"])
JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                     lambda inner: (st.lists(inner, max_size=3)
                                    | st.dictionaries(st.text(max_size=4), inner, max_size=3)),
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
    backend = ScriptedBackend(tokenizer, [outputs])
    (traj,) = run_episodes(backend, tokenizer, [("t", 0, env)], PARAMS, 0, 3, 10_000, tool_call_format="strict")
    assert 0.0 <= traj.reward <= 1.0 and env.closed
    batch = collate([traj], tokenizer.pad_token_id)
    scripted = [i for o in outputs[:traj.behaviour.steps]
                for i in tokenizer(o, add_special_tokens=False)["input_ids"][:PARAMS.max_new_tokens] + [2]]
    assert batch.target_ids_B_T[0][batch.action_mask_B_T[0] > 0].tolist() == scripted  # what the backend sampled
