"""The benchmark and diagnostic scripts (scripts/bench/: bench_*.py, tool_call_rate.py, teacher_openings.py): they stop
as the stages do when an input is missing, and their arithmetic is checked by hand or against a brute-force count."""

import json
import math
from pathlib import Path

import pytest
import torch
from pyfork import python

from lopd.core.config import resolve

REPO = Path(__file__).resolve().parents[1]


def test_a_benchmark_without_its_model_is_a_one_line_error(tmp_path):
    """The perf scripts stop as the stages do: one line naming the missing folder and the stage that builds it."""
    missing = tmp_path / "no-model"
    for script in ("bench_rollout.py", "bench_cpu.py", "tool_call_rate.py"):
        done = python([REPO / "scripts" / "bench" / script, "--model-dir", missing], cwd=REPO)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.stderr.strip().splitlines()[-1] == (
            f"error: {missing}: model not found (for the base model run: dvc repro prepare_model)")


def test_the_malloc_benchmark_needs_an_update_after_the_first_before_any_work():
    """bench_malloc.py times the updates after the first (which allocates AdamW's state): fewer than 2 is one line,
    before a variant's process starts."""
    done = python([REPO / "scripts" / "bench" / "bench_malloc.py", "--updates", "1",
                   "--out", "/nonexistent/malloc.json"], cwd=REPO)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "error: --updates: must be >= 2 (the first allocates AdamW's state)"


def test_the_validation_benchmark_predicts_from_the_recorded_run(load_script):
    """bench_validation.py's prediction, against the arithmetic done by hand: the recorded run validated on 32 tasks
    at 60 s a point; 64 tasks cost 100 s a point here, on a machine half as fast as the recording one, and leave 8
    fewer training tasks for the bank (10 s each)."""
    bench = load_script("bench/bench_validation")
    lock = {"stages": {"train@grpo": {"params": {"params.yaml": {"data": {"validation_tasks": 32}}}}}}
    assert bench.recorded_validation_tasks(lock) == 32
    recorded = {"total_s": 7200.0, "stages": {"build_bank": {"seconds": 400.0}, "train@grpo": {"seconds": 6800.0}}}
    points = {32: {"wall_s": 60.0, "train_tasks": 40}, 64: {"wall_s": 100.0, "train_tasks": 32}}
    out = bench.predict(points, recorded, 32, {"train@grpo": 3, "train_lopd": 2}, speed=0.5)
    overhead = 2 * bench.DVC_STAGE_OVERHEAD_S
    assert out["end_to_end_h"][32] == round((7200 + overhead) / 3600, 2)
    assert out["end_to_end_h"][64] == round((7200 + overhead + 5 * 20 - 8 * 10) / 3600, 2)


def test_teacher_openings_sums_the_first_tokens_that_open_a_code_fence(load_script, tiny_model, tokenizer):
    """scripts/bench/teacher_openings.py: the fence tokens are those whose text starts with ``` (found here by decoding
    each token id), and a prompt's opening mass is their share of the next-token distribution (summed one id at a
    time)."""
    openings = load_script("bench/teacher_openings")
    by_decoding = {i for i in range(len(tokenizer)) if tokenizer.decode([i]).lstrip().startswith("```")}
    assert set(openings.fence_ids(tokenizer)) == by_decoding and by_decoding
    prompt = tokenizer("def add(a, b):")["input_ids"]
    with torch.no_grad():
        logits = tiny_model(torch.tensor([prompt])).logits[0, -1].double()
    probs = [math.exp(logits[i].item() - torch.logsumexp(logits, 0).item()) for i in sorted(by_decoding)]
    assert openings.opening_mass(tiny_model, prompt, sorted(by_decoding)) == pytest.approx(sum(probs), rel=1e-5)



