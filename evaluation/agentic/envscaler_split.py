"""The EnvScaler-format data as training sees it: the fixed train/test split (official files or the built-in
envscaler-mini) and the train split as chat tasks with a fresh-environment factory.

Training tasks carry the very messages and tools their environment opens with, so a teacher's privileged
prompt is always the student's prompt plus the privileged context.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

from evaluation.agentic import envscaler, envscaler_mini
from lopd.core.config import Config, resolve_path
from lopd.core.multiturn import ToolEnvironment
from lopd.core.rollout import Task


@dataclass(frozen=True)
class EnvScalerData:
    envs: dict[str, envscaler.EnvItem]
    train: list[envscaler.TaskItem]
    test: list[envscaler.TaskItem]
    source: str
    """Which EnvScaler data a run used, for the tables: the built-in suite's name or the official files."""


def envscaler_data(cfg: Config) -> EnvScalerData:
    """The configured EnvScaler-format data, split into train and test (fixed, task-disjoint)."""
    a = cfg.agentic
    if a.envscaler_envs:
        envs, tasks = envscaler.load_envscaler(resolve_path(a.envscaler_envs), resolve_path(a.envscaler_tasks))
        source = f"EnvScaler ({a.envscaler_tasks})"
    else:
        envs, tasks = envscaler.items_from_dicts(envscaler_mini.env_items(), envscaler_mini.task_items())
        source = f"{envscaler_mini.SUITE_NAME} (built-in substitute)"
    train, test = envscaler.split_tasks(tasks, a.test_fraction)
    return EnvScalerData(envs, train, test, source)


def task_of(task_id: str, env: ToolEnvironment) -> Task:
    """A chat task holding exactly what `env` opens the episode with."""
    try:
        messages, tools = env.reset()
    finally:
        env.close()
    return Task(task_id, messages, tuple(tools))


@contextlib.contextmanager
def training_tasks(cfg: Config) -> Iterator[tuple[list[Task], Callable[[Task], ToolEnvironment], str]]:
    """The EnvScaler-format train split as chat tasks, a fresh-environment factory for rollouts, and the data's
    name; the environments' worker processes live as long as the context."""
    data = envscaler_data(cfg)
    by_id = {t.task_id: t for t in data.train}
    with envscaler.EnvScalerSuite(data.envs, data.train) as suite:
        tasks = [task_of(t.task_id, suite.make(t)) for t in data.train]
        yield tasks, lambda task: suite.make(by_id[task.task_id]), data.source
