"""Text-context self-distillation: the shared part of SDFT, OPSD, SDPO and Skill-SD.

The teacher re-scores the student's own trajectory with privileged text added to its prompt. A method
says which text (`privileged_messages`), which teacher (`teacher` kind and EMA rate) and which divergence;
this class builds the teacher's view of each trajectory, runs the teacher without gradient, and computes
the chunked divergence at the action positions. A trajectory without privileged context (no pool entry,
no successful sibling, no skill yet) gets no distillation signal: weight 0 in the loss, and it is skipped.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any, Callable

import torch

from baselines.pool import POOL_FILE, load_pool
from baselines.teachers import Teacher
from lopd.core.config import Config
from lopd.core.losses import chunked_distillation, distillation_loss
from lopd.core.methods import Domain, Method, MethodContext, PolicyOutputs
from lopd.core.rollout import encode_prompt
from lopd.core.trajectory import TokenBatch, Trajectory, collate, with_prompt

Messages = list[dict[str, str]]
TEACHER_MESSAGES = "teacher_messages"  # trajectory.metadata key set by `prepare`


def append_to_user(messages: Messages, text: str) -> Messages:
    """A copy of `messages` with `text` appended to the first user message, after a blank line."""
    out = [dict(m) for m in messages]
    first = next(m for m in out if m["role"] == "user")
    first["content"] = f"{first['content']}\n\n{text}"
    return out


def append_to_system(messages: Messages, text: str) -> Messages:
    """A copy of `messages` with `text` appended to the system message (one is created if there is none)."""
    out = [dict(m) for m in messages]
    if out and out[0]["role"] == "system":
        out[0]["content"] = f"{out[0]['content']}\n\n{text}"
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


class SelfDistillation(Method):
    ema_rate: float | None = None

    @property
    def rollouts_per_task(self) -> int:
        return 1

    @abstractmethod
    def privileged_messages(self, trajectories: list[Trajectory]) -> list[Messages | None]:
        """The teacher's chat messages for each of the step's trajectories; None = no privileged context."""

    def divergence(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """Per-position divergence of full-vocabulary log-probs (student, teacher) -> [N]."""
        raise NotImplementedError(f"{self.name} overrides loss() instead")

    def setup(self, ctx: MethodContext) -> None:
        self.tokenizer = ctx.tokenizer
        self.messages = {t.task_id: t.messages for t in ctx.tasks}
        self.tools = {t.task_id: t.tools for t in ctx.tasks}
        self.teacher_model = Teacher(self.teacher, ctx.student, ctx.base_dir, self.ema_rate, ctx.accelerator)

    def prepare(self, trajectories: list[Trajectory]) -> None:
        for traj, messages in zip(trajectories, self.privileged_messages(trajectories)):
            traj.metadata[TEACHER_MESSAGES] = messages

    def contributes(self, trajectory: Trajectory) -> bool:
        return trajectory.metadata[TEACHER_MESSAGES] is not None

    def teacher_view(self, trajectories: list[Trajectory]) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Teacher hidden states [N, D] at the action positions, each trajectory's weight [B] (1 with
        privileged context, else 0) and the mean number of privileged prompt tokens the teacher read."""
        rows, extra = [], []
        for traj in trajectories:
            messages = traj.metadata[TEACHER_MESSAGES]
            prompt = encode_prompt(self.tokenizer, messages or self.messages[traj.task_id], self.tools[traj.task_id])
            rows.append(with_prompt(traj, prompt))
            if messages is not None:
                extra.append(len(prompt) - len(traj.turns[0].context_ids))
        hidden_t_N_D = self.teacher_model.hidden_at_actions(collate(rows, self.tokenizer.pad_token_id,
                                                                    self.teacher_model.device))
        weights_B = torch.tensor([float(t.metadata[TEACHER_MESSAGES] is not None) for t in trajectories],
                                 device=hidden_t_N_D.device)
        return hidden_t_N_D, weights_B, {"teacher_context_tokens": sum(extra) / len(extra) if extra else 0.0}

    def loss(self, student: PolicyOutputs, batch: TokenBatch,
             trajectories: list[Trajectory]) -> tuple[torch.Tensor, dict[str, float]]:
        hidden_t_N_D, weights_B, metrics = self.teacher_view(trajectories)
        kl_N, student.logp_N, _ = chunked_distillation(
            student.hidden_N_D, student.weight_V_D, hidden_t_N_D, self.teacher_model.weight_V_D, student.targets_N,
            self.divergence(), student.temperature, student.chunk_size)
        w_N = student.token_weights_N()  # train.tis_cap (from the logp_N just set); None when off
        loss, loss_metrics = distillation_loss(kl_N, student.sequence_N, weights_B, w_N)
        return loss, {**loss_metrics, **metrics, **student.tis_metrics(w_N)}

    def after_step(self, metrics: dict[str, float], trajectories: list[Trajectory]) -> dict[str, float]:
        self.teacher_model.after_step()
        privileged = [t.metadata[TEACHER_MESSAGES] is not None for t in trajectories]
        return {"privileged_fraction": sum(privileged) / len(privileged)}

    def state_dict(self) -> dict[str, Any]:
        return {"teacher": self.teacher_model.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.teacher_model.load_state_dict(state["teacher"])


class PoolDistillation(SelfDistillation):
    """SDFT and OPSD: the teacher reads the task's demonstration from the shared oracle pool."""

    def __init__(self, cfg: Config, domain: Domain):
        super().__init__(cfg, domain)
        self.pool_path = domain.pool / POOL_FILE

    @abstractmethod
    def with_demonstration(self, messages: Messages, demonstration: str) -> Messages:
        """The task's messages with the demonstration placed as the method's template says."""

    def setup(self, ctx: MethodContext) -> None:
        self.pool = load_pool(self.pool_path)
        super().setup(ctx)

    def inputs(self) -> list[Path]:
        return [self.pool_path]

    def privileged_messages(self, trajectories: list[Trajectory]) -> list[Messages | None]:
        return [self.with_demonstration(self.messages[t.task_id], self.pool[t.task_id].text)
                if t.task_id in self.pool else None for t in trajectories]
