"""ACEBench agent data: load the JSON-lines task and answer files, parse the milestone call strings.

A task line holds `id`, `question`, `initial_config` (class name -> attribute overrides), `involved_classes`
and `function` (the function docs offered to the agent). Its answer line holds `ground_truth` (a list of
one-key dicts, class name -> final attributes) and `mile_stone`: either one list of call strings or a
list of alternative lists. Each string is a bracketed list of Python-like calls, e.g.
`"[login_device(), view_messages_between_users(sender_name='Grace', receiver_name='Helen')]"`; several
calls in one bracket are one milestone group (made in any order, see `scoring.process_accuracy`).

Milestone strings are parsed with `ast` (never evaluated). The published strings are not always valid
Python: apostrophes inside single-quoted strings are not escaped (`merchant_name='Domino's'`), so a
failed parse is retried after `repair_quotes`, which treats a quote as closing a string only when the
next non-blank character can follow a literal (`,` `)` `]` `}` `:` or the end).

Class-name typos in the answers (`ReminderAPI`, `Reminderpi`, `BaseAPI`) are mapped to our class names.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lopd.core.jsonl import read_jsonl
from lopd.core.multiturn import ToolCall

KINDS = ("multi_step", "multi_turn")
CLASS_NAMES = ("BaseApi", "MessageApi", "ReminderApi", "FoodPlatform", "Travel")

MilestoneGroup = tuple[ToolCall, ...]
"""Calls listed in one bracket of a milestone string."""
Milestones = tuple[MilestoneGroup, ...]
"""One ideal call path: groups in order."""


@dataclass(frozen=True)
class ACETask:
    id: str
    kind: str
    """"multi_step" (the question is the only user message) or "multi_turn" (a simulated user)."""
    question: str
    """Multi-step: the user's request. Multi-turn: the instructions for the user simulator."""
    functions: tuple[dict[str, Any], ...]
    """The function docs offered to the agent, as published (ACEBench types: dict, list, ...)."""
    involved_classes: tuple[str, ...]
    initial_config: dict[str, dict[str, Any]]
    ground_truth: dict[str, dict[str, Any]]
    """Our class name -> expected final attributes."""
    milestones: tuple[Milestones, ...]
    """Alternative ideal call paths (at least one)."""


def load_acebench(kind: str, data_dir: str | Path, limit: int | None = None) -> list[ACETask]:
    """Tasks of one agent category from an ACEBench language folder (e.g. `.../acebench/data_en`).
    Raises FileNotFoundError naming a missing file, ValueError naming the file and entry of malformed data."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    data_dir = Path(data_dir)
    task_path = data_dir / f"data_agent_{kind}.json"
    answer_path = data_dir / "possible_answer" / f"data_agent_{kind}.json"
    rows, answers = read_jsonl(task_path, "ACEBench"), _answers_by_id(answer_path)
    tasks = []
    for index, row in enumerate(rows[:limit] if limit is not None else rows):
        try:
            if row["id"] not in answers:
                raise ValueError(f"no answer in {answer_path}")
            tasks.append(task_from_dicts(kind, row, answers[row["id"]]))
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise ValueError(f"{task_path}: entry {index} ({row.get('id')!r}): {_data_error(err)}") from None
    return tasks


def _answers_by_id(answer_path: Path) -> dict[str, dict[str, Any]]:
    answers = {}
    for index, answer in enumerate(read_jsonl(answer_path, "ACEBench")):
        if not isinstance(answer.get("id"), str):
            raise ValueError(f"{answer_path}: entry {index} has no string 'id'")
        answers[answer["id"]] = answer
    return answers


def _data_error(err: Exception) -> str:
    """One line on what is wrong with an entry: its own message for a ValueError, else the missing key or type."""
    if isinstance(err, KeyError):
        return f"missing field {err}"
    return str(err) if isinstance(err, ValueError) else f"malformed ({type(err).__name__}: {err})"


def task_from_dicts(kind: str, row: dict[str, Any], answer: dict[str, Any]) -> ACETask:
    """One task from its task line and answer line; a malformed line raises KeyError, TypeError,
    AttributeError or ValueError (`load_acebench` names the file and entry)."""
    ground_truth: dict[str, dict[str, Any]] = {}
    for item in answer["ground_truth"]:
        for name, attributes in item.items():
            ground_truth[canonical_class_name(name)] = attributes
    raw = answer["mile_stone"]
    alternatives = [raw] if all(isinstance(s, str) for s in raw) else raw
    milestones = tuple(tuple(tuple(parse_calls(s)) for s in alt) for alt in alternatives)
    return ACETask(id=row["id"], kind=kind, question=row["question"], functions=tuple(row["function"]),
                   involved_classes=tuple(canonical_class_name(c) for c in row["involved_classes"]),
                   initial_config={canonical_class_name(k): v for k, v in row.get("initial_config", {}).items()},
                   ground_truth=ground_truth, milestones=milestones)


def canonical_class_name(name: str) -> str:
    """Map a class name from the data (with its typos) to ours; unknown names raise ValueError."""
    by_lower = {c.lower(): c for c in CLASS_NAMES}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.8)
    if not close:
        raise ValueError(f"unknown ACEBench class name {name!r}")
    return by_lower[close[0]]


def parse_calls(text: str) -> list[ToolCall]:
    """Parse one milestone string, `[f(a=1), g(b='x')]` (or a bare call), into calls; never evaluates."""
    source = text.strip()
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        tree = _parse_repaired(source, text)
    body = tree.body
    nodes = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    calls = []
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)) or node.args:
            raise ValueError(f"milestone is not a list of keyword-argument calls: {text!r}")
        if any(kw.arg is None for kw in node.keywords):
            raise ValueError(f"milestone uses **kwargs: {text!r}")
        calls.append(ToolCall(node.func.id, {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}))
    return calls


def _parse_repaired(source: str, text: str) -> ast.Expression:
    try:
        return ast.parse(repair_quotes(source), mode="eval")
    except SyntaxError as err:  # a ValueError, like every other malformed milestone
        raise ValueError(f"milestone is not valid Python even after repairing quotes ({err.msg}): {text!r}") from None


def repair_quotes(source: str) -> str:
    """Escape quote characters that cannot close the string literal they are in (see module docstring)."""
    out, quote, i = [], None, 0
    while i < len(source):
        c = source[i]
        if quote is None:
            quote = c if c in "'\"" else None
            out.append(c)
        elif c == "\\":
            out.append(source[i:i + 2])
            i += 1
        elif c == quote:
            rest = source[i + 1:].lstrip()
            if not rest or rest[0] in ",)]}:":
                quote = None
                out.append(c)
            else:
                out.append("\\" + c)
        else:
            out.append(c)
        i += 1
    return "".join(out)

