"""The agentic domain: EnvScaler-format tool-use tasks (official files or the built-in envscaler-mini), multi-turn."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from evaluation.agentic import envscaler, envscaler_split
from lopd.core.config import Config
from lopd.core.multiturn import multi_turn
from lopd.core.rollout import TrainingSplit


def check_sandbox() -> None:
    """Raise SandboxUnavailable unless the EnvScaler worker runs a known environment right
    (`envscaler.check_sandbox`): a stage that plays tool-use tasks calls it before any work."""
    envscaler.check_sandbox()


@contextlib.contextmanager
def training_tasks(cfg: Config) -> Iterator[TrainingSplit]:
    """The EnvScaler-format training split; no validation tasks (data.validation_tasks is the code domain's: the
    agentic domain's held-out test split is its evaluation)."""
    a = cfg.agentic
    stack = contextlib.ExitStack()
    try:
        tasks, make_env, source = stack.enter_context(envscaler_split.training_tasks(cfg))
    except (OSError, ValueError) as err:
        sys.exit(f"error: agentic training tasks: {err}")
    with stack:
        yield TrainingSplit(tasks, multi_turn(make_env, a.max_steps, a.max_context_tokens, a.max_step_tokens,
                                              tool_call_format=a.tool_call_format), source, [])
