"""The latent composer and latent injection (paper §3.2, Appendix A and B.2).

Composer Phi_phi = (Enc_psi, Comp_chi):
- Enc_psi is the frozen backbone with a LoRA adapter (on q/k/v/o/gate/up/down); it reads
  "Task to solve:\\n{x}\\n\\nReference past trajectory:\\n{m_j}" and returns its last hidden states.
- Comp_chi is a QFormer-style perceiver: K learned queries cross-attend to those hidden states through
  one block whose weights are shared across `qformer_layers` applications.
Each retrieved item becomes K latent tokens; J items concatenate to J*K.

The same backbone object is the frozen teacher: its adapter is on only while encoding (`Composer._adapter_off`), so
every teacher forward is the pure base model reading `input_ids` whose placeholder span is replaced by the
latent tokens (torch.cat over slices, so gradients reach phi).
"""

from __future__ import annotations

import contextlib
import functools
import math
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.utils.checkpoint
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.modeling_layers import GradientCheckpointingLayer

from lopd.core.adapters import attribute_set, only_adapter, peft_wrapping
from lopd.core.config import PROJECTIONS, ComposerConfig
from lopd.core.rollout import chat_text, encode_prompt
from lopd.core.trajectory import TokenBatch, Trajectory, collate, with_prompt

LATENT_PLACEHOLDER = "<|LATENT_PH|>"

# Domain framing around the latent span (paper Appendix C).
FRAMINGS: dict[str, tuple[str, str]] = {
    "code": ("The following is a reference from a similar programming problem. Study the approach and "
             "algorithm, then solve YOUR problem below.",
             "--- end of reference ---"),
    "agentic": ("The following is a REFERENCE EXAMPLE of how a DIFFERENT, already-solved task was handled, shown "
                "only to illustrate the general approach. It was performed in a SEPARATE session -- in YOUR task "
                "below, NOTHING has been done yet and the environment is in its initial state. You must perform "
                "every step yourself by calling the tools and reading their actual results; do NOT assume any "
                "step is already complete.",
                "--- end of reference example ---\nNow complete YOUR task below, starting from scratch "
                "(the environment is untouched):"),
}


def trace_text(trace: str) -> str:
    """A retrieved trace as the encoder reads it; alone, it is the encoder's input without task conditioning."""
    return f"Reference past trajectory:\n{trace}"


def encoder_text(task: str, trace: str) -> str:
    return f"Task to solve:\n{task}\n\n{trace_text(trace)}"


def teacher_prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], framing: tuple[str, str],
                       n_latent: int, tools: Sequence[dict[str, Any]] = (), *,
                       continue_final: bool = False) -> tuple[list[int], int]:
    """The teacher's prompt: the framing and a placeholder go into the first user message, the chat template
    renders it, the text is split at the placeholder and each half tokenised on its own, and `n_latent` pad
    ids fill the gap. Returns (ids, index of the first latent slot). `continue_final` as for `chat_text`.

    With nothing retrieved (`n_latent` 0: an empty bank) there is no reference to frame, and the teacher reads the
    student's own prompt (`encode_prompt`), an empty span at its end: a framing that announces a reference and
    shows none is no privileged context (on the agentic cpu run, whose bank is empty, Qwen 0.5B read it as a
    finished task and answered "Task Completed" at once, and LOPD distilled that into its student)."""
    if n_latent == 0:
        ids = encode_prompt(tokenizer, messages, tools, continue_final=continue_final)
        return ids, len(ids)
    rendered = chat_text(tokenizer, framed_messages(messages, framing, LATENT_PLACEHOLDER), tools,
                         continue_final=continue_final)
    head, tail = rendered.split(LATENT_PLACEHOLDER)
    head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
    tail_ids = tokenizer(tail, add_special_tokens=False)["input_ids"]
    return [*head_ids, *[tokenizer.pad_token_id] * n_latent, *tail_ids], len(head_ids)


def text_context_prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]],
                            framing: tuple[str, str], traces: Sequence[str],
                            tools: Sequence[dict[str, Any]] = ()) -> list[int]:
    """The teacher's prompt with the retrieved traces as text where `teacher_prompt_ids` puts their latent tokens
    (the same framing, each trace as the encoder reads it): what the latents are measured against. No traces: the
    student's own prompt, as with an empty latent span."""
    reference = "\n\n".join(trace_text(trace) for trace in traces)
    return encode_prompt(tokenizer, framed_messages(messages, framing, reference) if traces else messages, tools)


