"""ACEBench agent tasks (multi-step: 20, multi-turn: 30) as `lopd.core.multiturn.ToolEnvironment`s.

Public API:

    load_acebench(kind in {"multi_step", "multi_turn"}, data_dir, limit=None) -> list[ACETask]
    ACEEnvironment(task, user_simulator=None, max_nudges=3)      reset / call_tool / reply / score / close
    replay_ground_truth(task, alternative=0) -> dict              final state after a milestone path
    UserSimulator = Callable[[list[dict]], str]; OpenAICompatibleUser(...), LocalModelUser(...)
    SIMULATOR_STOP = "finish conversation"

`data_dir` is an ACEBench language folder (e.g. `<shared>/acebench/data_en`) holding
`data_agent_<kind>.json` and `possible_answer/data_agent_<kind>.json` (JSON lines).

The scenario classes are our own implementation, written from the function docs and the published
tasks and final states (phone.py: BaseApi, MessageApi, ReminderApi, FoodPlatform; travel.py: Travel);
their rules are documented there. Their state serialises as the answers' final states do (class name ->
attributes). Metrics (scoring.py): reward = end_to_end = 1.0 iff the final state of every answered
class equals the published one; process = the longest in-order match between the agent's successful
calls and a milestone path, over its length, maximised over the alternative paths.

Ground truth replay. Replaying the milestone calls through our APIs reproduces the published final
state for 12 of the 20 multi-step and 29 of the 30 multi-turn entries (an entry counts when at least
one of its alternative paths does). The others are inconsistent in the published data, whatever the API
rules: the milestones cannot produce the published final state.

    agent_multi_step_0, _1   The order names product 'Super Supreme' (the menu item, and the answer's
                             order line, is 'Super Supreme Pizza'), and the answer's reminder list has the
                             new reminder in slot "3" *replacing* the 'To-do list' reminder that every other
                             answer keeps (slots 1-3 by default, new reminders from slot 4).
    agent_multi_step_8, _9   Second path only: it never calls login_device although the device starts
                             logged out and the answer has it logged in (the first path reproduces).
    agent_multi_step_12, _13 The path never calls login_food_platform, yet the answer has Helen logged in
                             to the platform and her order placed.
    agent_multi_step_14, _15, _17
                             The path deletes message 3 (get_earliest_message_id) and sends '... 198.0
                             yuan.'; the answer instead lacks message 4 (the *latest*, as the question asks)
                             and holds the text without the final period.
    agent_multi_step_16      As 14, and the path never calls login_device (device starts logged out).
    agent_multi_turn_6       The path never calls login_device (device starts logged out), yet the answer
                             has the device logged in and the reminder added.

These entries are kept and scored like any other: against the published final state (an agent may
still match it, e.g. by deleting the latest message in 14-17 and writing no period) and against the
published milestones (process accuracy). The test suite lists them as expected replay failures.

Ambiguities that replay cannot catch (the entry reproduces, but the question and the answer disagree,
so a faithful agent may fail end-to-end):
    agent_multi_step_19      After deleting the 'call' message the store is no longer full, yet the answer
                             also deletes the latest message (entry 18, the same question, does not).
    agent_multi_turn_12-15   The user is told to send 'The total cost is () yuan.'; the answer has no period.
    agent_multi_turn_28      The user has four bags; the answer books three.
"""

from evaluation.agentic.acebench.data import ACETask, load_acebench
from evaluation.agentic.acebench.env import ACEEnvironment, replay_ground_truth
from evaluation.agentic.acebench.user_simulator import (
                                                        SIMULATOR_STOP,
                                                        LocalModelUser,
                                                        OpenAICompatibleUser,
                                                        UserSimulator,
)

__all__ = ["ACETask", "load_acebench", "ACEEnvironment", "replay_ground_truth", "UserSimulator",
           "OpenAICompatibleUser", "LocalModelUser", "SIMULATOR_STOP"]
