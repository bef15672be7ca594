"""BFCL-v3 multi-turn (base, miss_func, miss_param, long_context) as a `lopd.core.multiturn.ToolEnvironment`.

What comes from the ``bfcl-eval`` package (imported, not re-implemented):

* the executable backends (GorillaFileSystem, MathAPI, MessageAPI, TwitterAPI, TicketAPI, TradingBot,
  TravelAPI, VehicleControlAPI) through its class mapping ``CLASS_FILE_PATH_MAPPING``, initialised the
  way its harness does (``_load_scenario(initial_config[cls], long_context=...)``, stateless classes
  untouched); the function-doc file of each class (``MULTI_TURN_FUNC_DOC_FILE_MAPPING``), its type map
  ``GORILLA_TO_OPENAPI`` and its miss_func prompt;
* scoring: ``multi_turn_checker`` (per turn: empty-turn check, instance state check, execution-response
  check), preceded by its runner's turn-count check ("force_terminated").

The version is pinned to ``bfcl-eval==2025.10.13`` (scripts/setup.sh), *not* the newest release: the
data here are the BFCL v3 files (EnvScaler's copy), and from 2025.10.20 on the backends were rewritten
for the updated v4 data (``update_market_status`` / ``make_transaction`` removed, a funds check in
``place_order``, ``echo`` no longer creates files, ...), so about 70 ground-truth calls per subset
fail there. With 2025.10.13 every ground-truth call runs without error, and its multi-turn checker is
identical to the newest one.

Episode (mirrors BFCL's FC-mode inference loop):

* ``question`` is a list of user turns. The policy works on a turn until it writes a step without a
  tool call; ``reply`` then returns the next turn's messages, and None after the last turn.
* Tools: the function docs of the entry's ``involved_classes`` converted to the OpenAI function format
  (BFCL's ``dict``/``float``/``tuple``/... mapped to JSON-schema types, BFCL's FC-mode description
  hints kept). miss_func: the functions of ``missed_function`` are withheld from the tool list; at the
  turn that brings them (its question turn is empty) the user message is BFCL's prompting-mode
  announcement (a JSON listing of their schemas + "I have updated some more functions ..."), and only
  from then on can they be called.
* long_context: backends are loaded with ``long_context=True`` (the package pads them with many
  irrelevant records).
* System message: none by default. BFCL serves models in FC mode, where its harness sends only the
  user turns and the tool schemas (the chat template renders the tools); the driver may pass its own
  ``system_prompt`` (e.g. ``lopd.core.multiturn.AGENT_SYSTEM_PROMPT``) to the constructor.
* Step limits are the driver's: BFCL's ``MAXIMUM_STEP_LIMIT`` (20 steps per turn) counts steps of
  parallel calls, which a one-call-per-step driver cannot mirror (some ground-truth turns have more
  than 20 calls). An episode the driver stops before the last turn's reply scores invalid.

Dispatch (never ``eval`` on model output): ``call_tool(name, arguments)`` accepts only a function
offered so far in this entry, a dict whose keys are that function's documented parameters (required
ones present), JSON values (finite floats, integers within 64 bits, nesting <= 32, <= 64 KiB in all)
and, for the MathAPI's arbitrary-precision knobs, ``precision`` <= 1000 and ``|exponent|`` <= 10000
(resource guards; a numeric string counts as its number, as mpmath reads it so). It then calls the
method on the backend instance with keyword arguments (restoring the mpmath and decimal precisions that
MathAPI sets process-wide); anything else, and any exception inside the tool, becomes an error
observation. Value types are not checked against the schema, as in BFCL (the v3 ground truth itself
passes a string as ``close_ticket``'s integer ``ticket_id``): a wrongly typed value reaches the
backend, whose error is the observation.
Results are rendered as BFCL renders them (strings as is, dicts as JSON, else ``str``; exceptions as
``Error during execution: ...``).

Scoring: BFCL's checker needs call *strings*, which it ``eval``s against fresh backends. We build them
ourselves from the validated name and ``repr`` of each (JSON-derived) value, e.g. ``cd(folder='x')``,
one step per accepted call; rejected calls are not recorded (they never changed state). Ground-truth
strings of ``possible_answer`` are parsed with ``ast`` (literals only, names checked against the
backend classes, positional arguments bound by the method signature) into (name, kwargs) at load time
and rebuilt the same way, so the checker only ever evaluates strings this module built from validated
names and literal values. An episode that ended early (turns left: the driver's step cap) scores
invalid, as BFCL's turn-count check does.

Known data issues (kept as in the official v3 files, so published v3 numbers stay comparable; listed
in ``KNOWN_INVALID_GROUND_TRUTH``):

* ``multi_turn_base_154`` has 5 question turns but 6 ground-truth turns (upstream later merged turns
  1 and 2), so no trajectory can be valid: BFCL's turn-count check fails it for every model.
* ``multi_turn_miss_func_49`` withholds ``tail`` until turn 3, but its ground truth calls ``tail`` in
  turn 1 (the response check needs that result); BFCL only passes a model that calls the unlisted
  function anyway, which this environment refuses (withheld means not callable). Unchanged upstream.

The v3 doc of ``MessageAPI.delete_message`` documents a ``message_id`` parameter that the backend
does not take: passing it gives the backend's TypeError as observation, as in BFCL.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import decimal
import functools
import importlib
import inspect
import json
import math
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import mpmath
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING
    from bfcl_eval.constants.executable_backend_config import (
        CLASS_FILE_PATH_MAPPING,
        MULTI_TURN_FUNC_DOC_FILE_MAPPING,
        STATELESS_CLASSES,
    )
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
except ImportError as err:  # the evaluation stage reports this and runs the other benchmarks
    raise ImportError(f"BFCL needs the pinned bfcl-eval package (cannot import {err.name or err}); "
                      f"install it with scripts/setup.sh") from None

from lopd.core.jsonl import read_jsonl

BFCL_SUBSETS = ("base", "miss_func", "miss_param", "long_context")

BFCL_CLASSES = (
    "GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI",
    "TicketAPI", "TradingBot", "TravelAPI", "VehicleControlAPI",
)

KNOWN_INVALID_GROUND_TRUTH = frozenset({"multi_turn_base_154", "multi_turn_miss_func_49"})
"""Entries whose official ground truth cannot be valid (see the module docstring)."""

MAX_ARGUMENT_CHARS = 65_536
MAX_NESTING = 32
MAX_INT = 2**63
_RESOURCE_LIMITS = {  # MathAPI's arbitrary-precision knobs: (function, argument) -> largest |value|
    ("power", "exponent"): 10_000, ("logarithm", "precision"): 1_000, ("square_root", "precision"): 1_000,
}


# --- data -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BFCLEntry:
    """One multi-turn entry with its ground truth, as loaded by `load_bfcl`."""

    entry_id: str
    subset: str
    question: list[list[dict[str, str]]]
    """User turns, each a list of chat messages (empty for a miss_func announcement turn)."""
    initial_config: dict[str, Any]
    involved_classes: list[str]
    functions: list[dict[str, Any]]
    """BFCL function docs of all involved classes, withheld ones included."""
    missed_functions: dict[int, list[str]]
    """miss_func: turn index -> names withheld until that turn."""
    ground_truth: list[list[tuple[str, dict[str, Any]]]]
    """Per turn, the ground-truth calls as (name, keyword arguments)."""

    @property
    def long_context(self) -> bool:
        return self.subset == "long_context"


@functools.lru_cache(maxsize=None)
def _func_docs(data_dir: str, class_name: str) -> tuple[dict, ...]:
    return tuple(read_jsonl(Path(data_dir) / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name],
                            "BFCL"))


@functools.lru_cache(maxsize=None)
def _backend_class(class_name: str) -> type:
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


def _method_owner(functions: list[dict], involved_classes: list[str]) -> dict[str, str]:
    """Function name -> backend class, for the documented functions that the classes implement."""
    owner = {}
    for cls in involved_classes:
        for name, _ in inspect.getmembers(_backend_class(cls), inspect.isfunction):
            if not name.startswith("_"):
                owner[name] = cls
    return {doc["name"]: owner[doc["name"]] for doc in functions if doc["name"] in owner}


def parse_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """Parse one BFCL call string such as ``cd(folder='x')`` with `ast` (literal arguments only)."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:  # a ValueError, like every other malformed call string
        raise ValueError(f"not a call ({err.msg}): {text!r}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    if any(kw.arg is None for kw in node.keywords):
        raise ValueError(f"**kwargs in call: {text!r}")
    args = [ast.literal_eval(a) for a in node.args]
    return node.func.id, args, {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}


def _bind_ground_truth(text: str, owner: dict[str, str], entry_id: str) -> tuple[str, dict[str, Any]]:
    name, args, kwargs = parse_call(text)
    if name not in owner:
        raise ValueError(f"{entry_id}: ground-truth call of an unknown function: {text!r}")
    signature = inspect.signature(getattr(_backend_class(owner[name]), name))
    try:
        bound = signature.bind(None, *args, **kwargs).arguments  # None stands for self
    except TypeError as err:
        raise ValueError(f"{entry_id}: ground-truth call {text!r} does not fit {name}{signature}: {err}") from None
    bound.pop(next(iter(signature.parameters)))
    return name, dict(bound)


def load_bfcl(subset: str, data_dir: str | Path, limit: int | None = None) -> list[BFCLEntry]:
    """Load one subset (``BFCL_SUBSETS``) from a BFCL v3 data dir (questions, possible_answer/,
    multi_turn_func_doc/). Raises FileNotFoundError naming the missing path, ValueError naming the
    file and entry of malformed data."""
    if subset not in BFCL_SUBSETS:
        raise ValueError(f"unknown BFCL subset {subset!r}; expected one of {BFCL_SUBSETS}")
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"BFCL data dir not found: {data_dir}")
    question_file = data_dir / f"BFCL_v3_multi_turn_{subset}.json"
    rows = read_jsonl(question_file, "BFCL")
    answers = _ground_truth_by_id(data_dir / "possible_answer" / question_file.name)
    entries = []
    for index, row in enumerate(rows[:limit] if limit is not None else rows):
        try:
            entries.append(_entry(row, subset, answers, data_dir))
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise ValueError(f"{question_file}: entry {index} ({row.get('id')!r}): {_data_error(err)}") from None
    return entries


