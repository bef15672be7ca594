"""The EnvScaler runtime: loading, the worker process and its defences, the ToolEnvironment, the split."""

from __future__ import annotations

import ast
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evaluation.agentic import envscaler as es
from evaluation.agentic.envscaler import (
    EnvScalerEnvironment,
    EnvScalerSuite,
    EnvScalerWorker,
    TaskItem,
    items_from_dicts,
    load_envscaler,
    replay,
    split_tasks,
)
from evaluation.sandbox import SandboxUnavailable
from lopd.core.multiturn import AGENT_SYSTEM_PROMPT, TASK_COMPLETED

BANK_CODE = '''
from typing import Dict
import copy


class Bank:
    """Accounts with balances and a transaction log."""

    def __init__(self, config: dict):
        self.accounts: Dict[str, float] = config.get("accounts", {})
        self.transactions: list = []

    def _log(self, kind, account_id, amount):
        self.transactions.append({"kind": kind, "account_id": account_id, "amount": amount})

    def get_balance(self, account_id: str) -> dict:
        if account_id not in self.accounts:
            return {"success": False, "error": "no such account"}
        return {"success": True, "balance": self.accounts[account_id]}

    def deposit(self, account_id: str, amount: float) -> dict:
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.accounts[account_id] += amount
        self._log("deposit", account_id, amount)
        return {"success": True, "balance": self.accounts[account_id]}

    def withdraw(self, account_id: str, amount: float) -> dict:
        if self.accounts[account_id] < amount:
            return {"success": False, "error": "insufficient funds"}
        self.accounts[account_id] -= amount
        self._log("withdraw", account_id, amount)
        return {"success": True, "balance": self.accounts[account_id]}

    def statement(self, repeat: int = 1) -> str:
        return "x" * repeat
'''

TOOLS = [
    {"type": "function", "function": {"name": "get_balance", "description": "Balance of an account.",
                                      "parameters": {"type": "object", "properties": {"account_id": {"type": "string"}},
                                                     "required": ["account_id"]}}},
    {"name": "deposit", "description": "Deposit money.",  # the bare form is accepted too
     "parameters": {"type": "object", "properties": {"account_id": {"type": "string"}, "amount": {"type": "number"}},
                    "required": ["account_id", "amount"]}},
    {"type": "function", "function": {"name": "withdraw", "description": "Withdraw money.",
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "statement", "description": "A long text.",
                                      "parameters": {"type": "object", "properties": {}}}},
]
INIT = {"accounts": {"alice": 100, "bob": 50, "carol": 0}}


def check(expr: str) -> dict[str, str]:
    return {"check_item": expr, "check_func": f"def check_func(final_state):\n    return {expr}\n"}


TASKS = [
    {"env_id": "bank", "task_id": "deposit-alice", "init_config": INIT, "task": "Deposit 50 into alice's account.",
     "checklist_with_func": [check("final_state['accounts']['alice'] == 150"),
                             check("final_state['accounts']['bob'] == initial_state['accounts']['bob']"),
                             check("len(final_state['transactions']) == 1")],
     "ground_truth": [{"name": "deposit", "arguments": {"account_id": "alice", "amount": 50}}]},
    {"env_id": "bank", "task_id": "move-bob-carol", "init_config": json.dumps(INIT),  # a JSON string, as published
     "task": "Move 20 from bob to carol.",
     "checklist_with_func": [check("final_state['accounts']['bob'] == 30"),
                             check("final_state['accounts']['carol'] == 20"),
                             check("final_state['accounts']['alice'] == 100"),
                             check("[t['kind'] for t in final_state['transactions']] == ['withdraw', 'deposit']")],
     "ground_truth": [{"name": "get_balance", "arguments": {"account_id": "bob"}},
                      {"name": "withdraw", "arguments": {"account_id": "bob", "amount": 20}},
                      {"name": "deposit", "arguments": {"account_id": "carol", "amount": 20}}]},
    {"env_id": "bank", "task_id": "empty-bob", "init_config": INIT, "task": "Withdraw everything from bob.",
     "checklist_with_func": [check("final_state['accounts']['bob'] == 0"),
                             check("final_state['transactions'][-1]['amount'] == 50")],
     "ground_truth": [{"name": "withdraw", "arguments": {"account_id": "bob", "amount": 50}}]},
]
ENVS = [{"env_id": "bank", "env_class_name": "Bank", "env_class_code": BANK_CODE, "tools": TOOLS}]


