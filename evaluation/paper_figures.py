"""The paper's analysis figures (§4.3-4.4), drawn with matplotlib from stage outputs: each written as PNG and PDF.
Training curves live in `evaluation.figures` (training stages import that module; these only the analysis stages)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # no display: stages run headless
import matplotlib.pyplot as plt  # noqa: E402

SAVE_METADATA = {"png": {"Software": None}, "pdf": {"Creator": None, "Producer": None, "CreationDate": None}}
"""No matplotlib version or date in the files: the same figure gives the same bytes."""


def save(fig, path: Path) -> list[Path]:
    """Write `fig` as `path` (.png) and its .pdf twin; returns both paths."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = [path.with_suffix(".png"), path.with_suffix(".pdf")]
    with warnings.catch_warnings():  # decoded latent tokens include scripts the bundled font lacks (drawn as boxes)
        warnings.simplefilter("ignore", UserWarning)
        for file in out:
            fig.savefig(file, dpi=110, metadata=SAVE_METADATA[file.suffix[1:]])
    plt.close(fig)
    return out


def draw_table(header: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[float], path: Path,
               title: str) -> list[Path]:
    """A text table as a figure: columns `widths` inches wide, cells as given (the caller wraps them into lines),
    one rule under the header and between rows; saved as PNG and PDF."""
    line_h, pad = 0.16, 0.08  # inches
    heights = [line_h * (1 + max(cell.count("\n") for cell in row)) + 2 * pad for row in [header, *rows]]
    width, height = sum(widths) + 0.2, sum(heights) + 0.5
    fig = plt.figure(figsize=(width, height))
    fig.suptitle(title, fontsize=10, y=1 - 0.12 / height)
    y = height - 0.4
    for i, (row, row_h) in enumerate(zip([header, *rows], heights)):
        x = 0.1
        for cell, col_w in zip(row, widths):
            fig.text(x / width, (y - pad) / height, cell, fontsize=7, va="top", ha="left", family="monospace",
                     weight="bold" if i == 0 else "normal")
            x += col_w
        y -= row_h
        fig.add_artist(plt.Line2D([0.1 / width, (width - 0.1) / width], [y / height] * 2, color="0.6",
                                  linewidth=0.8 if i == 0 else 0.4))
    return save(fig, path)
