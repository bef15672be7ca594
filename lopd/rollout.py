"""Rollouts: tasks -> prompts -> sampled token-in/token-out trajectories on a rollout backend.

Shared by the training loop, the experience bank and evaluation; randomness is a pure function of
(seed, step, process) so a resumed run samples exactly what an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from transformers import PreTrainedTokenizerBase

from lopd.config import Config
from lopd.models import load_model
from lopd.sampling import ROLLOUT_ATTENTION, HFBackend, SamplingParams
from lopd.trajectory import Trajectory, Turn


@dataclass(frozen=True)
class Task:
    task_id: str
    messages: list[dict[str, str]]


ScoreFn = Callable[[list[Task], list[str]], list[float]]
"""Rewards in [0, 1] for (task, decoded completion) pairs."""

def encode_prompt(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    """Render chat messages with the tokenizer's own chat template, ready for the assistant turn."""
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"])


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    return (seed * 1_000_003 + step * 7_919 + rank * 104_729) % (2**63)


def sampling_params(cfg: Config, max_new_tokens: int) -> SamplingParams:
    s = cfg.sampling
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_new_tokens=max_new_tokens)


def make_backend(model_dir: str | Path, tokenizer: PreTrainedTokenizerBase, cfg: Config, batch_size: int) -> HFBackend:
    """The CPU rollout backend: its own copy of the policy in `sampling.dtype` with the grouped-query
    decode attention, kept in sync with the trainer after every step."""
    model = load_model(model_dir, cfg.sampling.dtype, attn_implementation=ROLLOUT_ATTENTION)
    stop_ids = {tokenizer.eos_token_id, *_as_list(model.generation_config.eos_token_id)}
    return HFBackend(model, stop_ids=[i for i in stop_ids if i is not None], pad_id=tokenizer.pad_token_id,
                     batch_size=batch_size)


def _as_list(x) -> list:
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]


def rollout(backend: HFBackend, tokenizer: PreTrainedTokenizerBase, tasks: list[Task], params: SamplingParams,
            seed: int, rollouts_per_task: int) -> list[Trajectory]:
    """Sample `rollouts_per_task` single-turn trajectories per task (rewards are filled in later)."""
    prompts = [encode_prompt(tokenizer, t.messages) for t in tasks]
    flat = [(g, task, prompt) for g, (task, prompt) in enumerate(zip(tasks, prompts)) for _ in range(rollouts_per_task)]
    completions = backend.generate([p for _, _, p in flat], params, seed)
    return [Trajectory(task_id=task.task_id, group=g, turns=[Turn(list(p), c.token_ids, c.logprobs)],
                       metadata={"stopped": c.stopped})
            for (g, task, p), c in zip(flat, completions)]