def bank_items(code: str = BANK_CODE, tasks: list[dict] = TASKS):
    envs, tasks = items_from_dicts([{**ENVS[0], "env_class_code": code}], tasks)
    return envs["bank"], tasks


@pytest.fixture(scope="module")
def suite():
    envs, tasks = items_from_dicts(ENVS, TASKS)
    with EnvScalerSuite(envs, tasks, workers=1, call_timeout=0.5) as suite:
        yield suite


@pytest.fixture
def worker():
    worker = EnvScalerWorker(call_timeout=0.5)
    yield worker
    worker.close()


def expected_reward(task: TaskItem, final_state: dict) -> float:
    """Run the check sources here, in the test, on a hand-written final state."""
    initial = {"accounts": dict(INIT["accounts"]), "transactions": []}
    results = []
    for _, source in task.checklist:
        scope = {"initial_state": initial}
        exec(source, scope)
        results.append(scope["check_func"](final_state) is True)
    return sum(results) / len(results)


# -- the environment ---------------------------------------------------------


def test_every_ground_truth_replays_to_full_reward(suite):
    for task in suite.tasks:
        env = suite.make(task)
        assert replay(env, task.ground_truth) == {"reward": 1.0, "checks_passed": len(task.checklist),
                                                  "checks_total": len(task.checklist)}
        env.close()


def test_a_partial_run_scores_the_fraction_of_passed_checks(suite):
    task = suite.tasks[1]
    env = suite.make(task)
    score = replay(env, task.ground_truth[:2])  # withdrew from bob, never deposited to carol
    state = {"accounts": {"alice": 100, "bob": 30, "carol": 0},
             "transactions": [{"kind": "withdraw", "account_id": "bob", "amount": 20}]}
    assert score["reward"] == pytest.approx(expected_reward(task, state)) == pytest.approx(2 / 4)
    assert (score["checks_passed"], score["checks_total"]) == (2, 4)
    env.close()

    env = suite.make(task)
    score = replay(env, [{"name": "deposit", "arguments": {"account_id": "alice", "amount": 1}}])
    state = {"accounts": {"alice": 101, "bob": 50, "carol": 0},
             "transactions": [{"kind": "deposit", "account_id": "alice", "amount": 1}]}
    assert score["reward"] == pytest.approx(expected_reward(task, state)) == 0.0
    env.close()


def test_reset_offers_the_prompt_task_and_openai_tools(suite):
    env = suite.make(suite.tasks[0])
    messages, tools = env.reset()
    assert messages == [{"role": "system", "content": AGENT_SYSTEM_PROMPT},
                        {"role": "user", "content": "Deposit 50 into alice's account."}]
    assert [t["type"] for t in tools] == ["function"] * 4
    assert [t["function"]["name"] for t in tools] == ["get_balance", "deposit", "withdraw", "statement"]
    tools[0]["function"]["name"] = "mutated"  # the caller's copy: the environment is unaffected
    assert env.call_tool("get_balance", {"account_id": "alice"}) == '{"success": true, "balance": 100}'
    env.close()


def test_reply_ends_only_on_task_completed(suite):
    env = suite.make(suite.tasks[0])
    env.reset()
    assert env.reply(f"Done. {TASK_COMPLETED}") is None
    (nudge,) = env.reply("I think I am finished")
    assert nudge["role"] == "user" and TASK_COMPLETED in nudge["content"]
    env.close()


@pytest.mark.parametrize("name, arguments, expected", [
    ("launch_rocket", {}, "unknown tool 'launch_rocket'"),
    ("_log", {"kind": "x", "account_id": "alice", "amount": 1}, "unknown tool '_log'"),
    ("deposit", {"account_id": "alice"}, "missing a required argument: 'amount'"),
    ("deposit", {"account_id": "alice", "amount": 1, "memo": "hi"}, "unexpected keyword argument 'memo'"),
    ("deposit", {"account_id": "alice", "amount": -5}, "ValueError: amount must be positive"),
    ("deposit", {"account_id": "nobody", "amount": 5}, "KeyError: 'nobody'"),
    ("deposit", {"account_id": "alice", "amount": "5"}, "TypeError"),
])
def test_bad_calls_become_one_line_error_observations(suite, name, arguments, expected):
    env = suite.make(suite.tasks[0])
    env.reset()
    observation = env.call_tool(name, arguments)
    assert observation.startswith("Error: ") and expected in observation and "\n" not in observation
    assert env.call_tool("get_balance", {"account_id": "alice"}) == '{"success": true, "balance": 100}'
    env.close()


