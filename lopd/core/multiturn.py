"""Multi-turn tool use: the environment protocol, the tool-call parser and the batched episode driver.

An episode alternates policy turns and environment turns. The policy writes one step; if it contains a
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block (parsed as JSON, never evaluated; in the
`lenient` tool-call format also a call object in a ```json fence or bare in the text, see `parse_step`) the
environment executes it and its result comes back as a tool message; a step without a call is a reply,
which the environment answers with more messages (the next user turn) or by ending the episode.

Token-in/token-out: the prompt of turn t+1 is turn t's tokens plus the sampled tokens plus the
environment's tokens, so the trainer scores exactly what was sampled and masks the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from transformers import PreTrainedTokenizerBase

from lopd.core.domain import SandboxUnavailable
from lopd.core.progress import progress
from lopd.core.rollout import Rollouts, Task, encode_prompt
from lopd.core.sampling import RolloutBackend, SamplingParams
from lopd.core.trajectory import EpisodeBehaviour, Trajectory, Turn

AGENT_SYSTEM_PROMPT = (
    "You are a helpful assistant. When given a specific task, your goal is to complete it in an interactive "
    "environment by making step-by-step use of available tools.\n"
    "- Before completing the task, at each step, select a tool from the tool list and fill in all required "
    "parameters, making sure that the values are valid. Avoid making parallel tool calls in one step.\n"
    "- When you believe the task has been completed, respond only with 'Task Completed' to end the trajectory, "
    "without adding any other content or making any tool calls.\n"
    "- It is recommended to first call query tools to gather sufficient information, then use modification tools "
    "to complete the task. Adjust actions promptly based on the feedback from the environment."
)
"""Appendix A's agentic system prompt (EnvScaler / ACEBench)."""

TASK_COMPLETED = "Task Completed"


class ToolEnvironment(Protocol):
    """One episode's environment; a fresh instance per rollout.

    Implementations must turn every problem with a call (unknown tool, bad or missing arguments, an
    exception inside the tool, a time-out) into an observation string: the driver treats an exception
    escaping `call_tool` as a bug, reports it as an observation too, and goes on.
    """

    def reset(self) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        """The opening chat messages (system and user) and the tools offered, as JSON schemas in the
        OpenAI function format `{"type": "function", "function": {"name", "description", "parameters"}}`."""
        ...

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Execute one parsed tool call and return its observation text."""
        ...

    def reply(self, text: str) -> list[dict[str, str]] | None:
        """The agent wrote a step without a tool call. Return the messages that continue the episode
        (e.g. the next user turn, which may announce new tools) or None when the episode is over."""
        ...

    def score(self) -> dict[str, float]:
        """Called once when the episode is over: {"reward": r in [0, 1], ...benchmark metrics}."""
        ...

    def close(self) -> None:
        """Release resources (worker processes); called exactly once."""
        ...


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedStep:
    """What one policy step asked for."""

    calls: list[ToolCall]
    """Well-formed calls, in order (the driver executes the first: one call per step)."""
    errors: list[str]
    """One message per malformed call attempt (a `<tool_call>` block; in lenient mode also a fenced one)."""


TOOL_CALL_FORMATS = ("strict", "lenient")
"""`agentic.tool_call_format`: what `parse_step` reads as a tool call."""

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([A-Za-z][\w+.-]*)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
"""A Markdown code fence, its language tag (if any) and body; an unclosed fence runs to the end (a truncated step)."""
_OBJECT_START = re.compile(r'\{\s*"')
"""Where a bare call object may start: `{` then a key (prunes the braces of prose and code)."""
_MAX_BARE_MISSES = 100
"""Bare candidates that fail to decode tried per step, at most: a degenerate, repeating step (`{"a": [{"a": [...`)
would otherwise cost a decode to its end from every `{` (quadratic); no real step holds that many."""


def _check_format(mode: str) -> None:
    """A bad format is a caller's bug (the config validates `agentic.tool_call_format`): raise at once."""
    if mode not in TOOL_CALL_FORMATS:
        raise ValueError(f"tool-call format {mode!r} is not one of {', '.join(TOOL_CALL_FORMATS)}")


