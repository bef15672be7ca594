"""LOPD's own params section (`lopd`); `margin`, `latent_tokens` and `n_ret` are top-level params (the ablation knobs).

The registry names the class (`lopd.core.registry`); the config validates the section with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lopd.core.config import MethodConfig, require


@dataclass
class LOPDConfig(MethodConfig):
    """Joint training of student and composer (paper eq. 8-12); `margin`, `latent_tokens`, `n_ret` are top level."""

    top_m: int = 20
    """Teacher top-M support of the reverse KL; the rest of the vocabulary is one tail bucket."""
    anchor_weight: float = 0.2
    """lambda: weight of ||c_phi - sg[c_phi0]||^2, the anchor of the latent context to its cold-start value."""
    dual_lr: float = 0.5
    """eta_beta: step of the dual update beta <- max(0, beta + eta_beta * (margin - Delta))."""
    beta_init: float = 0.0
    """Initial dual variable beta."""
    composer_lr: float = 1e-5
    """AdamW learning rate of the composer (LoRA + QFormer) during joint training."""
    train_composer: bool = True
    """False freezes the composer at its cold start phi_0 (the paper's "Frozen phi_0" ablation row)."""
    margin_constraint: bool = True
    """The privilege-margin constraint Delta >= m with its dual beta. False removes it: beta stays 0, so the loss
    has no beta (m - Delta) term, which is how the paper reads "without the margin constraint (m = 0)" (Fig. 3's
    m = 0 point). True with `margin: 0` is the literal constraint Delta >= 0: beta still rises whenever Delta < 0."""

    def __post_init__(self) -> None:
        require(self.top_m >= 1, "lopd.top_m: must be >= 1")
        require(self.anchor_weight >= 0, "lopd.anchor_weight: must be >= 0")
        require(self.dual_lr >= 0, "lopd.dual_lr: must be >= 0")
        require(self.beta_init >= 0, "lopd.beta_init: must be >= 0")
        require(self.margin_constraint or self.beta_init == 0,
                "lopd.beta_init: must be 0 when lopd.margin_constraint is false (beta stays 0 without the constraint)")
        require(self.composer_lr > 0, "lopd.composer_lr: must be > 0")
        self._check_steps("lopd")