def _data_error(err: Exception) -> str:
    """One line on what is wrong with a row: its own message for a ValueError, else the missing key or type."""
    if isinstance(err, KeyError):
        return f"missing field {err}"
    return str(err) if isinstance(err, ValueError) else f"malformed ({type(err).__name__}: {err})"


def _ground_truth_by_id(answer_file: Path) -> dict[str, list[list[str]]]:
    answers = {}
    for index, answer in enumerate(read_jsonl(answer_file, "BFCL")):
        if not isinstance(answer.get("id"), str) or "ground_truth" not in answer:
            raise ValueError(f"{answer_file}: entry {index} lacks a string 'id' or 'ground_truth'")
        answers[answer["id"]] = answer["ground_truth"]
    return answers


def _entry(row: dict[str, Any], subset: str, answers: dict[str, list[list[str]]], data_dir: Path) -> BFCLEntry:
    """One question row as an entry; malformed rows raise KeyError/TypeError/AttributeError/ValueError."""
    entry_id = row["id"]
    if not isinstance(entry_id, str) or not entry_id.startswith(f"multi_turn_{subset}_") or entry_id not in answers:
        raise ValueError(f"{entry_id}: not a {subset} entry with a ground truth")
    classes = list(row["involved_classes"])
    unknown = [c for c in classes if c not in BFCL_CLASSES]
    if unknown:
        raise ValueError(f"{entry_id}: unsupported classes {unknown}")
    functions = [dict(doc) for cls in classes for doc in _func_docs(str(data_dir), cls)]
    owner = _method_owner(functions, classes)
    missed = {int(turn): list(names) for turn, names in row.get("missed_function", {}).items()}
    if any(name not in owner for names in missed.values() for name in names):
        raise ValueError(f"{entry_id}: missed_function names a function the classes do not offer")
    ground_truth = [[_bind_ground_truth(call, owner, entry_id) for call in turn] for turn in answers[entry_id]]
    question, initial_config = row["question"], row["initial_config"]
    if not (isinstance(question, list) and all(isinstance(turn, list) for turn in question)):
        raise ValueError(f"{entry_id}: 'question' must be a list of turns (lists of messages)")
    if not isinstance(initial_config, dict):
        raise ValueError(f"{entry_id}: 'initial_config' must be an object")
    return BFCLEntry(entry_id, subset, question, initial_config, classes, functions, missed, ground_truth)


