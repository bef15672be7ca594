"""BFCL-v3 multi-turn environment: ground-truth replay through our runner scored by BFCL's own checker,
wrong sequences scoring 0, hostile calls turned into observations, tool-schema conversion.

Needs the BFCL v3 data in <shared>/bfcl_v3 (shared dir: $LOPD_SHARED_DATA, else <repo>/../shared/data).
"""

from __future__ import annotations

import decimal
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

multi_turn_utils = pytest.importorskip("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
mpmath = pytest.importorskip("mpmath")

from evaluation.agentic.bfcl import (  # noqa: E402  (after the skip when bfcl-eval is not installed)
    BFCL_CLASSES,
    BFCL_SUBSETS,
    KNOWN_INVALID_GROUND_TRUTH,
    BFCLEnvironment,
    load_bfcl,
    parse_call,
    replay_ground_truth,
    to_openai_tool,
)

SHARED = Path(os.environ.get("LOPD_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DATA_DIR = SHARED / "bfcl_v3"
pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"BFCL v3 data not in {DATA_DIR} (set LOPD_SHARED_DATA)")


@pytest.fixture(scope="module")
def subsets() -> dict:
    return {subset: load_bfcl(subset, DATA_DIR) for subset in BFCL_SUBSETS}


def by_id(subsets: dict, entry_id: str):
    subset = next(s for s in sorted(BFCL_SUBSETS, key=len, reverse=True) if entry_id.startswith(f"multi_turn_{s}_"))
    return next(e for e in subsets[subset] if e.entry_id == entry_id)


def run(entry, turns, *, finish: bool = True) -> tuple[BFCLEnvironment, dict]:
    """Play `turns` (per turn, a list of (name, arguments)) and score; `finish=False` stops before the
    last reply, as a driver hitting its step cap would."""
    env = BFCLEnvironment(entry)
    env.reset()
    for index, calls in enumerate(turns):
        for name, arguments in calls:
            env.call_tool(name, arguments)
        if finish or index < len(turns) - 1:
            env.reply("Done.")
    score = env.score()
    env.close()
    return env, score


# --- ground-truth replay -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("subset", BFCL_SUBSETS)
def test_ground_truth_replay_is_valid_for_every_entry(subsets, subset):
    entries = subsets[subset]
    assert len(entries) == 200
    invalid = sorted(e.entry_id for e in entries if replay_ground_truth(e)["reward"] != 1.0)
    assert invalid == sorted(KNOWN_INVALID_GROUND_TRUTH & {e.entry_id for e in entries})


@pytest.mark.xfail(strict=True, reason="data fault in the official v3 files, see KNOWN_INVALID_GROUND_TRUTH")
@pytest.mark.parametrize("entry_id", sorted(KNOWN_INVALID_GROUND_TRUTH))
def test_known_invalid_ground_truth(subsets, entry_id):
    assert replay_ground_truth(by_id(subsets, entry_id))["reward"] == 1.0


def test_checker_leaves_no_backend_instances_behind(subsets):
    replay_ground_truth(subsets["long_context"][0])
    assert not [key for key in vars(multi_turn_utils) if key.startswith("lopd_")]


# --- wrong or partial sequences ---------------------------------------------------------------------------------


def test_wrong_and_partial_sequences_score_zero(subsets):
    entry = subsets["base"][0]
    truth = entry.ground_truth
    assert run(entry, truth)[1]["reward"] == 1.0

    dropped = [list(turn) for turn in truth]
    dropped[-1] = dropped[-1][:-1]
    assert run(entry, dropped)[1]["reward"] == 0.0

    name, arguments = truth[0][0]
    changed = [list(turn) for turn in truth]
    changed[0][0] = (name, {key: f"{value}_x" if isinstance(value, str) else value for key, value in arguments.items()})
    assert run(entry, changed)[1]["reward"] == 0.0

    _, score = run(entry, truth, finish=False)
    assert score["reward"] == 0.0 and score["turns_completed"] == len(truth) - 1
    assert score["invalid_reason"].startswith("multi_turn:force_terminated")

    all_first = [[call for turn in truth for call in turn]] + [[] for _ in truth[1:]]
    assert run(entry, all_first)[1]["reward"] == 0.0

    assert truth[1]
    _, score = run(entry, [truth[0], [], *truth[2:]])
    assert score["reward"] == 0.0 and score["invalid_reason"].startswith("multi_turn:empty_turn_model_response")

    assert run(entry, [[] for _ in truth])[1]["reward"] == 0.0


def test_score_before_any_turn_and_twice(subsets):
    env = BFCLEnvironment(subsets["base"][1])
    env.reset()
    first = env.score()
    assert first["reward"] == 0.0 and env.score() == first


# --- protocol ---------------------------------------------------------------------------------------------------


def test_protocol_turns_and_messages(subsets):
    entry = subsets["base"][0]
    env = BFCLEnvironment(entry)
    messages, tools = env.reset()
    assert messages == entry.question[0] and all(m["role"] != "system" for m in messages)
    assert {t["function"]["name"] for t in tools} == {doc["name"] for doc in entry.functions}
    for turn in range(1, len(entry.question)):
        assert env.reply("ok") == entry.question[turn]
    assert env.reply("ok") is None and env.reply("ok") is None
    assert env.call_tool("ls", {}).startswith("Error: the episode is over")
    score = env.score()
    numeric = {"reward", "valid", "turns_completed", "num_turns", "tool_calls", "rejected_calls"}
    assert set(score) == numeric | {"invalid_reason"}  # no calls at all: invalid, and the reason is given
    assert all(isinstance(score[key], float) for key in numeric) and isinstance(score["invalid_reason"], str)

    messages, _ = BFCLEnvironment(entry, system_prompt="Use the tools.").reset()
    assert messages[0] == {"role": "system", "content": "Use the tools."}


def test_miss_func_announces_and_then_allows_withheld_functions(subsets):
    entry = subsets["miss_func"][0]
    ((turn, names),) = entry.missed_functions.items()
    assert (turn, names) == (3, ["sort"]) and entry.question[turn] == []
    env = BFCLEnvironment(entry)
    _, tools = env.reset()
    assert "sort" not in {t["function"]["name"] for t in tools}
    assert env.call_tool("sort", {"file_name": "final_report.pdf"}) == "Error: unknown function 'sort'"
    for _ in range(turn - 1):
        env.reply("ok")
    (announcement,) = env.reply("I cannot sort without a sort tool.")
    assert announcement["role"] == "user" and "I have updated some more functions" in announcement["content"]
    listing = json.loads(announcement["content"].split("\n")[0])
    assert [t["function"]["name"] for t in listing] == ["sort"] and listing[0]["type"] == "function"
    assert not env.call_tool("sort", {"file_name": "final_report.pdf"}).startswith("Error: unknown function")


def test_long_context_loads_the_padded_backends(subsets):
    base, long = subsets["base"][0], subsets["long_context"][0]
    assert base.initial_config == long.initial_config
    sizes = [len(repr({c: vars(i) for c, i in BFCLEnvironment(e)._backends().items()})) for e in (base, long)]
    assert sizes[1] > 5 * sizes[0]


# --- hostile and malformed calls --------------------------------------------------------------------------------


HOSTILE = [
    ("no_such_function", {}),
    ("_load_scenario", {"scenario": {}}),
    ("__init__", {}),
    ("cd", ["documents"]),
    ("cd", "folder=documents"),
    ("cd", None),
    ("cd", {}),
    ("cd", {"folder": "a", "extra": 1}),
    ("cd", {"folder=__import__('os').getcwd()": 1}),
    ("cd", {"folder": "x" * 100_000}),
    ("cd", {"folder": float("nan")}),
    ("cd", {"folder": 10**40}),
    ("cd", {"folder": json.loads("[" * 40 + "1" + "]" * 40)}),
    ("cd", {"folder": {1: "non-string key"}}),
    ("cd", {"folder": ("a", "tuple")}),
]
WRONG_TYPES = [("cd", {"folder": 5}), ("mkdir", {"dir_name": {"a": 1}}), ("cd", {"folder": ["a"]})]


def test_hostile_calls_are_observations_and_leave_the_episode_valid(subsets):
    entry = subsets["base"][0]  # GorillaFileSystem + TwitterAPI
    env = BFCLEnvironment(entry)
    env.reset()
    for index, calls in enumerate(entry.ground_truth):
        for name, arguments in HOSTILE:
            observation = env.call_tool(name, arguments)
            assert isinstance(observation, str) and observation.startswith("Error"), (name, observation)
        for name, arguments in WRONG_TYPES:  # reach the backend, as in BFCL, which fails without changing state
            assert env.call_tool(name, arguments).startswith("Error during execution")
        for name, arguments in calls:
            env.call_tool(name, arguments)
        env.reply("ok")
    score = env.score()
    assert score["reward"] == 1.0 and "invalid_reason" not in score, score.get("invalid_reason")
    assert score["rejected_calls"] == len(HOSTILE) * len(entry.ground_truth)


def test_resource_guards(subsets):
    entry = next(e for e in subsets["base"] if "MathAPI" in e.involved_classes)
    env = BFCLEnvironment(entry)
    env.reset()
    assert "limited" in env.call_tool("power", {"base": 10, "exponent": 10**12})
    assert "limited" in env.call_tool("logarithm", {"value": 2, "base": 10, "precision": 10**9})
    assert json.loads(env.call_tool("power", {"base": 2, "exponent": 10}))["result"] == 1024
    assert env.call_tool("power", {"base": 10, "exponent": 10_000}).startswith("Error during execution")
    # mpmath reads a precision with int(): a numeric string is limited by its number, not waved through
    assert "limited" in env.call_tool("logarithm", {"value": 2, "base": 10, "precision": "100000000"})
    assert "limited" in env.call_tool("logarithm", {"value": 2, "base": 10, "precision": " 1_000_000 "})


def test_precisions_set_by_math_tools_do_not_leak(subsets):
    entry = next(e for e in subsets["base"] if "MathAPI" in e.involved_classes)
    env = BFCLEnvironment(entry)
    env.reset()
    before = mpmath.mp.prec, decimal.getcontext().prec
    as_number = env.call_tool("logarithm", {"value": 2, "base": 10, "precision": 40})
    assert "mpf('0.301029995663981195213738894724493" in as_number  # printed at the precision it asked for
    assert env.call_tool("logarithm", {"value": 2, "base": 10, "precision": "40"}) == as_number  # as before
    assert "1.41421356237309504880" in env.call_tool("square_root", {"number": 2, "precision": 50})
    assert (mpmath.mp.prec, decimal.getcontext().prec) == before


def test_argument_text_is_never_executed_by_the_checker(subsets, tmp_path):
    entry = subsets["base"][0]
    marker = tmp_path / "executed"
    payload = f"'); open({str(marker)!r}, 'w').write('x'); ('\" cd(folder='..') \\ \n\t{{}}"
    turns = [list(turn) for turn in entry.ground_truth]
    turns[0] = [("echo", {"content": payload, "file_name": "notes.txt"}), ("cat", {"file_name": "notes.txt"}),
                *turns[0]]
    env = BFCLEnvironment(entry)
    env.reset()
    for calls in turns:
        for name, arguments in calls:
            observation = env.call_tool(name, arguments)
            if name == "cat":
                assert payload in json.loads(observation)["file_content"]
        env.reply("ok")
    env.score()
    assert not marker.exists()


# --- loading and parsing ----------------------------------------------------------------------------------------


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "missing"))):
        load_bfcl("base", tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="BFCL_v3_multi_turn_base.json"):
        load_bfcl("base", tmp_path)
    with pytest.raises(ValueError, match="unknown BFCL subset"):
        load_bfcl("composite", DATA_DIR)
    assert len(load_bfcl("miss_param", DATA_DIR, limit=3)) == 3


