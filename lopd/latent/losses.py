"""LOPD's own loss terms (paper §3.3): the privileged margin Delta, the objective with the dual beta and the anchor to
the cold-start latents, and beta's update. The shared divergences (the top-M + tail reverse KL) are in
`lopd.core.losses`; these live here so that an edit to them re-runs the LOPD branch only."""

from __future__ import annotations

import torch

from lopd.core.losses import sequence_means


def privilege_margin(logp_t_N: torch.Tensor, logp_s_N: torch.Tensor, seq_N: torch.Tensor,
                     advantages_B: torch.Tensor) -> torch.Tensor:
    """Delta (paper eq. 12): per trajectory, the mean over its action tokens of A * delta with
    delta = log pi_T(a) - sg[log pi_S(a)]; then the mean over trajectories."""
    delta_N = logp_t_N - logp_s_N.detach()
    return (advantages_B * sequence_means(delta_N, seq_N, advantages_B.shape[0])).mean()


def dual_update(beta: float, margin: float, delta: float, dual_lr: float) -> float:
    """beta <- [beta + eta_beta * (m - Delta)]_+ (after eq. 13)."""
    return max(0.0, beta + dual_lr * (margin - delta))


def anchor_penalty(latents: list[torch.Tensor], anchors: list[torch.Tensor]) -> torch.Tensor:
    """||c_phi - sg[c_phi0]||_2^2 per trajectory (summed over its latent tokens and coordinates), averaged
    over trajectories (at least one)."""
    return torch.stack([(c.float() - c0.detach().float()).pow(2).sum() for c, c0 in zip(latents, anchors)]).mean()


def lopd_loss(kl_N: torch.Tensor, logp_t_N: torch.Tensor, logp_s_N: torch.Tensor, seq_N: torch.Tensor,
              advantages_B: torch.Tensor, beta: float, margin: float, anchor: torch.Tensor,
              anchor_weight: float,
              token_weights_N: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The LOPD objective (paper eq. 13) for one batch: L_distill + beta (m - Delta) + lambda * anchor.

    L_distill is the per-trajectory mean of the top-M + tail reverse KL over action tokens, averaged over
    trajectories (eqs. 9-10). beta is a constant here; the dual update happens after the optimizer step.
    `token_weights_N` (e.g. `truncated_is_weights`) multiplies each token's KL in L_distill only; None leaves the
    objective exactly as without it. Delta stays unweighted: it is a diagnostic of the teacher (how much more
    likely it finds the successful tokens), which drives the dual variable, not a per-token estimate under the
    student's policy.
    """
    distill_N = kl_N if token_weights_N is None else kl_N * token_weights_N
    distill = sequence_means(distill_N, seq_N, advantages_B.shape[0]).mean()
    delta = privilege_margin(logp_t_N, logp_s_N, seq_N, advantages_B)
    loss = distill + beta * (margin - delta) + anchor_weight * anchor
    metrics = {"distill_loss": distill.item(), "privilege_margin": delta.item(), "anchor": anchor.item(),
               "kl_mean": kl_N.mean().item() if kl_N.numel() else 0.0}
    return loss, metrics
