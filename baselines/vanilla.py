"""Vanilla: the unadapted base model (the tables' first row). It trains nothing; its checkpoint points at the base."""

from __future__ import annotations

import torch

from lopd.core.methods import Method, PolicyOutputs
from lopd.core.trajectory import TokenBatch, Trajectory


class Vanilla(Method):
    """The unadapted base model: the loop runs zero updates and evaluation uses the base weights."""

    name = "vanilla"
    trains = False
    rollouts_per_task = 1

    def loss(self, student: PolicyOutputs, batch: TokenBatch,
             trajectories: list[Trajectory]) -> tuple[torch.Tensor, dict[str, float]]:
        raise RuntimeError("vanilla does not train")