def write_subset(directory: Path, questions: list[str], answers: list[str]) -> Path:
    """A base-subset data dir with these raw lines (the real function docs)."""
    (directory / "possible_answer").mkdir(parents=True)
    (directory / "multi_turn_func_doc").symlink_to(DATA_DIR / "multi_turn_func_doc")
    (directory / "BFCL_v3_multi_turn_base.json").write_text("\n".join(questions) + "\n")
    (directory / "possible_answer" / "BFCL_v3_multi_turn_base.json").write_text("\n".join(answers) + "\n")
    return directory


ROW = {"id": "multi_turn_base_0", "question": [[{"role": "user", "content": "List the files."}]],
       "initial_config": {}, "involved_classes": ["GorillaFileSystem"]}
ANSWER = {"id": "multi_turn_base_0", "ground_truth": [["ls()"]]}


@pytest.mark.parametrize("questions, answers, message", [
    ([json.dumps(ROW), "{oops"], [json.dumps(ANSWER)], r"multi_turn_base.json: line 2 is not valid JSON"),
    ([json.dumps(ROW)], ["[1, 2]"], r"possible_answer/BFCL_v3_multi_turn_base.json: line 1 is a JSON array, not"),
    ([json.dumps(ROW)], [json.dumps({"id": "multi_turn_base_0"})], r"entry 0 lacks a string 'id' or 'ground_truth'"),
    ([json.dumps({k: v for k, v in ROW.items() if k != "id"})], [json.dumps(ANSWER)],
     r"multi_turn_base.json: entry 0 \(None\): missing field 'id'"),
    ([json.dumps({k: v for k, v in ROW.items() if k != "question"})], [json.dumps(ANSWER)],
     r"entry 0 \('multi_turn_base_0'\): missing field 'question'"),
    ([json.dumps({**ROW, "question": "List the files."})], [json.dumps(ANSWER)], r"'question' must be a list"),
    ([json.dumps({**ROW, "involved_classes": 5})], [json.dumps(ANSWER)], r"malformed \(TypeError"),
    ([json.dumps(ROW)], [json.dumps({**ANSWER, "ground_truth": [["ls("]]})], r"not a call"),
])
def test_malformed_data_raises_one_line_value_errors_naming_the_file(tmp_path, questions, answers, message):
    data_dir = write_subset(tmp_path, questions, answers)
    with pytest.raises(ValueError, match=message) as err:
        load_bfcl("base", data_dir)
    assert "\n" not in str(err.value)
    assert len(load_bfcl("base", write_subset(tmp_path / "good", [json.dumps(ROW)], [json.dumps(ANSWER)]))) == 1


