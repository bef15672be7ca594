"""Losses as small pure functions returning `(loss, metrics)`; tensor names carry their shapes.

B = sequences, T = target positions, D = hidden size, V = vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

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
        std = r.std() if r.numel() > 1 else r.new_zeros(())
        adv_B[members] = (r - r.mean()) / (std + eps)
    return adv_B


def ppo_clip_loss(logp_B_T: torch.Tensor, old_logp_B_T: torch.Tensor, advantages_B: torch.Tensor,
                  mask_B_T: torch.Tensor, clip_low: float, clip_high: float,
                  token_weights_B_T: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """GRPO's clipped surrogate: mean over each sequence's action tokens, then mean over sequences.

    `token_weights_B_T` (e.g. `truncated_is_weights`, detached) multiplies each token's surrogate before the
    per-sequence mean; None leaves the loss exactly as without it. Sequences without action tokens contribute
    zero. Returns the loss to minimise and diagnostics (the clip and ratio statistics are unweighted).
    """
    ratio_B_T = torch.exp(logp_B_T - old_logp_B_T)
    adv_B_1 = advantages_B[:, None]
    unclipped_B_T = ratio_B_T * adv_B_1
    clipped_B_T = ratio_B_T.clamp(1 - clip_low, 1 + clip_high) * adv_B_1
    per_token_B_T = -torch.minimum(unclipped_B_T, clipped_B_T)
    if token_weights_B_T is not None:
        per_token_B_T = per_token_B_T * token_weights_B_T
    tokens_B = mask_B_T.sum(-1)
    per_seq_B = (per_token_B_T * mask_B_T).sum(-1) / tokens_B.clamp(min=1)
    loss = per_seq_B.mean()
    with torch.no_grad():  # TRL GRPOTrainer's clip_ratio/* names: where the clamp bound the surrogate
        n = mask_B_T.sum().clamp(min=1)
        low_B_T = (ratio_B_T < 1 - clip_low) & (adv_B_1 < 0)
        high_B_T = (ratio_B_T > 1 + clip_high) & (adv_B_1 > 0)
        metrics = {"clip_ratio/low_mean": ((low_B_T * mask_B_T).sum() / n).item(),
                   "clip_ratio/high_mean": ((high_B_T * mask_B_T).sum() / n).item(),
                   "clip_ratio/region_mean": (((low_B_T | high_B_T) * mask_B_T).sum() / n).item(),
                   "ratio_mean": ((ratio_B_T * mask_B_T).sum() / n).item()}
    return loss, metrics


def _chunk_entropy(hidden_N_D: torch.Tensor, weight_V_D: torch.Tensor, temperature: float) -> torch.Tensor:
    logp_N_V = torch.log_softmax((hidden_N_D.to(weight_V_D.dtype) @ weight_V_D.T).float() / temperature, -1)
    return -(logp_N_V.exp() * logp_N_V).sum(-1)


def chunked_entropy(hidden_N_D: torch.Tensor, weight_V_D: torch.Tensor, temperature: float = 1.0,
                    chunk_size: int = 256) -> torch.Tensor:
    """Entropy of softmax(hidden @ W^T / temperature) per position ([N]), `chunk_size` positions at a time,
    so only one chunk's [C, V] logits exist at once. A diagnostic: no gradient flows through it."""
    with torch.no_grad():
        pieces = [_chunk_entropy(hidden_N_D[start:start + chunk_size], weight_V_D, temperature)
                  for start in range(0, hidden_N_D.shape[0], chunk_size)]
    return torch.cat(pieces) if pieces else hidden_N_D.new_zeros(0, dtype=torch.float32)


