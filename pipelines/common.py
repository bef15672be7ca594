"""Shared plumbing for the stage CLIs: config loading, output paths, the method registry."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from baselines.grpo import GRPO
from baselines.opsd import OPSD
from baselines.sdft import SDFT
from baselines.sdpo import SDPO
from baselines.skill_sd import SkillSD
from evaluation.agentic import benchmarks as agentic_benchmarks
from evaluation.coding import taco
from lopd.latent.composer import FRAMINGS
from lopd.core.config import KNOWN_METHODS, REPO_ROOT, Config, ConfigError, load_config, resolve_merged
from lopd.latent.method import LOPD
from baselines.pool import POOL_FILE
from lopd.core.multiturn import multi_turn
from lopd.core.rollout import Rollouts, ScoreFn, Task, single_turn
from lopd.core.methods import Method, Vanilla

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


@dataclass(frozen=True)
class Domain:
    """Where a training domain's stage outputs live, and how its privileged context is framed."""

    name: str
    bank: Path
    pool: Path
    composer: Path
    checkpoints: Path
    metrics: Path
    results: Path
    framing: tuple[str, str]
    trace_of: Callable[[str], str]
    """A successful response -> its bank trace (agentic responses already are observation-lite traces)."""
    max_eval_containment: float
    """The bank/pool overlap guard rejects a training entry holding more than this share of an evaluation
    task's word 8-grams. Agentic tasks are generated from per-environment templates, so train and test tasks
    of one environment share phrasing by design (envscaler-mini: up to 0.75); only near-copies are rejected."""


DOMAINS = {
    "code": Domain("code", BANK_DIR, POOL_DIR, COMPOSER_DIR, CHECKPOINTS_DIR, METRICS_DIR, RESULTS_DIR,
                   FRAMINGS["coding"], taco.extract_code, 0.5),
    "agentic": Domain("agentic", REPO_ROOT / "bank_agentic", REPO_ROOT / "pool_agentic",
                      CHECKPOINTS_DIR / "agentic" / "composer", CHECKPOINTS_DIR / "agentic", METRICS_DIR / "agentic",
                      RESULTS_DIR / "agentic", FRAMINGS["agentic"], lambda response: response, 0.9),
}


def stage_name(stage: str, domain: str, method: str | None = None) -> str:
    """The DVC stage a CLI run stands for (its MLflow run name): `train@grpo`, `train_agentic@grpo`, ..."""
    name = stage if domain == "code" else f"{stage}_{domain}"
    return f"{name}@{method}" if method else name


DOMAIN_ARG = {"default": "code", "choices": list(DOMAINS), "help": "training domain: code (TACO) or agentic (EnvScaler)"}


def for_domain(cfg: Config, domain: str) -> Config:
    """The config a domain's stages run with: the agentic domain takes its own step budget, rollouts per step
    and bank threshold from `agentic` (null keeps the shared value)."""
    if domain == "code":
        return cfg
    a = cfg.agentic
    raw = cfg.to_dict()
    raw["train"]["rollouts_per_step"] = a.rollouts_per_step or cfg.train.rollouts_per_step
    raw["bank"]["success_threshold"] = a.bank_success_threshold
    raw["bank"]["query_instruction"] = a.query_instruction
    raw["bank"]["samples_per_task"] = a.bank_samples_per_task or cfg.bank.samples_per_task
    if a.steps is not None:
        for name in KNOWN_METHODS:
            if "steps" in raw[name]:
                raw[name]["steps"] = a.steps
    return resolve_merged(raw)


@contextlib.contextmanager
def training_domain(cfg: Config, domain: str) -> Iterator[tuple[list[Task], Rollouts, str]]:
    """A domain's training split as chat tasks, how to roll them out and score them, and the data's name."""
    if domain == "code":
        tasks, score = coding_training_tasks(cfg)
        yield tasks, single_turn(score), "TACO" if cfg.data.taco_path else "built-in coding set"
        return
    a = cfg.agentic
    stack = contextlib.ExitStack()
    try:
        tasks, make_env, source = stack.enter_context(agentic_benchmarks.training_tasks(cfg))
    except (OSError, ValueError) as err:
        sys.exit(f"error: agentic training tasks: {err}")
    with stack:
        yield tasks, multi_turn(make_env, a.max_steps, a.max_context_tokens, a.max_step_tokens), source


def build_method(name: str, cfg: Config, domain: str = "code") -> Method:
    d = DOMAINS[domain]
    methods = {"vanilla": lambda: Vanilla(), "grpo": lambda: GRPO(cfg.grpo),
               "skill_sd": lambda: SkillSD(cfg, d.bank), "opsd": lambda: OPSD(cfg, d.pool / POOL_FILE),
               "sdpo": lambda: SDPO(cfg), "sdft": lambda: SDFT(cfg, d.pool / POOL_FILE),
               "lopd": lambda: LOPD(cfg, d.bank, d.composer, d.framing, trace_of=d.trace_of)}
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
