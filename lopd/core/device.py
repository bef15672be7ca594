"""The one source of truth for where this process computes: the accelerator's device.

accelerate's process state decides it (the local GPU of this rank under `accelerate launch` or torchrun, else
the CPU); every stage, model, teacher, composer, rollout engine and tensor of training code asks here.
"""

from __future__ import annotations

import torch
from accelerate import PartialState


def device() -> torch.device:
    """This process's device (the one `Accelerator().device` reports; plain `cpu` for every CPU process, where
    accelerate may say `cpu:<rank>`, which torch.load cannot map to)."""
    found = PartialState(cpu=not torch.cuda.is_available()).device
    return torch.device("cpu") if found.type == "cpu" else found
