"""A training domain and where its stages' outputs live (the CLIs define the two: code and agentic)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Domain:
    """A training domain (`code` or `agentic`) and where its stages' outputs live."""

    name: str
    bank: Path
    pool: Path
    composer: Path
    checkpoints: Path
    metrics: Path
    """Scalar metrics files (DVC `metrics:`), one per stage."""
    results: Path
    plots: Path
    """Per-step histories and their figures (DVC `plots:`)."""
    max_eval_containment: float
    """The bank/pool overlap guard rejects a training entry holding more than this share of an evaluation
    task's word 8-grams. Agentic tasks are generated from per-environment templates, so train and test tasks
    of one environment share phrasing by design (envscaler-mini: up to 0.75); only near-copies are rejected."""
