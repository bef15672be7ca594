"""Rollout backends: token ids in, sampled token ids and their log-probs out.

The loop talks to a `RolloutBackend`; `HFBackend` runs a Hugging Face causal LM with a KV cache. On a CPU it decodes
with a hand-written loop: it avoids `generate`'s per-step overhead (logits processors over the whole vocabulary,
stopping-criteria objects) and drops finished rows from the batch so that long-tail rollouts do not keep paying for
short ones. On a GPU it hands each batch to a `StaticDecoder` (lopd/core/static_decode.py: a static cache and CUDA
graphs). lopd/core/vllm_backend.py implements the same protocol.

Log-probs are those of the temperature-scaled full-vocabulary distribution softmax(z / T), the
distribution the trainer recomputes (top-k / top-p only decide which tokens may be drawn).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import torch
from transformers import AttentionInterface, PreTrainedTokenizerBase
from transformers.cache_utils import Cache, DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from lopd.core.progress import progress

ROLLOUT_ATTENTION = "lopd_grouped"
LONG_PREFILL = 1024
"""From this many query tokens on (agentic prompts with long tool lists) the O(L^2) fp32 score matrix below
dominates the prefill; PyTorch's fused attention is about 3x faster there. Shorter inputs keep the path below."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 20
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    """Stop strings: a completion also ends once its decoded text (special tokens skipped) contains one of them. Its
    `token_ids` then end with the token that completed the stop string (that token may hold text past it): callers
    cut the decoded text at the stop string themselves, as EvalPlus does with its providers' outputs."""


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]
    """Sampled tokens, including the stop token, or the token completing a stop string, that ended them."""
    logprobs: list[float]
    """log softmax(z / T) of each sampled token under the sampling policy."""
    stopped: bool
    """True if the model emitted a stop token or a stop string; False if it ran out of budget."""


class RolloutBackend(Protocol):
    """Token ids in, `Completion`s out, on its own copy of the policy that the loop refreshes after every step."""

    stats: dict[str, float]
    """Cumulative counters, at least `sampling_s` (wall time inside `generate`), `prompt_tokens`, `sampled_tokens`."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int,
                 embeds: Sequence[torch.Tensor] | None = None) -> list[Completion]:
        """Sample one completion per prompt; the same seed (and weights) gives the same completions. `embeds`: each
        prompt's input embeddings [len(prompt), D], read instead of its token ids' (latent context spliced in);
        the prompt ids then only say how long each prompt is and what it was."""

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the backend's weights by the trainer's full (unsharded) ones, given as (Hugging Face state-dict name,
        tensor) pairs, e.g. `full_parameters(model)` (one gathered at a time) or `state_dict.items()`; cast to the
        backend's dtype one tensor at a time; drop any cached prefixes."""

    def sleep(self) -> None:
        """Release the device memory the engine does not need during the update (vLLM sleep mode on a GPU)."""

    def wake_up(self) -> None:
        """Undo `sleep` before the next `load_weights` or `generate`."""