def framed_messages(messages: list[dict[str, str]], framing: tuple[str, str], reference: str) -> list[dict[str, str]]:
    """`messages` with the framed reference before the first user message's content."""
    before, after = framing
    first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    framed = [dict(m) for m in messages]
    framed[first_user]["content"] = f"{before}\n{reference}\n{after}\n\n{messages[first_user]['content']}"
    return framed


def inject_latents(embeds_B_L_D: torch.Tensor, latents: list[torch.Tensor], starts: list[int]) -> torch.Tensor:
    """Replace row b's span [starts[b], starts[b] + len(latents[b])) by latents[b] ([S_b, D]), with torch.cat
    over slices (not in-place assignment) so autograd tracks the latents."""
    rows = []
    for row_L_D, lat_S_D, start in zip(embeds_B_L_D, latents, starts):
        end = start + lat_S_D.shape[0]
        rows.append(torch.cat([row_L_D[:start], lat_S_D.to(row_L_D.dtype), row_L_D[end:]]))
    return torch.stack(rows)


class QFormer(nn.Module):
    """K learned queries; one pre-norm cross-attention + feed-forward block applied `n_layers` times."""

    def __init__(self, dim: int, heads: int, n_queries: int, n_layers: int, ff_mult: int, out_scale: float):
        super().__init__()
        # Queries ~ N(0, 1/sqrt(d)) read as a standard deviation of 1/sqrt(d) (the usual perceiver init).
        # A seeded CPU init (the same on every device); the module is moved afterwards.
        self.queries_K_D = nn.Parameter(torch.randn(n_queries, dim, device="cpu") / math.sqrt(dim))
        self.norm_queries, self.norm_memory, self.norm_ff = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(dim, ff_mult * dim), nn.GELU(), nn.Linear(ff_mult * dim, dim))
        self.n_layers = n_layers
        # Latents replace token embeddings, so they start at the embedding table's per-coordinate scale.
        self.norm_out = nn.LayerNorm(dim)
        nn.init.constant_(self.norm_out.weight, out_scale)

    def forward(self, memory_J_T_D: torch.Tensor, memory_mask_J_T: torch.Tensor) -> torch.Tensor:
        memory = self.norm_memory(memory_J_T_D)
        x_J_K_D = self.queries_K_D.expand(memory.shape[0], -1, -1)
        for _ in range(self.n_layers):
            x_J_K_D = x_J_K_D + self.attention(self.norm_queries(x_J_K_D), memory, memory,
                                               key_padding_mask=memory_mask_J_T == 0, need_weights=False)[0]
            x_J_K_D = x_J_K_D + self.ff(self.norm_ff(x_J_K_D))
        return self.norm_out(x_J_K_D)


ENCODER = "default"
"""The encoder adapter's name (peft's default), under which composer files name its weights."""


