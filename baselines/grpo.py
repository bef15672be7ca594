"""GRPO (Shao et al., 2024): outcome-reward RL with group-normalised advantages, no teacher.

G rollouts per task; each rollout's advantage is its reward normalised within its group; a PPO-clip
surrogate with eps_lo = eps_hi = 0.2 and no KL term. With one optimizer step per rollout batch the
old policy is the current one (ratio 1, as TRL does with num_iterations=1); clipping acts when a
batch is reused.
"""

from __future__ import annotations

import torch

from baselines.config import GRPOConfig
from lopd.core.config import Config
from lopd.core.losses import group_advantages, ppo_clip_loss
from lopd.core.methods import Domain, Method, PolicyOutputs
from lopd.core.trajectory import TokenBatch, Trajectory


class GRPO(Method):
    name = "grpo"
    teacher = "none"
    uses_advantages = True

    def __init__(self, cfg: Config, domain: Domain):
        super().__init__(cfg, domain)
        self.config = cfg.section(GRPOConfig)

    @property
    def rollouts_per_task(self) -> int:
        return self.config.group_size

    def prepare(self, trajectories: list[Trajectory]) -> None:
        rewards_B = torch.tensor([t.reward for t in trajectories], device="cpu")  # a handful of scalars
        groups_B = torch.tensor([t.group for t in trajectories], device="cpu")
        for traj, adv in zip(trajectories, group_advantages(rewards_B, groups_B).tolist()):
            traj.advantage = adv

    def contributes(self, trajectory: Trajectory) -> bool:
        # No KL term: a zero advantage (a group with equal rewards) gives exactly zero gradient.
        return trajectory.advantage != 0.0

    def loss(self, student: PolicyOutputs, batch: TokenBatch,
             trajectories: list[Trajectory]) -> tuple[torch.Tensor, dict[str, float]]:
        logp_B_T = student.logp_B_T()
        w_N = student.token_weights_N()  # train.tis_cap: None when off
        loss, metrics = ppo_clip_loss(logp_B_T, logp_B_T.detach(), batch.advantages_B, batch.action_mask_B_T,
                                      self.config.clip_low, self.config.clip_high,
                                      None if w_N is None else student.scatter_B_T(w_N))
        return loss, {**metrics, **student.tis_metrics(w_N)}
