"""Rollouts: tasks -> prompts -> sampled token-in/token-out trajectories on a rollout backend.

Shared by the training loop, the experience bank and evaluation; randomness is a pure function of
(seed, step, process) so a resumed run samples exactly what an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Protocol, Sequence, TypeVar

import torch
from transformers import AutoConfig, GenerationConfig, PreTrainedTokenizerBase

from lopd.core.config import Config, ConfigError
from lopd.core.device import device
from lopd.core.models import check_weights, load_model
from lopd.core.sampling import ROLLOUT_ATTENTION, HFBackend, RolloutBackend, SamplingParams
from lopd.core.static_decode import STATIC_ATTENTION, StaticDecoder, supports
from lopd.core.trajectory import Trajectory, Turn
from lopd.core.vllm_backend import INSTALL_HINT, runs_on_cpu, vllm_available

T = TypeVar("T")


def evenly_spaced(items: Sequence[T], n: int) -> list[T]:
    """`n` of `items` spread evenly over all of them, in their order: the item at position floor(i * len / n) for
    i = 0..n-1 (all of them where n >= len). A split that lists its tasks by kind (a domain, a tier) gives every kind
    its share: the learning races' candidates and the agentic bank's tasks under a limit."""
    if n >= len(items):
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


@dataclass(frozen=True)
class Task:
    task_id: str
    messages: list[dict[str, str]]
    tools: tuple[dict[str, Any], ...] = ()
    """Tools offered to the policy (JSON schemas in the OpenAI function format); empty for coding."""


ScoreFn = Callable[[list[Task], list[str]], list[float]]
"""Rewards in [0, 1] for (task, decoded completion) pairs."""


class Rollouts(Protocol):
    """How a domain samples and scores: tasks in, `rollouts_per_task` scored trajectories per task out (grouped
    by task, `group` = the task's index), each with its response text in `response`."""

    def __call__(self, backend: RolloutBackend, tokenizer: PreTrainedTokenizerBase, tasks: list[Task],
                 params: SamplingParams, seed: int, rollouts_per_task: int) -> list[Trajectory]: ...


class TrainingSplit(NamedTuple):
    """A domain's training data as the stages read it."""

    tasks: list[Task]
    """What the methods train on (and the bank and the pool sample)."""
    collect: Rollouts
    source: str
    """The data's name, for titles and metadata."""
    validation: list[Task]
    """Held-out tasks of the same distribution for the validation reward: never trained on, never in the bank or
    the pool (`hold_out`)."""


def hold_out(tasks: Sequence[Task], n: int) -> tuple[list[Task], list[Task]]:
    """(kept, held out): the `n` tasks with the smallest sha256 of their task id are held out. The split depends on
    the ids alone, so neither the seed nor the file's order moves a task across it; both parts keep the input order."""
    if not 0 <= n <= len(tasks):
        raise ValueError(f"cannot hold out {n} of {len(tasks)} tasks")
    ranked = sorted(tasks, key=lambda t: hashlib.sha256(t.task_id.encode()).hexdigest())
    held = {t.task_id for t in ranked[:n]}
    return [t for t in tasks if t.task_id not in held], [t for t in tasks if t.task_id in held]


_PROBE_MESSAGES = [{"role": "user", "content": "u"}]
_PROBE_TOOL = {"type": "function", "function": {"name": "probe", "description": "d",
                                                "parameters": {"type": "object", "properties": {}}}}


def supports_tools(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the chat template renders a `tools=` argument itself (Qwen3, Llama 3, ...): a tiny conversation
    rendered with a tool differs from the one without (a template's wording or its names never decide it)."""
    def render(**kwargs: Any) -> str:
        return tokenizer.apply_chat_template(_PROBE_MESSAGES, add_generation_prompt=True, tokenize=False, **kwargs)

    return render(tools=[_PROBE_TOOL]) != render()


TOOLS_BLOCK = (
    "\n\n# Tools\n\nYou may call one of the following functions. Their signatures are JSON schemas inside "
    "<tools></tools>:\n<tools>\n{tools}\n</tools>\n\n"
    "To call a function, reply with a JSON object inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
"""How tools are offered by templates without a tool block of their own (the Hermes/Qwen convention)."""


def with_tools_block(messages: list[dict[str, str]], tools: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The messages with the tool listing appended to the system message (one is added if missing)."""
    block = TOOLS_BLOCK.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": messages[0]["content"] + block}, *messages[1:]]
    return [{"role": "system", "content": block.lstrip()}, *messages]


def chat_text(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]],
              tools: Sequence[dict[str, Any]] = (), *, continue_final: bool = False) -> str:
    """Chat messages rendered by the tokenizer's own chat template, ready for the assistant turn. Tools go in
    the template's own tool block or, for templates without one, in a `<tools>` block of the system message.
    `continue_final`: the last message is a prefilled assistant turn, left open (no end-of-turn after its text) for
    the model to continue, as EvalPlus prompts chat models."""
    kwargs: dict[str, Any] = {}
    if tools and supports_tools(tokenizer):
        kwargs["tools"] = list(tools)
    elif tools:
        messages = with_tools_block(messages, tools)
    return tokenizer.apply_chat_template(messages, add_generation_prompt=not continue_final,
                                         continue_final_message=continue_final, tokenize=False, **kwargs)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]],
                  tools: Sequence[dict[str, Any]] = (), *, continue_final: bool = False) -> list[int]:
    """Token ids of `chat_text` (the template's text already holds any special tokens)."""
    text = chat_text(tokenizer, messages, tools, continue_final=continue_final)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    return (seed * 1_000_003 + step * 7_919 + rank * 104_729) % (2**63)


def process_seed(seed: int, rank: int) -> int:
    """A seed of process `rank`'s own for a stage's sampling: `seed` itself on process 0, so a one-process run samples
    what it always did."""
    return seed if rank == 0 else step_seed(seed, 0, rank)


def sampling_params(cfg: Config, max_new_tokens: int) -> SamplingParams:
    s = cfg.sampling
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_new_tokens=max_new_tokens)


def greedy_params(max_new_tokens: int) -> SamplingParams:
    """Greedy decoding on either backend: top-k 1 keeps only the most likely token."""
    return SamplingParams(temperature=1.0, top_p=1.0, top_k=1, max_new_tokens=max_new_tokens)


def backend_name(cfg: Config, model_dir: str | Path) -> str:
    """`sampling.backend` with auto decided: vllm on CUDA when it is installed (one engine per process), else hf.
    On this project's CPU hf stays the default: in the cpu profile's bf16 vLLM's CPU kernels decode at half hf's speed
    (no bf16 units); in float32 the two tie at training length and vllm wins at evaluation and multi-turn
    (docs/scale.md, Rollout backends). vllm asked for but not installed, or on a CPU for a head size vLLM's CPU
    attention does not take (tiny-random's 16), is a one-line error."""
    name = cfg.sampling.backend
    if name == "auto":
        return "vllm" if torch.cuda.is_available() and vllm_available() else "hf"
    if name == "vllm" and not vllm_available():
        raise ConfigError(f"sampling.backend=vllm: vllm is not installed ({INSTALL_HINT})")
    if name == "vllm" and not torch.cuda.is_available() and not runs_on_cpu(model_dir):
        raise ConfigError(f"sampling.backend=vllm: vLLM's CPU attention does not take {model_dir}'s head size "
                          "(use sampling.backend=hf)")
    return name  # an unknown name never gets here: SamplingConfig refuses it


def check_backend(cfg: Config, model_dir: str | Path) -> None:
    """The rollout engine the config names can run the model (else `backend_name`'s one-line error): what a stage
    that samples checks as it starts, before any work. A folder without a model is left to the stage's own error."""
    if (Path(model_dir) / "config.json").is_file():
        backend_name(cfg, model_dir)


def make_backend(model_dir: str | Path, tokenizer: PreTrainedTokenizerBase, cfg: Config,
                 batch_size: int, *, prompt_embeds: bool = False) -> RolloutBackend:
    """The rollout backend `sampling.backend` names (`backend_name`), holding its own copy of the policy in
    `sampling.dtype` on this process's device, kept in sync with the trainer after every step. vllm: an in-process
    engine (lopd/core/vllm_backend.py). hf: the decode loop or the static decoder (`hf_decode`). `prompt_embeds`: the
    backend will be given prompts as input embeddings (`generate(..., embeds=...)`; vLLM enables it at start-up)."""
    check_weights(model_dir)  # before an engine reads them: a corrupt file is one line, not the engine's traceback
    if backend_name(cfg, model_dir) == "vllm":
        from lopd.core.vllm_backend import VLLMBackend

        s = cfg.sampling
        return VLLMBackend(model_dir, stop_ids=_stop_ids(model_dir, tokenizer), dtype=s.dtype,
                           gpu_memory_utilization=s.gpu_memory_utilization, kv_cache_gib=s.kv_cache_gib,
                           prompt_embeds=prompt_embeds)
    static = hf_decode(cfg, model_dir) == "static"
    model = load_model(model_dir, cfg.sampling.dtype,
                       attn_implementation=STATIC_ATTENTION if static else ROLLOUT_ATTENTION).to(device())
    decoder = StaticDecoder(model, tokenizer.pad_token_id, graphs=device().type == "cuda") if static else None
    return HFBackend(model, stop_ids=_stop_ids(model_dir, tokenizer), pad_id=tokenizer.pad_token_id,
                     batch_size=batch_size, tokenizer=tokenizer, decoder=decoder)


def hf_decode(cfg: Config, model_dir: str | Path) -> str:
    """`sampling.hf_decode` with auto decided: static on a GPU for a model whose layers all attend to the whole
    context, else loop (docs/scale.md: The HF backend on a GPU). static for a sliding-window model is a one-line
    error."""
    name = cfg.sampling.hf_decode
    if name == "loop" or (name == "auto" and device().type != "cuda"):
        return "loop"
    if supports(AutoConfig.from_pretrained(model_dir)):
        return "static"
    if name == "static":
        raise ConfigError(f"sampling.hf_decode=static: {model_dir} has sliding-window layers "
                          "(use sampling.hf_decode=loop)")
    return "loop"


def _stop_ids(model_dir: str | Path, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The stop set of both backends: the tokenizer's eos and the generation config's eos ids."""
    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:  # no generation_config.json: transformers derives one from config.json
        eos = AutoConfig.from_pretrained(model_dir).eos_token_id
    return sorted(i for i in {tokenizer.eos_token_id, *_as_list(eos)} if i is not None)


def _as_list(x) -> list:
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]


def single_turn(score: ScoreFn) -> Rollouts:
    """Rollouts of one response per prompt (coding), scored on the decoded response."""

    def collect(backend: RolloutBackend, tokenizer: PreTrainedTokenizerBase, tasks: list[Task],
                params: SamplingParams, seed: int, rollouts_per_task: int) -> list[Trajectory]:
        prompts = [encode_prompt(tokenizer, t.messages, t.tools) for t in tasks]
        flat = [(g, task, prompt) for g, (task, prompt) in enumerate(zip(tasks, prompts))
                for _ in range(rollouts_per_task)]
        completions = backend.generate([p for _, _, p in flat], params, seed)
        texts = [tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
        rewards = score([task for _, task, _ in flat], texts)
        return [Trajectory(task_id=task.task_id, group=g, turns=[Turn(list(p), c.token_ids, c.logprobs)],
                           reward=r, response=text, stopped=c.stopped)
                for (g, task, p), c, text, r in zip(flat, completions, texts, rewards)]

    return collect
