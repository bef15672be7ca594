"""SDPO (Huebotter et al., 2026), as set up in the paper's Appendix B.

G = 4 rollouts per task. Teacher: an EMA of the student (rate 0.05). Privileged context: a successful
sibling from the same step's group (reward >= sdpo.success_threshold; never the rollout itself; the first
such sibling, as in the SDPO reference), no external pool, in the reference's reprompt format below.
A rollout whose group has no other success gets no distillation signal that step. Loss: reverse KL on the
student's top-K (K = 100) tokens plus a tail bucket.
"""

from __future__ import annotations

from baselines.config import SDPOConfig
from baselines.self_distill import Messages, SelfDistillation, append_to_user
from lopd.core.config import Config
from lopd.core.domain import Domain
from lopd.core.losses import TopkTailReverseKL
from lopd.core.trajectory import Trajectory

TEMPLATE = "Correct solution:\n\n{solution}\n\nCorrectly solve the original question."


def successful_siblings(rewards: list[float], groups: list[int], threshold: float) -> list[int | None]:
    """For each rollout, the index of the first other rollout of its group with reward >= threshold."""
    return [next((j for j, (r, g) in enumerate(zip(rewards, groups)) if g == groups[i] and j != i and r >= threshold),
                 None) for i in range(len(rewards))]


class SDPO(SelfDistillation):
    name = "sdpo"
    teacher = "ema"

    def __init__(self, cfg: Config, domain: Domain):
        super().__init__(cfg, domain)
        self.config = cfg.section(SDPOConfig)

    @property
    def ema_rate(self) -> float:
        return self.config.ema_rate

    @property
    def rollouts_per_task(self) -> int:
        return self.config.group_size

    def privileged_messages(self, trajectories: list[Trajectory]) -> list[Messages | None]:
        siblings = successful_siblings([t.reward for t in trajectories], [t.group for t in trajectories],
                                       self.config.success_threshold)
        out = []
        for traj, j in zip(trajectories, siblings):
            if j is None:
                out.append(None)
                continue
            solution = trajectories[j].response
            out.append(append_to_user(self.messages[traj.task_id], TEMPLATE.format(solution=solution)))
        return out

    def divergence(self):
        return TopkTailReverseKL(self.config.top_k, support=self.config.support)
