"""Table 1's benchmarks as the evaluation stage sees them: batches of fresh environments (EnvScaler's test split,
BFCL-v3 multi-turn, ACEBench agent). The training side of the EnvScaler data is in envscaler_split.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from evaluation.agentic import envscaler
from evaluation.agentic.acebench.user_simulator import UserSimulator
from evaluation.agentic.envscaler_split import envscaler_data
from lopd.core.config import Config
from lopd.core.multiturn import ToolEnvironment


@dataclass
class Benchmark:
    name: str
    episodes: list[tuple[str, ToolEnvironment]]
    """(task id, fresh environment) per evaluation task."""
    max_steps: int
    source: str
    close: Callable[[], None] = lambda: None


def load_benchmark(cfg: Config, name: str, user: UserSimulator) -> Benchmark:
    """One of Table 1's benchmarks (`lopd.core.config.AGENTIC_BENCHMARKS`), its first `agentic.task_limit` tasks
    (EnvScaler: `agentic.envscaler_task_limit`, `AgenticConfig.benchmark_limit`).
    Missing data raises OSError/ValueError with the path in the message."""
    a, limit = cfg.agentic, cfg.agentic.benchmark_limit(name)
    if name == "envscaler":
        data = envscaler_data(cfg)
        test = data.test[:limit]
        suite = envscaler.EnvScalerSuite(data.envs, test)
        return Benchmark(name, [(t.task_id, suite.make(t)) for t in test], a.max_steps, data.source, suite.close)
    if name.startswith("bfcl_"):
        from evaluation.agentic import bfcl

        entries = bfcl.load_bfcl(name.removeprefix("bfcl_"), cfg.data.shared_path("bfcl_v3"), limit)
        return Benchmark(name, [(e.entry_id, bfcl.BFCLEnvironment(e)) for e in entries], a.max_steps, "BFCL-v3")
    if name.startswith("acebench_"):
        from evaluation.agentic import acebench

        tasks = acebench.load_acebench(name.removeprefix("acebench_"), cfg.data.shared_path("acebench", "data_en"),
                                       limit)
        return Benchmark(name, [(t.id, acebench.ACEEnvironment(t, user)) for t in tasks], a.acebench_max_steps,
                         "ACEBench (en)")
    raise ValueError(f"unknown agentic benchmark {name!r}")
