"""OPSD (Zhao et al., 2026), as set up in the paper's Appendix B.

Teacher: the frozen initial model. Privileged context: the task's oracle trajectory from the shared pool,
appended to the system message with the template below. Loss: forward KL D_KL(pi_T || pi_S) over the full
vocabulary at every action token.
"""

from __future__ import annotations

from baselines.self_distill import Messages, PoolDistillation, append_to_system
from lopd.core.losses import forward_kl

TEMPLATE = ("The following is a reference plan for the upcoming task. Use it only as guidance for your own "
            "reasoning; you must still interact with the environment to complete the task.\n{demonstration}\n\n"
            "After reading the reference solution above, make sure you truly understand the reasoning behind each "
            "step. Now, using your own words and independent reasoning, derive the same final answer.")


class OPSD(PoolDistillation):
    name = "opsd"
    teacher = "frozen"

    def with_demonstration(self, messages: Messages, demonstration: str) -> Messages:
        return append_to_system(messages, TEMPLATE.format(demonstration=demonstration))

    def divergence(self):
        return forward_kl
