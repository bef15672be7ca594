"""envscaler-mini: our own small, built-in corpus in the EnvScaler data format.

A stand-in for the EnvScaler corpus (RUC-NLPIR/EnvScaler), which lives on a hub we cannot reach. All
environments and tasks here are original. Twelve stateful environments (insurance, logistics,
e-commerce, healthcare, banking, travel, library, HR, real estate, restaurant, telecom, education);
each is one class in `envs/<domain>.py` whose public methods are the tools, with a small initial
state and about 25 tasks generated deterministically from templates x entities in
`tasks/<domain>.py`.

Records (plain dicts, as EnvScaler stores them):
  environment item  env_id, env_class_name, env_class_code (class source), tools (OpenAI function
                    schemas derived from the source, see `schema.py`), environment_introduction and
                    constraints_rules (from the class docstring)
  task item         env_id, env_class_name, task_id, init_config (initial state), task (the
                    instruction), checklist_with_func ([{check_item, check_func}], each check_func
                    the source of `def check_func(final_state) -> bool`), ground_truth (our extra
                    field: the tool calls [{name, arguments}] that solve the task)
  hinted twins      the same tasks again with the internal ids their writes need in the instruction, one write
                    away from solved (`tasks/hinted.py`): our extra fields `tier` ("hinted") and `split_group`
                    (the base task's id, which keeps a twin on its base task's side of the train/test split)

Conventions the classes follow: `Cls(init_config)` or `Cls()` followed by setting each init_config
key as an attribute both give the same instance; tools take keyword arguments and return
{"success": True, "data": ...} or {"success": False, "error": "..."}; the state is the instance's
public attributes (JSON-like dicts). Tool names starting with get_/list_/search_/find_/check_ only
read state (`schema.is_query_tool`).
"""

from __future__ import annotations

import copy
import importlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from .schema import introduction, tool_schemas
from .tasks._common import TaskBook
from .tasks.hinted import hinted_twin

SUITE_NAME = "envscaler-mini"

DOMAINS = ("insurance", "logistics", "ecommerce", "healthcare", "banking", "travel",
           "library", "hr", "real_estate", "restaurant", "telecom", "education")

ENVS_DIR = Path(__file__).resolve().parent / "envs"


def env_id(domain: str) -> str:
    return f"{SUITE_NAME}.{domain}"


def _builder(domain: str):
    return importlib.import_module(f"{__name__}.tasks.{domain}")


@lru_cache(maxsize=None)
def _env_items() -> tuple[dict[str, Any], ...]:
    items = []
    for domain in DOMAINS:
        class_name = _builder(domain).ENV_CLASS
        source = (ENVS_DIR / f"{domain}.py").read_text(encoding="utf-8")
        intro, rules = introduction(source, class_name)
        items.append({"env_id": env_id(domain), "env_class_name": class_name, "env_class_code": source,
                      "tools": tool_schemas(source, class_name), "environment_introduction": intro,
                      "constraints_rules": rules})
    return tuple(items)


@lru_cache(maxsize=None)
def _task_items() -> tuple[dict[str, Any], ...]:
    tasks = []
    for domain in DOMAINS:
        module = _builder(domain)
        book = TaskBook(env_id(domain), module.ENV_CLASS, module.INIT_CONFIG)
        module.build(book)
        tasks.extend(book.tasks)
    return tuple(item for task in tasks for item in (task, hinted_twin(task)) if item is not None)


def env_items() -> list[dict[str, Any]]:
    """One environment item per domain (fresh copies; safe to mutate)."""
    return copy.deepcopy(list(_env_items()))


def task_items() -> list[dict[str, Any]]:
    """All tasks (fresh copies), grouped by domain in DOMAINS order and numbered within each domain, each base task
    followed by its hinted twin: the first N tasks of a split hold both tiers."""
    return copy.deepcopy(list(_task_items()))