def test_a_data_file_that_is_not_utf8_is_a_one_line_error_naming_file_and_line(tmp_path):
    data_dir = write_subset(tmp_path, [json.dumps(ROW)], [json.dumps(ANSWER)])
    (data_dir / "BFCL_v3_multi_turn_base.json").write_bytes(json.dumps(ROW).encode() + b"\n\xff\n")
    with pytest.raises(ValueError, match=r"BFCL_v3_multi_turn_base.json: line 2: not UTF-8 text") as err:
        load_bfcl("base", data_dir)
    assert "\n" not in str(err.value)


def test_a_missing_bfcl_eval_package_is_a_one_line_import_error():
    code = "import sys; sys.modules['bfcl_eval'] = None; import evaluation.agentic.bfcl"
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                            capture_output=True, text=True, timeout=120)
    last_line = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and last_line.startswith("ImportError: BFCL needs the pinned bfcl-eval package")
    assert last_line.endswith("install it with scripts/setup.sh")


def test_ground_truth_is_parsed_not_evaluated():
    assert parse_call("sort('final_report.pdf')") == ("sort", ["final_report.pdf"], {})
    assert parse_call("f(a=[1, {'b': None}], c=-2.5)") == ("f", [], {"a": [1, {"b": None}], "c": -2.5})
    for text in ("__import__('os').getcwd()", "f(x=g())", "f(**{'a': 1})", "f(x=y)", "f(x=", "1 +"):
        with pytest.raises(ValueError):
            parse_call(text)


