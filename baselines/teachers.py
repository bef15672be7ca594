"""The teachers of the text-context self-distillation methods: the frozen initial model, an EMA of the
student, or the live student. A teacher only scores the student's trajectories: its forward pass runs
without gradient and its output weights are detached, so no loss ever reaches a teacher's weights (for
a live teacher, the student learns only through its own side of the divergence).

A LoRA student's teachers hold no copy of the model (lopd/core/adapters.py): the frozen one is the student with its
adapter off, the EMA one a second adapter on the student's base that follows the student adapter's A and B.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from lopd.core.adapters import (
    EMA_TEACHER,
    adapter_state,
    adapters_off,
    add_ema_adapter,
    ema_update_adapter_,
    is_lora,
    load_adapter_state,
    only_adapter,
)
from lopd.core.device import device
from lopd.core.methods import TeacherKind
from lopd.core.models import load_model
from lopd.core.trajectory import TokenBatch


@torch.no_grad()
def ema_update_(teacher: torch.nn.Module, student: torch.nn.Module, rate: float) -> None:
    """theta_T <- (1 - rate) theta_T + rate theta_S, in place, parameter by parameter (an FSDP2 student's shards
    are gathered one parameter at a time: collective)."""
    student_params = dict(student.named_parameters())
    for name, p in teacher.named_parameters():
        theta_s = student_params[name].detach()
        p.lerp_((theta_s.full_tensor() if isinstance(theta_s, DTensor) else theta_s).to(p.dtype), rate)


class Teacher:
    def __init__(self, kind: TeacherKind, student: torch.nn.Module, base_dir: str | Path,
                 ema_rate: float | None = None, accelerator=None):
        if kind not in ("frozen", "ema", "live"):
            raise ValueError(f"teacher kind {kind!r} is not frozen, ema or live")
        if kind == "ema" and not ema_rate:
            raise ValueError("an EMA teacher needs an ema_rate in (0, 1]")
        self.kind, self.ema_rate, self.student = kind, ema_rate, student
        self.accelerator = accelerator
        self.lora = is_lora(student)
        if kind == "live" or self.lora:
            self.model = student
            if kind == "ema" and self.lora:
                add_ema_adapter(student)
        else:  # frozen and EMA teachers start from the initial weights, which the student starts from too; in float32,
            # like the student's master weights, so that an EMA step of rate 0.01 is not rounded away
            self.model = load_model(base_dir).to(device()).eval().requires_grad_(False)

    @property
    def device(self) -> torch.device:
        return self.model.get_output_embeddings().weight.device

    @property
    def weight_V_D(self) -> torch.Tensor:
        weight = self.model.get_output_embeddings().weight.detach()
        return weight.full_tensor() if isinstance(weight, DTensor) else weight  # a live FSDP2 student's shard

    @torch.no_grad()
    def hidden_at_actions(self, batch: TokenBatch) -> torch.Tensor:
        """Final hidden states [N, D] at the batch's action positions (row-major, as the student's)."""
        autocast = self.accelerator.autocast() if self.accelerator is not None else contextlib.nullcontext()
        with autocast, self._weights():
            # the decoder alone: only the last hidden state exists, not one per layer (~3 GB per 17k-token
            # sequence on a 4B model), and no logits
            inputs = dict(input_ids=batch.input_ids_B_L, attention_mask=batch.attention_mask_B_L, use_cache=False)
            if isinstance(self.model, FSDPModule):
                out = self._sharded_decoder(inputs)
            else:
                out = self.model.get_decoder()(**inputs)
        return out.last_hidden_state[:, :-1][batch.action_mask_B_T > 0]

    def _weights(self) -> contextlib.AbstractContextManager[None]:
        """A LoRA student's teacher view of the shared base: no adapter (frozen) or the EMA adapter alone."""
        if not self.lora or self.kind == "live":
            return contextlib.nullcontext()
        return adapters_off(self.model) if self.kind == "frozen" else only_adapter(self.model, EMA_TEACHER)

    def _sharded_decoder(self, inputs: dict):
        """The decoder's output for a live teacher that is an FSDP2-sharded student: its root's forward hooks gather
        the embedding and final norm, which calling the decoder directly would bypass, so the pass goes through the
        root (one position's logits) and the decoder's output is caught on the way. Collective."""
        caught = []

        def catch(module, args, output) -> None:
            caught.append(output)

        handle = self.model.get_decoder().register_forward_hook(catch)
        try:
            self.model(**inputs, logits_to_keep=1)
        finally:
            handle.remove()
        return caught[0]

    def after_step(self) -> None:
        """Follow the student after its optimizer step (EMA teachers only; a frozen one never moves)."""
        if self.kind == "ema" and self.lora:
            ema_update_adapter_(self.model, self.ema_rate)
        elif self.kind == "ema":
            ema_update_(self.model, self.student, self.ema_rate)

    def state_dict(self) -> dict[str, torch.Tensor]:
        if self.kind != "ema":
            return {}
        return adapter_state(self.model, EMA_TEACHER) if self.lora else self.model.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if self.kind == "ema" and self.lora:
            load_adapter_state(self.model, state, EMA_TEACHER)
        elif self.kind == "ema":
            self.model.load_state_dict(state)
