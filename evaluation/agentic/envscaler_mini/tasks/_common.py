"""Helpers shared by the per-domain task builders.

A builder module defines `INIT_CONFIG` (the environment's small initial state) and
`build(book: TaskBook)`, which adds tasks from templates x entities in a fixed order, so the
task list is the same on every run. A check is a Python expression over `s` (the final state
dict) that the helper wraps into EnvScaler's `def check_func(final_state): ... return bool`.
"""

from __future__ import annotations

import copy
from typing import Any


def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
    """One ground-truth step."""
    return {"name": tool, "arguments": arguments}


def check(item: str, expr: str) -> dict[str, str]:
    """A checklist entry whose check is `expr`; a missing key or wrong type counts as failed."""
    code = (
        "def check_func(final_state):\n"
        "    s = final_state\n"
        "    try:\n"
        f"        return bool({expr})\n"
        "    except (KeyError, IndexError, TypeError, AttributeError, ValueError):\n"
        "        return False\n"
    )
    return {"check_item": item, "check_func": code}


def close(expr: str, value: float) -> str:
    """Expression: `expr` equals the amount `value` to the cent."""
    return f"abs(({expr}) - {value!r}) < 0.005"


class TaskBook:
    """Collects one environment's tasks in order and numbers them."""

    def __init__(self, env_id: str, env_class_name: str, init_config: dict[str, Any]):
        self.env_id = env_id
        self.env_class_name = env_class_name
        self.init_config = init_config
        self.tasks: list[dict[str, Any]] = []

    def add(self, task: str, checks: list[dict[str, str]], ground_truth: list[dict[str, Any]],
            init_config: dict[str, Any] | None = None) -> None:
        if not 1 <= len(checks) <= 4:
            raise ValueError(f"{self.env_id}: a task needs 1-4 checks, got {len(checks)}: {task!r}")
        self.tasks.append({
            "env_id": self.env_id,
            "env_class_name": self.env_class_name,
            "task_id": f"{self.env_id}.{len(self.tasks) + 1:03d}",
            "init_config": copy.deepcopy(self.init_config if init_config is None else init_config),
            "task": task,
            "checklist_with_func": checks,
            "ground_truth": ground_truth,
        })
