"""Reading data files as text: UTF-8 and JSON lines, every failure one line naming the file (and the line).

Shared by the experience bank and oracle pool (lopd, baselines) and the data loaders of the coding and
agentic benchmarks (evaluation), so that a broken file is reported the same way everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_origin


class UnreadableFile(ValueError):
    """A file that is not UTF-8 or not the JSON it must be; the message names the file (and the line)."""


def read_text(path: str | Path) -> str:
    """The UTF-8 text of `path`; UnreadableFile naming file and line when it is not UTF-8 (OSError as open raises
    it)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UnreadableFile(f"{path}: line {line}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def read_jsonl_objects(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) for every non-blank line of `path`; UnreadableFile naming file and line when the
    file is not UTF-8 or a line is not a JSON object."""
    path = Path(path)
    rows = []
    for number, line in enumerate(read_text(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as err:
            raise UnreadableFile(f"{path}: line {number} is not valid JSON ({err})") from None
        if not isinstance(value, dict):
            raise UnreadableFile(f"{path}: line {number} is a JSON {json_type(value)}, not an object")
        rows.append((number, value))
    return rows


def read_json(path: str | Path) -> Any:
    """The JSON value in `path` (a stage's output); UnreadableFile naming it when it is not UTF-8 or not JSON (a
    truncated write, an edit gone wrong)."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise UnreadableFile(f"{path}: not valid JSON ({err}); rerun the stage that writes it") from None


def check_fields(value: dict[str, Any], types: dict[str, type], where: str) -> dict[str, Any]:
    """`value` (a decoded JSON object) when it has exactly the fields of `types`, each of its type (a float field
    takes any JSON number, returned as float); else ValueError naming `where` and the field."""
    unknown = sorted(set(value) - set(types))
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}")
    out = {}
    for name, annotation in types.items():
        expected = get_origin(annotation) or annotation  # list[int] is checked as a list (its items by the record)
        if name not in value:
            raise ValueError(f"{where}: missing field {name!r}")
        got = value[name]
        if isinstance(got, bool):  # JSON true/false are no numbers
            fits = expected is bool
        else:
            fits = isinstance(got, (int, float)) if expected is float else isinstance(got, expected)
        if not fits:
            raise ValueError(f"{where}: field {name!r} must be a {_JSON_NAMES.get(expected, expected.__name__)}, "
                             f"got {json_type(got)}")
        out[name] = float(got) if expected is float else got
    return out


_JSON_NAMES = {str: "string", float: "number", int: "integer", bool: "boolean", list: "array", dict: "object"}


def read_jsonl(path: str | Path, what: str) -> list[dict[str, Any]]:
    """The JSON objects of `path`, one per non-blank line. FileNotFoundError naming `what` when it is missing;
    UnreadableFile (naming file and line) when it is not UTF-8 or a line is not a JSON object."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} data file not found: {path}")
    return [value for _, value in read_jsonl_objects(path)]


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (array, string, number, ...)."""
    if value is None:
        return "null"
    return {bool: "boolean", list: "array", dict: "object", str: "string", int: "number",
            float: "number"}.get(type(value), type(value).__name__)
