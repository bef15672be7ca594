"""The teachers of the text-context self-distillation methods: the frozen initial model, an EMA of the
student, or the live student. A teacher only scores the student's trajectories: its forward pass runs
without gradient and its output weights are detached, so no loss ever reaches a teacher's weights (for
a live teacher, the student learns only through its own side of the divergence).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from lopd.core.methods import TeacherKind
from lopd.core.models import load_model
from lopd.core.trajectory import TokenBatch


@torch.no_grad()
def ema_update_(teacher: torch.nn.Module, student: torch.nn.Module, rate: float) -> None:
    """theta_T <- (1 - rate) theta_T + rate theta_S, in place, parameter by parameter."""
    student_params = dict(student.named_parameters())
    for name, p in teacher.named_parameters():
        p.lerp_(student_params[name].detach().to(p.dtype), rate)


class Teacher:
    def __init__(self, kind: TeacherKind, student: torch.nn.Module, base_dir: str | Path,
                 ema_rate: float | None = None, accelerator=None):
        if kind not in ("frozen", "ema", "live"):
            raise ValueError(f"teacher kind {kind!r} is not frozen, ema or live")
        if kind == "ema" and not ema_rate:
            raise ValueError("an EMA teacher needs an ema_rate in (0, 1]")
        self.kind, self.ema_rate, self.student = kind, ema_rate, student
        self.accelerator = accelerator
        if kind == "live":
            self.model = student
        else:  # frozen and EMA teachers start from the initial weights, which the student starts from too; in float32,
            # like the student's master weights, so that an EMA step of rate 0.01 is not rounded away
            self.model = load_model(base_dir).eval().requires_grad_(False)

    @property
    def weight_V_D(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight.detach()

    @torch.no_grad()
    def hidden_at_actions(self, batch: TokenBatch) -> torch.Tensor:
        """Final hidden states [N, D] at the batch's action positions (row-major, as the student's)."""
        autocast = self.accelerator.autocast() if self.accelerator is not None else contextlib.nullcontext()
        with autocast:
            out = self.model(input_ids=batch.input_ids_B_L, attention_mask=batch.attention_mask_B_L,
                             output_hidden_states=True, logits_to_keep=1, use_cache=False)
        return out.hidden_states[-1][:, :-1][batch.action_mask_B_T > 0]

    def after_step(self) -> None:
        """Follow the student after its optimizer step (EMA teachers only; a frozen one never moves)."""
        if self.kind == "ema":
            ema_update_(self.model, self.student, self.ema_rate)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict() if self.kind == "ema" else {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if self.kind == "ema":
            self.model.load_state_dict(state)
