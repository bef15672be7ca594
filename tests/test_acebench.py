"""ACEBench agent tasks: ground-truth replay of all 50 entries, the scenario APIs, hostile calls, the
multi-step and multi-turn episode flow with scripted users, process accuracy against a brute-force
reference, and the two user simulators (a local fake endpoint / a fake backend; no network)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from evaluation.agentic.acebench import (
    SIMULATOR_STOP,
    ACEEnvironment,
    ACETask,
    LocalModelUser,
    OpenAICompatibleUser,
    load_acebench,
    replay_ground_truth,
)
from evaluation.agentic.acebench.data import parse_calls
from evaluation.agentic.acebench.phone import BaseApi, FoodPlatform, MessageApi, ReminderApi
from evaluation.agentic.acebench.scoring import process_accuracy
from evaluation.agentic.acebench.travel import Travel
from evaluation.agentic.acebench.user_simulator import OPENING, strip_thinking
from lopd.core.multiturn import AGENT_SYSTEM_PROMPT, TASK_COMPLETED, ToolCall

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("LOPD_SHARED_DATA", ROOT.parent / "shared" / "data"))
DATA = SHARED / "acebench" / "data_en"
needs_data = pytest.mark.skipif(not (DATA / "data_agent_multi_step.json").is_file(),
                                reason=f"ACEBench data not in {DATA} (set LOPD_SHARED_DATA)")

EXPECTED_REPLAY_FAILURES = {
    # (entry, milestone path): why the published milestones cannot produce the published final state
    ("agent_multi_step_0", 0): "orders product 'Super Supreme' (menu: 'Super Supreme Pizza'); the answer's new "
                               "reminder replaces the default 'To-do list' reminder in slot 3",
    ("agent_multi_step_1", 0): "same as agent_multi_step_0",
    ("agent_multi_step_8", 1): "never calls login_device, but the device starts logged out and ends logged in",
    ("agent_multi_step_9", 1): "never calls login_device, but the device starts logged out and ends logged in",
    ("agent_multi_step_12", 0): "never calls login_food_platform, but the answer has Helen logged in and her order",
    ("agent_multi_step_13", 0): "never calls login_food_platform, but the answer has Helen logged in and her order",
    ("agent_multi_step_14", 0): "deletes message 3 and writes '...yuan.'; the answer deletes message 4, no period",
    ("agent_multi_step_15", 0): "deletes message 3 and writes '...yuan.'; the answer deletes message 4, no period",
    ("agent_multi_step_16", 0): "as 14, and never calls login_device although the device starts logged out",
    ("agent_multi_step_17", 0): "deletes message 3 and writes '...yuan.'; the answer deletes message 4, no period",
    ("agent_multi_turn_6", 0): "never calls login_device, but the device starts logged out and ends logged in",
}


# ---------------------------------------------------------------- ground truth replay


@needs_data
@pytest.mark.parametrize("kind, n_entries, n_reproduced", [("multi_step", 20, 12), ("multi_turn", 30, 29)])
def test_ground_truth_replay(kind, n_entries, n_reproduced):
    tasks = load_acebench(kind, DATA)
    assert len(tasks) == n_entries
    reproduced = set()
    for task in tasks:
        assert set(task.ground_truth) == set(task.involved_classes), task.id
        for alternative in range(len(task.milestones)):
            state = replay_ground_truth(task, alternative)
            ok = all(state[name] == expected for name, expected in task.ground_truth.items())
            assert ok == ((task.id, alternative) not in EXPECTED_REPLAY_FAILURES), (task.id, alternative)
            reproduced |= {task.id} if ok else set()
    assert len(reproduced) == n_reproduced


@needs_data
def test_replayed_milestones_score_full_marks():
    task = load_acebench("multi_step", DATA)[10]
    env = ACEEnvironment(task)
    env.reset()
    for group in task.milestones[1]:  # the path with two calls in one bracket
        for call in reversed(group):  # calls inside a bracket may come in any order
            assert not env.call_tool(call.name, dict(call.arguments)).startswith("Error")
    assert env.score() == {"reward": 1.0, "end_to_end": 1.0, "process": 1.0}


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "data_agent_multi_step.json")):
        load_acebench("multi_step", tmp_path)
    with pytest.raises(ValueError, match="kind"):
        load_acebench("normal", tmp_path)


TASK_ROW = {"id": "agent_multi_step_0", "question": "Turn on the wifi.", "function": [],
            "involved_classes": ["BaseApi"], "initial_config": {}}
ANSWER_ROW = {"id": "agent_multi_step_0", "ground_truth": [{"BaseApi": {}}], "mile_stone": ["[turn_on_wifi()]"]}


@pytest.mark.parametrize("task_lines, answer_lines, message", [
    ([json.dumps(TASK_ROW), "{oops"], [json.dumps(ANSWER_ROW)], r"multi_step.json: line 2 is not valid JSON"),
    ([json.dumps(TASK_ROW)], [json.dumps({"ground_truth": []})], r"entry 0 has no string 'id'"),
    ([json.dumps({k: v for k, v in TASK_ROW.items() if k != "id"})], [json.dumps(ANSWER_ROW)],
     r"data_agent_multi_step.json: entry 0 \(None\): missing field 'id'"),
    ([json.dumps({**TASK_ROW, "id": "agent_multi_step_9"})], [json.dumps(ANSWER_ROW)], r"no answer in"),
    ([json.dumps(TASK_ROW)], [json.dumps({k: v for k, v in ANSWER_ROW.items() if k != "mile_stone"})],
     r"entry 0 \('agent_multi_step_0'\): missing field 'mile_stone'"),
    ([json.dumps(TASK_ROW)], [json.dumps({**ANSWER_ROW, "mile_stone": ["[turn_on_wifi(]"]})],
     r"not valid Python even after repairing quotes"),
    ([json.dumps({**TASK_ROW, "involved_classes": ["Spaceship"]})], [json.dumps(ANSWER_ROW)],
     r"unknown ACEBench class name 'Spaceship'"),
    ([json.dumps({**TASK_ROW, "function": 3})], [json.dumps(ANSWER_ROW)], r"malformed \(TypeError"),
])
def test_malformed_data_raises_one_line_value_errors_naming_the_file(tmp_path, task_lines, answer_lines, message):
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "data_agent_multi_step.json").write_text("\n".join(task_lines) + "\n")
    (tmp_path / "possible_answer" / "data_agent_multi_step.json").write_text("\n".join(answer_lines) + "\n")
    with pytest.raises(ValueError, match=message) as err:
        load_acebench("multi_step", tmp_path)
    assert "\n" not in str(err.value)


def test_milestone_parsing_repairs_quotes_and_never_evaluates():
    [call] = parse_calls("[add_food_delivery_order(username='Eve', merchant_name='Domino's', "
                         "items=[{'product': 'Super Supreme', 'quantity': 1}])] ")
    assert call == ToolCall("add_food_delivery_order", {"username": "Eve", "merchant_name": "Domino's",
                                                        "items": [{"product": "Super Supreme", "quantity": 1}]})
    assert parse_calls("[send_message(message='Don't forget tomorrow afternoon's meeting'), login_device()]") == [
        ToolCall("send_message", {"message": "Don't forget tomorrow afternoon's meeting"}),
        ToolCall("login_device", {})]
    for hostile in ["[f(x=__import__('os').system('true'))]", "[os.system('true')]", "[f('positional')]"]:
        with pytest.raises(ValueError):
            parse_calls(hostile)


# ---------------------------------------------------------------- scenario APIs


def phone(wifi=True, logged_in=True):
    base = BaseApi()
    base.configure({"wifi": wifi, "logged_in": logged_in})
    return base, MessageApi(base), ReminderApi(base), FoodPlatform(base)


def refused(fn, *args, **kwargs) -> str:
    from evaluation.agentic.acebench.common import ToolError

    with pytest.raises(ToolError) as err:
        fn(*args, **kwargs)
    return str(err.value)


def test_send_message_needs_login_wifi_and_room():
    base, messages, _, _ = phone(wifi=False, logged_in=False)
    assert "login_device" in refused(messages.send_message, "Eve", "Frank", "hi")
    base.login_device()
    assert "turn_on_wifi" in refused(messages.send_message, "Eve", "Frank", "hi")
    base.turn_on_wifi()
    assert "full" in refused(messages.send_message, "Eve", "Frank", "hi")  # 6 stored messages
    assert messages.get_latest_message_id() == {"message_id": 4}  # by date, not by id
    assert messages.get_earliest_message_id() == {"message_id": 3}
    messages.delete_message(4)
    assert "unknown user" in refused(messages.send_message, "Eve", "Zed", "hi")
    assert messages.send_message("eve", "Frank", "hi") == {"status": "sent", "message_id": 7}
    assert messages.state()["inbox"]["7"] == {"sender_id": "USR100", "receiver_id": "USR101", "message": "hi"}
    assert messages.get_latest_message_id() == {"message_id": 7}  # undated = sent now
    assert "no message" in refused(messages.delete_message, 4)
    assert [m["message_id"] for m in messages.search_messages("Isaac", "CALL")] == [5]
    assert messages.view_messages_between_users("Grace", "Helen")[0]["message_id"] == 3


def test_reminders():
    base, _, reminders, _ = phone(logged_in=False)
    assert "login_device" in refused(reminders.add_reminder, "t", "d", "2024-07-15 09:30")
    base.login_device()
    assert "YYYY-MM-DD HH:MM" in refused(reminders.add_reminder, "t", "d", "tomorrow 9am")
    assert reminders.add_reminder("Meeting", "Room 1", "2024-06-11 16:00") == {"status": "added", "reminder_id": 4}
    assert reminders.state()["reminder_list"]["4"] == {"reminder_id": 4, "title": "Meeting", "description": "Room 1",
                                                       "time": "2024-06-11 16:00", "notified": False}
    assert reminders.view_reminder_by_title("to-do list")[0]["reminder_id"] == 1003
    assert [r["reminder_id"] for r in reminders.search_reminders("checkup")] == [1001]
    assert "no reminder" in refused(reminders.view_reminder_by_title, "Nothing")


def test_food_orders_and_balance():
    base, _, _, food = phone(wifi=False)
    assert "turn_on_wifi" in refused(food.login_food_platform, "Jack", "password654")
    base.turn_on_wifi()
    assert "wrong password" in refused(food.login_food_platform, "Jack", "nope")
    assert "not logged in" in refused(food.check_balance, "Jack")
    assert "not logged in" in refused(food.add_food_delivery_order, "Jack", "Jiutian BBQ",
                                      [{"product": "Grilled Pork Belly", "quantity": 1}])
    food.login_food_platform("Jack", "password654")
    assert food.check_balance("Jack") == {"user_name": "Jack", "balance": 120.0}
    affordable = [p["product"] for p in food.get_products("Jiutian BBQ") if p["price"] <= 120]
    assert affordable == ["Grilled Pork Belly"]
    assert "insufficient balance" in refused(food.add_food_delivery_order, "Jack", "Jiutian BBQ",
                                             [{"product": "Beef Short Ribs", "quantity": 1}])
    assert "unknown product" in refused(food.add_food_delivery_order, "Jack", "Jiutian BBQ",
                                        [{"product": "Pork Belly", "quantity": 1}])
    food.add_food_delivery_order("Jack", "jiutian bbq", [{"product": "grilled pork belly", "quantity": 1}])
    line = {"product": "Grilled Pork Belly", "quantity": 1, "price_per_unit": 78.0}
    assert food.state()["orders"] == [{"user_name": "Jack", "merchant_name": "Jiutian BBQ", "total_price": 78.0,
                                       "items": [line]}]
    assert food.check_balance("Jack")["balance"] == 42.0 and food.logged_in_users == ["Jack"]


def test_travel_booking_modification_and_cancellation():
    travel = Travel()
    assert "wrong password" in refused(travel.reserve_flight, "user2", "x", "CA1234", "Economy Class", "bank", 1)
    booked = travel.reserve_flight("user2", "password456", "CA1234", "economy", "bank", 1)
    assert booked["reservation_id"] == "res_5" and travel.users["user2"]["bank_balance"] == 6800.0
    assert travel.reservations[-1] == {"reservation_id": "res_5", "user_id": "user2", "flight_no": "CA1234",
                                       "payment_method": "bank", "cabin": "Economy Class", "baggage": 1}
    # gold member, economy: 3 free bags, 50 per extra one; business fares exceed her remaining balance
    travel.reserve_flight("user3", "password789", "MU3561", "Economy Class", "bank", 4)
    assert travel.users["user3"]["bank_balance"] == 5000.0 - 1550.0
    assert "insufficient bank balance" in refused(travel.reserve_flight, "user3", "password789", "MU1566",
                                                  "Business Class", "bank", 1)
    # modify: same route only; the fare difference is charged or refunded
    assert "reservation is for" in refused(travel.modify_flight, "user1", "res_2", new_flight_no="CA1234")
    assert "does not belong" in refused(travel.modify_flight, "user2", "res_2", new_flight_no="CZ4321")
    travel.modify_flight("user1", "res_2", new_flight_no="CZ4352", new_cabin="Economy Class")
    assert travel.users["user1"]["bank_balance"] == 51100.0
    assert travel.reservations[1]["flight_no"] == "CZ4352" and travel.reservations[1]["origin"] == "Shanghai"
    travel.cancel_reservation("user2", "res_5", "schedule change")
    assert travel.users["user2"]["bank_balance"] == 8000.0
    assert "res_5" not in [r["reservation_id"] for r in travel.reservations]
    [pair] = travel.find_transfer_flights("Beijing", "Nanjing", "Shenzhen")
    assert (pair["first_flight"]["flight_no"], pair["second_flight"]["flight_no"]) == ("MU3561", "CZ1765")
    assert isinstance(travel.get_flight_details("Beijing", "Shenzhen"), str)  # no direct flight


# ---------------------------------------------------------------- environment, hostile calls, episodes

DOCS = [
    {"name": "turn_on_wifi", "description": "Turn on WiFi.",
     "parameters": {"type": "dict", "required": [], "properties": {}}},
    {"name": "delete_message", "description": "Delete a message.", "parameters": {
        "type": "dict", "required": ["message_id"],
        "properties": {"message_id": {"type": "integer", "description": "id"}}}},
    {"name": "get_earliest_message_id", "description": "Earliest id.",
     "parameters": {"type": "dict", "properties": {}}},
    {"name": "send_message", "description": "Send a message.", "parameters": {
        "type": "dict", "required": ["sender_name", "receiver_name", "message"],
        "properties": {k: {"type": "string", "description": k} for k in ("sender_name", "receiver_name", "message")}}},
    {"name": "add_food_delivery_order", "description": "Order food.", "parameters": {
        "type": "dict", "required": ["username", "merchant_name", "items"], "properties": {
            "username": {"type": "string"}, "merchant_name": {"type": "string"},
            "items": {"type": "list", "items": {"type": "dict", "required": ["product", "quantity"], "properties": {
                "product": {"type": "string"}, "quantity": {"type": "integer"}}}}}}},
    {"name": "teleport", "description": "Offered but not implemented.",
     "parameters": {"type": "dict", "properties": {}}},
]
MILESTONES = [ToolCall("turn_on_wifi", {}), ToolCall("get_earliest_message_id", {}),
              ToolCall("delete_message", {"message_id": 3}),
              ToolCall("send_message", {"sender_name": "Grace", "receiver_name": "Frank", "message": "Lunch?"})]


def synthetic_task(kind: str) -> ACETask:
    config = {"BaseApi": {"wifi": False, "logged_in": True}}
    task = ACETask(id="synthetic", kind=kind, question="You are Grace. Ask Frank to lunch.", functions=tuple(DOCS),
                   involved_classes=("BaseApi", "MessageApi"), initial_config=config, ground_truth={},
                   milestones=(tuple((c,) for c in MILESTONES),))
    env = ACEEnvironment(task)
    for c in MILESTONES:
        env.call_tool(c.name, dict(c.arguments))
    return dataclasses.replace(task, ground_truth=env.final_state())


def test_tools_are_openai_function_schemas():
    tasks = load_acebench("multi_step", DATA) + load_acebench("multi_turn", DATA) if DATA.is_dir() else []
    docs = {d["name"]: d for t in tasks for d in t.functions} or {d["name"]: d for d in DOCS}
    tools = ACEEnvironment(dataclasses.replace(synthetic_task("multi_step"), functions=tuple(docs.values()))).tools

    def check(schema):
        assert schema.get("type") in {"object", "array", "string", "integer", "number", "boolean"}
        if schema["type"] == "object":
            assert set(schema.get("required", [])) <= set(schema.get("properties", {}))
            for sub in schema.get("properties", {}).values():
                check(sub)
        if schema["type"] == "array":
            check(schema["items"])

    for tool in tools:
        assert tool["type"] == "function" and set(tool["function"]) == {"name", "description", "parameters"}
        check(tool["function"]["parameters"])
        json.dumps(tool)
    if "reserve_flight" in docs:  # the doc requires "payment_methods" but defines "payment_method"
        [reserve] = [t for t in tools if t["function"]["name"] == "reserve_flight"]
        assert "payment_method" in reserve["function"]["parameters"]["required"]


@pytest.mark.parametrize("name, arguments, expected", [
    ("launch_rockets", {}, "unknown function"),
    ("teleport", {}, "not available"),
    ("delete_message", {}, "missing required argument 'message_id'"),
    ("delete_message", {"message_id": "3"}, "message_id must be an integer"),
    ("delete_message", {"message_id": True}, "message_id must be an integer"),
    ("delete_message", {"message_id": 3, "force": True}, "unexpected argument 'force'"),
    ("delete_message", ["3"], "arguments must be an object"),
    ("send_message", {"sender_name": "Grace", "receiver_name": None, "message": "x"}, "must be a string"),
    ("add_food_delivery_order", {"username": "Eve", "merchant_name": "Heytea", "items": "tea"},
     "items must be an array"),
    ("add_food_delivery_order", {"username": "Eve", "merchant_name": "Heytea", "items": [{"product": "Tea"}]},
     "missing required argument 'quantity' in items[0]"),
    ("add_food_delivery_order", {"username": "Eve", "merchant_name": "Heytea",
                                 "items": [{"product": "Tea", "quantity": "two"}]},
     "items[0].quantity must be an integer"),
    ("send_message", {"sender_name": "Grace", "receiver_name": "Frank", "message": "x"}, "turn_on_wifi"),
    ("delete_message", {"message_id": 99}, "no message with id 99"),
])
def test_hostile_calls_become_error_observations(name, arguments, expected):
    env = ACEEnvironment(synthetic_task("multi_step"))
    env.reset()
    observation = env.call_tool(name, arguments)
    assert observation.startswith("Error") and expected in observation
    assert env.executed == []


def test_random_garbage_never_raises():
    rng = random.Random(0)
    junk = [None, -1, 0, 2.5, 1e300, "", "x" * 10_000, [], [{}], {"a": {"b": []}}, True, "3", [{"product": 1}]]
    env = ACEEnvironment(synthetic_task("multi_step"))
    env.reset()
    for _ in range(500):
        name = rng.choice([d["name"] for d in DOCS] + ["", "__init__", "state"])
        keys = ["message_id", "sender_name", "receiver_name", "message", "items", "username", "merchant_name", "zzz"]
        arguments = {k: rng.choice(junk) for k in rng.sample(keys, rng.randint(0, 4))}
        assert isinstance(env.call_tool(name, arguments), str)


def test_multi_step_episode():
    task = synthetic_task("multi_step")
    env = ACEEnvironment(task, max_nudges=2)
    messages, tools = env.reset()
    assert messages == [{"role": "system", "content": AGENT_SYSTEM_PROMPT}, {"role": "user", "content": task.question}]
    assert [t["function"]["name"] for t in tools] == [d["name"] for d in DOCS]
    env.call_tool("turn_on_wifi", {})
    [nudge] = env.reply("Let me think about what to do next.")
    assert nudge["role"] == "user" and TASK_COMPLETED in nudge["content"]
    for c in MILESTONES[1:]:
        env.call_tool(c.name, dict(c.arguments))
    assert env.reply(f"{TASK_COMPLETED}") is None and env.reply("more?") is None
    assert env.score() == {"reward": 1.0, "end_to_end": 1.0, "process": 1.0}
    # nudges run out: the episode ends
    env = ACEEnvironment(task, max_nudges=2)
    env.reset()
    assert env.reply("hmm") and env.reply("hmm") and env.reply("hmm") is None
    assert env.score() == {"reward": 0.0, "end_to_end": 0.0, "process": 0.0}


class ScriptedUser:
    """Plays Grace: states the goal, answers one question, ends when the agent reports success."""

    def __init__(self):
        self.seen: list[list[dict[str, str]]] = []

    def __call__(self, messages):
        self.seen.append(messages)
        last = messages[-1]["content"]
        if last == OPENING:
            return "Hi, I'd like to send a message to Frank."
        if "what should" in last.lower():
            return "Please write: Lunch?"
        return f"Great, thanks! {SIMULATOR_STOP}"


def test_multi_turn_episode_with_scripted_user():
    task, user = synthetic_task("multi_turn"), ScriptedUser()
    with pytest.raises(ValueError, match="user_simulator"):
        ACEEnvironment(task).reset()
    env = ACEEnvironment(task, user_simulator=user)
    messages, _ = env.reset()
    assert messages[0]["content"].startswith(AGENT_SYSTEM_PROMPT) and messages[0]["content"] != AGENT_SYSTEM_PROMPT
    assert messages[1] == {"role": "user", "content": "Hi, I'd like to send a message to Frank."}
    assert task.question in user.seen[0][0]["content"] and SIMULATOR_STOP in user.seen[0][0]["content"]
    assert env.reply("<think>the user wants a message</think>Sure, what should the message say?") == [
        {"role": "user", "content": "Please write: Lunch?"}]
    assert user.seen[-1][-1] == {"role": "user", "content": "Sure, what should the message say?"}  # thinking dropped
    env.call_tool("turn_on_wifi", {})
    env.call_tool("delete_message", {"message_id": 3})
    env.call_tool("send_message", {"sender_name": "Grace", "receiver_name": "Frank", "message": "Lunch?"})
    assert env.reply("Done: the message is sent.") is None  # the user said "finish conversation"
    assert env.score() == {"reward": 1.0, "end_to_end": 1.0, "process": 0.75, "simulator_error": 0.0}


def test_multi_turn_ends_on_task_completed_and_on_simulator_failure():
    env = ACEEnvironment(synthetic_task("multi_turn"), user_simulator=ScriptedUser())
    env.reset()
    assert env.reply(TASK_COMPLETED) is None
    calls = []

    def flaky(messages):
        calls.append(messages)
        if len(calls) > 1:
            raise ConnectionError("endpoint down")
        return "Hello"

    env = ACEEnvironment(synthetic_task("multi_turn"), user_simulator=flaky)
    env.reset()
    assert env.reply("How can I help?") is None
    assert env.score()["simulator_error"] == 1.0 and "endpoint down" in env.simulator_error


def test_a_simulator_failing_at_reset_ends_the_episode_instead_of_raising():
    def down(messages):
        raise ConnectionError("endpoint down")

    env = ACEEnvironment(synthetic_task("multi_turn"), user_simulator=down)
    messages, tools = env.reset()
    assert messages[1] == {"role": "user", "content": ""} and tools
    assert env.call_tool("turn_on_wifi", {}).startswith("Error: the episode is over")
    assert env.reply("Hello?") is None
    assert env.score() == {"reward": 0.0, "end_to_end": 0.0, "process": 0.0, "simulator_error": 1.0}
    assert env.simulator_error == "ConnectionError: endpoint down"


# ---------------------------------------------------------------- process accuracy


def brute_force_process(alternatives, executed):
    """max over paths, in-bracket orders and subsets S of the milestone calls such that S, in order, is a
    subsequence of the executed calls, of |S| / n."""
    def is_subsequence(xs, ys):
        it = iter(ys)
        return all(any(x == y for y in it) for x in xs)

    best = 0.0
    for alternative in alternatives:
        n = sum(map(len, alternative))
        for order in itertools.product(*(itertools.permutations(g) for g in alternative)):
            flat = [c for g in order for c in g]
            for size in range(n + 1):
                if any(is_subsequence([flat[i] for i in subset], executed)
                       for subset in itertools.combinations(range(n), size)):
                    best = max(best, size / n)
    return best


def test_process_accuracy_matches_brute_force():
    rng = random.Random(1)
    alphabet = [ToolCall("f", {"x": i % 3}) if i < 4 else ToolCall("g", {}) for i in range(6)]
    for _ in range(300):
        alternatives = [[tuple(rng.choice(alphabet) for _ in range(rng.choice([1, 1, 2])))
                         for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 2))]
        executed = [rng.choice(alphabet) for _ in range(rng.randint(0, 7))]
        assert process_accuracy(alternatives, executed) == pytest.approx(brute_force_process(alternatives, executed))
    assert process_accuracy([], []) == 1.0


def test_process_accuracy_counts_successful_calls_and_ignores_defaults():
    task = ACETask(id="t", kind="multi_step", question="q", involved_classes=("Travel",), initial_config={},
                   ground_truth={}, functions=(
                       {"name": "modify_flight", "description": "", "parameters": {
                           "type": "dict", "required": ["user_id", "reservation_id"], "properties": {
                               "user_id": {"type": "string"}, "reservation_id": {"type": "string"},
                               "new_flight_no": {"type": "string", "default": None},
                               "add_baggage": {"type": "integer", "default": 0}}}},),
                   milestones=(((ToolCall("modify_flight", {"user_id": "user1", "reservation_id": "res_2",
                                                            "new_flight_no": "CZ4321"}),),),))
    env = ACEEnvironment(task)
    env.reset()
    assert env.call_tool("modify_flight", {"user_id": "user1", "reservation_id": "res_9",
                                           "new_flight_no": "CZ4321"}).startswith("Error")
    assert env.score()["process"] == 0.0  # a refused call does not count
    env.call_tool("modify_flight", {"user_id": "user1", "reservation_id": "res_2", "new_flight_no": "CZ4321",
                                    "add_baggage": 0.0})
    assert env.score()["process"] == 1.0


# ---------------------------------------------------------------- user simulators


def test_strip_thinking():
    assert strip_thinking("<think>plan</think>\nHello") == "Hello"
    assert strip_thinking("reasoning...</think>Hi") == "Hi"
    assert strip_thinking("<think>never closed") == ""


def test_openai_compatible_user_against_local_endpoint(monkeypatch):
    requests = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            requests.append((self.path, self.headers.get("Authorization"),
                             json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            body = json.dumps({"id": "1", "object": "chat.completion", "created": 0, "model": "m", "choices": [
                {"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "<think>hm</think>I want lunch."}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("SIM_KEY", "secret")
        user = OpenAICompatibleUser(f"http://127.0.0.1:{server.server_port}/v1", "sim-model", api_key_env="SIM_KEY",
                                    temperature=0.3, max_tokens=64, max_retries=0)
        assert user([{"role": "user", "content": "hi"}]) == "I want lunch."
    finally:
        server.shutdown()
    [(path, auth, body)] = requests
    assert path == "/v1/chat/completions" and auth == "Bearer secret"
    assert body["model"] == "sim-model" and body["temperature"] == 0.3 and body["max_tokens"] == 64
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_local_model_user_with_fake_backend():
    from lopd.core.rollout import encode_prompt
    from lopd.core.sampling import Completion, SamplingParams

    class Tokenizer:
        """Renders "role: content" lines; one token per character."""
        chat_template = ""

        def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False, return_dict=False, **kw):
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: " * add_generation_prompt
            ids = [ord(c) for c in text]
            return ({"input_ids": ids} if return_dict else ids) if tokenize else text

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) for c in text]}

        def decode(self, ids, skip_special_tokens=False):
            assert skip_special_tokens
            return "<think>x</think>" + "".join(map(chr, ids))

    class Backend:
        def __init__(self):
            self.calls = []

        def generate(self, prompts, params, seed):
            self.calls.append((prompts, params, seed))
            return [Completion(token_ids=[ord("o"), ord("k")], logprobs=[0.0, 0.0], stopped=True)]

    tokenizer, backend, params = Tokenizer(), Backend(), SamplingParams(max_new_tokens=32)
    user = LocalModelUser(backend, tokenizer, params, seed=3)
    conversation = [{"role": "system", "content": "abc"}, {"role": "user", "content": "hello"}]
    assert user(conversation) == "ok"
    user(conversation)
    user(conversation + [{"role": "assistant", "content": "x"}])
    (prompts, used, s1), (_, _, s2), (_, _, s3) = backend.calls
    assert prompts == [encode_prompt(tokenizer, conversation)] and used is params
    assert s1 == s2 != s3  # seeded by the conversation, not by the call count
