"""The one source of truth for where this process computes: the accelerator's device.

accelerate's process state decides it (the local GPU of this rank under `accelerate launch` or torchrun, else
the CPU); every stage, model, teacher, composer, rollout engine and tensor of training code asks here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import torch
from accelerate import PartialState


def device() -> torch.device:
    """This process's device (the one `Accelerator().device` reports; plain `cpu` for every CPU process, where
    accelerate may say `cpu:<rank>`, which torch.load cannot map to)."""
    found = PartialState(cpu=not torch.cuda.is_available()).device
    return torch.device("cpu") if found.type == "cpu" else found


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name) if name else None
    return lib if lib is not None and hasattr(lib, "malloc_trim") else None


def release_freed_memory() -> None:
    """Hand the memory freed since the last call back to the OS (glibc's `malloc_trim`; a no-op elsewhere).
    glibc keeps freed tensor memory of under 32 MB (e.g. an activation or a layer's weight) in its arenas for reuse, so
    a CPU training process's resident size ratchets up towards the sum of its phases' peaks (README: LOPD's memory)."""
    lib = _glibc()
    if lib is not None and device().type == "cpu":
        lib.malloc_trim(0)
