"""The HF backend's decode for a GPU: a static KV cache and one captured CUDA graph per decode step.

The CPU loop in lopd/core/sampling.py syncs with the host after every token and shrinks its batch as rows finish:
cheap on a CPU, launch-bound on a GPU (1-5% of an H200's memory bandwidth: docs/scale.md, The HF backend on a GPU). Here
every tensor a decode step touches keeps its shape (rows B, cache capacity C) and address, so the whole step (forward,
sampling, bookkeeping) is captured once as a CUDA graph and replayed: one launch per token. The host reads the sampled
tokens every `SYNC_EVERY` steps to see which rows stopped; rows that stopped decode on, and their extra tokens are
dropped (a decode step reads the weights once for any number of rows, so it costs about the same).

Randomness: one uniform per (step, row), drawn up front from the seeded generator; a row's token is the inverse CDF
of its top-k / top-p distribution at its uniform, so a row's sample depends on its own logits and uniforms alone.
Log-probs are those of softmax(z / T) over the full vocabulary, as in the loop. On a CPU the same code runs without
the graph (the tests).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Callable, Sequence

import torch
from transformers import AttentionInterface, PreTrainedTokenizerBase
from transformers.cache_utils import Cache, DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from lopd.core.sampling import (
    Completion,
    SamplingParams,
    hits_stop_string,
    prompt_inputs,
    stop_tail_tokens,
    top_k_top_p,
)

STATIC_ATTENTION = "lopd_static"
SYNC_EVERY = 16
"""Decode steps between two reads of the sampled tokens by the host (at most this many wasted steps per batch)."""
CAPACITY_ROUND = 256
"""Cache capacities are multiples of this: batches of similar prompt width share one captured graph."""
FIRST_SPAN = 1024
"""New tokens the cache first holds room for; it grows by half when full (a 16k budget is rarely used up, and every
decode step reads the whole capacity)."""


def sample_inverse_cdf(logits_B_V: torch.Tensor, params: SamplingParams, uniform_B: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row with temperature, top-k then top-p, chosen by the inverse CDF at `uniform_B` (in [0, 1));
    return (tokens_B, logprobs_B) with log-probs of softmax(z / T) over the full vocabulary. No host sync and no
    random-number generator inside: a CUDA graph can hold it."""
    top_logp_B_K, top_ids_B_K, probs_B_K = top_k_top_p(logits_B_V, params)
    cdf_B_K = torch.cumsum(probs_B_K, dim=-1)
    choice_B1 = torch.searchsorted(cdf_B_K, uniform_B[:, None] * cdf_B_K[:, -1:], right=True)
    # u * total rounded up to total: the last token with mass (those with mass are a prefix, sorted descending)
    choice_B1 = torch.minimum(choice_B1, (probs_B_K > 0).sum(-1, keepdim=True) - 1)
    return top_ids_B_K.gather(-1, choice_B1).squeeze(-1), top_logp_B_K.gather(-1, choice_B1).squeeze(-1)


def static_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Attention over a static cache: `attention_mask` (bool [B, 1, Lq, Lk], True = attend) says which of the
    cache's first Lk positions each query reads. A decode step (Lq = 1) stacks each KV head's G query heads as G
    query rows, so grouped-query K/V are never repeated; a prefill repeats them once. Runs in the model's dtype.
    Shapes: query [B, Hq, Lq, D], key/value [B, Hkv, C, D]; returns [B, Lq, Hq, D]."""
    batch, q_heads, q_len, dim = query.shape
    if attention_mask is not None:
        key, value = key[:, :, :attention_mask.shape[-1]], value[:, :, :attention_mask.shape[-1]]
    kv_heads = key.shape[1]
    groups = q_heads // kv_heads
    if q_len == 1:
        out = torch.nn.functional.scaled_dot_product_attention(
            query.reshape(batch, kv_heads, groups, dim), key, value, attn_mask=attention_mask, scale=scaling)
        return out.reshape(batch, q_heads, 1, -1).transpose(1, 2).contiguous(), None
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1),
        attn_mask=attention_mask, scale=scaling, is_causal=attention_mask is None)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(STATIC_ATTENTION, static_attention)
AttentionMaskInterface.register(STATIC_ATTENTION, sdpa_mask)  # a plain forward with a 2-D mask (not the decoder's)


def supports(config) -> bool:
    """Whether a model's layers all attend to the whole context (the static cache keeps every position; sliding-window
    layers would need a ring buffer)."""
    return all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or ["full_attention"])


class _WritePositions:
    """Where the next forward writes its keys and values in the cache: the prompt's positions in a prefill, the
    current slot (a one-element tensor the graph advances) in a decode step."""

    positions: torch.Tensor


class _StaticLayer(DynamicLayer):
    """One layer's keys and values in fixed buffers [B, H, C, D], written at `writer.positions`."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, writer: _WritePositions):
        super().__init__()
        self.keys, self.values, self.writer = keys, values, writer
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.keys.index_copy_(2, self.writer.positions, key_states)
        self.values.index_copy_(2, self.writer.positions, value_states)
        return self.keys, self.values