def test_long_observations_are_truncated_with_a_note(suite):
    env = suite.make(suite.tasks[0])
    env.reset()
    short = env.call_tool("statement", {"repeat": 10})
    assert short == json.dumps("x" * 10)
    long = env.call_tool("statement", {"repeat": 10_000})
    body, note = long.split("\n")
    assert body == json.dumps("x" * 10_000)[:4000] and "4000 of 10002 characters" in note
    env.close()


def test_calls_after_close_are_errors_not_crashes(suite):
    env = suite.make(suite.tasks[0])
    env.reset()
    env.close()
    assert env.call_tool("get_balance", {"account_id": "alice"}).startswith("Error: ")
    assert env.score()["reward"] == 0.0


def test_environments_sharing_a_worker_are_independent(suite):
    first, second = suite.make(suite.tasks[0]), suite.make(suite.tasks[0])
    first.reset(), second.reset()
    first.call_tool("deposit", {"account_id": "alice", "amount": 50})
    assert first.worker is second.worker
    assert first.score()["reward"] == 1.0 and second.score()["reward"] < 1.0
    first.close(), second.close()


# -- hostile or broken dataset code --------------------------------------------


def test_forbidden_imports_at_module_level_fail_the_environment_not_the_host(worker, tmp_path):
    marker = tmp_path / "pwned"
    env_item, tasks = bank_items(f"import os\nos.system('touch {marker}')\n" + BANK_CODE)
    env = EnvScalerEnvironment(env_item, tasks[0], worker)
    messages, tools = env.reset()  # the episode can still start
    assert len(messages) == 2 and len(tools) == 4
    observation = env.call_tool("get_balance", {"account_id": "alice"})
    assert observation.startswith("Error: the environment failed to start") and "'os' is not allowed" in observation
    assert env.score() == {"reward": 0.0, "checks_passed": 0, "checks_total": 3}
    assert not marker.exists()


HOSTILE_METHODS = '''
    def read_secrets(self) -> str:
        return open("/etc/passwd").read()

    def shell(self) -> int:
        return __import__("subprocess").call(["touch", "{marker}"])

    def sneaky_eval(self) -> int:
        return eval("1 + 1")

    def chatty(self) -> str:
        print("this must not corrupt the protocol")
        return "ok"

    def hog_memory(self) -> int:
        return len(bytearray(4 << 30))
'''
HOSTILE_TOOLS = ["read_secrets", "shell", "sneaky_eval", "chatty", "hog_memory"]


@pytest.mark.parametrize("tool, expected", [
    ("read_secrets", "NameError: name 'open' is not defined"),
    ("shell", "ImportError: import of 'subprocess' is not allowed"),
    ("sneaky_eval", "NameError: name 'eval' is not defined"),
    ("chatty", '"ok"'),
    ("hog_memory", "MemoryError"),
])
def test_hostile_tools_become_error_observations(worker, tmp_path, tool, expected):
    marker = tmp_path / "pwned"
    code = BANK_CODE + HOSTILE_METHODS.replace("{marker}", str(marker))
    env_item, tasks = items_from_dicts([{**ENVS[0], "env_class_code": code,
                                         "tools": TOOLS + [{"name": n} for n in HOSTILE_TOOLS]}], TASKS)
    env = EnvScalerEnvironment(env_item["bank"], tasks[0], worker)
    env.reset()
    assert expected in env.call_tool(tool, {})
    assert env.call_tool("deposit", {"account_id": "alice", "amount": 50}) == '{"success": true, "balance": 150}'
    assert env.score()["reward"] == 1.0
    assert not marker.exists() and worker.restarts == 0