def test_positional_ground_truth_is_bound_to_parameter_names(subsets):
    entry = subsets["miss_func"][0]
    assert ("sort", {"file_name": "final_report.pdf"}) in entry.ground_truth[3]


# --- tool schemas -----------------------------------------------------------------------------------------------

JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


def assert_json_schema(schema: dict, where: str) -> None:
    assert isinstance(schema, dict) and schema.get("type") in JSON_TYPES, where
    assert set(schema) <= {"type", "description", "properties", "required", "items", "enum", "default"}, where
    if "description" in schema:
        assert isinstance(schema["description"], str), where
    if "properties" in schema:
        assert schema["type"] == "object", where
        for name, prop in schema["properties"].items():
            assert_json_schema(prop, f"{where}.{name}")
    if "required" in schema:
        assert schema["type"] == "object" and set(schema["required"]) <= set(schema.get("properties", {})), where
    if "items" in schema:
        assert schema["type"] == "array", where
        assert_json_schema(schema["items"], f"{where}[]")


def test_every_function_doc_converts_to_valid_json_schema(subsets):
    docs = {doc["name"]: doc for entries in subsets.values() for e in entries for doc in e.functions}
    assert len(docs) >= 120
    for name, doc in docs.items():
        tool = to_openai_tool(doc)
        json.dumps(tool)
        assert set(tool) == {"type", "function"} and tool["type"] == "function"
        assert set(tool["function"]) == {"name", "description", "parameters"}
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool["function"]["name"])
        parameters = tool["function"]["parameters"]
        assert parameters["type"] == "object" and "properties" in parameters
        assert_json_schema(parameters, name)
    classes = {c for entries in subsets.values() for e in entries for c in e.involved_classes}
    assert classes == set(BFCL_CLASSES)