def _call_from(obj: Any) -> ToolCall | str:
    """The call an object describes, or why it is not one: a string `name` and an object `arguments` (a JSON
    string holding an object is accepted too, as some chat templates serialise arguments that way)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return 'tool call must be a JSON object with a string "name"'
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            pass
    if not isinstance(arguments, dict):
        return f'tool call {obj["name"]!r}: "arguments" must be a JSON object'
    return ToolCall(obj["name"], arguments)


def _add(found: ToolCall | str, calls: list[ToolCall], errors: list[str]) -> None:
    (calls if isinstance(found, ToolCall) else errors).append(found)


def _tagged_calls(text: str) -> tuple[list[ToolCall], list[str]]:
    calls: list[ToolCall] = []
    errors: list[str] = []
    for match in _BLOCK.finditer(text):
        try:
            obj = json.loads(match.group(1).strip())
        except (ValueError, RecursionError) as err:
            errors.append(f"tool call is not valid JSON ({type(err).__name__}: {str(err)[:120]})")
            continue
        _add(_call_from(obj), calls, errors)
    return calls, errors


def _is_call_shaped(obj: Any) -> bool:
    """A fenced or bare JSON value that claims to be a call: an object with both "name" and "arguments". Any
    other JSON (the model showing data, e.g. {"name": "Alice", "balance": 5}) is not a call and not an error."""
    return isinstance(obj, dict) and "name" in obj and "arguments" in obj


def _fenced_calls(text: str) -> tuple[list[ToolCall], list[str]]:
    calls: list[ToolCall] = []
    errors: list[str] = []
    for match in _FENCE.finditer(text):
        language, body = (match.group(1) or "").lower(), match.group(2).strip()
        if language not in ("", "json") or not body:
            continue  # another language's code is never read as a call
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as err:
            if '"name"' in body:  # a call attempt that is not JSON; anything else is the model showing text
                errors.append(f"fenced tool call is not valid JSON ({type(err).__name__}: {str(err)[:120]})")
            continue
        if _is_call_shaped(obj):
            _add(_call_from(obj), calls, errors)
    return calls, errors


def _bare_calls(text: str) -> tuple[list[ToolCall], list[str]]:
    """Call-shaped JSON objects in the prose outside any code fence. Each candidate is decoded with
    `json.JSONDecoder().raw_decode` from a `{`, so nesting is balanced by the JSON grammar, not a regex; after an
    object the scan goes on past its end. Text that does not decode is prose, never an error; after
    `_MAX_BARE_MISSES` such candidates the scan stops."""
    prose = _FENCE.sub(" ", text)
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    errors: list[str] = []
    pos = misses = 0
    while misses < _MAX_BARE_MISSES and (match := _OBJECT_START.search(prose, pos)) is not None:
        try:
            obj, end = decoder.raw_decode(prose, match.start())
        except (ValueError, RecursionError):
            pos, misses = match.start() + 1, misses + 1
            continue
        if _is_call_shaped(obj):
            _add(_call_from(obj), calls, errors)
        pos = end
    return calls, errors


def parse_step(text: str, mode: str) -> ParsedStep:
    """The tool calls of one policy step (pure; never raises on any text and never evaluates code: everything is
    read with `json`).

    `mode` is `agentic.tool_call_format`:
    - `strict`: only `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks. Each block must hold one
      JSON object with a string `name` and an object `arguments` (or a JSON string holding an object); a block
      that does not is a malformed call (an error).
    - `lenient`: the first of these that finds any call or error, in order:
      1. `<tool_call>` blocks, as in strict (so a step with tags is read exactly as in strict);
      2. ```json and plain ``` fenced blocks, each holding one JSON value: an object with "name" and
         "arguments" is a call (checked as above); other valid JSON is the model showing data and is skipped;
         a body that is not valid JSON is a malformed call only if it contains `"name"` (a call attempt);
         fences in other languages (```python ...) are never read;
      3. bare JSON objects in the text outside code fences with "name" and "arguments" (other JSON and text
         that does not decode are skipped, never errors).
    """
    _check_format(mode)
    calls, errors = _tagged_calls(text)
    if mode == "lenient" and not calls and not errors:
        calls, errors = _fenced_calls(text)
        if not calls and not errors:
            calls, errors = _bare_calls(text)
    return ParsedStep(calls, errors)


_SENTINEL = "\u2063LOPD-ASSISTANT-TURN\u2063"


def _after_assistant_turn(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> str:
    """What the chat template writes after an assistant turn's content when `messages` follow it, up to the
    next assistant turn (rendered around a sentinel assistant message, so it holds for any template)."""
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": _SENTINEL}]
    text = tokenizer.apply_chat_template(base + messages, add_generation_prompt=True, tokenize=False)
    return text[text.rindex(_SENTINEL) + len(_SENTINEL):]


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The special token the chat template closes an assistant turn with (ChatML's `<|im_end|>`, Llama 3's
    `<|eot_id|>`). Taken from the template, not from `eos_token_id`: a model may also stop on other tokens
    (Qwen3 on `<|endoftext|>`), and the context must then still hold the template's end of turn."""
    special = {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
    after = tokenizer(_after_assistant_turn(tokenizer, [{"role": "user", "content": "u"}]),
                      add_special_tokens=False)["input_ids"]
    found = next((i for i in after if i in special), None)
    if found is None:
        raise ValueError("the chat template closes an assistant turn without a special token")
    return found


def continuation_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], end_of_turn: int) -> list[int]:
    """Tokens the chat template puts between an assistant turn's end-of-turn token and the next assistant
    turn when `messages` (tool results, user turns) come in between.

    Tokenised on its own: the sampled tokens before it are never re-tokenised.
    """
    after = _after_assistant_turn(tokenizer, messages)
    end_text = tokenizer.added_tokens_decoder[end_of_turn].content
    return list(tokenizer(after[after.index(end_text) + len(end_text):], add_special_tokens=False)["input_ids"])