def topk_tail_reverse_kl(logp_s_N_V: torch.Tensor, logp_t_N_V: torch.Tensor, top_k: int,
                         support: str = "teacher") -> torch.Tensor:
    """D_KL(p~S || p~T) per position: both distributions restricted to one side's top-k tokens plus one tail
    bucket holding the rest of the mass. `support="teacher"` is LOPD's top-M (paper eq. 9); `"student"` is
    the SDPO reference's top-K. Inputs are full-vocabulary log-probs; the support choice carries no gradient."""
    chooser_N_V = logp_t_N_V if support == "teacher" else logp_s_N_V
    support_N_K = chooser_N_V.detach().topk(top_k, dim=-1).indices
    ls_N_K, lt_N_K = logp_s_N_V.gather(-1, support_N_K), logp_t_N_V.gather(-1, support_N_K)
    outside_N_V = torch.ones_like(logp_s_N_V, dtype=torch.bool).scatter(-1, support_N_K, False)
    tail_s_N = logp_s_N_V.masked_fill(~outside_N_V, float("-inf")).logsumexp(-1)
    tail_t_N = logp_t_N_V.masked_fill(~outside_N_V, float("-inf")).logsumexp(-1)
    head_N = (ls_N_K.exp() * (ls_N_K - lt_N_K)).sum(-1)
    # exp(-inf) * nan would poison an empty tail (top_k == V); it is 0 by definition.
    tail_N = torch.where(torch.isinf(tail_s_N), torch.zeros_like(tail_s_N), tail_s_N.exp() * (tail_s_N - tail_t_N))
    return head_N + tail_N


def forward_kl(logp_s_N_V: torch.Tensor, logp_t_N_V: torch.Tensor) -> torch.Tensor:
    """D_KL(p_T || p_S) per position over the full vocabulary (SDFT and OPSD)."""
    return (logp_t_N_V.exp() * (logp_t_N_V - logp_s_N_V)).sum(-1)


def _chunk_distill(hidden_s_N_D, weight_s_V_D, hidden_t_N_D, weight_t_V_D, targets_N, divergence, temperature):
    logp_s_N_V = torch.log_softmax((hidden_s_N_D.to(weight_s_V_D.dtype) @ weight_s_V_D.T).float() / temperature, -1)
    logp_t_N_V = torch.log_softmax((hidden_t_N_D.to(weight_t_V_D.dtype) @ weight_t_V_D.T).float() / temperature, -1)
    index_N_1 = targets_N[:, None]
    # The student's value is detached: a gather's backward keeps its whole [C, V] input, and a graph branch no
    # loss uses is never run, so under checkpointing that input stayed alive per chunk until the step's end.
    return (divergence(logp_s_N_V, logp_t_N_V), logp_s_N_V.detach().gather(-1, index_N_1).squeeze(-1),
            logp_t_N_V.gather(-1, index_N_1).squeeze(-1))


@dataclass(frozen=True)
class TopkTailReverseKL:
    """`topk_tail_reverse_kl` with its parameters bound (LOPD's top-M, SDPO's top-K). As a divergence of
    `chunked_distillation` it takes the closed-form path (`_TopkTailChunk`) instead of autograd over [C, V]."""

    top_k: int
    support: str = "teacher"

    def __call__(self, logp_s_N_V: torch.Tensor, logp_t_N_V: torch.Tensor) -> torch.Tensor:
        return topk_tail_reverse_kl(logp_s_N_V, logp_t_N_V, self.top_k, self.support)


