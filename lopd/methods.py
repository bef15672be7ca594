"""What a training method is: the loop is shared, methods differ only in these pieces.

A method names its teacher (none / frozen / EMA), builds the teacher's privileged context, says how
many rollouts it draws per task, and turns a scored batch into a loss. The loop owns everything else
(sampling, rewards, forward passes, optimizer, checkpoints, logging).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

import torch

from lopd.trajectory import TokenBatch, Trajectory

TeacherKind = Literal["none", "frozen", "ema"]


@dataclass
class PolicyOutputs:
    """The student's forward pass over a TokenBatch, as the loss needs it."""

    logp_B_T: torch.Tensor
    """log pi(target) at every target position (temperature-scaled), with grad."""


class Method(ABC):
    name: str
    teacher: TeacherKind = "none"
    trains: bool = True

    @property
    @abstractmethod
    def rollouts_per_task(self) -> int: ...

    def prepare(self, trajectories: list[Trajectory]) -> None:
        """Annotate the whole step's trajectories (e.g. advantages) before they are split into micro-batches."""

    def contributes(self, trajectory: Trajectory) -> bool:
        """False when the trajectory's loss gradient is exactly zero, so the loop may skip its forward pass."""
        return True

    @abstractmethod
    def loss(self, student: PolicyOutputs, batch: TokenBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss for one micro-batch, normalised as a mean over its sequences."""


class Vanilla(Method):
    """The unadapted base model: the loop runs zero updates and evaluation uses the base weights."""

    name = "vanilla"
    trains = False
    rollouts_per_task = 1

    def loss(self, student: PolicyOutputs, batch: TokenBatch) -> tuple[torch.Tensor, dict[str, float]]:
        raise RuntimeError("vanilla does not train")
