"""Training-curve figures drawn with matplotlib, so they render offline (DVC's HTML plots load their chart library
from a CDN). Each figure is written as PNG, from the per-step histories the training stages write."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # no display: stages run headless
import matplotlib.pyplot as plt  # noqa: E402

X_KEY = "cumulative_rollouts"
"""Curves are drawn against generations (rollouts) so far, the paper's budget axis (its Fig. 4)."""
PANELS = (("reward", "Mean reward"), ("val_reward", "Validation reward (greedy, held out)"), ("loss", "Loss"),
          ("kl_mean", "Distillation KL"), ("privilege_margin", "Privileged margin Δ"), ("beta_next", "Dual β"),
          ("entropy", "Entropy"), ("completions/mean_length", "Completion length"))
"""The per-step keys drawn, one panel each, when a history has them."""
PNG_METADATA = {"Software": None}  # no matplotlib version in the file: the same curves give the same bytes


def history_panels(histories: dict[str, Sequence[dict]]) -> list[tuple[str, str]]:
    """The panels that at least one history has data for, in PANELS order."""
    return [(key, title) for key, title in PANELS
            if any(h.get(key) is not None for hist in histories.values() for h in hist)]


def draw_curves(histories: dict[str, Sequence[dict]], path: Path, title: str) -> None:
    """One panel per per-step metric, one line per labelled history (a method, or an experiment), against
    rollouts so far, saved as PNG at `path`. A history with no steps is named in the title instead of drawn."""
    drawn = {label: hist for label, hist in histories.items() if hist}
    empty = sorted(set(histories) - set(drawn))
    panels = history_panels(drawn) or [("reward", "Mean reward")]
    cols = min(len(panels), 3)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (key, panel_title) in zip(axes.flat, panels):
        for i, (label, hist) in enumerate(drawn.items()):  # one colour per history in every panel
            points = sorted((h[X_KEY], h[key]) for h in hist if h.get(key) is not None)  # None: not measured
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, color=f"C{i % 10}", marker="o" if len(points) < 20 else None, markersize=3,
                        label=label)
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel("rollouts")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if len(drawn) > 1:
        axes.flat[0].legend(fontsize=8)
    fig.suptitle(title + (f" (no training steps: {', '.join(empty)})" if empty else ""), fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata=PNG_METADATA)
    plt.close(fig)