def _log_softmax_(logits_C_V: torch.Tensor, shift_C: torch.Tensor | None = None,
                  lse_C: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log softmax of a float32 [C, V] buffer, in place, as torch.log_softmax computes it (the row max subtracted
    first, then the log-sum-exp of the rest: accurate for the most likely tokens); returns the buffer and the two
    per-row constants, which a recomputation passes back to get the same values bit for bit."""
    shift_C = logits_C_V.amax(-1) if shift_C is None else shift_C
    logits_C_V.sub_(shift_C[:, None])
    lse_C = logits_C_V.exp().sum(-1).log() if lse_C is None else lse_C
    return logits_C_V.sub_(lse_C[:, None]), shift_C, lse_C


def _logits(hidden_C_D: torch.Tensor, weight_V_D: torch.Tensor, temperature: float) -> torch.Tensor:
    """hidden @ W^T / temperature as a float32 [C, V] buffer (no graph)."""
    return (hidden_C_D.detach().to(weight_V_D.dtype) @ weight_V_D.detach().T).float().div_(temperature)


def _weighted_rows(coef_C_K: torch.Tensor, index_C_K: torch.Tensor, weight_V_D: torch.Tensor) -> torch.Tensor:
    """sum_k coef[c, k] * W[index[c, k]] ([C, D]), one support column at a time (no [C, K, D] tensor)."""
    out_C_D = coef_C_K.new_zeros(coef_C_K.shape[0], weight_V_D.shape[1])
    for k in range(coef_C_K.shape[1]):
        out_C_D += coef_C_K[:, k, None] * weight_V_D[index_C_K[:, k]].float()
    return out_C_D


class _TopkTailChunk(torch.autograd.Function):
    """One chunk of `chunked_distillation` for the top-k + tail reverse KL, differentiated in closed form.

    With p = softmax(a), q = softmax(b) (student, teacher logits over temperature), support S and tail masses
    P = 1 - sum_S p, Q = 1 - sum_S q, and c_v = log(p_v / q_v) on S, log(P / Q) off it:
        d KL / d a = p * (c - KL);   d KL / d b = q - p on S, q * (1 - P / Q) off S;   d log q_y / d b = e_y - q.
    The forward pass turns these into the hidden-state gradients per unit upstream gradient ([C, D] each), so the
    backward pass only scales them, and recomputes the student's [C, V] gradient solely for its weight gradient.
    At most two [C, V] float32 buffers live at once (autograd over the same expression keeps about nine). The tail
    log-masses are exact (log-sum-exp over the tokens outside S, not log(1 - head)). The teacher's output weight
    must be frozen."""

    @staticmethod
    def forward(ctx, hidden_s_C_D, weight_s_V_D, hidden_t_C_D, weight_t_V_D, targets_C, top_k, support, temperature):
        logp_s_C_V, shift_s_C, lse_s_C = _log_softmax_(_logits(hidden_s_C_D, weight_s_V_D, temperature))
        logp_t_C_V, _, _ = _log_softmax_(_logits(hidden_t_C_D, weight_t_V_D, temperature))
        support_C_K = (logp_t_C_V if support == "teacher" else logp_s_C_V).topk(top_k, dim=-1).indices
        ls_C_K, lt_C_K = logp_s_C_V.gather(-1, support_C_K), logp_t_C_V.gather(-1, support_C_K)
        ls_y_C = logp_s_C_V.gather(-1, targets_C[:, None]).squeeze(-1)
        lt_y_C = logp_t_C_V.gather(-1, targets_C[:, None]).squeeze(-1)
        tail_s_C = logp_s_C_V.scatter_(-1, support_C_K, float("-inf")).logsumexp(-1)
        tail_t_C = logp_t_C_V.scatter_(-1, support_C_K, float("-inf")).logsumexp(-1)
        # The KL and the coefficients c - KL in float64 ([C, K] only): c and KL can both be ~30 nats apart from
        # a tiny difference, which float32 would leave to rounding.
        ls64_C_K, lt64_C_K, tail_s64_C, tail_t64_C = (x.double() for x in (ls_C_K, lt_C_K, tail_s_C, tail_t_C))
        ps_C_K, pt_C_K = ls64_C_K.exp(), lt64_C_K.exp()
        empty_C = torch.isinf(tail_s_C)  # no student mass off the support (top_k == V): the tail term is 0
        tail_C = torch.where(empty_C, 0.0, tail_s64_C.exp() * (tail_s64_C - tail_t64_C))
        kl64_C = (ps_C_K * (ls64_C_K - lt64_C_K)).sum(-1) + tail_C
        head_coef_C_K = (ps_C_K * (ls64_C_K - lt64_C_K - kl64_C[:, None])).float()
        tail_coef_C = torch.where(empty_C, 0.0, tail_s64_C - tail_t64_C - kl64_C).float()
        kl_C, ps_C_K, pt_C_K = kl64_C.float(), ps_C_K.float(), pt_C_K.float()
        ctx.mark_non_differentiable(ls_y_C)
        ctx.temperature = temperature
        grad_s_C_D = grad_kl_t_C_D = grad_y_t_C_D = None
        if ctx.needs_input_grad[0]:
            # d KL / d a: p off S (the buffer, S zeroed) times the tail coefficient, the head's on S
            g_C_V = logp_s_C_V.exp_().mul_(tail_coef_C[:, None]).scatter_(-1, support_C_K, head_coef_C_K)
            grad_s_C_D = (g_C_V.to(weight_s_V_D.dtype) @ weight_s_V_D.detach()).float()
        del logp_s_C_V
        if ctx.needs_input_grad[2]:
            qw_off_C_D = (logp_t_C_V.exp_().to(weight_t_V_D.dtype) @ weight_t_V_D.detach()).float()  # q off S
            ratio_C = torch.where(empty_C, 0.0, (tail_s64_C - tail_t64_C).exp()).float()  # P / Q
            qw_S_C_D = _weighted_rows(pt_C_K, support_C_K, weight_t_V_D)
            grad_kl_t_C_D = (1 - ratio_C[:, None]) * qw_off_C_D + qw_S_C_D - _weighted_rows(ps_C_K, support_C_K,
                                                                                              weight_t_V_D)
            grad_y_t_C_D = weight_t_V_D[targets_C].float() - qw_off_C_D - qw_S_C_D
        ctx.save_for_backward(hidden_s_C_D, weight_s_V_D, support_C_K, shift_s_C, lse_s_C, head_coef_C_K, tail_coef_C,
                              grad_s_C_D, grad_kl_t_C_D, grad_y_t_C_D)
        return kl_C, ls_y_C, lt_y_C

    @staticmethod
    def backward(ctx, grad_kl_C, _grad_ls_y_C, grad_lt_y_C):
        (hidden_s_C_D, weight_s_V_D, support_C_K, shift_s_C, lse_s_C, head_coef_C_K, tail_coef_C, grad_s_C_D,
         grad_kl_t_C_D, grad_y_t_C_D) = ctx.saved_tensors
        t = ctx.temperature
        d_hidden_s = d_weight_s = d_hidden_t = None
        if ctx.needs_input_grad[0]:
            d_hidden_s = (grad_kl_C[:, None] * grad_s_C_D / t).to(hidden_s_C_D.dtype)
        if ctx.needs_input_grad[1]:  # the student's [C, V] gradient again: p (S zeroed) scaled, the head's on S
            logp_C_V, _, _ = _log_softmax_(_logits(hidden_s_C_D, weight_s_V_D, t), shift_s_C, lse_s_C)
            g_C_V = logp_C_V.exp_().mul_(tail_coef_C[:, None]).scatter_(-1, support_C_K, head_coef_C_K)
            d_weight_s = (g_C_V.T @ (grad_kl_C[:, None] * hidden_s_C_D.float()) / t).to(weight_s_V_D.dtype)
        if ctx.needs_input_grad[2]:
            d_hidden_t = (grad_kl_C[:, None] * grad_kl_t_C_D + grad_lt_y_C[:, None] * grad_y_t_C_D) / t
        return d_hidden_s, d_weight_s, d_hidden_t, None, None, None, None, None


def chunked_distillation(hidden_s_N_D: torch.Tensor, weight_s_V_D: torch.Tensor, hidden_t_N_D: torch.Tensor,
                         weight_t_V_D: torch.Tensor, targets_N: torch.Tensor,
                         divergence: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], temperature: float = 1.0,
                         chunk_size: int = 256) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-position `divergence(logp_s_N_V, logp_t_N_V)`, student log pi_S(target) (without grad: every loss uses
    it as a stop-gradient or an importance weight) and teacher log pi_T(target) (with grad: LOPD's margin trains the
    composer through it), from final hidden states, `chunk_size` positions at a time.

    Full-vocabulary log-probs never exist for the whole sequence at once. A `TopkTailReverseKL` is differentiated
    in closed form (`_TopkTailChunk`); any other divergence by autograd, each chunk's two [C, V] log-prob tensors
    recomputed in the backward pass (activation checkpointing).
    """
    kl, ls, lt = [], [], []
    needs_grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (hidden_s_N_D, weight_s_V_D, hidden_t_N_D, weight_t_V_D))
    closed_form = isinstance(divergence, TopkTailReverseKL)
    if closed_form and needs_grad and weight_t_V_D.requires_grad:
        raise ValueError("chunked_distillation: the teacher's output weight must be frozen (requires_grad off)")
    for start in range(0, hidden_s_N_D.shape[0], chunk_size):
        end = start + chunk_size
        if closed_form:  # inputs detached without grad: the Function then skips the gradient precomputation
            tensors = (hidden_s_N_D[start:end], weight_s_V_D, hidden_t_N_D[start:end], weight_t_V_D)
            out = _TopkTailChunk.apply(*(t if needs_grad else t.detach() for t in tensors), targets_N[start:end],
                                       divergence.top_k, divergence.support, temperature)
        else:
            args = (hidden_s_N_D[start:end], weight_s_V_D, hidden_t_N_D[start:end], weight_t_V_D,
                    targets_N[start:end], divergence, temperature)
            out = checkpoint(_chunk_distill, *args, use_reentrant=False) if needs_grad else _chunk_distill(*args)
        for acc, piece in zip((kl, ls, lt), out):
            acc.append(piece)
    if not kl:
        empty = hidden_s_N_D.new_zeros(0, dtype=torch.float32)
        return empty, empty, empty
    return torch.cat(kl), torch.cat(ls), torch.cat(lt)


