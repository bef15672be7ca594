"""`ACEEnvironment`: one ACEBench agent task as a `lopd.core.multiturn.ToolEnvironment`, and the milestone replay.

Multi-step: the opening user message is the question. A step without a tool call that contains
TASK_COMPLETED ends the episode; any other one gets a short nudge, and after `max_nudges` nudges in a
row (no tool call in between) the episode ends.

Multi-turn: a user simulator plays the user from the task's instructions; the opening user message is
its first line. Each agent step without a tool call is sent to it and its answer is the next user
message. The episode ends when the simulator writes SIMULATOR_STOP, when the agent writes
TASK_COMPLETED, when the simulator fails (recorded as "simulator_error" in the score; at reset the agent
then gets an empty opening message and the episode is over at its first reply), or at the driver's step
cap.
"""

from __future__ import annotations

import json
from typing import Any

from evaluation.agentic.acebench.common import ScenarioApi, ToolError
from evaluation.agentic.acebench.data import ACETask
from evaluation.agentic.acebench.phone import make_phone
from evaluation.agentic.acebench.schema import ArgumentError, canonical_call, to_openai_tool, validate_arguments
from evaluation.agentic.acebench.scoring import process_accuracy
from evaluation.agentic.acebench.travel import make_travel
from evaluation.agentic.acebench.user_simulator import (
    OPENING,
    UserSimulator,
    is_finished,
    simulator_system_prompt,
    strip_thinking,
)
from lopd.core.multiturn import AGENT_SYSTEM_PROMPT, TASK_COMPLETED, ToolCall

MULTI_TURN_ROLE = (
    "You are serving a user in a conversation. A message of yours without a tool call is shown to the user, "
    "whose answer comes back as the next message. Ask the user for information you need and cannot get from "
    "the tools instead of guessing it."
)
NUDGE = (
    "No tool call was found in your last message. If the task is finished, respond only with "
    f"'{TASK_COMPLETED}'; otherwise continue by calling one of the tools."
)


class ACEEnvironment:
    def __init__(self, task: ACETask, user_simulator: UserSimulator | None = None, max_nudges: int = 3) -> None:
        self.task, self.user_simulator, self.max_nudges = task, user_simulator, max_nudges
        self.tools = [to_openai_tool(doc) for doc in task.functions]
        self._parameters = {t["function"]["name"]: t["function"]["parameters"] for t in self.tools}
        self._start()

    def _start(self) -> None:
        """A fresh scenario state and an empty episode record."""
        apis = make_travel() if "Travel" in self.task.involved_classes else make_phone()
        self.apis: dict[str, ScenarioApi] = {api.NAME: api for api in apis}
        for name, overrides in self.task.initial_config.items():
            if name not in self.apis:
                raise ValueError(f"{self.task.id}: initial_config names {name!r}, not part of this scenario")
            self.apis[name].configure(overrides)
        self._methods = {tool: getattr(api, tool) for api in apis for tool in api.TOOLS}
        self.executed: list[ToolCall] = []
        """Calls that ran without error, in order, in the form process accuracy compares."""
        self.user_dialogue: list[dict[str, str]] = []
        """The simulator's side of the conversation (multi-turn)."""
        self.simulator_error: str | None = None
        self.done = False
        self._nudges = 0

    # ---- ToolEnvironment protocol

    def reset(self) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        self._start()
        if self.task.kind == "multi_step":
            return [{"role": "system", "content": AGENT_SYSTEM_PROMPT},
                    {"role": "user", "content": self.task.question}], self.tools
        if self.user_simulator is None:
            raise ValueError(f"{self.task.id}: multi-turn tasks need a user_simulator")
        self.user_dialogue = [{"role": "system", "content": simulator_system_prompt(self.task.question)},
                              {"role": "user", "content": OPENING}]
        first = self._ask_user()
        return [{"role": "system", "content": f"{AGENT_SYSTEM_PROMPT}\n\n{MULTI_TURN_ROLE}"},
                {"role": "user", "content": first or ""}], self.tools

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self.done:  # only reachable after the simulator failed at reset: the driver stops at reply's None
            return "Error: the episode is over; no more tool calls are executed."
        self._nudges = 0
        if name not in self._parameters:
            return f"Error: unknown function {name!r}; available functions: {', '.join(self._parameters)}"
        if name not in self._methods:
            return f"Error: function {name!r} is not available in this environment"
        try:
            kwargs = validate_arguments(arguments, self._parameters[name])
        except ArgumentError as err:
            return f"Error: invalid arguments for {name}: {err}"
        try:
            result = self._methods[name](**kwargs)
        except ToolError as err:
            return f"Error: {err}"
        except Exception as err:  # a bug or an unforeseen argument combination: still only an observation
            return f"Error: {name} failed ({type(err).__name__}: {err})"
        self.executed.append(canonical_call(ToolCall(name, kwargs), self._parameters[name]))
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    def reply(self, text: str) -> list[dict[str, str]] | None:
        if self.done:
            return None
        if TASK_COMPLETED.casefold() in text.casefold():
            self.done = True
            return None
        if self.task.kind == "multi_step":
            self._nudges += 1
            if self._nudges > self.max_nudges:
                self.done = True
                return None
            return [{"role": "user", "content": NUDGE}]
        self.user_dialogue.append({"role": "user", "content": strip_thinking(text)})
        answer = self._ask_user()
        if answer is None or is_finished(answer):
            self.done = True
            return None
        return [{"role": "user", "content": answer}]

    def score(self) -> dict[str, float]:
        state = self.final_state()
        end_to_end = float(all(state.get(name) == expected for name, expected in self.task.ground_truth.items()))
        milestones = [[[canonical_call(c, self._parameters.get(c.name)) for c in group] for group in alternative]
                      for alternative in self.task.milestones]
        scores = {"reward": end_to_end, "end_to_end": end_to_end,
                  "process": process_accuracy(milestones, self.executed)}
        if self.task.kind == "multi_turn":
            scores["simulator_error"] = float(self.simulator_error is not None)
        return scores

    def close(self) -> None:
        pass

    def _ask_user(self) -> str | None:
        """The simulated user's next message, recorded in its dialogue; None when the simulator failed,
        which ends the episode and is scored as "simulator_error" (an endpoint failure must not end the
        evaluation stage)."""
        try:
            answer = self.user_simulator(list(self.user_dialogue))
        except Exception as err:
            self.simulator_error = f"{type(err).__name__}: {err}"
            self.done = True
            return None
        self.user_dialogue.append({"role": "assistant", "content": answer})
        return answer

    # ---- inspection

    def final_state(self) -> dict[str, dict[str, Any]]:
        """The serialised state of the task's involved classes (our class names)."""
        return {name: self.apis[name].state() for name in self.task.involved_classes}


def replay_ground_truth(task: ACETask, alternative: int = 0) -> dict[str, dict[str, Any]]:
    """Run one milestone path through a fresh environment (errors are observations, as for an agent)
    and return the final state of the involved classes, to compare with `task.ground_truth`."""
    env = ACEEnvironment(task)
    for group in task.milestones[alternative]:
        for call in group:
            env.call_tool(call.name, dict(call.arguments))
    return env.final_state()
