"""The paper's analysis figures (§4.3-4.4), drawn with matplotlib from stage outputs: each written as PNG and PDF.
Training curves live in `evaluation.figures` (training stages import that module; these only the analysis stages)."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path
from typing import Collection, Sequence

import matplotlib

matplotlib.use("Agg")  # no display: stages run headless
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager, ft2font  # noqa: E402

SAVE_METADATA = {"png": {"Software": None}, "pdf": {"Creator": None, "Producer": None, "CreationDate": None}}
"""No matplotlib version or date in the files: the same figure gives the same bytes."""


def save(fig, path: Path) -> list[Path]:
    """Write `fig` as `path` (.png) and its .pdf twin; returns both paths."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = [path.with_suffix(".png"), path.with_suffix(".pdf")]
    for file in out:
        fig.savefig(file, dpi=110, metadata=SAVE_METADATA[file.suffix[1:]])
    plt.close(fig)
    return out


def escape_undrawable(text: str, drawable: Collection[int]) -> str:
    """`text` with every character but whitespace whose code point is not in `drawable` written as its Python
    escape (\\u4e2d): a font without that script would draw a box of unknown width, which breaks the caller's
    wrapping."""
    return "".join(c if c.isspace() or ord(c) in drawable
                   else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}" for c in text)


@functools.cache
def monospace_code_points() -> frozenset[int]:
    """The code points the monospace font of `draw_table` can draw."""
    path = font_manager.findfont(font_manager.FontProperties(family="monospace"))
    return frozenset(ft2font.FT2Font(path).get_charmap())


def draw_table(header: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[float], path: Path,
               title: str) -> list[Path]:
    """A text table as a figure: columns `widths` inches wide, cells as given (the caller wraps them into lines, after
    `escape_undrawable(cell, monospace_code_points())`), one rule under the header and between rows; saved as PNG
    and PDF."""
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


def _fit(title: str, fig) -> str:
    """A figure title wrapped to the figure's width (about 12 characters per inch at size 10)."""
    return textwrap.fill(title, int(fig.get_figwidth() * 12))


def _error_bars(values: Sequence[dict]) -> list[list[float]]:
    """matplotlib's yerr ([below], [above]) from rows with value/low/high (0 where a CI is missing)."""
    below = [r["value"] - r["low"] if r.get("low") is not None else 0.0 for r in values]
    above = [r["high"] - r["value"] if r.get("high") is not None else 0.0 for r in values]
    return [below, above]


def draw_sweep(rows: Sequence[dict], points: Sequence[str], default: str, x_label: str, numeric: bool, path: Path,
               title: str) -> list[Path]:
    """One panel per metric of a sweep (`evaluation.sweeps.collect` rows): the student metric with its 95% CI per
    point, as bars (categorical points) or a line over x (numeric; a dashed line at the default). Points without a
    result are left out of the panel and named under it."""
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    panel_width = 4.6  # inches
    fig, axes = plt.subplots(1, len(metrics), figsize=(panel_width * len(metrics), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        mine = {r["point"]: r for r in rows if r["metric"] == metric}
        done = [p for p in points if mine.get(p, {}).get("status") == "ok"]
        missing = [p for p in points if p not in done]
        values = [mine[p] for p in done]
        if numeric:
            xs = [mine[p]["x"] for p in done]
            ax.errorbar(xs, [r["value"] for r in values], yerr=_error_bars(values), marker="o", capsize=3)
            ax.set_xscale("log", base=2)
            ticks = [mine[p]["x"] for p in points if p in mine]
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            if default in mine:
                ax.axvline(mine[default]["x"], color="C1", linestyle="--", linewidth=1.0, zorder=0)
        else:
            colours = ["C1" if p == default else "C0" for p in done]
            ax.bar(range(len(done)), [r["value"] for r in values], yerr=_error_bars(values), color=colours,
                   capsize=3)
            ax.set_xticks(range(len(done)), done, rotation=30, ha="right", fontsize=8)
        n = sorted({int(r["n"]) for r in values if r.get("n")})
        ax.set_title(metric + (f" (n = {', '.join(map(str, n))})" if n else ""), fontsize=9)
        not_run = textwrap.fill("not run yet: " + ", ".join(missing), int(panel_width * 11))  # ~11 chars/inch at 9
        ax.set_xlabel(x_label + ("\n" + not_run if missing else ""), fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        if not done:
            ax.text(0.5, 0.5, "n/a: no point has run", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(_fit(title, fig), fontsize=10)
    fig.tight_layout()
    return save(fig, path)


def draw_dynamics(histories: dict[str, Sequence[dict]], validations: dict[str, Sequence[dict]], path: Path,
                  title: str, intervals) -> list[Path]:
    """Training dynamics (paper Fig. 4): per method, the mean training reward of each step and the held-out
    validation reward (with its 95% CI band, `intervals(rewards) -> (low, high)`) against rollouts so far."""
    panels = [("Mean training reward", histories, "reward")]
    if any(validations.values()):
        panels.append(("Validation reward (greedy, held out; 95% CI)", validations, "val_reward"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.6), squeeze=False)
    for ax, (panel, data, key) in zip(axes[0], panels):
        for i, (method, points) in enumerate(data.items()):
            points = sorted((p for p in points if p.get(key) is not None), key=lambda p: p["cumulative_rollouts"])
            if not points:
                continue
            xs = [p["cumulative_rollouts"] for p in points]
            ax.plot(xs, [p[key] for p in points], marker="o", markersize=3, color=f"C{i}", label=method)
            if key == "val_reward":
                bands = [intervals(p["val_rewards"]) for p in points]
                ax.fill_between(xs, [b[0] for b in bands], [b[1] for b in bands], color=f"C{i}", alpha=0.15)
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("rollouts (generations)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(_fit(title, fig), fontsize=10)
    fig.tight_layout()
    return save(fig, path)


def draw_race(panels: dict[str, dict[str, Sequence[dict]]], path: Path, title: str, intervals) -> list[Path]:
    """The learning race in the shape of Fig. 4: per panel, each run's held-in reward against rollouts so far with its
    95% CI band (`intervals(rewards) -> (low, high)`). A run's curve takes the colour of what its label names before
    " · seed" (the method and its setting), so a second seed of the same is drawn in that colour, dashed."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 3.9), squeeze=False)
    colours: dict[str, str] = {}
    for ax, (panel, runs) in zip(axes[0], panels.items()):
        seen: set[str] = set()
        for label, points in runs.items():
            if not points:
                continue
            method = label.rsplit(" · seed", 1)[0]  # a seed's curve: its method's (and setting's) colour
            colour = colours.setdefault(method, f"C{len(colours)}")
            xs = [p["cumulative_rollouts"] for p in points]
            ax.plot(xs, [p["val_reward"] for p in points], marker="o", markersize=3, color=colour, label=label,
                    linestyle="--" if method in seen else "-")
            seen.add(method)
            bands = [intervals(p["val_rewards"]) for p in points]
            ax.fill_between(xs, [b[0] for b in bands], [b[1] for b in bands], color=colour, alpha=0.12)
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("rollouts (generations)", fontsize=9)
        ax.set_ylabel("held-in reward (mean of k samples; 95% CI)", fontsize=8)
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "n/a: no run has finished", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(_fit(title, fig), fontsize=10)
    fig.tight_layout()
    return save(fig, path)
