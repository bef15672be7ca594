"""Shared plumbing for the stage CLIs: config loading, output paths, the method registry."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from baselines.grpo import GRPO
from baselines.opsd import OPSD
from baselines.sdft import SDFT
from baselines.sdpo import SDPO
from baselines.skill_sd import SkillSD
from evaluation.coding import taco
from lopd.composer import FRAMINGS
from lopd.config import REPO_ROOT, Config, ConfigError, load_config
from lopd.lopd_method import LOPD
from lopd.pool import POOL_FILE
from lopd.rollout import ScoreFn, Task
from lopd.methods import Method, Vanilla

BASE_MODEL_DIR = REPO_ROOT / "models" / "base"
BANK_DIR = REPO_ROOT / "bank"
COMPOSER_DIR = REPO_ROOT / "checkpoints" / "composer"
POOL_DIR = REPO_ROOT / "pool"
CHECKPOINTS_DIR = REPO_ROOT / "checkpoints"
METRICS_DIR = REPO_ROOT / "metrics"
RESULTS_DIR = REPO_ROOT / "results"


def parse_args(description: str, **arguments: dict[str, Any]) -> tuple[argparse.Namespace, Config]:
    """Parse `--params` plus the stage's own arguments; a bad config exits with its one-line error."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default=str(REPO_ROOT / "params.yaml"), help="params file (default: params.yaml)")
    for name, spec in arguments.items():
        parser.add_argument(f"--{name}", **spec)
    args = parser.parse_args()
    try:
        cfg = load_config(args.params)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    return args, cfg


def build_method(name: str, cfg: Config) -> Method:
    methods = {"vanilla": lambda: Vanilla(), "grpo": lambda: GRPO(cfg.grpo),
               "skill_sd": lambda: SkillSD(cfg, BANK_DIR), "opsd": lambda: OPSD(cfg, POOL_DIR / POOL_FILE),
               "sdpo": lambda: SDPO(cfg), "sdft": lambda: SDFT(cfg, POOL_DIR / POOL_FILE),
               "lopd": lambda: LOPD(cfg, BANK_DIR, COMPOSER_DIR, FRAMINGS["coding"], trace_of=taco.extract_code)}
    if name not in methods:
        sys.exit(f"error: unknown method {name!r} (known: {', '.join(methods)})")
    return methods[name]()


def coding_tasks(cfg: Config) -> list[taco.CodingTask]:
    """The coding training split: a user's TACO file, else the built-in set."""
    try:
        return taco.load_taco_file(cfg.data.taco_path) if cfg.data.taco_path else taco.load_builtin_tasks()
    except (OSError, ValueError) as err:
        sys.exit(f"error: training tasks: {err}")


def coding_training_tasks(cfg: Config) -> tuple[list[Task], ScoreFn]:
    """The coding training split as chat tasks and its sandboxed reward."""
    coding = coding_tasks(cfg)
    by_id = {t.task_id: t for t in coding}

    def score(tasks: list[Task], completions: list[str]) -> list[float]:
        with ThreadPoolExecutor(cfg.eval.workers) as pool:
            return list(pool.map(lambda tc: taco.reward(tc[1], by_id[tc[0].task_id]), zip(tasks, completions)))

    return [Task(t.task_id, taco.build_messages(t)) for t in coding], score


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
