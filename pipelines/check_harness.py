"""Stage `check_harness` (pipelines/check/dvc.yaml, `make check-harness`): a scripted policy that writes each task's
ground truth and a null policy that only replies "Task Completed", played through the multi-turn driver, tool-call
parser and scorers the model's episodes go through, on every tool-use benchmark (and EnvScaler's training split), and
each code task's reference solution against an empty one through the code scorers (evaluation/harness_check.py).
Writes reports/tables/harness_check.csv (`benchmark,n,scripted,null`: mean scores) and harness_check.md (the table
and, task by task, why the scripted policy falls short of 1.0). Reads the base model's tokenizer only, no weights."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import sys
import time
from typing import Iterator

from evaluation import evalplus_bench, livecodebench
from evaluation.agentic import envscaler_split
from evaluation.agentic.benchmarks import Benchmark, load_benchmark
from evaluation.harness_check import (
    PlaceholderUser,
    RowCheck,
    ScriptWriter,
    TemplateError,
    check_coding_tasks,
    check_evalplus,
    check_tool_benchmark,
    csv_text,
    faults,
    markdown,
)
from lopd.core.config import AGENTIC_BENCHMARKS, REPO_ROOT, Config, repo_relative
from lopd.core.models import load_tokenizer
from lopd.core.tracking import Tracker
from pipelines.common import BASE_MODEL_DIR, parse_args, replacing, run_stage, stage_name
from pipelines.domains import agentic, code

TABLE = REPO_ROOT / "reports" / "tables" / "harness_check"
TRAIN_ROW = "envscaler_train"
CODE_ROW = "code_train"
ROWS = (AGENTIC_BENCHMARKS[0], TRAIN_ROW, *AGENTIC_BENCHMARKS[1:], CODE_ROW, *evalplus_bench.BENCHMARKS,
        *livecodebench.BENCHMARKS)
"""The table's rows: Table 1's benchmarks with EnvScaler's training split beside its test split, the code domain's
training tasks, then Table 2's benchmarks."""
TASK_LIMIT_ARG = {"type": int, "default": None, "metavar": "N",
                  "help": "only the first N tasks of each benchmark (default: all)"}


@contextlib.contextmanager
def evaluation_benchmark(cfg: Config, name: str) -> Iterator[Benchmark]:
    """A fresh copy of one of Table 1's benchmarks, as evaluation loads it."""
    bench = load_benchmark(cfg, name, PlaceholderUser())
    try:
        yield bench
    finally:
        bench.close()


@contextlib.contextmanager
def training_benchmark(cfg: Config) -> Iterator[Benchmark]:
    """EnvScaler's training split, its environments made as training makes them, under training's step cap."""
    with envscaler_split.training_tasks(cfg) as (tasks, make_env, source):
        tasks = tasks[:cfg.agentic.task_limit]
        yield Benchmark(TRAIN_ROW, [(task.task_id, make_env(task)) for task in tasks], cfg.agentic.max_steps, source)


def check_row(cfg: Config, name: str, writer: ScriptWriter) -> RowCheck:
    """One row of the table; a benchmark whose data is missing is a row of n/a naming it."""
    a, limit = cfg.agentic, cfg.agentic.task_limit
    if name == CODE_ROW:
        tasks = code.coding_tasks(cfg)
        return check_coding_tasks(name, tasks[:limit], cfg.eval.workers)
    if name in evalplus_bench.BENCHMARKS:
        return check_evalplus(name, cfg.data.shared_path("evalplus"), cfg.eval.workers, limit)
    if name in livecodebench.BENCHMARKS:
        release = repo_relative(cfg.data.livecodebench_release())
        return RowCheck(name, (), "", f"n/a: a LiveCodeBench release holds no reference solutions, so there is "
                                      f"nothing to script (and by default there is no release: {release})")
    opened = (lambda: training_benchmark(cfg)) if name == TRAIN_ROW else (lambda: evaluation_benchmark(cfg, name))
    try:
        with opened():
            pass
    except (OSError, ValueError, ImportError) as err:  # data or package missing: n/a, as evaluation reports it
        return RowCheck(name, (), "", f"n/a: {str(err).splitlines()[0]}")
    return check_tool_benchmark(name, opened, writer, a.max_step_tokens, a.max_context_tokens, a.tool_call_format)


