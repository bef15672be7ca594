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
from lopd.core.losses import token_logprobs, truncated_is_weights
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
    With `tis_cap` set, `token_weights_N()` gives the truncated importance weights every method multiplies its
    per-token loss terms by (`train.tis_cap`).
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
    """log pi(target) at the action positions once computed: with grad by `logp_B_T`, without by a distillation
    loss (`chunked_distillation`), which needs it only for importance weights."""
    sampler_logp_N: torch.Tensor | None = None
    """The rollout engine's log pi_sampler(target) at the action positions (row-major, like `targets_N`)."""
    tis_cap: float | None = None
    """Truncated importance sampling cap C (`train.tis_cap`); None = off."""

    def _logp_N(self) -> torch.Tensor:
        if self.logp_N is None:
            self.logp_N = token_logprobs(self.hidden_N_D, self.weight_V_D, self.targets_N, self.temperature,
                                         self.chunk_size)
        return self.logp_N

    def logp_B_T(self) -> torch.Tensor:
        """log pi(target) (temperature-scaled) at every target position, 0 off the action mask."""
        return self.scatter_B_T(self._logp_N())

    def scatter_B_T(self, values_N: torch.Tensor) -> torch.Tensor:
        """Per-action-position values laid out as [B, T], 0 off the action mask."""
        return values_N.new_zeros(self.where_B_T.shape).masked_scatter(self.where_B_T, values_N)

    def token_weights_N(self) -> torch.Tensor | None:
        """The truncated importance weights min(pi_train / pi_sampler, tis_cap) at the action positions ([N],
        float32, detached), from `logp_N` (computed as `logp_B_T` does if no loss has set it yet); None when
        TIS is off. A loss that sets `logp_N` itself calls this afterwards."""
        if self.tis_cap is None:
            return None
        if self.sampler_logp_N is None:
            raise ValueError("train.tis_cap is set but the policy outputs carry no sampler log-probs")
        return truncated_is_weights(self._logp_N(), self.sampler_logp_N, self.tis_cap)

    def tis_metrics(self, w_N: torch.Tensor | None) -> dict[str, float]:
        """Diagnostics of weights from `token_weights_N()`: their mean and the share of tokens at the cap
        ({} when TIS is off)."""
        if w_N is None or not w_N.numel():
            return {}
        return {"tis_weight_mean": w_N.mean().item(),
                "tis_capped_fraction": (w_N >= self.tis_cap).float().mean().item()}

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
    """One training method on the shared loop. Every method is built the same way, `Method(cfg, domain)`: the run's
    config (the method reads its own section) and the domain it trains on (where its inputs live)."""

    name: str
    teacher: TeacherKind = "none"
    trains: bool = True
    uses_advantages: bool = False
    """Its loss weighs each trajectory's tokens by `trajectory.advantage`, which its `prepare` sets."""

    def __init__(self, cfg: Config, domain: Domain):
        self.cfg, self.domain = cfg, domain

    @property
    @abstractmethod
    def rollouts_per_task(self) -> int: ...

    def steps(self, cfg: Config) -> int:
        """Optimizer steps to run: the method section's `steps`, else the shared `train.steps`."""
        return self._own_or_shared(cfg, "steps")

    def lr(self, cfg: Config) -> float:
        """The policy's learning rate: the method section's `lr`, else the shared `train.lr`."""
        return self._own_or_shared(cfg, "lr")

    def _own_or_shared(self, cfg: Config, key: str) -> Any:
        own = getattr(cfg.method_sections.get(self.name), key, None)
        return getattr(cfg.train, key) if own is None else own

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
