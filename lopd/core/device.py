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

CPU_MATMULS = ("auto", "blas")
"""`model.cpu_matmul`'s values (`use_cpu_matmul`)."""
_cpu_matmul = "blas"
"""The float32 matmul path this process took on the CPU (`use_cpu_matmul`): onednn | blas."""


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


def use_cpu_matmul(mode: str) -> str:
    """Choose how this process multiplies float32 matrices on the CPU (`model.cpu_matmul`); returns the path taken,
    onednn or blas (`cpu_matmul`).

    torch sends float32 products to its BLAS (MKL on x86), which on some CPUs runs far below the cores' bound: on AMD
    cores with AVX-512 MKL picks slower kernels than the CPU allows (2 Zen 5 cores, the MLP of a 0.5B model over 3,072
    tokens: 181 GFLOP/s against oneDNN's 353, and a GRPO update 1.6x as fast through oneDNN; `make bench`). torch
    sends them to oneDNN instead when `torch.backends.mkldnn.matmul.fp32_precision` is bf16, which allows oneDNN
    to round the inputs to bf16; on a CPU without AMX it has no kernel that does, and computes in float32 (the same
    result as its plain float32 product, bit for bit). `auto` takes that path only where a probe product comes out
    float32-accurate, so a CPU where oneDNN would round (AMX) keeps BLAS; `blas` is torch's default. Off the CPU
    (CUDA) nothing changes: blas."""
    global _cpu_matmul
    if mode not in CPU_MATMULS:
        raise ValueError(f"model.cpu_matmul: {mode!r} is not one of {', '.join(CPU_MATMULS)}")
    torch.backends.mkldnn.matmul.fp32_precision = "none"
    _cpu_matmul = "blas"
    if mode == "auto" and not torch.cuda.is_available() and _cpu_has_bf16():
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        if _float32_accurate():
            _cpu_matmul = "onednn"
        else:
            torch.backends.mkldnn.matmul.fp32_precision = "none"
    return _cpu_matmul


def mixed_precision(setting: str) -> str:
    """`train.mixed_precision` on this machine, as accelerate takes it: bf16 and no as set; auto is bf16 where the
    device computes bf16 natively (a CUDA GPU that supports it; a CPU with bf16 units: AVX512-BF16 or AMX), else no.
    On a CPU bf16 changes the numbers (inputs rounded to 8 significant bits), so it is never chosen unasked;
    `make bench` measures whether it pays."""
    if setting != "auto":
        return setting
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if _cpu_has_bf16() else "no"


def _cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 units oneDNN uses (AVX512-BF16 or AMX)."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def cpu_matmul() -> str:
    """The float32 matmul path `use_cpu_matmul` took in this process (blas before any call)."""
    return _cpu_matmul


def _float32_accurate() -> bool:
    """Whether a float32 product now matches float64 to float32's accuracy: relative error under 1e-5, where inputs
    rounded to bf16 (8 significant bits) give about 1e-3."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a_M_K = torch.randn(64, 512, generator=gen, device="cpu")
    b_K_N = torch.randn(512, 64, generator=gen, device="cpu")
    exact = a_M_K.double() @ b_K_N.double()
    return ((a_M_K @ b_K_N).double() - exact).abs().max().item() < 1e-5 * exact.abs().max().item()


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name) if name else None
    return lib if lib is not None and hasattr(lib, "malloc_trim") else None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's `mallopt` parameters (malloc.h)."""
HEAP_BLOCK_LIMIT = 1 << 30
"""`reuse_freed_memory`: blocks up to this size come from glibc's heap, larger ones (a 2 GiB KV cache) are mapped."""
_malloc_mode = "mapped"
"""`malloc_mode`'s answer for this process."""


def reuse_freed_memory() -> None:
    """Let glibc serve memory blocks of up to 1 GiB from its heap and keep what is freed there for reuse, until
    `release_freed_memory` hands it back at the end of a phase. By default a block over 32 MB (a [rows, vocabulary]
    logits block in every sampling step, an MLP's activations over a prefill chunk or a micro-batch, a loss chunk) is
    a fresh mapping, unmapped when freed, so each step page-faults its temporaries in again: on 2 Zen 5 cores that
    took a fifth of a code evaluation's sampling and a sixth of a GRPO update (`python scripts/bench/bench_malloc.py`).
    The same bytes are computed, elsewhere in memory (weights and sampled tokens identical, measured there). Once per
    process, before its work (`pipelines.common.run_stage`); a no-op without glibc."""
    global _malloc_mode
    lib = _glibc()
    if lib is not None:
        lib.mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK_LIMIT)
        lib.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)  # the largest it takes (an int): freed memory stays until released
        _malloc_mode = "heap"


def stage_malloc_mode() -> str:
    """The mode every stage runs with (`pipelines.common.run_stage` calls `reuse_freed_memory`): heap on glibc."""
    return "heap" if _glibc() is not None else "mapped"


def malloc_mode() -> str:
    """How glibc serves this process's large blocks: heap (`reuse_freed_memory`) or mapped (its default; also without
    glibc). Benchmarks record it (`malloc`): `make estimate` prices a run at the rates of the mode it runs with."""
    return _malloc_mode


def release_freed_memory() -> None:
    """Hand the memory freed since the last call back to the OS (glibc's `malloc_trim`; a no-op elsewhere), at the
    end of a phase of the training loop (a step's or a validation's sampling, a micro-batch's backward, the optimizer
    step, the weight sync). glibc keeps freed memory in its heap for reuse (`reuse_freed_memory`), so without it a CPU
    training process's resident size ratchets up towards the sum of its phases' peaks (docs/performance.md: LOPD's
    memory)."""
    lib = _glibc()
    if lib is not None and device().type == "cpu":
        lib.malloc_trim(0)