def test_hostile_or_broken_check_functions_count_as_failed(worker):
    hostile = [
        {"check_item": "import", "check_func": "import os\ndef check_func(final_state):\n    return True\n"},
        {"check_item": "open", "check_func": "def check_func(final_state):\n    return bool(open('/etc/passwd'))\n"},
        {"check_item": "dunder import",
         "check_func": "def check_func(final_state):\n    return __import__('os').getcwd() == '/'\n"},
        {"check_item": "raises", "check_func": "def check_func(final_state):\n    return final_state['nope']\n"},
        {"check_item": "not a bool", "check_func": "def check_func(final_state):\n    return 1\n"},
        {"check_item": "no function", "check_func": "x = 1\n"},
        {"check_item": "syntax", "check_func": "def check_func(final_state) return True\n"},
        {"check_item": "loops", "check_func": "def check_func(final_state):\n    while True:\n        pass\n"},
        {"check_item": "mutates", "check_func": "def check_func(final_state):\n"
                                                "    final_state['accounts'].clear()\n    return True\n"},
        check("final_state['accounts']['alice'] == 100"),  # still sees the real state after the one above
    ]
    env_item, tasks = bank_items(tasks=[{**TASKS[0], "checklist_with_func": hostile}])
    env = EnvScalerEnvironment(env_item, tasks[0], worker)
    env.reset()
    assert env.score() == {"reward": 0.2, "checks_passed": 2, "checks_total": 10}


def test_tampering_with_shared_modules_or_builtins_stays_inside_one_environment(worker):
    tamper = "import json\njson.dumps = lambda *a, **k: 'hacked'\n__builtins__['len'] = lambda x: -1\n"
    env_item, tasks = bank_items(tamper + BANK_CODE)
    tampering = EnvScalerEnvironment(env_item, tasks[0], worker)
    tampering.reset()
    honest = EnvScalerEnvironment(bank_items()[0], tasks[0], worker)
    honest.reset()
    assert tampering.call_tool("get_balance", {"account_id": "bob"}) == '{"success": true, "balance": 50}'
    assert honest.call_tool("statement", {"repeat": 3}) == '"xxx"'
    assert replay(honest, tasks[0].ground_truth)["reward"] == 1.0


def test_concurrent_episodes_on_shared_workers():
    envs, tasks = items_from_dicts(ENVS, TASKS)
    with EnvScalerSuite(envs, tasks, workers=2, call_timeout=2.0) as suite:
        jobs = [suite.make(task) for task in tasks * 8]
        with ThreadPoolExecutor(8) as pool:
            scores = list(pool.map(lambda env: replay(env, env.task.ground_truth)["reward"], jobs))
    assert scores == [1.0] * len(jobs)


LOOPING_METHODS = '''
    def spin(self) -> None:
        while True:
            pass

    def stubborn(self) -> None:
        swallowed = 0
        while True:
            try:
                while True:
                    pass
            except BaseException:
                swallowed += 1
'''


def looping_bank(worker, count: int = 1, code_extra: str = "",
                 tools_extra: tuple[str, ...] = ()) -> list[EnvScalerEnvironment]:
    tools = TOOLS + [{"name": name} for name in ("spin", "stubborn", *tools_extra)]
    envs, tasks = items_from_dicts([{**ENVS[0], "env_class_code": BANK_CODE + LOOPING_METHODS + code_extra,
                                     "tools": tools}], TASKS[:1])
    environments = [EnvScalerEnvironment(envs["bank"], tasks[0], worker) for _ in range(count)]
    for env in environments:
        env.reset()
    return environments


def test_an_infinite_loop_times_out_and_the_environment_keeps_its_state(worker):
    (env,) = looping_bank(worker)
    env.call_tool("deposit", {"account_id": "alice", "amount": 20})
    assert env.call_tool("spin", {}) == "Error: tool 'spin' timed out after 0.5 s"
    assert worker.restarts == 0  # the worker's own timer, no kill
    assert env.call_tool("deposit", {"account_id": "alice", "amount": 30}) == '{"success": true, "balance": 150}'
    assert env.score()["reward"] == pytest.approx(2 / 3)  # alice 150 and bob untouched, but two transactions
    env.close()


