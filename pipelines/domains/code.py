"""The code domain: TACO-format coding tasks (a user's file or the built-in set), single-turn, sandboxed reward."""

from __future__ import annotations

import contextlib
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from evaluation.coding import taco
from lopd.core.config import Config, resolve_path
from lopd.core.rollout import ScoreFn, Task, TrainingSplit, hold_out, single_turn


def check_sandbox() -> None:
    """Raise SandboxUnavailable unless the sandbox scores a known-correct program right and a known-wrong one wrong
    (`taco.check_sandbox`): a stage that scores code calls it before any work."""
    taco.check_sandbox()


def coding_tasks(cfg: Config) -> list[taco.CodingTask]:
    """The coding training split: a user's TACO file, else the built-in set."""
    try:
        return (taco.load_taco_file(resolve_path(cfg.data.taco_path)) if cfg.data.taco_path
                else taco.load_builtin_tasks())
    except (OSError, ValueError) as err:
        sys.exit(f"error: training tasks: {err}")


def coding_training_tasks(cfg: Config) -> tuple[list[Task], ScoreFn]:
    """The coding training split as chat tasks (without the validation tasks) and its sandboxed reward."""
    tasks, _, score = _split(cfg)
    return tasks, score


def _split(cfg: Config) -> tuple[list[Task], list[Task], ScoreFn]:
    """(training tasks, validation tasks, reward) of the coding set."""
    coding = coding_tasks(cfg)
    by_id = {t.task_id: t for t in coding}

    def score(tasks: list[Task], completions: list[str]) -> list[float]:
        with ThreadPoolExecutor(cfg.eval.workers) as pool:
            return list(pool.map(lambda tc: taco.reward(tc[1], by_id[tc[0].task_id]), zip(tasks, completions)))

    tasks = [Task(t.task_id, taco.build_messages(t)) for t in coding]
    try:
        training, validation = hold_out(tasks, cfg.data.validation_tasks)
    except ValueError as err:
        sys.exit(f"error: data.validation_tasks: {err}")
    return training, validation, score


@contextlib.contextmanager
def training_tasks(cfg: Config) -> Iterator[TrainingSplit]:
    tasks, validation, score = _split(cfg)
    yield TrainingSplit(tasks, single_turn(score), "TACO" if cfg.data.taco_path else "built-in coding set", validation)