# --- tool schemas ---------------------------------------------------------------------------------------------------


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """BFCL parameter schema -> JSON schema (types mapped with BFCL's GORILLA_TO_OPENAPI, recursively)."""
    out: dict[str, Any] = {"type": GORILLA_TO_OPENAPI.get(schema.get("type", "string"), "string")}
    description = schema.get("description")
    if schema.get("type") == "float" and description is not None:
        description += " This is a float type value."  # BFCL's FC-mode hint
    if description is not None:
        out["description"] = description
    for key in ("enum", "default"):
        if key in schema:
            out[key] = schema[key]
    if "properties" in schema:
        out["properties"] = {name: _json_schema(prop) for name, prop in schema["properties"].items()}
    if schema.get("required"):
        out["required"] = list(schema["required"])
    if "items" in schema:
        out["items"] = _json_schema(schema["items"])
    return out


def to_openai_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function doc as ``{"type": "function", "function": {name, description, parameters}}``;
    the description gets BFCL's Python hint, the ``response`` schema is dropped."""
    parameters = _json_schema({**doc["parameters"], "type": "dict"})
    parameters.setdefault("properties", {})
    description = doc["description"] + " Note that the provided function is in Python 3 syntax."
    return {"type": "function", "function": {"name": doc["name"], "description": description, "parameters": parameters}}


