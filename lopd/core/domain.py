"""A training domain and where its stages' outputs live (the CLIs define the two: code and agentic)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


class SandboxUnavailable(RuntimeError):
    """The sandbox that scores a domain (model-written code, dataset environments) cannot run at all; the message
    says why. Nothing is scored then, not even as a failure: the stage stops with this one line."""


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
    bank_trace: Callable[[str], str]
    """How a successful response becomes its experience-bank trace (what retrieval and the composer read)."""

    @classmethod
    def scratch(cls, root: str | Path, name: str = "code", bank_trace: Callable[[str], str] = str,
                **folders: Path) -> Domain:
        """A domain whose outputs live under `root` (bank/, pool/, composer/, ...), or in the `folders` given: for
        methods run outside the pipeline (scripts, tests)."""
        root = Path(root)
        paths = {f: root / f for f in ("bank", "pool", "composer", "checkpoints", "metrics", "results", "plots")}
        return cls(name, **{**paths, **folders}, max_eval_containment=0.5, bank_trace=bank_trace)
