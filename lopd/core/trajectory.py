"""Token-in/token-out trajectories and the padded batches built from them.

A trajectory is a list of turns. Each turn is the tokens the prompt or the environment contributed
(`context_ids`, never trained on) followed by the tokens the policy sampled (`action_ids`, with the
sampler's log-probs). Concatenating the turns gives exactly the sequence the policy saw and wrote,
so the trainer scores the very tokens that were sampled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Turn:
    context_ids: list[int]
    """Prompt tokens (first turn) or environment/tool tokens (later turns): masked out of every loss."""
    action_ids: list[int]
    """Tokens sampled by the policy."""
    action_logprobs: list[float]
    """Sampler log-probs of `action_ids`."""

    def __post_init__(self) -> None:
        if len(self.action_ids) != len(self.action_logprobs):
            raise ValueError("Turn: action_ids and action_logprobs differ in length")


@dataclass
class EpisodeBehaviour:
    """How one multi-turn episode went: why it ended, the behaviour metrics of the paper's behaviour table
    (`BEHAVIOUR_KEYS`) and what the environment's scorer said. Written by `lopd.core.multiturn`, read by the
    training loop (step means) and the agentic evaluation (benchmark means, per-episode records)."""

    ended: str
    """Why the episode ended: completed | env_end | context | env_error | step_cap."""
    steps: int
    """Policy steps taken (one turn each)."""
    tool_calls: int
    """Tool calls parsed from the policy's steps (only the first of a step is executed)."""
    invalid_calls: int
    """Tool calls that failed to parse."""
    repeated_calls: int
    """Executed calls identical (name and arguments) to an earlier one of the episode."""
    tool_calls_per_step: float
    """`tool_calls / max(steps, 1)`."""
    first_step_tokens: int
    """Tokens the policy sampled in its first step (0 when no step fit the context)."""
    reward_per_tool_call: float
    """`reward / max(tool_calls, 1)`."""
    scores: dict[str, float] = field(default_factory=dict)
    """The environment's numeric scores (`reward` and any extra, e.g. ACEBench's end_to_end / process)."""
    score_notes: dict[str, str] = field(default_factory=dict)
    """The scorer's non-numeric outputs, as text (e.g. why a simulated user failed); empty when none."""
    env_error: str = ""
    """The environment's error when it raised mid-episode (`ended == "env_error"`); empty otherwise."""


BEHAVIOUR_KEYS = ("steps", "tool_calls_per_step", "first_step_tokens", "reward_per_tool_call", "repeated_calls",
                  "invalid_calls")
"""The `EpisodeBehaviour` fields of the paper's behaviour table: per-episode numbers averaged into its metrics."""


@dataclass
class Trajectory:
    task_id: str
    turns: list[Turn]
    reward: float = 0.0
    """Outcome reward in [0, 1]."""
    group: int = 0
    """Index of the rollout group (the rollouts of one task in one step share it)."""
    advantage: float = 0.0
    """Set by the method over the whole step (e.g. GRPO's group-normalised reward)."""
    response: str = ""
    """The response as text, set by the rollout: the decoded completion (single turn), or the observation-lite
    trace of the executed tool calls and their observations (multi-turn). What banks, sibling demonstrations
    and skill summaries read."""
    stopped: bool = False
    """Whether the (last) sampled action ended on a stop token rather than at the token cap."""
    behaviour: EpisodeBehaviour | None = None
    """How the episode went, for multi-turn rollouts; None for single-turn ones."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """A method's own per-step scratch (e.g. a baseline's teacher messages); data that crosses modules has a
    typed field above."""

    def __post_init__(self) -> None:
        if not self.turns:  # the first turn's context is the prompt, which teacher views replace
            raise ValueError("Trajectory: needs at least one turn")

    @property
    def token_ids(self) -> list[int]:
        return [t for turn in self.turns for t in (*turn.context_ids, *turn.action_ids)]

    @property
    def action_mask(self) -> list[int]:
        return [m for turn in self.turns for m in (*[0] * len(turn.context_ids), *[1] * len(turn.action_ids))]

    @property
    def sampler_logprobs(self) -> list[float]:
        return [lp for turn in self.turns for lp in (*[0.0] * len(turn.context_ids), *turn.action_logprobs)]

    @property
    def num_action_tokens(self) -> int:
        return sum(len(turn.action_ids) for turn in self.turns)


def with_prompt(trajectory: Trajectory, prompt_ids: list[int]) -> Trajectory:
    """The same trajectory seen from another prompt (a teacher's view): the first turn's context is
    replaced, every action and later turn is unchanged, so action positions align one to one."""
    first = trajectory.turns[0]
    return Trajectory(trajectory.task_id, [Turn(list(prompt_ids), first.action_ids, first.action_logprobs),
                                           *trajectory.turns[1:]],
                      reward=trajectory.reward, group=trajectory.group, advantage=trajectory.advantage)


@dataclass
class TokenBatch:
    """Right-padded tensors for a list of trajectories, aligned to next-token targets.

    Position t of a `_B_T` tensor describes the prediction of token t+1 from the logits at position t.
    """

    input_ids_B_L: torch.Tensor
    attention_mask_B_L: torch.Tensor
    target_ids_B_T: torch.Tensor
    action_mask_B_T: torch.Tensor
    sampler_logprobs_B_T: torch.Tensor
    rewards_B: torch.Tensor
    advantages_B: torch.Tensor


def collate(trajectories: list[Trajectory], pad_id: int, device: torch.device | str = "cpu") -> TokenBatch:
    """Pad trajectories into a TokenBatch on `device` (pure: no model, no randomness). The rows are filled on the
    CPU and each tensor is moved once, not row by row."""
    width = max(len(t.token_ids) for t in trajectories)
    n = len(trajectories)
    cpu = torch.device("cpu")
    ids = torch.full((n, width), pad_id, dtype=torch.long, device=cpu)
    attention = torch.zeros((n, width), dtype=torch.long, device=cpu)
    action = torch.zeros((n, width), dtype=torch.float32, device=cpu)
    sampler = torch.zeros((n, width), dtype=torch.float32, device=cpu)
    for row, traj in enumerate(trajectories):
        length = len(traj.token_ids)
        ids[row, :length] = torch.tensor(traj.token_ids, device=cpu)
        attention[row, :length] = 1
        action[row, :length] = torch.tensor(traj.action_mask, dtype=torch.float32, device=cpu)
        sampler[row, :length] = torch.tensor(traj.sampler_logprobs, device=cpu)
    ids, attention, action, sampler = (t.to(device) for t in (ids, attention, action, sampler))
    return TokenBatch(
        input_ids_B_L=ids,
        attention_mask_B_L=attention,
        target_ids_B_T=ids[:, 1:],
        action_mask_B_T=action[:, 1:],
        sampler_logprobs_B_T=sampler[:, 1:],
        rewards_B=torch.tensor([t.reward for t in trajectories], dtype=torch.float32, device=device),
        advantages_B=torch.tensor([t.advantage for t in trajectories], dtype=torch.float32, device=device),
    )
