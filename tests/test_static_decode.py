"""The GPU decode path (lopd/core/static_decode.py) where a CPU can run it: the static cache and fixed-shape steps,
without the CUDA graph."""

import math

import pytest
import torch
from test_sampling import _greedy, _prompts, straddling_stop

import lopd.core.static_decode as static_decode
from lopd.core.models import load_model
from lopd.core.sampling import HFBackend, SamplingParams
from lopd.core.static_decode import STATIC_ATTENTION, StaticDecoder, sample_inverse_cdf

PARAMS = SamplingParams(temperature=0.7, top_p=0.95, top_k=20, max_new_tokens=40)


def _backend(model, tokenizer, batch_size: int = 2) -> HFBackend:
    return HFBackend(model, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id, batch_size=batch_size,
                     tokenizer=tokenizer, decoder=StaticDecoder(model, tokenizer.pad_token_id, graphs=False))


@pytest.fixture(scope="module")
def static_model(tiny_model_dir):
    return load_model(tiny_model_dir, attn_implementation=STATIC_ATTENTION).eval()


def _reference_logprobs(model, prompt, completion, temperature, embeds=None):
    """log softmax(z / T) of the completion's tokens under one plain forward pass (what the trainer recomputes)."""
    with torch.no_grad():
        if embeds is None:
            logits = model(input_ids=torch.tensor([prompt + completion])).logits
        else:
            inputs = torch.cat([embeds, model.get_input_embeddings()(torch.tensor(completion))])[None]
            logits = model(inputs_embeds=inputs).logits
    logp = torch.log_softmax(logits[0, len(prompt) - 1:-1].float() / temperature, -1)
    return logp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_inverse_cdf_sampling_equals_a_brute_force_walk():
    torch.manual_seed(0)
    logits = torch.randn(64, 50) * 3
    uniform = torch.rand(64)
    uniform[:3] = torch.tensor([0.0, 1 - 2**-24, 0.5])  # both ends of [0, 1)
    for params in (SamplingParams(temperature=0.7, top_k=5, top_p=0.6), SamplingParams(temperature=1.3, top_k=50,
                                                                                        top_p=1.0),
                   SamplingParams(temperature=1.0, top_k=1, top_p=1.0)):
        tokens, logp = sample_inverse_cdf(logits, params, uniform)
        for row in range(64):
            z = [x / params.temperature for x in logits[row].tolist()]
            top = max(z)
            norm = top + math.log(sum(math.exp(x - top) for x in z))
            ranked = sorted(range(50), key=lambda v: -z[v])[:params.top_k]
            probs = [math.exp(z[v] - norm) for v in ranked]
            total = sum(probs)
            kept, mass = [], 0.0
            for v, p in zip(ranked, probs):
                if mass < params.top_p:
                    kept.append((v, p))
                mass += p / total
            target, walked = uniform[row].item() * sum(p for _, p in kept), 0.0
            expected = kept[-1][0]
            for v, p in kept:
                walked += p
                if walked > target:
                    expected = v
                    break
            assert tokens[row].item() == expected, (params, row)
            assert logp[row].item() == pytest.approx(z[expected] - norm, abs=1e-5)


def test_static_decode_logprobs_equal_the_trainers_recompute(tiny_model, static_model, tokenizer):
    """float32: the plain forward's log-probs to 1e-4 (as the loop). Same seed, same tokens."""
    prompts = _prompts(tokenizer)
    backend = _backend(static_model, tokenizer)
    completions = backend.generate(prompts, PARAMS, seed=3)
    for prompt, c in zip(prompts, completions):
        assert 1 <= len(c.token_ids) <= 40 and len(c.logprobs) == len(c.token_ids)
        ref = _reference_logprobs(tiny_model, prompt, c.token_ids, 0.7)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)
    again = backend.generate(prompts, PARAMS, seed=3)
    assert [c.token_ids for c in again] == [c.token_ids for c in completions]
    assert [c.token_ids for c in backend.generate(prompts, PARAMS, seed=4)] != [c.token_ids for c in completions]


def test_bfloat16_static_decode_within_bfloat16_tolerance(tiny_model_dir, tiny_model, tokenizer):
    """A bf16 rollout copy against the float32 trainer's recompute: bf16 keeps 8 bits of mantissa, so log-probs of
    a few nats agree to a few hundredths (the tolerance stated here is 0.05)."""
    model = load_model(tiny_model_dir, "bfloat16", attn_implementation=STATIC_ATTENTION).eval()
    prompts = _prompts(tokenizer)
    for prompt, c in zip(prompts, _backend(model, tokenizer).generate(prompts, PARAMS, seed=3)):
        ref = _reference_logprobs(tiny_model, prompt, c.token_ids, 0.7)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=0.05)