def test_a_loop_that_swallows_the_timer_is_killed_and_neighbours_are_rebuilt(worker):
    hanging, neighbour = looping_bank(worker, count=2)
    hanging.call_tool("deposit", {"account_id": "alice", "amount": 20})
    neighbour.call_tool("deposit", {"account_id": "alice", "amount": 50})
    neighbour.call_tool("deposit", {"account_id": "bob", "amount": "bad"})  # failed calls are replayed too
    assert hanging.call_tool("stubborn", {}) == "Error: tool 'stubborn' timed out after 0.5 s"
    assert worker.restarts == 1
    assert neighbour.score()["reward"] == 1.0  # alice 150, one transaction: rebuilt exactly
    assert hanging.call_tool("get_balance", {"account_id": "alice"}) == '{"success": true, "balance": 120}'


def test_a_neighbour_that_cannot_be_rebuilt_faithfully_is_marked_lost(worker):
    expiring = '''
    def touch(self, until: float) -> str:
        import time
        if time.time() > until:
            raise RuntimeError("expired")
        return "fresh"
'''
    hanging, expiring_env = looping_bank(worker, 2, expiring, ("touch",))
    # the deadline is set once the worker is up, so a slow start cannot expire it early
    assert expiring_env.call_tool("touch", {"until": time.time() + 1.0}) == '"fresh"'
    hanging.call_tool("stubborn", {})  # >= 1.5 s: replaying `touch` now raises, so the rebuild differs
    observation = expiring_env.call_tool("get_balance", {"account_id": "alice"})
    assert observation.startswith("Error: the environment's state was lost")
    assert expiring_env.score()["reward"] == 0.0
    assert hanging.call_tool("get_balance", {"account_id": "alice"}) == '{"success": true, "balance": 100}'


# -- the worker process ----------------------------------------------------------