def importance_weights(logp_N: torch.Tensor, old_logp_N: torch.Tensor, clip: float | None) -> torch.Tensor:
    """pi_theta(a) / pi_old(a) per token, detached and capped at `clip` (None: uncapped)."""
    ratio_N = torch.exp((logp_N - old_logp_N).detach().clamp(-20.0, 20.0))
    return ratio_N if clip is None else ratio_N.clamp(max=clip)


def truncated_is_weights(logp_train_N: torch.Tensor, logp_sampler_N: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (TIS; Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
    Off-Policy RL Training"): w = min(pi_train(a) / pi_sampler(a), cap) per sampled token, float32 and detached.

    pi_train is the trainer's log-prob of the sampled token, pi_sampler the rollout engine's (a bf16 copy or
    vLLM, whose kernels differ). Multiplying a per-token loss by w makes it an estimate under the trainer's own
    policy; the cap bounds the variance a token the sampler found much less likely than the trainer could add.
    No gradient flows through w.
    """
    log_ratio_N = logp_train_N.detach().float() - logp_sampler_N.detach().float()
    return torch.exp(log_ratio_N).clamp(max=cap)  # exp overflow is inf, then capped; the cap is reached exactly


def sampled_token_reverse_kl(logp_s_N: torch.Tensor, logp_t_N: torch.Tensor, weights_N: torch.Tensor) -> torch.Tensor:
    """Per-token surrogate of the reverse KL on the sampled tokens: w * sg[log pi_S - log pi_T] * log pi_S.

    Its value is w * (log-ratio) * log pi_S; its gradient is the importance-weighted score-function estimate
    of grad D_KL(pi_S || pi_T) from the student's own samples (teacher log-probs carry no gradient)."""
    return weights_N * (logp_s_N - logp_t_N).detach() * logp_s_N


def sequence_means(values_N: torch.Tensor, seq_N: torch.Tensor, n_seq: int) -> torch.Tensor:
    """Mean of the values belonging to each sequence ([n_seq]; 0 for a sequence without positions)."""
    sums_B = values_N.new_zeros(n_seq).index_add(0, seq_N, values_N)
    counts_B = values_N.new_zeros(n_seq).index_add(0, seq_N, torch.ones_like(values_N))
    return sums_B / counts_B.clamp(min=1)


def distillation_loss(kl_N: torch.Tensor, seq_N: torch.Tensor, weights_B: torch.Tensor,
                      token_weights_N: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Per-trajectory mean of a per-token divergence over its action tokens, weighted per trajectory (0 for
    a trajectory whose teacher has no privileged context), averaged over the batch's trajectories.

    `token_weights_N` (e.g. `truncated_is_weights`) multiplies each token's divergence in the loss; None leaves
    it exactly as without it. The `kl_mean` diagnostic stays the unweighted divergence."""
    per_seq_B = sequence_means(kl_N, seq_N, weights_B.shape[0])
    weighted_B = per_seq_B if token_weights_N is None else sequence_means(kl_N * token_weights_N, seq_N,
                                                                          weights_B.shape[0])
    loss = (weights_B * weighted_B).mean()
    active = weights_B > 0
    return loss, {"distill_loss": loss.item(),
                  "kl_mean": per_seq_B[active].mean().item() if active.any() else 0.0}
