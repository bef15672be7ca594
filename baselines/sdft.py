"""SDFT (Shenfeld et al., 2026), as set up in the paper's Appendix B.

Teacher: an EMA shadow of the student (alpha_EMA = 0.01, synced after every step). Privileged context: the
task's oracle demonstration from the shared pool, appended to the first user message with the template
below. Loss: forward KL D_KL(pi_T || pi_S) over the full vocabulary at every action token.
"""

from __future__ import annotations

from baselines.config import SDFTConfig
from baselines.self_distill import Messages, PoolDistillation, append_to_user
from lopd.core.config import Config
from lopd.core.domain import Domain
from lopd.core.losses import forward_kl

TEMPLATE = ("This is an example for a response to the question:\n{demonstration}\n\n"
            "Now answer with a response of your own, including the thinking process.")


class SDFT(PoolDistillation):
    name = "sdft"
    teacher = "ema"

    def __init__(self, cfg: Config, domain: Domain):
        super().__init__(cfg, domain)
        self.config = cfg.section(SDFTConfig)

    @property
    def ema_rate(self) -> float:
        return self.config.ema_rate

    def with_demonstration(self, messages: Messages, demonstration: str) -> Messages:
        return append_to_user(messages, TEMPLATE.format(demonstration=demonstration))

    def divergence(self):
        return forward_kl
