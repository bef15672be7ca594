"""scripts/bench/bench_gpu.py at tiny size on the CPU: every engine and update of the GPU benchmark runs (code
paths)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from pyfork import python

REPO = Path(__file__).resolve().parents[1]


def test_bench_gpu_runs_every_part_at_tiny_size(tmp_path):
    out = tmp_path / "gpu.json"
    proc = python(["scripts/bench/bench_gpu.py", "--size", "tiny", "--out", out], cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [r["architecture"] for r in result["rollout"]] == ["qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b", "qwen3-4b"]
    for r in result["rollout"]:
        for engine in ("loop", "static"):  # no stop token: every row decodes its whole budget
            assert r[engine]["sampled_tokens"] == r["prompts"] * r["new_tokens"]
            assert 0 < r[engine]["of_bound"]
        assert r["static"]["graphs"] is False and r["vllm"].startswith("n/a: ")
    gaps = result["rollout"][0]["trainer_logprob_gap"]
    assert all(0 < gap["max"] < 0.1 for gap in gaps.values())  # bf16 engine against fp32 master + bf16 autocast
    assert [(u["profile"], u["architecture"]) for u in result["update"]] == [("cpu", "qwen2.5-coder-0.5b"),
                                                                             ("paper", "qwen3-4b")]
    for u in result["update"]:
        for kind in ("plain", "grpo", "lopd"):
            assert u[kind]["step_s"] > 0 and u[kind]["tokens_per_s"] > 0, (u["profile"], kind, u[kind])


def test_bench_gpu_refuses_real_sizes_without_cuda(monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_gpu", REPO / "scripts" / "bench" / "bench_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py"])
    with pytest.raises(SystemExit, match=r"^bench_gpu: no CUDA device \(--size tiny runs the code paths on a CPU\)$"):
        bench.main()