@dataclass
class _Buffers:
    """Everything a decode step reads or writes, at fixed addresses. Dims: B rows, C cache positions (a step's
    tokens are at most C, so the per-step buffers are C long too)."""

    keys: list[torch.Tensor]
    """Per layer [B, Hkv, C, D]."""
    values: list[torch.Tensor]
    attend_B11C: torch.Tensor
    """Which cache positions each row reads: its prompt's and those it has sampled."""
    uniform_C_B: torch.Tensor
    tokens_C_B: torch.Tensor
    logprobs_C_B: torch.Tensor
    token_B1: torch.Tensor
    """The last sampled token: the next step's input."""
    position_B1: torch.Tensor
    """Its position id (rows are left-padded, so it differs by row)."""
    slot_1: torch.Tensor
    """Its cache position (the same for every row)."""
    step_1: torch.Tensor
    """Tokens sampled so far: where the next one is written."""

    @property
    def capacity(self) -> int:
        return self.attend_B11C.shape[-1]

    @classmethod
    def allocate(cls, model: torch.nn.Module, rows: int, capacity: int) -> _Buffers:
        config, param = model.config, next(model.parameters())
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

        def kv() -> list[torch.Tensor]:
            return [param.new_zeros(rows, kv_heads, capacity, head_dim) for _ in range(config.num_hidden_layers)]

        def per_step(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(capacity, rows, dtype=dtype, device=param.device)

        def one(n: int = 1) -> torch.Tensor:
            return torch.zeros(n, 1, dtype=torch.long, device=param.device)

        return cls(kv(), kv(), torch.zeros(rows, 1, 1, capacity, dtype=torch.bool, device=param.device),
                   per_step(torch.float32), per_step(torch.long), per_step(torch.float32), one(rows), one(rows),
                   one().view(1), one().view(1))

    def grown(self, model: torch.nn.Module, capacity: int) -> _Buffers:
        """A copy with room for `capacity` positions (and steps), holding this one's contents."""
        bigger = _Buffers.allocate(model, self.token_B1.shape[0], capacity)
        for field in fields(self):
            old, new = getattr(self, field.name), getattr(bigger, field.name)
            for o, n in zip(old, new) if isinstance(old, list) else [(old, new)]:
                axis = {"keys": 2, "values": 2, "attend_B11C": 3}.get(field.name, 0)
                n.narrow(axis, 0, o.shape[axis]).copy_(o)
        return bigger


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class StaticDecoder:
    """Batches sampled with fixed-shape decode steps on `model` (loaded with `attn_implementation=STATIC_ATTENTION`).
    With `graphs` (CUDA only) each step is one replayed CUDA graph, captured for the current rows, capacity and
    sampling parameters, and captured again when they change; `stats["capture_s"]` adds up the time spent capturing."""

    def __init__(self, model: torch.nn.Module, pad_id: int, graphs: bool):
        if not supports(model.config):
            raise ValueError("static decode: the model has sliding-window layers (use sampling.hf_decode=loop)")
        self.model, self.pad_id, self.graphs = model, pad_id, graphs
        self.writer = _WritePositions()
        self.buffers: _Buffers | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.graph_key: tuple | None = None
        self.stats = {"captures": 0, "capture_s": 0.0}

    def release(self) -> None:
        """Free the cache and the graph (they are made again for the next batch)."""
        self.buffers = self.graph = self.graph_key = None

    def _prepare(self, rows: int, capacity: int) -> _Buffers:
        if self.buffers is None or self.buffers.token_B1.shape[0] != rows or self.buffers.capacity != capacity:
            self.release()
            self.buffers = _Buffers.allocate(self.model, rows, capacity)
        return self.buffers

    def _grow(self, capacity: int) -> None:
        grown = self.buffers.grown(self.model, capacity)
        self.release()
        self.buffers = grown

    def _cache(self) -> Cache:
        b = self.buffers
        return Cache(layers=[_StaticLayer(k, v, self.writer) for k, v in zip(b.keys, b.values)])

    def _decode_step(self, cache: Cache, params: SamplingParams) -> None:
        """Feed the last token at the current slot and sample the next: every operand is a buffer, so a graph can
        hold the whole step."""
        b = self.buffers
        b.attend_B11C.index_fill_(-1, b.slot_1, True)
        logits_B_V = self.model(input_ids=b.token_B1, position_ids=b.position_B1, attention_mask=b.attend_B11C,
                                past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        token_B, logprob_B = sample_inverse_cdf(logits_B_V, params, b.uniform_C_B.index_select(0, b.step_1)[0])
        b.tokens_C_B.index_copy_(0, b.step_1, token_B[None])
        b.logprobs_C_B.index_copy_(0, b.step_1, logprob_B[None])
        b.token_B1.copy_(token_B[:, None])
        b.position_B1.add_(1)
        b.slot_1.add_(1)
        b.step_1.add_(1)

    def _load_uniforms(self, uniforms_T_B: torch.Tensor) -> None:
        count = min(self.buffers.capacity, len(uniforms_T_B))
        self.buffers.uniform_C_B[:count] = uniforms_T_B[:count]

    def _step_function(self, params: SamplingParams) -> Callable[[], None]:
        """The decode step for the current buffers: the eager function, or the replay of its graph (captured here if
        the buffers or the sampling parameters changed)."""
        self.writer.positions = self.buffers.slot_1
        cache = self._cache()
        if not self.graphs:
            return lambda: self._decode_step(cache, params)
        key = (params.temperature, params.top_k, params.top_p)  # new buffers clear it (`release`)
        if self.graph_key != key:
            start = time.perf_counter()
            saved = {f.name: getattr(self.buffers, f.name).clone() for f in fields(self.buffers)
                     if f.name not in ("keys", "values")}
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up outside the graph: lazy initialisations, allocator pools
                for _ in range(2):
                    self._decode_step(cache, params)
            torch.cuda.current_stream().wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._decode_step(cache, params)
            for name, value in saved.items():  # undo the warm-up (the keys and values it wrote are masked out)
                getattr(self.buffers, name).copy_(value)
            self.graph_key = key
            self.stats["captures"] += 1
            self.stats["capture_s"] += time.perf_counter() - start
        return self.graph.replay

    def _prefill(self, prompts: list[Sequence[int]], rows: int, params: SamplingParams, uniforms_T_B: torch.Tensor,
                 embeds: list[torch.Tensor] | None) -> int:
        """Left-pad the prompts (plus one-token padding rows up to `rows`), run them through the model into the cache
        and sample each row's first token; return the prompt width."""
        width, device = max(len(p) for p in prompts), next(self.model.parameters()).device
        ids_B_W = torch.full((rows, width), self.pad_id, dtype=torch.long, device=device)
        keep_B_W = torch.zeros((rows, width), dtype=torch.bool, device=device)
        keep_B_W[len(prompts):, -1] = True
        for row, prompt in enumerate(prompts):
            ids_B_W[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long, device=device)
            keep_B_W[row, width - len(prompt):] = True
        capacity = _round_up(width + min(params.max_new_tokens, FIRST_SPAN), CAPACITY_ROUND)
        b = self._prepare(rows, capacity)
        self._load_uniforms(uniforms_T_B)
        # Each query reads the prompt tokens up to itself; a padding query reads itself (never a row of -inf).
        causal_W_W = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        attend_B1WW = (causal_W_W & keep_B_W[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)
        positions_B_W = (keep_B_W.long().cumsum(-1) - 1).clamp(min=0)
        self.writer.positions = torch.arange(width, device=device)
        logits_B_V = self.model(**prompt_inputs(self.model, ids_B_W, embeds), attention_mask=attend_B1WW[:, None],
                                position_ids=positions_B_W,
                                past_key_values=self._cache(), use_cache=True, logits_to_keep=1).logits[:, -1]
        token_B, logprob_B = sample_inverse_cdf(logits_B_V, params, b.uniform_C_B[0])
        b.attend_B11C.zero_()
        b.attend_B11C[:, 0, 0, :width] = keep_B_W
        b.tokens_C_B[0], b.logprobs_C_B[0] = token_B, logprob_B
        b.token_B1.copy_(token_B[:, None])
        b.position_B1.copy_(positions_B_W[:, -1:] + 1)
        b.slot_1.fill_(width)
        b.step_1.fill_(1)
        return width

    def generate_batch(self, prompts: list[Sequence[int]], params: SamplingParams, generator: torch.Generator,
                       advance: Callable[[int, int], None], embeds: list[torch.Tensor] | None, stop_ids: set[int],
                       tokenizer: PreTrainedTokenizerBase | None, stats: dict[str, float]) -> list[Completion]:
        """Sample one batch, as `HFBackend` does (same arguments): rows are padded to a power of two (fewer shapes,
        fewer captures), and a row ends at its first stop token or stop string."""
        was_training = self.model.training
        self.model.eval()
        n, budget = len(prompts), params.max_new_tokens
        rows = 1 << (n - 1).bit_length()
        device = next(self.model.parameters()).device
        start = time.perf_counter()
        uniforms_T_B = torch.rand((budget, rows), generator=generator, device=device)
        width = self._prefill(prompts, rows, params, uniforms_T_B, embeds)
        decode_start = time.perf_counter()
        stats["prefill_s"] += decode_start - start
        stats["prompt_tokens"] += sum(len(p) for p in prompts)

        tokens: list[list[int]] = [[] for _ in range(n)]
        length: list[int | None] = [None] * n  # a stopped row's length (its stop token included)
        tail = stop_tail_tokens(params.stop) if params.stop else 0
        step = self._step_function(params)
        sampled, active = 1, n
        while True:
            if sampled % SYNC_EVERY == 0 or sampled == budget:
                new_tokens = (sampled - len(tokens[0])) * active
                finished = self._read(tokens, length, sampled, stop_ids, params.stop, tail, tokenizer)
                active -= finished
                if sampled == budget or not active:
                    advance(finished + active, new_tokens)
                    break
                advance(finished, new_tokens)
            if width + sampled > self.buffers.capacity:  # the next step would write past the cache
                self._grow(min(_round_up(self.buffers.capacity * 3 // 2, CAPACITY_ROUND),
                               _round_up(width + budget, CAPACITY_ROUND)))
                self._load_uniforms(uniforms_T_B)
                step = self._step_function(params)
            step()
            sampled += 1
        logprobs_T_B = self.buffers.logprobs_C_B[:sampled, :n].T.tolist()
        self.model.train(was_training)
        end = time.perf_counter()
        stats["decode_s"] += end - decode_start
        stats["sampling_s"] += end - start
        completions = [Completion(tokens[r][:length[r] or sampled], logprobs_T_B[r][:length[r] or sampled],
                                  length[r] is not None) for r in range(n)]
        stats["sampled_tokens"] += sum(len(c.token_ids) for c in completions)
        return completions

    def _read(self, tokens: list[list[int]], length: list[int | None], sampled: int, stop_ids: set[int],
              stop: Sequence[str], tail: int, tokenizer: PreTrainedTokenizerBase | None) -> int:
        """Copy the tokens sampled since the last read to `tokens` and mark the rows whose first stop token or stop
        string is among them (`length`); return how many rows stopped."""
        read = len(tokens[0])
        new_B_T = self.buffers.tokens_C_B[read:sampled, :len(tokens)].T.tolist()
        stopped = 0
        for row, new in enumerate(new_B_T):
            tokens[row].extend(new)
            if length[row] is not None:
                continue
            ends = [read + i + 1 for i, t in enumerate(new) if t in stop_ids]
            if tail:  # the first step whose decoded tail holds a stop string
                steps = range(read + 1, (ends[0] if ends else sampled) + 1)
                hits = hits_stop_string([tokens[row][max(0, s - tail):s] for s in steps], stop, tokenizer)
                ends += [s for s, hit in zip(steps, hits) if hit][:1]
            if ends:
                length[row] = min(ends)
                stopped += 1
        return stopped
