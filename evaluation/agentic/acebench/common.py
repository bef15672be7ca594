"""What every scenario class shares: the refusal exception, state (de)serialisation, small checks."""

from __future__ import annotations

import copy
from typing import Any, ClassVar


class ToolError(Exception):
    """A call the scenario refuses (bad state, unknown name, insufficient balance...). Its message is
    shown to the agent as the observation; it never escapes the environment."""


class ScenarioApi:
    """One ACEBench class. `FIELDS` are the attributes that make up its state, serialised exactly as in
    the published final states; `TOOLS` are the method names offered as functions."""

    NAME: ClassVar[str]
    FIELDS: ClassVar[tuple[str, ...]]
    TOOLS: ClassVar[tuple[str, ...]]

    def state(self) -> dict[str, Any]:
        return {field: copy.deepcopy(getattr(self, field)) for field in self.FIELDS}

    def configure(self, overrides: dict[str, Any]) -> None:
        """Apply a task's `initial_config` entry for this class (unknown attributes are a data error)."""
        for field, value in overrides.items():
            if field not in self.FIELDS:
                raise ValueError(f"{self.NAME} has no attribute {field!r} (has {', '.join(self.FIELDS)})")
            setattr(self, field, copy.deepcopy(value))


def next_key(table: dict[str, Any], last: int) -> int:
    """Next integer id for a table keyed by decimal strings: ids are never reused after a deletion."""
    return max([last, *(int(k) for k in table if k.isdigit())]) + 1