# --- argument checks and call strings -------------------------------------------------------------------------------


def _json_value_error(value: Any, depth: int = 0, budget: list[int] | None = None) -> str | None:
    """Why `value` is not a small, finite JSON value (None when it is). `budget` counts characters."""
    budget = [MAX_ARGUMENT_CHARS] if budget is None else budget
    if depth > MAX_NESTING:
        return f"arguments nested deeper than {MAX_NESTING} levels"
    if value is None or isinstance(value, (bool, str)):
        budget[0] -= len(value) + 2 if isinstance(value, str) else 5
    elif isinstance(value, int):
        if abs(value) >= MAX_INT:
            return "integer argument out of the 64-bit range"
        budget[0] -= 20
    elif isinstance(value, float):
        if not math.isfinite(value):
            return "non-finite number in arguments"
        budget[0] -= 24
    elif isinstance(value, (list, dict)):
        budget[0] -= 2
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict):
                if not isinstance(key, str):
                    return "object keys must be strings"
                budget[0] -= len(key) + 4
            error = _json_value_error(item, depth + 1, budget)
            if error:
                return error
    else:
        return f"unsupported argument type {type(value).__name__}"
    return f"arguments longer than {MAX_ARGUMENT_CHARS} characters" if budget[0] < 0 else None


