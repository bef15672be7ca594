"""What a training method is: the loop is shared, methods differ only in these pieces.

A method names its teacher (none / frozen / EMA), builds the teacher's privileged context, says how
many rollouts it draws per task, and turns a scored batch into a loss. The loop owns everything else
(sampling, rewards, forward passes, optimizer, checkpoints, logging).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import torch
from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase

from lopd.core.config import Config
from lopd.core.domain import Domain
from lopd.core.losses import token_logprobs
from lopd.core.rollout import Task
from lopd.core.trajectory import TokenBatch, Trajectory

TeacherKind = Literal["none", "frozen", "ema", "live"]
"""none: no teacher; frozen: the initial model; ema: an exponential moving average of the student; live: the
student itself (its current weights, without gradient)."""


@dataclass
class PolicyOutputs:
    """The student's forward pass over a TokenBatch at its N action positions, as the loss needs it.

    The vocabulary projection is left to the loss: `logp_B_T()` gives log pi(target) (chunked), while a
    distillation loss projects `hidden_N_D` itself and may hand back the target log-probs it got on the way.
    """

    hidden_N_D: torch.Tensor
    """Final hidden states at the action positions (row-major over the batch), with grad."""
    weight_V_D: torch.Tensor
    """The policy's output embedding."""
    targets_N: torch.Tensor
    """The sampled token at each action position."""
    where_B_T: torch.Tensor
    """Boolean [B, T] mask of the action positions."""
    temperature: float
    chunk_size: int
    logp_N: torch.Tensor | None = None
    """log pi(target) at the action positions once computed (by `logp_B_T` or by the loss)."""

    def logp_B_T(self) -> torch.Tensor:
        """log pi(target) (temperature-scaled) at every target position, 0 off the action mask."""
        if self.logp_N is None:
            self.logp_N = token_logprobs(self.hidden_N_D, self.weight_V_D, self.targets_N, self.temperature,
                                         self.chunk_size)
        return torch.zeros(self.where_B_T.shape, dtype=self.logp_N.dtype).masked_scatter(self.where_B_T, self.logp_N)

    @property
    def sequence_N(self) -> torch.Tensor:
        """Which sequence of the batch each action position belongs to."""
        return self.where_B_T.nonzero()[:, 0]


@dataclass
class MethodContext:
    """What the loop hands a method before training starts."""

    cfg: Config
    accelerator: Accelerator
    tokenizer: PreTrainedTokenizerBase
    base_dir: Path
    student: torch.nn.Module
    """The model being trained (unwrapped), for teachers that follow it."""
    tasks: Sequence[Task]


class Method(ABC):
    name: str
    teacher: TeacherKind = "none"
    trains: bool = True

    @classmethod
    def from_config(cls, cfg: Config, domain: Domain) -> "Method":
        """Build the method for a training domain (the registry calls this)."""
        return cls(cfg)

    @property
    @abstractmethod
    def rollouts_per_task(self) -> int: ...

    def steps(self, cfg: Config) -> int:
        """Optimizer steps to run: the method section's `steps`, else the shared `train.steps`."""
        own = getattr(getattr(cfg, self.name, None), "steps", None)
        return cfg.train.steps if own is None else own

    def setup(self, ctx: MethodContext) -> None:
        """Load what the method needs beyond the student (teacher, composer, bank); called once by the loop."""

    def inputs(self) -> list[Path]:
        """Files and folders `setup` reads besides the base model (upstream stage outputs: bank, pool, composer).
        The resume fingerprint hashes them, so a rebuilt input re-trains instead of resuming."""
        return []

    def param_groups(self) -> list[dict[str, Any]]:
        """Extra AdamW parameter groups trained with the student (e.g. LOPD's composer)."""
        return []

    def prepare(self, trajectories: list[Trajectory]) -> None:
        """Annotate the whole step's trajectories (e.g. advantages) before they are split into micro-batches."""

    def contributes(self, trajectory: Trajectory) -> bool:
        """False when the trajectory's loss gradient is exactly zero, so the loop may skip its forward pass."""
        return True

    @abstractmethod
    def loss(self, student: PolicyOutputs, batch: TokenBatch,
             trajectories: list[Trajectory]) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss for one micro-batch (`trajectories` are its rows), normalised as a mean over its sequences."""

    def after_step(self, metrics: dict[str, float], trajectories: list[Trajectory]) -> dict[str, float]:
        """Update method state after the optimizer step (dual variables, EMA teachers, banks); returns
        extra metrics to log."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Method state a resumed run needs beyond the student and the optimizer."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` when resuming."""
