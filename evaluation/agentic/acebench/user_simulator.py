"""The simulated user of ACEBench multi-turn tasks.

A `UserSimulator` is any callable taking chat messages and returning the user's next message. The
conversation it sees is the user's side of the dialogue: a system prompt built from the task's
instructions (`simulator_system_prompt`), then the agent's messages as "user" turns and its own past
answers as "assistant" turns. It ends the dialogue by writing `SIMULATOR_STOP`.

Two implementations: `OpenAICompatibleUser` (any /v1/chat/completions endpoint) and `LocalModelUser`
(a local model through our rollout backend). Tests use plain functions.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Callable

UserSimulator = Callable[[list[dict[str, str]]], str]

SIMULATOR_STOP = "finish conversation"
"""Written by the simulated user when its goal is met (or cannot be): the episode is over."""

OPENING = "Hello! How can I help you today?"
"""The assistant's greeting the simulated user answers first (it never reaches the agent)."""


def simulator_system_prompt(instructions: str) -> str:
    return (
        "You are role-playing a user who is chatting with an AI assistant. The assistant can use tools to act "
        "for you (your phone and its apps, or a flight booking system); you cannot use them yourself.\n\n"
        f"Your situation and goal:\n{instructions}\n\n"
        "How to behave:\n"
        "- Write only the user's next message: short, natural, in the first person. Never act as the assistant "
        "and never write tool calls.\n"
        "- First say what you want. After that, give a detail (names, account, password, preferences) only when "
        "the assistant asks for it or clearly needs it. Use only details from your situation above; never "
        "invent others.\n"
        "- When the assistant asks you to choose or confirm something, answer as your goal says.\n"
        f"- When the assistant has done everything in your goal, or says it cannot be done, reply with exactly: "
        f"{SIMULATOR_STOP}"
    )


def is_finished(text: str) -> bool:
    return SIMULATOR_STOP in text.casefold()


_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


def strip_thinking(text: str) -> str:
    """Drop `<think>...</think>` blocks (an unterminated one runs to the end) and a stray `</think>` prefix."""
    text = _THINK.sub("", text)
    return text.split("</think>")[-1].strip()


class OpenAICompatibleUser:
    """A user played by a model behind an OpenAI-compatible chat completions endpoint (OpenAI, vLLM,
    SGLang...). The API key is read from `api_key_env` (a placeholder is sent when unset, as local
    servers need none)."""

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", temperature: float = 0.0,
                 max_tokens: int = 512, timeout: float = 60.0, max_retries: int = 2) -> None:
        from openai import OpenAI

        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens
        self.client = OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY", timeout=timeout,
                             max_retries=max_retries)

    def __call__(self, messages: list[dict[str, str]]) -> str:
        response = self.client.chat.completions.create(model=self.model, messages=messages,
                                                       temperature=self.temperature, max_tokens=self.max_tokens)
        return strip_thinking(response.choices[0].message.content or "")


class LocalModelUser:
    """A user played by a local model in-process through our sampling API (`lopd.core.sampling`).

    Sampling is seeded by `seed` and the conversation itself, so the same dialogue gets the same answer
    whatever order episodes run in.
    """

    def __init__(self, backend: Any, tokenizer: Any, params: Any, seed: int = 0) -> None:
        self.backend, self.tokenizer, self.params, self.seed = backend, tokenizer, params, seed

    def __call__(self, messages: list[dict[str, str]]) -> str:
        from lopd.core.rollout import encode_prompt

        prompt = encode_prompt(self.tokenizer, messages)
        digest = hashlib.sha256(json.dumps([self.seed, messages], sort_keys=True).encode()).digest()
        [completion] = self.backend.generate([prompt], self.params, int.from_bytes(digest[:8], "big") % 2**63)
        return strip_thinking(self.tokenizer.decode(completion.token_ids, skip_special_tokens=True))