def _arguments_error(name: str, arguments: Any, parameters: dict[str, Any]) -> str | None:
    """Why a call of `name` with `arguments` is rejected before execution (None when accepted)."""
    if not isinstance(arguments, dict):
        return f"arguments of {name!r} must be a JSON object"
    properties, required = parameters.get("properties", {}), parameters.get("required", [])
    unexpected = [key for key in arguments if key not in properties]
    if unexpected:
        names = ", ".join(map(repr, unexpected))[:200]
        return f"{name!r} got unexpected argument(s) {names}; parameters: {', '.join(properties)}"
    missing = [key for key in required if key not in arguments]
    if missing:
        return f"{name!r} is missing required argument(s) {', '.join(map(repr, missing))}"
    error = _json_value_error(arguments)
    if error:
        return error
    for key, value in arguments.items():
        limit = _RESOURCE_LIMITS.get((name, key))
        if limit is not None and _magnitude(value) > limit:
            return f"argument {key!r} of {name!r} is limited to {limit} in absolute value"
    return None


def _magnitude(value: Any) -> int | float:
    """|value| as the backend will use it. mpmath's precision setter applies int() to what it gets, so a
    numeric string counts as its number; a value int() refuses fails in the backend too (0 here)."""
    if isinstance(value, str):
        try:
            return abs(int(value))
        except ValueError:
            return 0
    return abs(value) if isinstance(value, (int, float)) else 0


@contextlib.contextmanager
def _precisions_restored():
    """MathAPI sets process-wide precisions (``mpmath.mp.dps`` in logarithm, the thread's decimal context in
    square_root) and leaves them set: put them back, so that the rest of the host process (the checker,
    later episodes, other libraries using mpmath) never inherits a model's choice."""
    mpmath_prec, decimal_prec = mpmath.mp.prec, decimal.getcontext().prec
    try:
        yield
    finally:
        mpmath.mp.prec, decimal.getcontext().prec = mpmath_prec, decimal_prec


def call_string(name: str, arguments: dict[str, Any]) -> str:
    """``name(k=repr(v), ...)``: the string form BFCL's checker executes. Only for a validated name,
    identifier keys and JSON values, whose ``repr`` is a Python literal."""
    return f"{name}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})"


