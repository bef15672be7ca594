"""The shared oracle pool of SDFT and OPSD: one verified-successful demonstration per training task.

The paper fills it first with the base model's own successful rollouts on the training split (here: the
experience bank's entries, which passed every test), then, where coverage is short, with other verified
solutions (the paper queries stronger models; offline we use the dataset's reference solutions, kept only
if they pass their tests). Every entry records where it came from. No evaluation task ever enters it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from lopd.latent.bank import BankEntry, read_records, write_records

POOL_VERSION = 1
POOL_FILE = "oracle.jsonl"
BASE_MODEL_ROLLOUT, REFERENCE_SOLUTION = "base_model_rollout", "reference_solution"


@dataclass(frozen=True)
class Demonstration:
    task_id: str
    task: str
    """The task description (first user message)."""
    text: str
    """What the teacher reads: the successful response, or a reference solution as a ```python block."""
    source: str
    """Provenance: base_model_rollout | reference_solution."""


def render_reference(code: str) -> str:
    """A reference program as the assistant would answer it."""
    return f"```python\n{code.strip()}\n```"


def assemble_pool(tasks: Sequence[tuple[str, str]], successes: Sequence[BankEntry],
                  passing_references: Mapping[str, Sequence[str]], fill_with_references: bool) -> list[Demonstration]:
    """One demonstration per (task_id, task text), in task order: the task's first base-model success, else
    (when filling) its first passing reference, already rendered as an answer, else none (pure)."""
    first_success: dict[str, BankEntry] = {}
    for entry in successes:
        first_success.setdefault(entry.task_id, entry)
    pool = []
    for task_id, task in tasks:
        if task_id in first_success:
            pool.append(Demonstration(task_id, task, first_success[task_id].response, BASE_MODEL_ROLLOUT))
        elif fill_with_references and passing_references.get(task_id):
            pool.append(Demonstration(task_id, task, passing_references[task_id][0], REFERENCE_SOLUTION))
    return pool


def write_pool(path: str | Path, pool: list[Demonstration], meta: dict) -> None:
    write_records(path, pool, {"pool_version": POOL_VERSION, **meta})


def load_pool(path: str | Path) -> dict[str, Demonstration]:
    """task_id -> demonstration; a missing, malformed or empty pool is a one-line error."""
    pool, _ = read_records(path, Demonstration, "pool_version", POOL_VERSION, "oracle pool", "build_pool")
    if not pool:
        raise ValueError(f"{path}: the oracle pool is empty (no base-model success and pool.fill_with_references "
                         "is off or no reference passed); SDFT and OPSD need demonstrations")
    return {d.task_id: d for d in pool}
