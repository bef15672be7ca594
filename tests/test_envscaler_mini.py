"""envscaler-mini: the built-in EnvScaler-format corpus loads through the runtime, its tool schemas
match the class sources, and every task's ground truth earns full reward while doing nothing does not."""

import ast
import json

import pytest

from evaluation.agentic import envscaler_mini
from evaluation.agentic.envscaler import EnvScalerSuite, items_from_dicts, replay, split_tasks
from evaluation.agentic.envscaler_mini.schema import is_query_tool


@pytest.fixture(scope="module")
def raw():
    return envscaler_mini.env_items(), envscaler_mini.task_items()


@pytest.fixture(scope="module")
def items(raw):
    return items_from_dicts(*raw)


def test_counts_and_ids(raw, items):
    env_dicts, task_dicts = raw
    envs, tasks = items
    assert envscaler_mini.SUITE_NAME == "envscaler-mini"
    base = [t for t in task_dicts if "tier" not in t]
    assert len(envs) >= 12 and len(base) >= 300
    assert len({t.task_id for t in tasks}) == len(tasks)
    assert len({(t.env_id, t.task) for t in tasks}) == len(tasks), "two tasks share an instruction"
    per_env = {env_id: sum(t.env_id == env_id and t.tier is None for t in tasks) for env_id in envs}
    assert min(per_env.values()) >= 20, per_env
    for env in envs.values():
        names = env.tool_names
        assert len(names) >= 6, env.env_id
        assert any(is_query_tool(n) for n in names) and not all(is_query_tool(n) for n in names), env.env_id
    for task in task_dicts:
        assert 1 <= len(task["checklist_with_func"]) <= 4, task["task_id"]
        assert len(json.dumps(task["init_config"])) < 4000, task["task_id"]  # small states, short prompts
        assert any(not is_query_tool(c["name"]) for c in task["ground_truth"]), task["task_id"]
    assert sum(len(t["ground_truth"]) >= 2 for t in base) >= 0.9 * len(base)  # the base tier needs a lookup
    # deterministic and plain JSON
    assert json.dumps(raw) == json.dumps((envscaler_mini.env_items(), envscaler_mini.task_items()))


def test_schemas_match_method_signatures(raw):
    """Checked against the class source directly with ast, independently of schema.py."""
    for env in raw[0]:
        cls = next(n for n in ast.parse(env["env_class_code"]).body
                   if isinstance(n, ast.ClassDef) and n.name == env["env_class_name"])
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
        schemas = {t["function"]["name"]: t["function"] for t in env["tools"]}
        assert list(schemas) == list(methods), env["env_id"]
        for name, method in methods.items():
            params = [a.arg for a in method.args.args[1:]]
            required = params[:len(params) - len(method.args.defaults)]
            fn = schemas[name]
            assert fn["description"] and fn["parameters"]["type"] == "object"
            assert list(fn["parameters"]["properties"]) == params, (env["env_id"], name)
            assert fn["parameters"]["required"] == required, (env["env_id"], name)
            assert not method.args.kwonlyargs and not method.args.vararg and not method.args.kwarg


def test_class_sources_import_only_allowed_modules(raw):
    allowed = {"copy", "typing", "datetime", "re", "json", "math", "collections", "dataclasses", "enum",
               "itertools", "functools", "string", "decimal"}
    for env in raw[0]:
        for node in ast.walk(ast.parse(env["env_class_code"])):
            if isinstance(node, ast.Import):
                assert {a.name.split(".")[0] for a in node.names} <= allowed, env["env_id"]
            elif isinstance(node, ast.ImportFrom):
                assert node.module.split(".")[0] in allowed, env["env_id"]


def test_ground_truth_solves_every_task_and_doing_nothing_does_not(items):
    envs, tasks = items
    failures = []
    with EnvScalerSuite(envs, tasks, workers=2) as suite:
        for task in tasks:
            env = suite.make(task)
            try:
                empty = replay(env, [])["reward"]
                env.reset()
                for call in task.ground_truth:
                    observation = env.call_tool(call["name"], call["arguments"])
                    if not json.loads(observation).get("success"):
                        failures.append(f"{task.task_id}: {call['name']} -> {observation[:200]}")
                final = env.score()["reward"]
            finally:
                env.close()
            if empty >= 1.0:
                failures.append(f"{task.task_id}: already solved before any action")
            if final != 1.0:
                failures.append(f"{task.task_id}: ground truth scores {final}")
    assert not failures, "\n".join(failures[:20])


def test_hinted_twins_keep_their_base_task_and_name_its_ids(raw):
    """Each base task has one hinted twin: the same initial state and checks, the instruction plus every id its
    writes take from the state (checked against a brute-force walk of the state written here), and only the writes
    as ground truth."""
    _, task_dicts = raw
    base = {t["task_id"]: t for t in task_dicts if "tier" not in t}
    twins = [t for t in task_dicts if t.get("tier") == "hinted"]
    assert sorted(t["split_group"] for t in twins) == sorted(base)

    def keys(node):
        found = []
        stack = [node]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                found += list(item)
                stack += list(item.values())
            elif isinstance(item, list):
                stack += item
        return set(found)

    for twin in twins:
        original = base[twin["split_group"]]
        assert twin["task_id"] == original["task_id"][:-3] + "h" + original["task_id"][-3:]
        assert twin["init_config"] == original["init_config"]
        assert twin["checklist_with_func"] == original["checklist_with_func"]
        writes = [c for c in original["ground_truth"] if not is_query_tool(c["name"])]
        assert twin["ground_truth"] == writes
        assert twin["task"].startswith(original["task"] + " (Ids: ")
        hint = twin["task"][len(original["task"]):]
        state_keys = keys(original["init_config"])
        for call in writes:
            for value in call["arguments"].values():
                if isinstance(value, str) and value in state_keys:
                    assert f" {value}" in hint, (twin["task_id"], value)


def test_split_keeps_a_twin_with_its_base_task(items):
    _, tasks = items
    train, test = split_tasks(tasks)
    side = {t.task_id: "test" for t in test} | {t.task_id: "train" for t in train}
    twins = [t for t in tasks if t.tier == "hinted"]
    assert twins and all(side[t.task_id] == side[t.split_group] for t in twins)
    assert {t.tier for t in test} == {None, "hinted"}  # both tiers are held out