def observation_lite(actions: Sequence[tuple[ToolCall, str]], observation_chars: int = 160) -> str:
    """The paper's observation-lite trace: one numbered line per executed call, its result cut short."""
    lines = []
    for i, (call, observation) in enumerate(actions, 1):
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in call.arguments.items())
        result = " ".join(observation.split())
        if len(result) > observation_chars:
            result = result[:observation_chars].rstrip() + " ..."
        lines.append(f"{i}. {call.name}({args}) -> {result}")
    return "\n".join(lines)


def multi_turn(make_env: Callable[[Task], ToolEnvironment], max_steps: int, max_context_tokens: int,
               max_step_tokens: int, *, tool_call_format: str) -> Rollouts:
    """Rollouts of whole episodes (agentic domains): one fresh environment per rollout, at most
    `max_step_tokens` sampled per step, tool calls read as `tool_call_format` says (`parse_step`)."""
    _check_format(tool_call_format)

    def collect(backend: RolloutBackend, tokenizer: PreTrainedTokenizerBase, tasks: list[Task],
                params: SamplingParams, seed: int, rollouts_per_task: int) -> list[Trajectory]:
        params = dataclasses.replace(params, max_new_tokens=max_step_tokens)
        with contextlib.ExitStack() as made:  # a failing make_env closes the environments made before it
            episodes = []
            for g, task in enumerate(tasks):
                for _ in range(rollouts_per_task):
                    env = make_env(task)
                    made.callback(env.close)
                    episodes.append((task.task_id, g, env))
            made.pop_all()  # run_episodes closes them from here on
        return run_episodes(backend, tokenizer, episodes, params, seed, max_steps, max_context_tokens,
                            tool_call_format=tool_call_format)

    return collect


def canonical_call(call: ToolCall) -> str:
    return json.dumps({"name": call.name, "arguments": call.arguments}, sort_keys=True, default=str)


@dataclass
class _Episode:
    env: ToolEnvironment
    task_id: str
    group: int
    turns: list[Turn]
    pending: list[int]
    """Context tokens (prompt, then tool/user tokens) not yet followed by an action."""
    length: int = 0
    done: str = ""
    """Why the episode ended: completed | env_end | context | env_error; empty while it runs and when it
    used all its steps (`_finish` reports that as step_cap)."""
    tool_calls: int = 0
    invalid_calls: int = 0
    repeated_calls: int = 0
    seen_calls: set[str] = field(default_factory=set)
    stopped: bool = True
    env_error: str = ""
    actions: list[tuple[ToolCall, str]] = field(default_factory=list)
    """Executed calls and their observations, for the observation-lite trace."""


def _observe(ep: _Episode, text: str, tool_call_format: str) -> list[dict[str, str]] | None:
    """Hand one step to the environment; the messages that follow it, or None when the episode is over."""
    step = parse_step(text, tool_call_format)
    ep.invalid_calls += len(step.errors)
    ep.tool_calls += len(step.calls)
    if step.calls:
        call = step.calls[0]
        key = canonical_call(call)
        ep.repeated_calls += key in ep.seen_calls
        ep.seen_calls.add(key)
        try:
            observation = ep.env.call_tool(call.name, call.arguments)
        except SandboxUnavailable:  # not the episode's failure: the stage stops
            raise
        except Exception as err:  # an environment bug must not end a batch of rollouts
            observation = f"Error: the tool raised {type(err).__name__}: {str(err)[:200]}"
        ep.actions.append((call, observation))
        if len(step.calls) > 1:
            observation += f"\n(Only the first of {len(step.calls)} tool calls was executed: one call per step.)"
        return [{"role": "tool", "content": observation}]
    if step.errors:
        return [{"role": "tool", "content": "Error: " + "; ".join(step.errors)}]
    try:
        return ep.env.reply(text)
    except SandboxUnavailable:  # not the episode's failure: the stage stops
        raise
    except Exception as err:
        ep.done = "env_error"
        ep.env_error = f"{type(err).__name__}: {str(err)[:200]}"
        return None


