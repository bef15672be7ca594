"""Device correctness: training code creates no tensor without saying where, and asks `lopd.core.device` where."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lopd.core import device as device_module
from lopd.core.config import ConfigError, resolve
from lopd.core.device import _glibc, cpu_matmul, device, mixed_precision, release_freed_memory, use_cpu_matmul

ROOT = Path(__file__).parents[1]
TRAINING_CODE = ["lopd", "baselines", "pipelines"]
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "linspace", "eye", "rand", "randn",
             "randint", "randperm", "Generator"}
"""torch functions that allocate on the default device unless given `device=` (`*_like` and `Tensor.new_*` follow
their argument's device and are fine)."""


def factories_without_device(source: str) -> list[tuple[int, str]]:
    """(line, call) of every `torch.<factory>(...)` call without a `device=` keyword."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords)):
            found.append((node.lineno, f"torch.{node.func.attr}"))
    return found


def test_the_check_finds_what_it_should():
    src = ("import torch\nx = torch.zeros(3)\ny = torch.zeros(3, device=d)\nz = torch.ones_like(x)\n"
           "g = torch.Generator()\nw = x.new_zeros(2)\nv = torch.tensor([1], dtype=torch.long)\n")
    assert factories_without_device(src) == [(2, "torch.zeros"), (5, "torch.Generator"), (7, "torch.tensor")]


def test_training_code_names_a_device_for_every_tensor_it_creates():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {call}"
                 for package in TRAINING_CODE for path in sorted((ROOT / package).rglob("*.py"))
                 for line, call in factories_without_device(path.read_text())]
    assert not offenders, "tensor factories without device= (use lopd.core.device.device() or the input's):\n" + \
        "\n".join(offenders)


def test_the_device_is_the_accelerators():
    from accelerate import Accelerator
    accelerators = Accelerator(cpu=not torch.cuda.is_available()).device
    assert device().type == accelerators.type == ("cuda" if torch.cuda.is_available() else "cpu")
    # One process on a GPU: both say plain `cuda` (the current GPU); a tensor lands on the same GPU either way.
    assert torch.zeros(0, device=device()).device == torch.zeros(0, device=accelerators).device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (make gpu-check runs this)")
def test_models_and_batches_live_on_the_gpu(tiny_model_dir):
    from lopd.core.config import resolve
    from lopd.core.models import load_tokenizer
    from lopd.core.rollout import make_backend
    from lopd.core.trajectory import Trajectory, Turn, collate

    cfg = resolve({"profile": "smoke"})
    backend = make_backend(tiny_model_dir, load_tokenizer(tiny_model_dir), cfg, 2)
    assert backend.device.type == "cuda"
    batch = collate([Trajectory("t", [Turn([1, 2], [3], [0.0])])], 0, device())
    assert batch.input_ids_B_L.device.type == batch.advantages_B.device.type == "cuda"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists() or _glibc() is None, reason="glibc on Linux only")
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-training measure: a no-op where training runs on a GPU")
def test_release_freed_memory_returns_freed_heap_pages_to_the_os():
    # 100 kB tensors sit below glibc's mmap threshold, so they come from its heap; freeing every other one leaves
    # holes between live blocks, which free() alone never hands back.
    blocks = [torch.ones(25_000, device="cpu") for _ in range(3_000)]  # 300 MB, every page touched
    del blocks[::2]
    holes = 1_500 * 100_000
    before = _rss_bytes()
    release_freed_memory()
    assert before - _rss_bytes() > 0.6 * holes
    del blocks


HEAP_PROBE = """
import ctypes, json, torch
from lopd.core.device import _glibc, malloc_mode, release_freed_memory, reuse_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]

lib = _glibc()
lib.mallinfo2.restype = Info
def state():
    info = lib.mallinfo2()
    rss = int(open("/proc/self/statm").read().split()[1]) * 4096
    return {"heap": info.arena, "used": info.uordblks, "mapped": info.hblkhd, "rss": rss}
out = {"start": state(), "modes": [malloc_mode()]}
block = torch.ones(100_000_000, dtype=torch.uint8)
out["default"] = state()
del block
reuse_freed_memory()
out["modes"].append(malloc_mode())
out["set"] = state()
block = torch.ones(100_000_000, dtype=torch.uint8)
out["first"] = state()
del block
block = torch.ones(100_000_000, dtype=torch.uint8)
out["second"] = state()
del block
out["freed"] = state()
release_freed_memory()
out["released"] = state()
print(json.dumps(out))
"""


@pytest.mark.skipif(_glibc() is None or not hasattr(_glibc(), "mallinfo2"), reason="glibc 2.33+ only")
def test_reuse_freed_memory_serves_large_blocks_from_the_heap_and_reuses_them():
    """A 100 MB tensor is a fresh mapping by default; after `reuse_freed_memory` it and the next come from glibc's
    heap, and the freed memory stays resident until `release_freed_memory` hands it back; `malloc_mode` says which.
    In a fresh process: the setting is the process's."""
    proc = subprocess.run([sys.executable, "-c", HEAP_PROBE], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout.strip().splitlines()[-1])
    block = 100_000_000
    assert s["modes"] == ["mapped", "heap"]
    assert s["default"]["mapped"] - s["start"]["mapped"] >= block
    assert s["first"]["mapped"] == s["set"]["mapped"] and s["first"]["used"] - s["set"]["used"] >= block
    assert s["second"]["mapped"] == s["set"]["mapped"]
    assert s["freed"]["rss"] - s["set"]["rss"] > 0.9 * block
    assert s["freed"]["rss"] - s["released"]["rss"] > 0.9 * block