def test_worker_imports_only_the_standard_library():
    tree = ast.parse(Path(es.__file__).with_name("envscaler_worker.py").read_text())
    imported = {alias.name.partition(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.partition(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names)


def test_worker_starts_unprivileged_and_exits_with_its_host(worker):
    env_item, tasks = bank_items()
    EnvScalerEnvironment(env_item, tasks[0], worker).reset()
    proc = worker._proc
    if os.geteuid() == 0:
        assert worker_uid(proc) != 0
    proc.stdin.close()  # what the kernel does when the host dies
    assert proc.wait(timeout=5) == 0


def worker_uid(proc) -> int:
    with open(f"/proc/{proc.pid}/status") as f:
        return int(next(line for line in f if line.startswith("Uid:")).split()[1])


def start_bank(worker) -> EnvScalerEnvironment:
    env_item, tasks = bank_items()
    env = EnvScalerEnvironment(env_item, tasks[0], worker)
    env.reset()
    return env


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop only exists on a root host")
def test_a_root_host_without_setpriv_refuses_to_run_dataset_code(worker, monkeypatch):
    monkeypatch.setattr(es, "_SETPRIV", None)
    with pytest.raises(SandboxUnavailable, match="setpriv"):
        worker.create(BANK_CODE, "Bank", INIT)
    with pytest.raises(SandboxUnavailable, match="setpriv"):  # the episode stops the stage: it does not score 0
        start_bank(worker)


def test_a_greeting_with_the_wrong_uid_is_refused(worker, monkeypatch):
    monkeypatch.setattr(es, "_sandbox_prefix", lambda: ([], os.getuid() + 1))
    with pytest.raises(SandboxUnavailable, match="did not start"):
        worker.create(BANK_CODE, "Bank", INIT)


def test_the_sandbox_check_runs_a_known_environment_and_stops_on_a_worker_that_cannot_start(monkeypatch):
    es.check_sandbox()
    monkeypatch.setattr(es, "_sandbox_prefix", lambda: ([], os.getuid() + 1))
    with pytest.raises(SandboxUnavailable, match="did not start"):
        es.check_sandbox()


def test_a_slow_start_is_retried_without_weakening_isolation(worker, monkeypatch):
    monkeypatch.setattr(es, "_START_ATTEMPTS", (0.0, 20.0))  # the first try cannot be in time
    env = start_bank(worker)
    assert env.call_tool("get_balance", {"account_id": "alice"}) == '{"success": true, "balance": 100}'
    if os.geteuid() == 0:
        assert worker_uid(worker._proc) != 0


def test_workers_run_without_network(worker):
    if not es._network_namespace():
        pytest.skip("unshare --net is not available here")
    start_bank(worker)
    assert os.readlink(f"/proc/{worker._proc.pid}/ns/net") != os.readlink("/proc/self/ns/net")


@pytest.mark.parametrize("written", ["b'garbage\\n'", "b'x' * (9 << 20)"])  # the second: over the 8 MiB cap
def test_garbage_on_the_protocol_is_an_invalid_response_not_a_timeout(worker, written):
    scribble = f'''
    def scribble(self) -> str:
        import random
        random._os.write(1, {written})  # reachable, see the worker's docstring
        return "ok"
'''
    (env,) = looping_bank(worker, code_extra=scribble, tools_extra=("scribble",))
    observation = env.call_tool("scribble", {})
    assert observation == "Error: the environment worker sent an invalid response and was restarted"
    assert worker.restarts == 1
    assert env.call_tool("get_balance", {"account_id": "alice"}) == '{"success": true, "balance": 100}'


def test_a_timer_firing_while_an_error_is_formatted_is_a_timeout_not_a_crash(worker):
    code = '''
    def bad_error(self) -> None:
        class Endless(Exception):
            def __str__(self):
                while True:
                    pass
        raise Endless()
'''
    (env,) = looping_bank(worker, code_extra=code, tools_extra=("bad_error",))
    assert env.call_tool("bad_error", {}) == "Error: tool 'bad_error' timed out after 0.5 s"
    assert worker.restarts == 0


def test_suite_spreads_environments_over_workers_and_closes_them():
    envs, tasks = items_from_dicts(ENVS, TASKS)
    suite = EnvScalerSuite(envs, tasks, workers=2, call_timeout=0.5)
    made = [suite.make(task) for task in tasks[:2]]
    assert made[0].worker is not made[1].worker
    for env, task in zip(made, tasks):
        assert replay(env, task.ground_truth)["reward"] == 1.0
    procs = [worker._proc for worker in suite.workers]
    suite.close()
    assert all(proc.poll() is not None for proc in procs)
    with pytest.raises(ValueError, match="unknown env_id"):
        EnvScalerSuite(envs, [TaskItem("nope", "t", {}, "x", (("c", "f"),))])


# -- loading -------------------------------------------------------------------------


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def write_jsonl(path: Path, items) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    return path


def test_json_and_jsonl_files_load_the_same(tmp_path):
    from_json = load_envscaler(write_json(tmp_path / "envs.json", ENVS), write_json(tmp_path / "tasks.json", TASKS))
    from_jsonl = load_envscaler(write_jsonl(tmp_path / "envs.jsonl", ENVS),
                                write_jsonl(tmp_path / "tasks.jsonl", TASKS))
    assert from_json == from_jsonl == items_from_dicts(ENVS, TASKS)
    envs, tasks = from_json
    assert envs["bank"].tools[1] == {"type": "function", "function": TOOLS[1]}
    assert tasks[1].init_config == INIT and tasks[1].checklist[0][0] == "final_state['accounts']['bob'] == 30"
    assert tasks[0].ground_truth == TASKS[0]["ground_truth"]


def test_envscaler_layout_variants_load(tmp_path):
    """An object keyed by env_id, env_class_name on the task only, integer ids, a one-line JSONL."""
    env = {k: v for k, v in ENVS[0].items() if k not in ("env_id", "env_class_name")}
    task = {**{k: v for k, v in TASKS[0].items() if k != "ground_truth"}, "env_id": 7, "task_id": 3,
            "env_class_name": "Bank"}
    envs, tasks = load_envscaler(write_json(tmp_path / "envs.json", {"7": env}),
                                 write_jsonl(tmp_path / "tasks.jsonl", [task]))
    assert envs["7"].env_class_name == "Bank" and tasks[0].task_id == "3" and tasks[0].ground_truth is None
    envs, _ = load_envscaler(write_json(tmp_path / "list.json", [env]), write_json(tmp_path / "t.json", [
        {**task, "env_id": 0}]))
    assert list(envs) == ["0"]  # a list item without env_id takes its position


@pytest.mark.parametrize("mutate, culprit, message", [
    (lambda envs, tasks: tasks[1].pop("checklist_with_func"), "tasks", "task item 1 (task_id 'move-bob-carol')"),
    (lambda envs, tasks: tasks[2].update(checklist_with_func=[{"check_item": "x"}]), "tasks", "[0] needs string"),
    (lambda envs, tasks: tasks[2].update(checklist_with_func=[]), "tasks", "must be a non-empty list"),
    (lambda envs, tasks: tasks[0].update(env_id="mars"), "tasks", "unknown env_id 'mars'"),
    (lambda envs, tasks: tasks[0].update(init_config="{oops"), "tasks", "'init_config' is a string but not valid"),
    (lambda envs, tasks: tasks[1].update(task_id="deposit-alice"), "tasks", "duplicate task_id"),
    (lambda envs, tasks: tasks[0].update(ground_truth=[{"arguments": {}}]), "tasks", "'ground_truth' must be"),
    (lambda envs, tasks: envs[0].pop("env_class_code"), "envs", "environment item 0 (env_id 'bank')"),
    (lambda envs, tasks: envs[0].update(tools=[{"description": "nameless"}]), "envs", "string 'name'"),
    (lambda envs, tasks: envs.append(envs[0]), "envs", "duplicate env_id"),
])
def test_malformed_items_raise_one_line_errors_naming_file_and_item(tmp_path, mutate, culprit, message):
    envs, tasks = json.loads(json.dumps(ENVS)), json.loads(json.dumps(TASKS))
    mutate(envs, tasks)
    env_path, task_path = write_json(tmp_path / "envs.json", envs), write_json(tmp_path / "tasks.json", tasks)
    with pytest.raises(ValueError) as err:
        load_envscaler(env_path, task_path)
    text = str(err.value)
    assert message in text and "\n" not in text
    assert text.startswith(str(env_path if culprit == "envs" else task_path) + ": ")


def test_missing_files_and_broken_jsonl_are_reported(tmp_path):
    env_path = write_json(tmp_path / "envs.json", ENVS)
    with pytest.raises(FileNotFoundError, match="task file not found: .*nowhere.json"):
        load_envscaler(env_path, tmp_path / "nowhere.json")
    broken = tmp_path / "tasks.jsonl"
    broken.write_text(json.dumps(TASKS[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl: line 2 is not valid JSON"):
        load_envscaler(env_path, broken)
    broken.write_bytes(json.dumps(TASKS[0]).encode() + b"\n\xff\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl: line 2: not UTF-8 text"):
        load_envscaler(env_path, broken)


# -- the split -----------------------------------------------------------------------


def test_split_is_deterministic_disjoint_and_about_a_fifth():
    tasks = [TaskItem("bank", f"task-{i}", {}, "x", (("c", "f"),)) for i in range(2000)]
    train, test = split_tasks(tasks)
    assert split_tasks(tasks) == (train, test)
    assert {t.task_id for t in split_tasks(tasks[::-1])[1]} == {t.task_id for t in test}  # order-free
    assert split_tasks(tasks[:500])[1] == [t for t in test if int(t.task_id[5:]) < 500]  # no dependence on others
    assert not {t.task_id for t in train} & {t.task_id for t in test} and len(train) + len(test) == 2000
    assert 0.17 < len(test) / 2000 < 0.23
    assert split_tasks(tasks, test_fraction=0.0) == (tasks, [])
    with pytest.raises(ValueError):
        split_tasks(tasks, test_fraction=1.5)


def test_split_puts_a_group_on_its_named_tasks_side():
    """A task with a `split_group` falls where a task with that id would, whatever its own id hashes to."""
    plain = [TaskItem("bank", f"task-{i}", {}, "x", (("c", "f"),)) for i in range(200)]
    grouped = [TaskItem("bank", f"twin-{i}", {}, "y", (("c", "f"),), split_group=f"task-{i}") for i in range(200)]
    train, test = split_tasks(plain + grouped)
    in_test = {t.task_id for t in test}
    assert in_test and all((f"twin-{i}" in in_test) == (f"task-{i}" in in_test) for i in range(200))
    alone = {t.task_id for t in split_tasks([TaskItem("bank", f"twin-{i}", {}, "y", (("c", "f"),))
                                             for i in range(200)])[1]}
    assert alone != {f"twin-{i}" for i in range(200) if f"task-{i}" in in_test}  # the group, not the id, decided