def test_teacher_openings_scores_a_sampled_response_within_a_cut_only_where_it_ended_there(load_script):
    """scripts/bench/teacher_openings.py --samples: a response passes within a cut only if it ended on its own by then
    (a capped response's test never ran whole); counted here response by response."""
    openings = load_script("bench/teacher_openings")
    lengths, stopped, rewards = [100, 300, 600, 1024, 256], [True, True, True, False, True], [1.0, 1.0, 0.0, 1.0, 1.0]
    stats = openings.response_stats(lengths, stopped, rewards, 1024)
    assert stats == {"mean tokens": 2280 / 5, "ended by 1024": 4 / 5, "pass (1024)": 4 / 5,
                     "pass (256)": 2 / 5, "pass (512)": 3 / 5}

def test_the_cpu_benchmark_runs_each_path_this_cpu_has_and_compares_them(tiny_model_dir, tmp_path):
    """scripts/bench/bench_cpu.py on the tiny model: BLAS, oneDNN where this CPU takes it and bf16 where it has bf16
    units: each path's first gradients against float64's, float32 paths to float32's rounding and bf16 only to
    bf16's; the fused AdamW takes the per-tensor loop's steps; the bounds are measured, not given."""
    out = tmp_path / "cpu.json"
    done = python([REPO / "scripts" / "bench" / "bench_cpu.py", "--model-dir", tiny_model_dir, "--batch", "4",
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


class _EndingEnv:
    """Ends the episode on the policy's first reply."""

    def reset(self):
        return [{"role": "user", "content": "Finish."}], []

    def reply(self, text):
        return None

    def score(self):
        return {"reward": 1.0}

    def close(self):
        pass


class _CountingBackend:
    """Answers every prompt with two tokens, counting the calls and the tokens as the backends' stats do."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls, self.stats = tokenizer, 0, {"sampled_tokens": 0}

    def generate(self, prompts, params, seed):
        from lopd.core.sampling import Completion

        self.calls += 1
        self.stats["sampled_tokens"] += 2 * len(prompts)
        ids = self.tokenizer("ok done", add_special_tokens=False)["input_ids"][:2]
        return [Completion(ids, [0.0, 0.0], True) for _ in prompts]


def test_the_agentic_evaluation_benchmark_plays_the_same_episodes_apart_and_together(load_script, tokenizer,
                                                                                      monkeypatch):
    """scripts/bench/bench_agentic_eval.py's measurement: two benchmarks of one step cap (3 and 2 episodes) played
    apart, in two batches, and together, in one: the same episodes and tokens either way, each counted once."""
    from evaluation.agentic.benchmarks import Benchmark

    bench = load_script("bench/bench_agentic_eval")
    sizes = {"first": 3, "second": 2}
    monkeypatch.setattr(bench, "load_benchmark", lambda cfg, name, user: Benchmark(
        name, [(f"{name}{i}", _EndingEnv()) for i in range(sizes[name])], max_steps=3, source="test"))
    cfg = resolve({"profile": "smoke"})
    backend = _CountingBackend(tokenizer)
    apart = bench.measure(cfg, backend, tokenizer, None, [["first"], ["second"]])
    assert backend.calls == 2
    together = bench.measure(cfg, backend, tokenizer, None, [["first", "second"]])
    assert backend.calls == 3
    assert (apart["batches_of_benchmarks"], together["batches_of_benchmarks"]) == (2, 1)
    for played in (apart, together):
        assert (played["episodes"], played["policy_steps"], played["sampled_tokens"]) == (5, 5, 10)
        assert played["seconds_per_episode"] == pytest.approx(played["wall_s"] / 5, abs=0.02)


def test_the_rollout_benchmark_plays_the_agentic_episodes_as_each_stage_does(load_script, monkeypatch):
    """bench_profile_rollouts.py's agentic parts: a training step's rollouts in groups of grpo.group_size and one per
    task, and build_bank_agentic's first batch (its tasks, samples and seed, as lopd.latent.bank.sample_rollouts
    plays its first batch on process 0); each counted by hand."""
    import contextlib
    from types import SimpleNamespace

    from lopd.latent.bank import BANK_TASKS_PER_BATCH, bank_batch_seed
    from pipelines.common import for_domain

    bench = load_script("bench/bench_profile_rollouts")
    tasks = [f"task{i}" for i in range(40)]
    played = []

    def collect(backend, tokenizer, chosen, params, seed, per_task):
        played.append((chosen, seed, per_task))
        return [SimpleNamespace(reward=1.0 if i == 0 else 0.25, num_action_tokens=30,
                                behaviour=SimpleNamespace(steps=2), turns=[SimpleNamespace(context_ids=[0] * 100)],
                                token_ids=[0] * 200)
                for i in range(len(chosen) * per_task)]

    @contextlib.contextmanager
    def domain(cfg, name):
        assert name == "agentic"
        yield SimpleNamespace(tasks=tasks, collect=collect)

    monkeypatch.setattr(bench, "training_domain", domain)
    cfg = resolve({"profile": "cpu"})
    agentic = for_domain(cfg, "agentic")
    parts = bench.measure_agentic(cfg, object(), None)
    rollouts, group = agentic.train.rollouts_per_step, cfg.section(bench.GRPOConfig).group_size
    banked = min(agentic.bank.task_limit or len(tasks), BANK_TASKS_PER_BATCH)
    assert played == [(tasks[:rollouts // group], agentic.seed, group), (tasks[:rollouts], agentic.seed, 1),
                      (tasks[:banked], bank_batch_seed(agentic, 0, 0), agentic.bank.samples_per_task)]
    grouped, single, bank = (parts[k] for k in ("agentic_train_step", "agentic_train_step_single",
                                                 "agentic_bank_batch"))
    assert (grouped["tasks"], grouped["episodes"], single["tasks"], single["episodes"]) == (
        rollouts // group, rollouts, rollouts, rollouts)
    assert (bank["tasks"], bank["episodes"]) == (banked, banked * agentic.bank.samples_per_task)
    for part in (grouped, single, bank):
        assert part["bank_successes"] == 1 and part["policy_steps"] == 2 * part["episodes"]
        assert (part["mean_steps"], part["mean_step_tokens"], part["mean_first_context_tokens"],
                part["mean_sequence_tokens"]) == (2.0, 15.0, 100.0, 200.0)
        assert part["sampled_tokens"] == 30 * part["episodes"]
        assert part["seconds_per_episode"] == pytest.approx(part["wall_s"] / part["episodes"], abs=0.02)


def test_the_composer_benchmark_counts_each_forward_calls_positions_and_not_the_recomputation(load_script,
                                                                                              tiny_model_dir):
    """bench_composer.py's FLOP rate rests on the positions the decoder's forward calls compute (batch x length, from
    token ids or from embeddings), counted only within the context; activation checkpointing's recomputation in the
    backward pass runs the layers again but not the decoder's call, so it is not counted (the rate's pass count says
    it); its arithmetic by hand."""
    from lopd.core.models import load_model

    bench = load_script("bench/bench_composer")
    model = load_model(tiny_model_dir)
    decoder = model.get_decoder()
    positions = []
    with torch.no_grad(), bench.counted_positions(decoder, positions):
        model(input_ids=torch.ones(2, 5, dtype=torch.long))
        decoder(inputs_embeds=model.get_input_embeddings()(torch.ones(3, 4, dtype=torch.long)))
    model(input_ids=torch.ones(1, 7, dtype=torch.long))
    assert positions == [10, 12]
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    recomputed = []
    with bench.counted_positions(decoder, recomputed):
        model(input_ids=torch.ones(2, 6, dtype=torch.long)).logits.sum().backward()
    assert recomputed == [12]
    linear = [m for m in decoder.modules() if isinstance(m, torch.nn.Linear)]
    assert linear and bench.decoder_weights(decoder) == sum(m.in_features * m.out_features for m in linear)
    assert bench.rate(1000, 3, 10**6, 2.0, 6.0) == {"model_gflops": 3.0, "fraction_of_gemm_bound": 0.5}