def test_a_growing_cache_samples_what_a_large_one_does(static_model, tokenizer, monkeypatch):
    """The cache starts small and grows as rows get long (copying its contents): the same tokens as a cache sized
    for the whole budget from the start, and the same log-probs to float32 rounding (attention sums over a cache of
    another length, so some CPUs' kernels block the sum differently: 1 ulp apart was seen on one)."""
    prompts = _prompts(tokenizer)
    whole = _backend(static_model, tokenizer).generate(prompts, PARAMS, seed=5)
    monkeypatch.setattr(static_decode, "FIRST_SPAN", 4)
    monkeypatch.setattr(static_decode, "CAPACITY_ROUND", 16)
    backend = _backend(static_model, tokenizer)
    grown = backend.generate(prompts, PARAMS, seed=5)
    assert backend.decoder.buffers.capacity > max(len(p) for p in prompts) + 4 + 16
    assert [c.token_ids for c in grown] == [c.token_ids for c in whole]
    for g, w in zip(grown, whole):
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(w.logprobs), rtol=0, atol=1e-5)
    backend.sleep()
    assert backend.decoder.buffers is None


def test_static_decode_stops_rows_at_their_first_stop_token(static_model, tokenizer):
    prompts = _prompts(tokenizer)
    vocab = static_model.config.vocab_size
    backend = HFBackend(static_model, stop_ids=list(range(0, vocab, 2)), pad_id=tokenizer.pad_token_id,
                        decoder=StaticDecoder(static_model, tokenizer.pad_token_id, graphs=False))
    completions = backend.generate(prompts, SamplingParams(max_new_tokens=30), seed=0)
    assert any(c.stopped for c in completions) and max(len(c.token_ids) for c in completions) > 1
    for c in completions:
        assert c.stopped == (c.token_ids[-1] % 2 == 0)
        assert all(t % 2 == 1 for t in c.token_ids[:-1])


def test_static_decode_stop_string_straddling_tokens(peaked_model_dir, tokenizer):
    """A stop string split across two tokens ends its row at the token completing it, as in the loop."""
    model = load_model(peaked_model_dir, attn_implementation=STATIC_ATTENTION).eval()
    prompts = _prompts(tokenizer)
    backend = _backend(model, tokenizer, batch_size=4)
    free = backend.generate(prompts, _greedy(24), seed=0)
    stop, k = straddling_stop(tokenizer, free[0].token_ids)
    cut = backend.generate(prompts, _greedy(24, (stop,)), seed=0)
    assert cut[0].token_ids == free[0].token_ids[:k + 1] and cut[0].stopped
    for c, f in zip(cut[1:], free[1:], strict=True):
        assert (c.token_ids, c.stopped) == (f.token_ids, f.stopped)


@pytest.fixture(scope="module")
def peaked_model_dir(tiny_model_dir, tmp_path_factory):
    """tiny-random with a wider init (std 0.2), saved: its greedy text is varied words (as test_sampling's
    peaked_model)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig.from_pretrained(tiny_model_dir, initializer_range=0.2)
    folder = tmp_path_factory.mktemp("peaked")
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(folder)
    return folder


def test_static_decode_reads_prompt_embeddings(tiny_model, static_model, tokenizer):
    """The token ids' own embeddings sample what the ids do; a spliced latent span is what the model reads."""
    backend = _backend(static_model, tokenizer)
    prompts = _prompts(tokenizer)
    table = static_model.get_input_embeddings()
    with torch.no_grad():
        own = [table(torch.tensor(p)) for p in prompts]
    by_ids = backend.generate(prompts, PARAMS, seed=5)
    assert [c.token_ids for c in backend.generate(prompts, PARAMS, seed=5, embeds=own)] == [
        c.token_ids for c in by_ids]
    latent = [e.clone() for e in own]
    for e in latent:
        e[2:5] = torch.randn(3, e.shape[1], generator=torch.Generator().manual_seed(0))
    for prompt, e, c in zip(prompts, latent, backend.generate(prompts, PARAMS, seed=5, embeds=latent)):
        assert torch.allclose(torch.tensor(c.logprobs), _reference_logprobs(tiny_model, prompt, c.token_ids, 0.7, e),
                              atol=1e-4)


def test_make_backend_picks_the_decode_by_config(tiny_model_dir, tokenizer):
    from lopd.core.config import ConfigError, resolve
    from lopd.core.rollout import hf_decode, make_backend

    static = resolve({"profile": "smoke", "sampling": {"backend": "hf", "hf_decode": "static"}})
    backend = make_backend(tiny_model_dir, tokenizer, static, batch_size=4)
    assert isinstance(backend.decoder, StaticDecoder) and not backend.decoder.graphs
    assert backend.model.config._attn_implementation == STATIC_ATTENTION
    auto = resolve({"profile": "smoke", "sampling": {"backend": "hf"}})
    assert hf_decode(auto, tiny_model_dir) == "loop"  # a CPU: the loop
    assert make_backend(tiny_model_dir, tokenizer, auto, batch_size=4).decoder is None
    with pytest.raises(ConfigError, match="sampling.hf_decode: 'graphs' is not one of auto, loop, static"):
        resolve({"profile": "smoke", "sampling": {"hf_decode": "graphs"}})
