"""The one source of truth for where this process computes: the accelerator's device.

accelerate's process state decides it (the local GPU of this rank under `accelerate launch` or torchrun, else
the CPU); every stage, model, teacher, composer, rollout engine and tensor of training code asks here.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
from typing import Iterator

import torch
from accelerate import PartialState

# cuBLAS is deterministic only with a fixed workspace, read when its first handle is made: set before any CUDA work.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def device() -> torch.device:
    """This process's device (the one `Accelerator().device` reports; plain `cpu` for every CPU process, where
    accelerate may say `cpu:<rank>`, which torch.load cannot map to)."""
    found = PartialState(cpu=not torch.cuda.is_available()).device
    return torch.device("cpu") if found.type == "cpu" else found


@contextlib.contextmanager
def deterministic_kernels() -> Iterator[None]:
    """Within: CUDA kernels that give the same result for the same inputs (torch's deterministic algorithms), so a
    resumed run equals an uninterrupted one. By default some accumulate with atomics in an order that varies from
    run to run: `index_add` (the losses' per-sequence means) and the backward of memory-efficient attention (masked
    batches: LOPD's composer encoder and QFormer; with `warn_only` it stays non-deterministic, hence strict). At
    real size (Qwen2.5-Coder-0.5B, one H200) two identical 2-step LOPD runs ended up to 4.2e-6 apart, with the
    same rollouts: Adam's second step turns ULP-level gradient noise into weight differences of about lr. Used
    around the training update only: the rollout engines' own kernels (vLLM's) are left as they are. A no-op on the
    CPU, whose kernels are deterministic already."""
    if device().type != "cuda":
        yield
        return
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name) if name else None
    return lib if lib is not None and hasattr(lib, "malloc_trim") else None


def release_freed_memory() -> None:
    """Hand the memory freed since the last call back to the OS (glibc's `malloc_trim`; a no-op elsewhere).
    glibc keeps freed tensor memory of under 32 MB (e.g. an activation or a layer's weight) in its arenas for reuse, so
    a CPU training process's resident size ratchets up towards the sum of its phases' peaks
    (docs/performance.md: LOPD's memory)."""
    lib = _glibc()
    if lib is not None and device().type == "cpu":
        lib.malloc_trim(0)
