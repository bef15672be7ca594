"""The benchmark and diagnostic scripts (scripts/bench_*.py, tool_call_rate.py, teacher_openings.py): they stop as the
stages do when an input is missing, and their arithmetic is checked by hand or against a brute-force count."""

import json
import math
from pathlib import Path

import pytest
import torch
from pyfork import python

REPO = Path(__file__).resolve().parents[1]


def test_a_benchmark_without_its_model_is_a_one_line_error(tmp_path):
    """The perf scripts stop as the stages do: one line naming the missing folder and the stage that builds it."""
    missing = tmp_path / "no-model"
    for script in ("bench_rollout.py", "bench_cpu.py", "tool_call_rate.py"):
        done = python([REPO / "scripts" / script, "--model-dir", missing], cwd=REPO)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.stderr.strip().splitlines()[-1] == (
            f"error: {missing}: model not found (for the base model run: dvc repro prepare_model)")


def test_the_validation_benchmark_predicts_from_the_recorded_run(load_script):
    """bench_validation.py's prediction, against the arithmetic done by hand: the recorded run validated on 32 tasks
    at 60 s a point; 64 tasks cost 100 s a point here, on a machine half as fast as the recording one, and leave 8
    fewer training tasks for the bank (10 s each)."""
    bench = load_script("bench_validation")
    lock = {"stages": {"train@grpo": {"params": {"params.yaml": {"data": {"validation_tasks": 32}}}}}}
    assert bench.recorded_validation_tasks(lock) == 32
    recorded = {"total_s": 7200.0, "stages": {"build_bank": {"seconds": 400.0}, "train@grpo": {"seconds": 6800.0}}}
    points = {32: {"wall_s": 60.0, "train_tasks": 40}, 64: {"wall_s": 100.0, "train_tasks": 32}}
    out = bench.predict(points, recorded, 32, {"train@grpo": 3, "train_lopd": 2}, speed=0.5)
    overhead = 2 * bench.DVC_STAGE_OVERHEAD_S
    assert out["end_to_end_h"][32] == round((7200 + overhead) / 3600, 2)
    assert out["end_to_end_h"][64] == round((7200 + overhead + 5 * 20 - 8 * 10) / 3600, 2)


def test_teacher_openings_sums_the_first_tokens_that_open_a_code_fence(load_script, tiny_model, tokenizer):
    """scripts/teacher_openings.py: the fence tokens are those whose text starts with ``` (found here by decoding each
    token id), and a prompt's opening mass is their share of the next-token distribution (summed one id at a time)."""
    openings = load_script("teacher_openings")
    by_decoding = {i for i in range(len(tokenizer)) if tokenizer.decode([i]).lstrip().startswith("```")}
    assert set(openings.fence_ids(tokenizer)) == by_decoding and by_decoding
    prompt = tokenizer("def add(a, b):")["input_ids"]
    with torch.no_grad():
        logits = tiny_model(torch.tensor([prompt])).logits[0, -1].double()
    probs = [math.exp(logits[i].item() - torch.logsumexp(logits, 0).item()) for i in sorted(by_decoding)]
    assert openings.opening_mass(tiny_model, prompt, sorted(by_decoding)) == pytest.approx(sum(probs), rel=1e-5)


def test_the_cpu_benchmark_runs_each_path_this_cpu_has_and_compares_them(tiny_model_dir, tmp_path):
    """scripts/bench_cpu.py on the tiny model: BLAS, oneDNN where this CPU takes it and bf16 where it has bf16
    units: each path's first gradients against float64's, float32 paths to float32's rounding and bf16 only to
    bf16's; the fused AdamW takes the per-tensor loop's steps; the bounds are measured, not given."""
    out = tmp_path / "cpu.json"
    done = python([REPO / "scripts" / "bench_cpu.py", "--model-dir", tiny_model_dir, "--batch", "4",
                   "--prompt-tokens", "8", "--response-tokens", "8", "--sections", "update", "adamw", "--out", out],
                  cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    update, adamw = result["update"], result["adamw"]
    paths = update["paths"]
    expected = ["fp32_blas"] + (["fp32_onednn"] if torch.ops.mkldnn._is_mkldnn_bf16_supported() else [])
    assert list(paths)[:len(expected)] == expected
    assert paths["fp32_blas"]["weight_difference_vs_fp32_blas"] == 0.0
    for name, path in paths.items():
        assert path["update_s"] > 0 and update["gemm_gflops"][name] > 0
        assert path["fraction_of_gemm_bound"] == pytest.approx(path["gflops"] / update["gemm_gflops"][name], rel=0.02)
    blas_error = paths["fp32_blas"]["first_grad_error_vs_float64"]
    assert 0 < blas_error < 1e-4  # float32's rounding against float64
    if "fp32_onednn" in paths:  # as accurate as BLAS
        assert 0 < paths["fp32_onednn"]["first_grad_error_vs_float64"] < 2 * blas_error
    if "bf16" in paths:
        assert paths["bf16"]["first_grad_error_vs_float64"] > 1e-3
    assert update["pays"] == min(paths, key=lambda k: paths[k]["update_s"])
    assert update["model_flops"] > 6 * 4 * 16 * 1000  # the tiny model has well over 1,000 weights
    assert adamw["max_weight_difference"] < 1e-6 and adamw["parameters"] > 0
    assert result["bandwidth_gbs"] > 0 and "sampling" not in result
