"""The hinted tier: every task again, with the internal ids its writes need given in the instruction.

A task of the base tier names things as a user would (a customer's name, a policy number), so solving it takes a
lookup (find the customer, list their accounts) before the write. The 0.5B model never looks up first: it writes with
invented ids and every base-tier episode ends at the task's no-action floor, so a policy gradient meets no reward
spread (docs/agentic.md, "The hinted tier"). The hinted twin of a task keeps its initial state and its checks as they
are and appends the ids: `... (Ids: policy P-91a, coverage CV-12.)`. Its ground truth is the base task's writes alone:
no lookup is needed, though one may still help (an amount the agent has to work out).

An id is a string argument of a write that is a key of the initial state (at any depth): what only a lookup reveals.
A twin is numbered as its base task with an `h` (`envscaler-mini.banking.h007`) and carries `split_group`, its base
task's id, so the train/test split puts both on the same side: no twin of a test task is trained on.
"""

from __future__ import annotations

import copy
from typing import Any

from ..schema import is_query_tool

TIER = "hinted"


def state_keys(state: Any) -> set[str]:
    """Every dict key of a JSON-like state, at any depth."""
    if isinstance(state, dict):
        return set(state).union(*(state_keys(v) for v in state.values()))
    if isinstance(state, list):
        return set().union(*(state_keys(v) for v in state))
    return set()


def id_hints(writes: list[dict[str, Any]], keys: set[str]) -> list[tuple[str, str]]:
    """(noun, id) for each write argument whose value is a state key, in call and argument order, each id once:
    `from_account_id: "AC-1"` gives ("from account", "AC-1")."""
    hints: list[tuple[str, str]] = []
    for call in writes:
        for name, value in call["arguments"].items():
            if isinstance(value, str) and value in keys and value not in (v for _, v in hints):
                hints.append((name.removesuffix("_id").replace("_", " "), value))
    return hints


def hinted_twin(task: dict[str, Any]) -> dict[str, Any] | None:
    """The hinted twin of a base-tier task dict, or None when its writes need no id from the state (nothing to
    hint: the twin would be the task itself)."""
    writes = [c for c in task["ground_truth"] if not is_query_tool(c["name"])]
    hints = id_hints(writes, state_keys(task["init_config"]))
    if not hints:
        return None
    prefix, number = task["task_id"].rsplit(".", 1)
    return {**copy.deepcopy(task),
            "task_id": f"{prefix}.h{number}",
            "task": f"{task['task']} (Ids: {', '.join(f'{noun} {value}' for noun, value in hints)}.)",
            "ground_truth": copy.deepcopy(writes),
            "tier": TIER,
            "split_group": task["task_id"]}
