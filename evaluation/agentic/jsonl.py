"""Reading the JSON-lines data files of the agentic benchmarks (BFCL, ACEBench).

Every failure is one line naming the file (and the line, for bad JSON), so that the evaluation stage can
report a broken download and go on with the other benchmarks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: Path, benchmark: str) -> list[dict[str, Any]]:
    """The JSON objects of `path`, one per non-blank line. FileNotFoundError when it is missing;
    ValueError (naming file and line) when it is not UTF-8 or a line is not a JSON object."""
    if not path.is_file():
        raise FileNotFoundError(f"{benchmark} data file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    rows = []
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            rows.append(_object(line, path, number))
    return rows


def _object(line: str, path: Path, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as err:
        raise ValueError(f"{path}: line {number} is not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: line {number} is a JSON {type(value).__name__}, not an object")
    return value
