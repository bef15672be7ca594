import pytest
import torch

from lopd.core.models import load_model
from lopd.core.sampling import ROLLOUT_ATTENTION, HFBackend, SamplingParams, sample_next


def _prompts(tokenizer):
    texts = ["Write a function that reverses a string.", "Hi", "Sum the numbers from one to ten, please, in Python."]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"] for t in texts]


@pytest.mark.parametrize("attention", ["sdpa", ROLLOUT_ATTENTION])
def test_sampler_logprobs_equal_full_forward_logprobs(tiny_model_dir, tiny_model, tokenizer, attention):
    """Left-padded, KV-cached, row-compacting decode (with HF's attention or the rollout engine's grouped
    attention) gives the same log-probs as one plain forward pass of the model."""
    params = SamplingParams(temperature=0.7, top_p=0.95, top_k=20, max_new_tokens=12)
    prompts = _prompts(tokenizer)
    sampler_model = load_model(tiny_model_dir, attn_implementation=attention).eval()
    backend = HFBackend(sampler_model, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id,
                        batch_size=2)
    completions = backend.generate(prompts, params, seed=3)
    for prompt, c in zip(prompts, completions):
        assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
        ids = torch.tensor([prompt + c.token_ids])
        with torch.no_grad():
            logits = tiny_model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / 0.7
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)


def test_sampler_stops_on_stop_token_and_drops_finished_rows(tiny_model, tokenizer):
    prompts = _prompts(tokenizer)
    # Make every token a stop token except one: rows finish at different steps, exercising compaction.
    vocab = tiny_model.config.vocab_size
    backend = HFBackend(tiny_model, stop_ids=list(range(0, vocab, 2)), pad_id=tokenizer.pad_token_id)
    completions = backend.generate(prompts, SamplingParams(max_new_tokens=30), seed=0)
    for c in completions:
        assert c.stopped == (c.token_ids[-1] % 2 == 0)
        assert all(t % 2 == 1 for t in c.token_ids[:-1])


def test_same_seed_same_samples(tiny_model, tokenizer):
    backend = HFBackend(tiny_model, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id)
    params = SamplingParams(max_new_tokens=8)
    a = backend.generate(_prompts(tokenizer), params, seed=11)
    b = backend.generate(_prompts(tokenizer), params, seed=11)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


def test_sample_next_respects_top_k_and_top_p():
    torch.manual_seed(0)
    logits = torch.randn(64, 100) * 3
    params = SamplingParams(temperature=0.7, top_k=5, top_p=0.6)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        tokens, logp = sample_next(logits, params, generator)
        full = torch.log_softmax(logits / 0.7, -1)
        for row in range(64):
            # brute force allowed set: top-5 by probability, then the smallest prefix reaching mass 0.6
            order = sorted(range(100), key=lambda v: -full[row, v].item())[:5]
            probs = [full[row, v].exp().item() for v in order]
            total, allowed = sum(probs), []
            mass = 0.0
            for v, p in zip(order, probs):
                if mass < 0.6:
                    allowed.append(v)
                mass += p / total
            assert tokens[row].item() in allowed
            assert logp[row].item() == full[row, tokens[row]].item()


def test_long_prefill_attention_matches_the_grouped_path():
    import torch

    from lopd.core.sampling import LONG_PREFILL, grouped_attention
    torch.manual_seed(0)
    length, dim = LONG_PREFILL + 3, 16
    query, key, value = torch.randn(2, 6, length, dim), torch.randn(2, 2, length, dim), torch.randn(2, 2, length, dim)
    mask = torch.zeros(2, 1, length, length).masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), -1e30)
    mask[1, :, :, :5] = -1e30  # left padding of the second row
    long, _ = grouped_attention(None, query, key, value, mask.bfloat16(), dim ** -0.5)  # masks come in the model dtype
    # the short path, one query block at a time (each block is below the threshold)
    short = torch.cat([grouped_attention(None, query[:, :, i:i + 512], key, value, mask[:, :, i:i + 512],
                                         dim ** -0.5)[0]
                       for i in range(0, length, 512)], dim=1)
    assert torch.allclose(long, short, atol=1e-5)


def _greedy(max_new_tokens: int, stop: tuple[str, ...] = ()) -> SamplingParams:
    return SamplingParams(temperature=0.7, top_p=1.0, top_k=1, max_new_tokens=max_new_tokens, stop=stop)