def run(cfg: Config, tokenizer, rows: tuple[str, ...],
        evaluated: dict[str, int | None] | None = None) -> list[RowCheck]:
    """The table's `rows`, on every task (on the first `agentic.task_limit` of each where set); `evaluated`: how many
    first tasks of each of Table 1's benchmarks evaluation plays (`AgenticConfig.benchmark_limit`; None: all)."""
    writer = ScriptWriter(tokenizer, cfg.model.name)  # before any work: the template writes tool calls
    # the check's own limit for every benchmark, EnvScaler's too (evaluation's are `evaluated`)
    cfg = dataclasses.replace(cfg, agentic=dataclasses.replace(cfg.agentic, envscaler_task_limit=None))
    checked = []
    for name in rows:
        row = check_row(cfg, name, writer)
        if name in AGENTIC_BENCHMARKS:
            row = dataclasses.replace(row, evaluated=(evaluated or {}).get(name))
        checked.append(row)
        print(f"{name}: n={len(row.tasks)} scripted={row.mean('scripted')} null={row.mean('null')} "
              f"({row.seconds:.0f} s){' ' + row.note if row.note else ''}", flush=True)
    return checked


def main() -> None:
    args, cfg = parse_args(__doc__, **{"task-limit": TASK_LIMIT_ARG})
    if args.task_limit is not None and args.task_limit < 1:
        sys.exit("error: --task-limit: must be >= 1")
    evaluated = {name: cfg.agentic.benchmark_limit(name) for name in AGENTIC_BENCHMARKS}
    cfg = dataclasses.replace(cfg, agentic=dataclasses.replace(cfg.agentic, task_limit=args.task_limit))
    agentic.check_sandbox()  # before any work: the EnvScaler worker and the code sandbox run known programs right
    code.check_sandbox()
    stage = stage_name("check_harness")
    with Tracker(cfg, stage) as tracker:
        tokenizer = load_tokenizer(BASE_MODEL_DIR)
        start = time.perf_counter()
        try:
            rows = run(cfg, tokenizer, ROWS, evaluated)
        except TemplateError as err:
            sys.exit(f"error: {err}")
        seconds = time.perf_counter() - start
        tasks = "every task" if args.task_limit is None else f"the first {args.task_limit} tasks"
        header = [f"Model {cfg.model.name} (its tokenizer and chat template only), profile {cfg.profile}, tool-call "
                  f"format {cfg.agentic.tool_call_format}; {tasks} of each benchmark; {seconds / 60:.1f} min on "
                  f"{datetime.date.today().isoformat()}.",
                  "Scripted: the task's ground truth written in the model's tool-call format; null: \"Task Completed\" "
                  "at every step; both through the driver, parser and scorer the model's episodes go through "
                  "(docs/agentic.md, \"The harness check\")."]
        csv_path, md_path = TABLE.with_suffix(".csv"), TABLE.with_suffix(".md")
        with replacing(csv_path, md_path) as (csv_tmp, md_tmp):
            csv_tmp.write_text(csv_text(rows))
            md_tmp.write_text(markdown(rows, header))
        tracker.log_metrics({f"{row.benchmark}.{kind}": value for row in rows for kind in ("scripted", "null")
                             if (value := row.mean(kind)) is not None})
        for path in (csv_path, md_path):
            tracker.log_artifact(path)
    print(f"wrote {repo_relative(csv_path)} and {repo_relative(md_path)} ({seconds / 60:.1f} min)")
    if found := {row.benchmark: len(faults(row)) for row in rows if faults(row)}:
        sys.exit(f"error: the harness is at fault ({', '.join(f'{name}: {n} task(s)' for name, n in found.items())}); "
                 f"see {repo_relative(md_path)}")


if __name__ == "__main__":
    run_stage(main)