def test_every_stage_reuses_freed_memory_from_its_start(monkeypatch):
    import pipelines.common as common

    calls = []
    monkeypatch.setattr(common, "reuse_freed_memory", lambda: calls.append("reuse"))
    common.run_stage(lambda: calls.append("main"))
    assert calls == ["reuse", "main"]


def test_deterministic_kernels_on_a_gpu_only_within_and_strict(monkeypatch):
    """On CUDA the update runs with torch's deterministic algorithms, strict (with warn_only, memory-efficient
    attention's backward stays non-deterministic), and the caller's setting comes back after; on the CPU nothing
    changes. cuBLAS's fixed workspace is set from the first import on."""
    import lopd.core.device as device_module

    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] in (":4096:8", ":16:8")
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    with device_module.deterministic_kernels():
        assert (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) \
            == before or device().type == "cuda"
    monkeypatch.setattr(device_module, "device", lambda: torch.device("cuda"))
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with device_module.deterministic_kernels():
            assert torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(*before[:1], warn_only=before[1])


def test_auto_matmul_takes_onednn_only_where_it_computes_in_float32(monkeypatch):
    """On this CPU `auto` sends float32 products to oneDNN (its float32 result, bit for bit, accurate to float32
    against float64) where the CPU has bf16 units, else leaves BLAS; where the probe finds rounding it keeps BLAS."""
    a_M_K, b_N_K = torch.randn(96, 384), torch.randn(200, 384)
    exact = a_M_K.double() @ b_N_K.double().T
    try:
        path = use_cpu_matmul("auto")
        assert path == cpu_matmul()
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            assert path == "onednn" and torch.backends.mkldnn.matmul.fp32_precision == "bf16"
            assert torch.equal(a_M_K @ b_N_K.T, torch.ops.mkldnn._linear_pointwise(a_M_K, b_N_K, None, "none", [], ""))
        else:
            assert path == "blas"
        assert ((a_M_K @ b_N_K.T).double() - exact).abs().max() < 1e-5 * exact.abs().max()
        monkeypatch.setattr(device_module, "_float32_accurate", lambda: False)
        assert use_cpu_matmul("auto") == "blas" == cpu_matmul()
        assert torch.backends.mkldnn.matmul.fp32_precision == "none"
        monkeypatch.undo()
        use_cpu_matmul("auto")
        assert use_cpu_matmul("blas") == "blas" and torch.backends.mkldnn.matmul.fp32_precision == "none"
        with pytest.raises(ValueError, match="model.cpu_matmul: 'mkl'"):
            use_cpu_matmul("mkl")
    finally:
        use_cpu_matmul("blas")


def test_the_probe_tells_float32_from_bf16_rounding():
    """The probe's bound separates the two: float32 products pass it, bf16-rounded inputs fail it."""
    try:
        torch.backends.mkldnn.matmul.fp32_precision = "none"
        assert device_module._float32_accurate()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not device_module._float32_accurate()
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = "none"


def test_mixed_precision_auto_is_bf16_only_where_the_device_computes_it_natively(monkeypatch):
    """`train.mixed_precision`: bf16 and no pass as set; auto is bf16 on a CPU with bf16 units (AVX512-BF16 or
    AMX) and on a GPU that supports it, else no; the config refuses anything else, naming the key."""
    assert mixed_precision("no") == "no" and mixed_precision("bf16") == "bf16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for units in (True, False):
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: units)
        assert mixed_precision("auto") == ("bf16" if units else "no")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for supported in (True, False):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: supported)
        assert mixed_precision("auto") == ("bf16" if supported else "no")
    monkeypatch.undo()
    assert resolve({"profile": "smoke", "train": {"mixed_precision": "auto"}}).train.mixed_precision == "auto"
    with pytest.raises(ConfigError, match="train.mixed_precision: 'fp16' is not bf16, no or auto"):
        resolve({"profile": "smoke", "train": {"mixed_precision": "fp16"}})
    with pytest.raises(ConfigError, match="model.cpu_matmul: 'mkl' is not auto or blas"):
        resolve({"profile": "smoke", "model": {"cpu_matmul": "mkl"}})
