"""Losses as small pure functions returning `(loss, metrics)`; tensor names carry their shapes.

B = sequences, T = target positions, D = hidden size, V = vocabulary.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def _chunk_logprobs(hidden_N_D: torch.Tensor, weight_V_D: torch.Tensor, targets_N: torch.Tensor,
                    temperature: float) -> torch.Tensor:
    logits_N_V = (hidden_N_D.to(weight_V_D.dtype) @ weight_V_D.T).float() / temperature
    return logits_N_V.gather(-1, targets_N[:, None]).squeeze(-1) - torch.logsumexp(logits_N_V, dim=-1)


def token_logprobs(hidden_N_D: torch.Tensor, weight_V_D: torch.Tensor, targets_N: torch.Tensor,
                   temperature: float = 1.0, chunk_size: int = 256) -> torch.Tensor:
    """log softmax(hidden @ W^T / temperature)[target] for N positions, computed in chunks of positions.

    Each chunk's [C, V] logits are recomputed in the backward pass (activation checkpointing), so peak
    memory holds one chunk of logits instead of all [N, V]. Callers pass only the positions they need
    (the action tokens), so prompt and tool-output positions never touch the vocabulary projection.
    """
    pieces = []
    needs_grad = torch.is_grad_enabled() and (hidden_N_D.requires_grad or weight_V_D.requires_grad)
    for start in range(0, hidden_N_D.shape[0], chunk_size):
        args = (hidden_N_D[start:start + chunk_size], weight_V_D, targets_N[start:start + chunk_size], temperature)
        pieces.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False) if needs_grad else _chunk_logprobs(*args))
    return torch.cat(pieces) if pieces else hidden_N_D.new_zeros(0, dtype=torch.float32)


def group_advantages(rewards_B: torch.Tensor, groups_B: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """GRPO advantages: (r - mean of its group) / (std of its group + eps), std unbiased as in TRL."""
    adv_B = torch.zeros_like(rewards_B)
    for g in groups_B.unique():
        members = groups_B == g
        r = rewards_B[members]
        std = r.std() if r.numel() > 1 else torch.zeros(())
        adv_B[members] = (r - r.mean()) / (std + eps)
    return adv_B


def ppo_clip_loss(logp_B_T: torch.Tensor, old_logp_B_T: torch.Tensor, advantages_B: torch.Tensor,
                  mask_B_T: torch.Tensor, clip_low: float, clip_high: float) -> tuple[torch.Tensor, dict]:
    """GRPO's clipped surrogate: mean over each sequence's action tokens, then mean over sequences.

    Sequences without action tokens contribute zero. Returns the loss to minimise and diagnostics.
    """
    ratio_B_T = torch.exp(logp_B_T - old_logp_B_T)
    adv_B_1 = advantages_B[:, None]
    unclipped_B_T = ratio_B_T * adv_B_1
    clipped_B_T = ratio_B_T.clamp(1 - clip_low, 1 + clip_high) * adv_B_1
    per_token_B_T = -torch.minimum(unclipped_B_T, clipped_B_T)
    tokens_B = mask_B_T.sum(-1)
    per_seq_B = (per_token_B_T * mask_B_T).sum(-1) / tokens_B.clamp(min=1)
    loss = per_seq_B.mean()
    with torch.no_grad():
        n = mask_B_T.sum().clamp(min=1)
        was_clipped = ((unclipped_B_T > clipped_B_T) & (mask_B_T > 0)).float().sum() / n
        metrics = {"clip_fraction": was_clipped.item(), "ratio_mean": ((ratio_B_T * mask_B_T).sum() / n).item()}
    return loss, metrics