def straddling_stop(tokenizer, token_ids: list[int]) -> tuple[str, int]:
    """(a stop string, k) such that the stop string first appears in the decoded text when token k is added and
    starts inside token k - 1: its last character(s) of k - 1 and first one(s) of token k."""
    for k in range(2, len(token_ids)):
        before, after = (tokenizer.decode(token_ids[:i], skip_special_tokens=True) for i in (k, k + 1))
        if len(before) >= 2 and after.startswith(before) and len(after) > len(before):
            stop = after[len(before) - 2:len(before) + 1]
            if stop not in before:
                return stop, k
    raise AssertionError("no token boundary to straddle in the sample")


@pytest.fixture(scope="module")
def peaked_model(tiny_model_dir):
    """tiny-random with a wider init (std 0.2): its greedy text is varied words, not tiny-random's newlines."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig.from_pretrained(tiny_model_dir, initializer_range=0.2)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def test_stop_string_straddling_tokens_stops_the_row_and_others_continue(peaked_model, tokenizer):
    """A stop string split across two tokens ends its row at the token completing it (kept, `stopped`); greedy rows
    without it are what they are without stop strings: the same tokens, and log-probs equal up to float rounding
    (on a GPU, the batch that shrinks when a row stops runs other kernels)."""
    prompts = _prompts(tokenizer)
    backend = HFBackend(peaked_model, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id,
                        tokenizer=tokenizer)
    free = backend.generate(prompts, _greedy(24), seed=0)
    stop, k = straddling_stop(tokenizer, free[0].token_ids)
    assert stop.strip()  # a real straddle: the stop string is not one of tiny-random's runs of newlines
    cut = backend.generate(prompts, _greedy(24, (stop,)), seed=0)
    assert cut[0].token_ids == free[0].token_ids[:k + 1] and cut[0].stopped
    assert cut[0].logprobs == free[0].logprobs[:k + 1]
    assert all(stop not in tokenizer.decode(b.token_ids) for b in free[1:])
    for c, f in zip(cut[1:], free[1:], strict=True):
        assert (c.token_ids, c.stopped) == (f.token_ids, f.stopped)
        assert torch.allclose(torch.tensor(c.logprobs), torch.tensor(f.logprobs), atol=1e-5)


class _NoDecode:
    def batch_decode(self, *args, **kwargs):
        raise AssertionError("decoded without stop strings")


def test_no_stop_strings_decode_nothing_and_sample_as_before(tiny_model, tokenizer):
    params = SamplingParams(max_new_tokens=10)
    plain = HFBackend(tiny_model, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id)
    with_tokenizer = HFBackend(tiny_model, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id,
                               tokenizer=_NoDecode())
    assert plain.generate(_prompts(tokenizer), params, seed=4) == with_tokenizer.generate(_prompts(tokenizer), params,
                                                                                          seed=4)
    with pytest.raises(ValueError, match="stop strings need the tokenizer"):
        plain.generate(_prompts(tokenizer), _greedy(4, ("x",)), seed=0)


def test_prompt_embeddings_instead_of_ids(tiny_model, tokenizer):
    """The token ids' own embeddings sample exactly what the ids do (the paper's injection check); other embeddings
    (a latent span) are what the model reads: log-probs equal a plain forward over those embeddings."""
    backend = HFBackend(tiny_model, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id, batch_size=2)
    params = SamplingParams(max_new_tokens=10)
    prompts = _prompts(tokenizer)
    table = tiny_model.get_input_embeddings()
    with torch.no_grad():
        own = [table(torch.tensor(p)) for p in prompts]
    by_ids = backend.generate(prompts, params, seed=5)
    by_embeds = backend.generate(prompts, params, seed=5, embeds=own)
    assert [c.token_ids for c in by_ids] == [c.token_ids for c in by_embeds]
    assert all(torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
               for a, b in zip(by_ids, by_embeds))
    latent = [e.clone() for e in own]
    for e in latent:  # a 3-token span of other vectors, as the composer's latent tokens would be
        e[2:5] = torch.randn(3, e.shape[1], generator=torch.Generator().manual_seed(0))
    spliced = backend.generate(prompts, params, seed=5, embeds=latent)
    for prompt, e, c in zip(prompts, latent, spliced):
        with torch.no_grad():
            inputs = torch.cat([e, table(torch.tensor(c.token_ids))])[None]
            logits = tiny_model(inputs_embeds=inputs).logits[0, len(prompt) - 1:-1].float() / params.temperature
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)
    with pytest.raises(ValueError, match="one row per prompt token"):
        backend.generate(prompts, params, seed=5, embeds=[e[:-1] for e in own])