class Composer(nn.Module):
    """Enc (backbone + LoRA) and Comp (QFormer). Wraps `backbone` in place with peft: the backbone's own
    weights are frozen; only the adapter and the QFormer train. A LoRA student (a peft model) is not copied: the
    encoder adapter joins the student's adapter on its base, and each pass switches on its own (the encoder's while
    encoding, none for the teacher); its other parameters are the student's, which the composer leaves alone."""

    def __init__(self, backbone: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cfg: ComposerConfig,
                 latent_tokens: int):
        super().__init__()
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=list(PROJECTIONS), bias="none")
        with peft_wrapping():
            if isinstance(backbone, PeftModel):
                backbone.add_adapter(ENCODER, lora)
                self.model = backbone
            else:
                backbone.requires_grad_(False)
                self.model = get_peft_model(backbone, lora, adapter_name=ENCODER)
        backbone = self.model.get_base_model()
        for _, p in self.own_parameters():
            p.requires_grad_(True)
        self.adapter_layers = [m for m in self.model.modules() if isinstance(m, BaseTunerLayer)]
        # Encoder and teacher activations are recomputed in the backward pass, layer by layer. transformers
        # checkpoints only in train mode (the backbone has no dropout, so the mode changes nothing else).
        self.checkpointing = cfg.activation_checkpointing
        if self.checkpointing:
            backbone.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        self.layers = [m for m in backbone.modules() if isinstance(m, GradientCheckpointingLayer)]
        config = backbone.config
        embed_scale = backbone.get_input_embeddings().weight.detach().float().pow(2).mean().sqrt().item()
        self.qformer = QFormer(config.hidden_size, config.num_attention_heads, latent_tokens, cfg.qformer_layers,
                               cfg.ff_mult, embed_scale)
        self.tokenizer = tokenizer
        self.max_item_tokens = cfg.max_item_tokens

    def own_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """The composer's own weights, phi: the encoder adapter and the QFormer (not a shared student's)."""
        return [(n, p) for n, p in self.named_parameters() if n.startswith("qformer.") or f".{ENCODER}." in n]

    @property
    def backbone(self) -> PreTrainedModel:
        return self.model.get_base_model()

    @property
    def device(self) -> torch.device:
        return self.qformer.queries_K_D.device

    def encode(self, groups: list[list[str]]) -> list[torch.Tensor]:
        """Latent tokens [J, K, D] for each group of encoder texts (one task's J retrieved items). Every text is
        tokenised and truncated on its own, as if encoded alone, and gets the hidden states it would get alone: the
        tokens a group's texts share at their start (the task) are encoded once, each text's remainder attending to
        that prefix and to itself (a block mask, positions continuing the prefix). One encoder pass for all groups."""
        ids = iter(self.tokenizer([t for g in groups for t in g], truncation=True,
                                  max_length=self.max_item_tokens)["input_ids"])
        items = [[next(ids) for _ in g] for g in groups]
        rows = [shared_prefix_row(group) for group in items]
        width = max(len(tokens) for tokens, _, _ in rows)
        cpu = torch.device("cpu")  # filled row by row on the CPU, moved once
        ids_B_L = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long, device=cpu)
        positions_B_L = torch.zeros((len(rows), width), dtype=torch.long, device=cpu)
        blocks_B_L = torch.full((len(rows), width), -2, dtype=torch.long, device=cpu)  # -2: padding, -1: prefix
        for b, (tokens, positions, blocks) in enumerate(rows):
            ids_B_L[b, :len(tokens)] = torch.tensor(tokens, device=cpu)
            positions_B_L[b, :len(tokens)] = torch.tensor(positions, device=cpu)
            blocks_B_L[b, :len(tokens)] = torch.tensor(blocks, device=cpu)
        mask = self._attention_mask(block_mask(positions_B_L, blocks_B_L))
        # the decoder of the LoRA-wrapped backbone (its adapter layers sit inside it): the last hidden state only
        recomputed = self._recomputed_as(self._encoder_on) if self.checkpointing else contextlib.nullcontext()
        with self._mode(self.checkpointing), self._encoder_on(), recomputed:
            hidden_B_L_D = self.backbone.get_decoder()(input_ids=ids_B_L.to(self.device), attention_mask=mask,
                                                       position_ids=positions_B_L.to(self.device),
                                                       use_cache=False).last_hidden_state
        memory, lengths = [], []
        for b, group in enumerate(items):
            prefix = rows[b][2].count(-1)
            start = prefix
            for tokens in group:  # the item alone: the prefix's states, then its own block's
                own = len(tokens) - prefix
                index = torch.cat([torch.arange(prefix, device=self.device),
                                   torch.arange(start, start + own, device=self.device)])
                memory.append(hidden_B_L_D[b, index])
                lengths.append(len(tokens))
                start += own
        memory_N_T_D = torch.nn.utils.rnn.pad_sequence(memory, batch_first=True)
        mask_N_T = (torch.arange(memory_N_T_D.shape[1], device=self.device)[None, :]
                    < torch.tensor(lengths, device=self.device)[:, None]).long()
        latents_N_K_D = self.qformer(memory_N_T_D, mask_N_T)
        return list(latents_N_K_D.split([len(g) for g in groups]))

    def _attention_mask(self, allowed_B_L_L: torch.Tensor) -> torch.Tensor:
        """The block mask as the backbone's attention implementation takes a custom 4D mask."""
        implementation = self.backbone.config._attn_implementation
        allowed = allowed_B_L_L[:, None].to(self.device)
        if implementation == "sdpa":
            return allowed
        if implementation == "eager":
            dtype = self.backbone.get_input_embeddings().weight.dtype
            return torch.zeros(allowed.shape, dtype=dtype, device=self.device).masked_fill(~allowed,
                                                                                          torch.finfo(dtype).min)
        raise ValueError(f"composer encoder: attention implementation {implementation!r} takes no custom 4D mask "
                         "(load the backbone with sdpa or eager attention)")

    def teacher_hidden(self, batch: TokenBatch, latents: list[torch.Tensor], starts: list[int]) -> torch.Tensor:
        """Final hidden states [B, L, D] of the frozen base model (adapter off) on `batch`, with each row's
        placeholder span replaced by its latent tokens. Only latents that require grad make it build a graph
        (the input-embedding hook of checkpointing would otherwise make one for nothing)."""
        if not (torch.is_grad_enabled() and any(lat.requires_grad for lat in latents)):
            with torch.no_grad():
                return self._teacher_forward(batch, latents, starts)
        if not self.checkpointing:
            return self._teacher_forward(batch, latents, starts)
        with self._recomputed_as(self._adapter_off):
            return self._teacher_forward(batch, latents, starts)

    def _teacher_forward(self, batch: TokenBatch, latents: list[torch.Tensor], starts: list[int]) -> torch.Tensor:
        embeds_B_L_D = inject_latents(self.backbone.get_input_embeddings()(batch.input_ids_B_L), latents, starts)
        with self._mode(self.checkpointing and torch.is_grad_enabled()), self._adapter_off():
            out = self.backbone.get_decoder()(inputs_embeds=embeds_B_L_D, attention_mask=batch.attention_mask_B_L,
                                              use_cache=False)
        return out.last_hidden_state

    @contextlib.contextmanager
    def _mode(self, training: bool) -> Iterator[None]:
        """The backbone in train (checkpointing) or eval mode for one pass, then as it was (a shared student's)."""
        was = self.backbone.training
        self.backbone.train(training)
        try:
            yield
        finally:
            self.backbone.train(was)

    def _encoder_on(self) -> contextlib.AbstractContextManager[None]:
        """The encoder's view of the backbone: the encoder adapter alone (a shared student's off)."""
        return only_adapter(self.model, ENCODER)

    def _adapter_off(self) -> contextlib.AbstractContextManager[None]:
        """The teacher's view of the shared backbone: every LoRA layer passes its input to its base layer only. It
        sets the flag each layer's forward reads, which peft's `disable_adapter` sets too, but without peft's
        requires_grad bookkeeping over every adapter weight on the way in and out (measured: ~0.14 s per switch on
        the 0.5B model, and the teacher's recomputation switches once per layer in every backward pass)."""
        return attribute_set(self.adapter_layers, "_disable_adapters", True)

    def _recomputed_as(self, view) -> contextlib.AbstractContextManager[None]:
        """Checkpoint the layers of a pass so that their backward-pass recomputation, which runs once the pass's
        adapter setting (`view()`: the teacher's adapters off, the encoder's alone) is undone, sets it again: the
        graph then holds one activation per layer instead of every intermediate (agentic sequences of thousands of
        tokens would not fit otherwise)."""
        checkpointed = functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=False,
                                         context_fn=lambda: (contextlib.nullcontext(), view()))
        return attribute_set(self.layers, "_gradient_checkpointing_func", checkpointed)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The adapter's and the QFormer's weights that train, as CPU copies (device-independent files and
        checkpoints)."""
        return {n: p.detach().to("cpu", copy=True) for n, p in self.own_parameters() if p.requires_grad}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        names = {n for n, p in self.own_parameters() if p.requires_grad}
        if set(state) != names:
            raise ValueError("composer checkpoint does not match this composer's configuration "
                             f"({len(set(state) ^ names)} parameter names differ)")
        params = dict(self.named_parameters())
        with torch.no_grad():
            for name, value in state.items():
                if params[name].shape != value.shape:
                    raise ValueError(f"composer checkpoint: {name} has shape {tuple(value.shape)}, "
                                     f"expected {tuple(params[name].shape)} (latent_tokens or composer changed?)")
                params[name].copy_(value)

    def save(self, path: str | Path) -> None:
        torch.save(self.trainable_state(), path)


COMPOSER_PARTS = {"queries": "qformer.queries_K_D", "qformer": "qformer.", "encoder": f".{ENCODER}."}
"""The composer's parts by parameter name: the QFormer's learned queries, the rest of the QFormer, the encoder's LoRA
adapter (the first part a name matches)."""


def grad_norms_by_part(named_parameters: Sequence[tuple[str, torch.Tensor]]) -> dict[str, float]:
    """The L2 norm of the gradient of each composer part (`COMPOSER_PARTS`) as `grad_norm_<part>`: which part learns."""
    squares = dict.fromkeys(COMPOSER_PARTS, 0.0)
    for name, p in named_parameters:
        part = next(part for part, key in COMPOSER_PARTS.items() if key in name)
        if p.grad is not None:
            squares[part] += float(p.grad.detach().float().pow(2).sum())
    return {f"grad_norm_{part}": math.sqrt(total) for part, total in squares.items()}


def shared_prefix_row(items: list[list[int]]) -> tuple[list[int], list[int], list[int]]:
    """One encoder row for a group of token sequences: their longest common prefix once, then each sequence's
    remainder. Returns (tokens, positions, blocks): a remainder's positions continue from the prefix as in its own
    sequence; block -1 is the prefix, j the j-th remainder."""
    prefix = 0
    while all(len(t) > prefix for t in items) and len({t[prefix] for t in items}) == 1:
        prefix += 1
    tokens, positions, blocks = list(items[0][:prefix]), list(range(prefix)), [-1] * prefix
    for j, item in enumerate(items):
        tokens += item[prefix:]
        positions += range(prefix, len(item))
        blocks += [j] * (len(item) - prefix)
    return tokens, positions, blocks


def block_mask(positions_B_L: torch.Tensor, blocks_B_L: torch.Tensor) -> torch.Tensor:
    """[B, L, L] bool, query by key: a token attends to the shared prefix (block -1) and to its own block, causally
    by position; padding (block -2) attends only to itself (a fully masked row would give NaN)."""
    q_blocks, k_blocks = blocks_B_L[:, :, None], blocks_B_L[:, None, :]
    visible = (k_blocks == -1) | (k_blocks == q_blocks)
    causal = positions_B_L[:, None, :] <= positions_B_L[:, :, None]
    real = (q_blocks != -2) & (k_blocks != -2)
    return (visible & causal & real) | (torch.eye(blocks_B_L.shape[1], dtype=torch.bool, device=blocks_B_L.device)
                                        & (q_blocks == -2))


def compose(composer: Composer, tasks: list[str], traces: list[list[str]]) -> list[torch.Tensor]:
    """Latent context per task: its J retrieved traces, each encoded together with the task and compressed
    to K tokens, concatenated to [J*K, D]. One encoder pass for the whole batch; a task appearing more than once
    with the same traces (several rollouts or bank entries of one task) is encoded once and its latents shared."""
    dim = composer.backbone.config.hidden_size
    groups = {(task, tuple(ts)): None for task, ts in zip(tasks, traces) if ts}
    encoded = composer.encode([[encoder_text(task, trace) for trace in ts] for task, ts in groups]) if groups else []
    latents = {key: lat.reshape(-1, dim) for key, lat in zip(groups, encoded)}
    return [latents[(task, tuple(ts))] if ts else torch.zeros(0, dim, device=composer.device)
            for task, ts in zip(tasks, traces)]


def teacher_batch(tokenizer: PreTrainedTokenizerBase, trajectories: list[Trajectory],
                  messages: list[list[dict[str, str]]], framing: tuple[str, str], n_latent: list[int],
                  pad_id: int, tools: Sequence[Sequence[dict[str, Any]]] | None = None,
                  device: torch.device | str = "cpu") -> tuple[TokenBatch, list[int]]:
    """The teacher's view of each trajectory: its first-turn context replaced by the framed prompt with a
    latent span, every action and later turn unchanged (so action positions align one to one with the
    student's). Returns the batch (on `device`) and each row's latent start."""
    rows, starts = [], []
    for traj, msgs, n, offered in zip(trajectories, messages, n_latent, tools or [()] * len(trajectories)):
        ids, start = teacher_prompt_ids(tokenizer, msgs, framing, n, offered)
        rows.append(with_prompt(traj, ids))
        starts.append(start)
    return collate(rows, pad_id, device), starts