def _render(result: Any) -> str:
    """A tool result as BFCL shows it: strings as is, dicts as JSON when they serialise, else str()."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            pass
    return str(result)


# --- environment ----------------------------------------------------------------------------------------------------


class BFCLEnvironment:
    """One BFCL multi-turn episode (`lopd.core.multiturn.ToolEnvironment`). See the module docstring."""

    def __init__(self, entry: BFCLEntry, system_prompt: str | None = None):
        self.entry = entry
        self.system_prompt = system_prompt
        self._docs = {doc["name"]: doc for doc in entry.functions}
        self._schemas = {name: to_openai_tool(doc) for name, doc in self._docs.items()}
        self._owner = _method_owner(entry.functions, entry.involved_classes)
        self._withheld = {name for names in entry.missed_functions.values() for name in names}
        self._start()

    def _start(self) -> None:
        self._instances: dict[str, Any] | None = None  # built on the first executed call
        self._available = {name for name in self._owner if name not in self._withheld}
        self._turn = 0
        self._done = False
        self._calls: list[list[list[str]]] = [[]]  # per turn, per step: [call string]
        self._counts = {"tool_calls": 0, "rejected_calls": 0}
        self._result: dict[str, Any] | None = None

    # -- protocol --

    def reset(self) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        self._start()
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        tools = [self._schemas[name] for name in self._docs if name in self._available]
        return system + self._open_turn(0), tools

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self._done:
            return "Error: the episode is over; no more tool calls are executed."
        self._counts["tool_calls"] += 1
        if not isinstance(name, str) or name not in self._available:
            error = f"unknown function {str(name)[:100]!r}"
        else:
            error = _arguments_error(name, arguments, self._schemas[name]["function"]["parameters"])
        if error:
            self._counts["rejected_calls"] += 1
            return f"Error: {error}"
        self._calls[self._turn].append([call_string(name, arguments)])
        with _precisions_restored():  # rendering included: an mpmath result prints at the precision it set
            try:
                result = _render(getattr(self._backends()[self._owner[name]], name)(**copy.deepcopy(arguments)))
            except Exception as err:  # a tool's own failure is an observation, as in BFCL
                result = f"Error during execution: {err}"
        return result

    def reply(self, text: str) -> list[dict[str, str]] | None:
        if self._done:
            return None
        if self._turn + 1 >= len(self.entry.question):
            self._done = True
            return None
        self._turn += 1
        self._calls.append([])
        return self._open_turn(self._turn)

    def score(self) -> dict[str, float | str]:
        """{"reward": 1.0 if BFCL's multi-turn check is valid else 0.0, "valid", "turns_completed",
        "num_turns", "tool_calls", "rejected_calls"}, plus, for an invalid episode, "invalid_reason":
        ``"<error_type>: <message>"`` of the failed check (the driver keeps strings as score notes)."""
        if self._result is None:
            self._result = self._check()
        valid = float(self._result["valid"])
        scores: dict[str, float | str] = {
            "reward": valid, "valid": valid, "turns_completed": float(self._turns_completed),
            "num_turns": float(len(self.entry.question)), **{k: float(v) for k, v in self._counts.items()}}
        if not valid:
            scores["invalid_reason"] = (f"{self._result.get('error_type', 'unknown')}: "
                                        f"{self._result.get('error_message', '')}")
        return scores

    def close(self) -> None:
        self._instances = None

    # -- helpers --

    def _backends(self) -> dict[str, Any]:
        """The entry's backend instances (class name -> instance), initialised as BFCL's harness does."""
        if self._instances is None:
            self._instances = {}
            for cls in self.entry.involved_classes:
                instance = _backend_class(cls)()
                if cls not in STATELESS_CLASSES:
                    config = copy.deepcopy(self.entry.initial_config.get(cls, {}))
                    instance._load_scenario(config, long_context=self.entry.long_context)
                self._instances[cls] = instance
        return self._instances

    @property
    def _turns_completed(self) -> int:
        return self._turn + int(self._done)

    def _open_turn(self, turn: int) -> list[dict[str, str]]:
        """The messages that open `turn`; a miss_func turn also makes its withheld functions callable."""
        new = self.entry.missed_functions.get(turn)
        if new is None:
            return [dict(message) for message in self.entry.question[turn]]
        self._available.update(new)
        listing = json.dumps([self._schemas[name] for name in new])
        content = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=listing)
        return [{"role": "user", "content": content}]

    def _check(self) -> dict[str, Any]:
        entry = self.entry
        if self._turns_completed != len(entry.ground_truth):
            message = f"{self._turns_completed} turn(s) completed for {len(entry.ground_truth)} ground-truth turns"
            return {"valid": False, "error_type": "multi_turn:force_terminated", "error_message": message}
        ground_truth = [[call_string(name, kwargs) for name, kwargs in turn] for turn in entry.ground_truth]
        test_entry = {"id": entry.entry_id, "initial_config": entry.initial_config,
                      "involved_classes": entry.involved_classes}
        model_name = f"lopd_{uuid.uuid4().hex}"
        try:
            with _precisions_restored():  # the checker re-runs the calls, MathAPI's included
                return multi_turn_checker(self._calls, ground_truth, test_entry, f"multi_turn_{entry.subset}",
                                          model_name)
        except Exception as err:  # the checker's own asserts; never crash the episode
            return {"valid": False, "error_type": "multi_turn:checker_error",
                    "error_message": f"{type(err).__name__}: {err}"}
        finally:  # the checker keeps its backend instances in its module globals, keyed by model_name
            for key in [key for key in vars(multi_turn_utils) if key.startswith(model_name)]:
                del vars(multi_turn_utils)[key]


def replay_ground_truth(entry: BFCLEntry) -> dict[str, float | str]:
    """Run every turn's ground-truth calls through `BFCLEnvironment.call_tool` / `reply` and score."""
    env = BFCLEnvironment(entry)
    try:
        env.reset()
        for turn in range(len(entry.question)):
            for name, kwargs in entry.ground_truth[turn] if turn < len(entry.ground_truth) else []:
                env.call_tool(name, kwargs)
            env.reply("")
        return env.score()
    finally:
        env.close()