def run_episodes(backend: RolloutBackend, tokenizer: PreTrainedTokenizerBase,
                 episodes: Sequence[tuple[str, int, ToolEnvironment]], params: SamplingParams, seed: int,
                 max_steps: int, max_context_tokens: int, *, tool_call_format: str) -> list[Trajectory]:
    """Play (task_id, group, environment) episodes to the end, all active ones sampled in one batch per step,
    reading each step's tool calls as `tool_call_format` (`agentic.tool_call_format`) says (`parse_step`).

    An episode ends when the environment says so (e.g. 'Task Completed'), after `max_steps` policy steps,
    or when its context would exceed `max_context_tokens`. Returns scored trajectories, each with its response
    (the observation-lite trace) and its `EpisodeBehaviour`. Every environment is closed exactly once, also when
    this raises.
    """
    with contextlib.ExitStack() as owned:
        for _, _, env in episodes:
            owned.callback(env.close)
        _check_format(tool_call_format)
        eps = []
        for task_id, group, env in episodes:
            messages, tools = env.reset()
            prompt = encode_prompt(tokenizer, messages, tools)
            eps.append(_Episode(env, task_id, group, [], prompt))
            if len(prompt) + params.max_new_tokens > max_context_tokens:  # not even one step fits
                eps[-1].done = "context"
        end_of_turn = end_of_turn_id(tokenizer)
        # Finished episodes of the call; transient, as the training loop plays a batch of episodes every step.
        bar = owned.enter_context(progress(total=len(eps), desc="episodes", unit="ep", transient=True))
        bar.update(sum(bool(ep.done) for ep in eps))  # prompts with no room for a step
        for step in range(max_steps):
            active = [ep for ep in eps if not ep.done]
            if not active:
                break
            bar.set_postfix_str(f"step {step + 1}/{max_steps}, {len(active)} running", refresh=False)
            prompts = [[*(t for turn in ep.turns for t in (*turn.context_ids, *turn.action_ids)), *ep.pending]
                       for ep in active]
            completions = backend.generate(prompts, params, (seed * 1_000_033 + step) % 2**63)
            for ep, prompt, c in zip(active, prompts, completions):
                ep.turns.append(Turn(ep.pending, c.token_ids, c.logprobs))
                ep.stopped = c.stopped
                ep.length = len(prompt) + len(c.token_ids)
                text = tokenizer.decode(c.token_ids, skip_special_tokens=True)
                messages = _observe(ep, text, tool_call_format)
                if messages is None:
                    ep.done = ep.done or ("completed" if TASK_COMPLETED in text else "env_end")
                    continue
                # a truncated step, or one that stopped on another stop token, still closes its turn
                closing = [] if c.token_ids[-1:] == [end_of_turn] else [end_of_turn]
                ep.pending = closing + continuation_ids(tokenizer, messages, end_of_turn)
                if ep.length + len(ep.pending) + params.max_new_tokens > max_context_tokens:
                    ep.done = "context"
            bar.update(sum(bool(ep.done) for ep in active))
        return [_finish(ep) for ep in eps]


def _finish(ep: _Episode) -> Trajectory:
    try:
        scores = ep.env.score()
    except SandboxUnavailable:  # not the episode's failure: the stage stops
        raise
    except Exception as err:  # scored as a failure, and said so
        scores = {"reward": 0.0, "score_error": 1.0}
        print(f"warning: scoring {ep.task_id} failed: {type(err).__name__}: {err}", flush=True)
    steps = len(ep.turns)
    reward = float(scores["reward"])
    behaviour = EpisodeBehaviour(
        ended=ep.done or "step_cap", steps=steps, tool_calls=ep.tool_calls, invalid_calls=ep.invalid_calls,
        repeated_calls=ep.repeated_calls, tool_calls_per_step=ep.tool_calls / max(steps, 1),
        first_step_tokens=len(ep.turns[0].action_ids) if ep.turns else 0,
        reward_per_tool_call=reward / max(ep.tool_calls, 1),
        scores={k: float(v) for k, v in scores.items() if isinstance(v, (int, float))},
        # e.g. why a simulated user failed
        score_notes={k: str(v) for k, v in scores.items() if not isinstance(v, (int, float))},
        env_error=ep.env_error)
    # An episode whose prompt left no room for a step is its prompt alone: every trajectory has a first turn.
    turns = ep.turns or [Turn(ep.pending, [], [])]
    return Trajectory(ep.task_id, turns, reward=reward, group=ep.group, response=observation_lite(ep.actions),
                      stopped=ep.stopped, behaviour=behaviour)