def top_k_top_p(logits_B_V: torch.Tensor, params: SamplingParams
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distribution a token is drawn from: (log softmax(z / T) of the top-k tokens over the full vocabulary,
    their ids, and their renormalised probabilities with those outside the nucleus set to 0), sorted descending."""
    logp_B_V = torch.log_softmax(logits_B_V.float() / params.temperature, dim=-1)
    top_logp_B_K, top_ids_B_K = torch.topk(logp_B_V, min(params.top_k, logp_B_V.shape[-1]), dim=-1)
    probs_B_K = torch.softmax(top_logp_B_K, dim=-1)
    # Nucleus over the top-k (sorted descending): keep a token if the mass before it is < top_p.
    mass_before_B_K = torch.cumsum(probs_B_K, dim=-1) - probs_B_K
    return top_logp_B_K, top_ids_B_K, probs_B_K.masked_fill(mass_before_B_K >= params.top_p, 0.0)


def sample_next(logits_B_V: torch.Tensor, params: SamplingParams, generator: torch.Generator
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row with temperature, top-k then top-p; return (tokens_B, logprobs_B)."""
    top_logp_B_K, top_ids_B_K, probs_B_K = top_k_top_p(logits_B_V, params)
    choice_B = torch.multinomial(probs_B_K, 1, generator=generator).squeeze(-1)
    rows = torch.arange(choice_B.shape[0], device=choice_B.device)
    return top_ids_B_K[rows, choice_B], top_logp_B_K[rows, choice_B]


def grouped_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Attention for grouped-query models without materialising repeated K/V heads.

    Hugging Face's eager path copies the whole KV cache G times per layer per decode step (repeat_kv);
    here each KV head's G query heads are stacked instead, and the scores/softmax/values run in fp32
    (small batched matmuls over a strided cache are several times faster in fp32 than bf16 on CPU).
    Shapes: query [B, Hq, Lq, D], key/value [B, Hkv, Lk, D], attention_mask additive [B, 1, Lq, Lk].
    """
    batch, q_heads, q_len, dim = query.shape
    if q_len >= LONG_PREFILL:
        out = torch.nn.functional.scaled_dot_product_attention(
            query.float(), key.float(), value.float(), scale=scaling, enable_gqa=True,
            attn_mask=None if attention_mask is None else attention_mask.float())
        return out.transpose(1, 2).to(query.dtype).contiguous(), None
    kv_heads, k_len = key.shape[1], key.shape[2]
    groups = q_heads // kv_heads
    q = query.float().reshape(batch, kv_heads, groups * q_len, dim)
    scores = torch.matmul(q, key.float().transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = (scores.view(batch, kv_heads, groups, q_len, k_len) + attention_mask[:, :, None]).view_as(scores)
    out = torch.matmul(torch.softmax(scores, dim=-1), value.float())
    return out.view(batch, q_heads, q_len, dim).transpose(1, 2).to(query.dtype).contiguous(), None


AttentionInterface.register(ROLLOUT_ATTENTION, grouped_attention)
AttentionMaskInterface.register(ROLLOUT_ATTENTION, eager_mask)


class _PreallocatedLayer(DynamicLayer):
    """A KV-cache layer that writes into an fp32 buffer sized for the whole rollout instead of
    `torch.cat`-ing the full cache on every decode step (an O(length) copy per token)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            batch, heads, _, dim = key_states.shape
            self.key_buffer = key_states.new_empty(batch, heads, self.capacity, dim, dtype=torch.float32)
            self.value_buffer = value_states.new_empty(batch, heads, self.capacity, value_states.shape[-1],
                                                       dtype=torch.float32)
            self.is_initialized = True
        new = key_states.shape[-2]
        self.key_buffer[:, :, self.length:self.length + new] = key_states
        self.value_buffer[:, :, self.length:self.length + new] = value_states
        self.length += new
        self.keys = self.key_buffer[:, :, :self.length]
        self.values = self.value_buffer[:, :, :self.length]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.key_buffer, self.value_buffer = self.key_buffer[indices], self.value_buffer[indices]
        self.keys = self.key_buffer[:, :, :self.length]
        self.values = self.value_buffer[:, :, :self.length]


STOP_TAIL_MARGIN = 4
"""Tokens decoded beyond the longest stop string's length when looking for it (see `stop_tail_tokens`)."""


def stop_tail_tokens(stop: Sequence[str]) -> int:
    """How many of a row's last tokens to decode to see a stop string that its last token completed. Text tokens
    decode to at least one character, so such a stop string starts within the last len(stop) tokens; the margin
    covers tokens that decode to nothing (skipped special tokens, a partial UTF-8 character) and keeps the window's
    first token, whose decoding may drop a leading space or bytes, out of the match."""
    return max(len(s) for s in stop) + STOP_TAIL_MARGIN


def hits_stop_string(tails: Sequence[Sequence[int]], stop: Sequence[str],
                     tokenizer: PreTrainedTokenizerBase) -> list[bool]:
    """Whether each row's decoded tail (`stop_tail_tokens` last tokens) contains a stop string. Only the tail is
    decoded, so the check costs the same at every step however long the completion is; a stop string completed
    before the last token would have stopped the row then."""
    texts = tokenizer.batch_decode(tails, skip_special_tokens=True)
    return [any(s in text for s in stop) for text in texts]


def prompt_inputs(model: torch.nn.Module, ids_B_L: torch.Tensor, embeds: Sequence[torch.Tensor] | None
                  ) -> dict[str, torch.Tensor]:
    """The model's inputs for left-padded prompt ids: the ids, or, given each row's embeddings [len(prompt), D], the
    embeddings with those rows in place (the pad positions keep their token embeddings: masked out either way)."""
    if embeds is None:
        return {"input_ids": ids_B_L}
    embeds_B_L_D = model.get_input_embeddings()(ids_B_L)
    for row, rows_L_D in enumerate(embeds):
        embeds_B_L_D[row, ids_B_L.shape[1] - len(rows_L_D):] = rows_L_D.to(embeds_B_L_D.dtype)
    return {"inputs_embeds": embeds_B_L_D}


class BatchDecoder(Protocol):
    """What `HFBackend` hands a batch to instead of its loop (`lopd.core.static_decode.StaticDecoder` on a GPU)."""

    def generate_batch(self, prompts: list[Sequence[int]], params: SamplingParams, generator: torch.Generator,
                       advance: Callable[[int, int], None], embeds: list[torch.Tensor] | None, stop_ids: set[int],
                       tokenizer: PreTrainedTokenizerBase | None, stats: dict[str, float]) -> list[Completion]: ...

    def release(self) -> None: ...


class HFBackend:
    """Batched sampling with a KV cache on any Hugging Face causal LM. Stop strings (`SamplingParams.stop`) need
    the `tokenizer` to decode sampled tokens; without stop strings nothing is decoded. `decoder`: a
    `static_decode.StaticDecoder` on the same model samples each batch instead of the loop below (the model then uses
    its attention, `static_decode.STATIC_ATTENTION`)."""

    def __init__(self, model: torch.nn.Module, stop_ids: Sequence[int], pad_id: int, batch_size: int = 32,
                 tokenizer: PreTrainedTokenizerBase | None = None, decoder: BatchDecoder | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.decoder = decoder
        self.stop_ids = torch.tensor(sorted(set(stop_ids)), device=self.device)
        self.pad_id = pad_id
        self.batch_size = batch_size
        self.stats = {"sampling_s": 0.0, "prefill_s": 0.0, "decode_s": 0.0, "prompt_tokens": 0, "sampled_tokens": 0}
        """Cumulative wall time and token counts; `sampling_s` splits into prompt prefill and token-by-token decode."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy each pair into the rollout copy's tensor of that name (cast to its dtype and device) as it comes, so a
        gathered shard is freed before the next; every tensor of the copy must be given."""
        own = self.model.state_dict()  # the copy's own tensors (no grad), by name
        given = set()
        for name, tensor in weights:
            own[name].copy_(tensor)
            given.add(name)
        if missing := own.keys() - given:
            raise KeyError(f"HFBackend.load_weights: no weights given for {sorted(missing)}")

    def sleep(self) -> None:
        """Release the static decoder's cache and graph, if any (the loop's cache lives within a batch)."""
        if self.decoder is not None:
            self.decoder.release()

    def wake_up(self) -> None:
        pass

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int,
                 embeds: Sequence[torch.Tensor] | None = None) -> list[Completion]:
        if embeds is not None and [len(e) for e in embeds] != [len(p) for p in prompts]:
            raise ValueError("HFBackend: each prompt's embeddings must have one row per prompt token")
        if params.stop and self.tokenizer is None:
            raise ValueError("HFBackend: stop strings need the tokenizer (HFBackend(..., tokenizer=...))")
        generator = torch.Generator(device=self.device).manual_seed(seed)
        # Batch prompts of similar length together: less padding, same results for a given seed.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        # Transient: the loop and multi-turn episodes call this many times a step, mostly with small batches.
        with progress(total=len(prompts), desc="sample", unit="seq", transient=True) as bar:
            start_s, sampled = time.perf_counter(), 0

            def advance(finished: int, tokens: int) -> None:
                nonlocal sampled
                sampled += tokens
                bar.set_postfix_str(f"{sampled / (time.perf_counter() - start_s):.0f} tok/s", refresh=False)
                bar.update(finished)  # also redraws (at most once a second) when no sequence finished

            for start in range(0, len(order), self.batch_size):
                idx = order[start:start + self.batch_size]
                batch_embeds = None if embeds is None else [embeds[i] for i in idx]
                for i, completion in zip(idx, self._generate_batch([prompts[i] for i in idx], params, generator,
                                                                   advance, batch_embeds)):
                    results[i] = completion
        return results  # type: ignore[return-value]

    def _generate_batch(self, prompts: list[Sequence[int]], params: SamplingParams, generator: torch.Generator,
                        advance: Callable[[int, int], None],
                        embeds: list[torch.Tensor] | None = None) -> list[Completion]:
        """Sample one batch (prefilled from `embeds` when given); after every decode step `advance(sequences
        finished, tokens sampled)`."""
        if self.decoder is not None:
            return self.decoder.generate_batch(prompts, params, generator, advance, embeds, set(self.stop_ids.tolist()),
                                               self.tokenizer, self.stats)
        was_training = self.model.training
        self.model.eval()
        n, width = len(prompts), max(len(p) for p in prompts)
        device = self.device
        ids_B_L = torch.full((n, width), self.pad_id, dtype=torch.long, device=device)
        mask_B_L = torch.zeros((n, width), dtype=torch.long, device=device)
        for row, prompt in enumerate(prompts):  # left padding: every row's next token is at the end
            ids_B_L[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long, device=device)
            mask_B_L[row, width - len(prompt):] = 1
        start = time.perf_counter()
        positions_B_L = (mask_B_L.cumsum(-1) - 1).clamp(min=0)
        capacity = width + params.max_new_tokens
        cache = Cache(layers=[_PreallocatedLayer(capacity) for _ in range(self.model.config.num_hidden_layers)])
        out = self.model(**prompt_inputs(self.model, ids_B_L, embeds), attention_mask=mask_B_L,
                         position_ids=positions_B_L, past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits_B_V = out.logits[:, -1]
        next_pos_B = positions_B_L[:, -1] + 1
        decode_start = time.perf_counter()
        self.stats["prefill_s"] += decode_start - start
        self.stats["prompt_tokens"] += sum(len(p) for p in prompts)

        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        stopped = [False] * n
        active = torch.arange(n, device=device)  # original row of each row still in the batch
        tail = stop_tail_tokens(params.stop) if params.stop else 0
        for step in range(params.max_new_tokens):
            tok_B, logp_B = sample_next(logits_B_V, params, generator)
            rows = active.tolist()
            for row, t, lp in zip(rows, tok_B.tolist(), logp_B.tolist()):
                tokens[row].append(t)
                logprobs[row].append(lp)
            done_B = torch.isin(tok_B, self.stop_ids)
            if tail:
                hits = hits_stop_string([tokens[row][-tail:] for row in rows], params.stop, self.tokenizer)
                done_B |= torch.tensor(hits, device=device)
            finished = active[done_B].tolist()
            for row in finished:
                stopped[row] = True
            last = step == params.max_new_tokens - 1 or len(finished) == len(active)
            advance(len(active) if last else len(finished), len(active))
            if last:
                break
            if bool(done_B.any()):  # drop finished rows from the batch and the cache
                keep = (~done_B).nonzero().squeeze(-1)
                active, tok_B, next_pos_B, mask_B_L = active[keep], tok_B[keep], next_pos_B[keep], mask_B_L[keep]
                cache.batch_select_indices(keep)
            mask_B_L = torch.cat([mask_B_L, torch.ones((len(active), 1), dtype=torch.long, device=device)], dim=-1)
            out = self.model(input_ids=tok_B[:, None], attention_mask=mask_B_L, position_ids=next_pos_B[:, None],
                             past_key_values=cache, use_cache=True)
            logits_B_V = out.logits[:, -1]
            next_pos_B = next_pos_B + 1
        self.model.train(was_training)
        end = time.perf_counter()
        self.stats["decode_s"] += end - decode_start
        self.stats["sampling_s"] += end - start
        self.stats["sampled_tokens"] += sum(len(t) for t in tokens)
        return [Completion(tokens[r], logprobs[r], stopped[r]) for r in range(n)]
