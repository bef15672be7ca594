"""Stage `build_pool` (code) / `build_pool_agentic`: the shared oracle pool of SDFT and OPSD
(<pool>/oracle.jsonl), one verified-successful demonstration per training task with its provenance: the base
model's own successes from the experience bank first, then references that are verified to succeed (coding:
reference programs that pass their tests; agentic: ground-truth action sequences that replay to full reward)."""

from __future__ import annotations

import sys
import time

from baselines.pool import POOL_FILE, REFERENCE_SOLUTION, assemble_pool, render_reference, write_pool
from evaluation.agentic import envscaler, envscaler_split
from lopd.core.multiturn import ToolCall, observation_lite
from lopd.core.tracking import Tracker
from lopd.latent.bank import check_no_eval_overlap, read_bank, task_text
from lopd.latent.retrieval import BANK_FILE
from pipelines.build_bank import evaluation_prompts
from pipelines.common import (
    DOMAIN_ARG,
    DOMAINS,
    check_sandbox,
    for_domain,
    parse_args,
    record_metrics,
    run_stage,
    stage_name,
)
from pipelines.domains.code import coding_tasks, coding_training_tasks


def coding_references(cfg, tasks, covered) -> tuple[dict[str, list[str]], int]:
    """Reference programs of uncovered tasks that pass their tests, rendered as answers; and how many were tried."""
    _, score = coding_training_tasks(cfg)
    references = {t.task_id: list(t.solutions) for t in coding_tasks(cfg)}
    candidates = [(task, code) for task in tasks if task.task_id not in covered
                  for code in references.get(task.task_id, [])]
    rewards = score([task for task, _ in candidates], [render_reference(code) for _, code in candidates])
    passing: dict[str, list[str]] = {}
    for (task, code), reward in zip(candidates, rewards):
        if reward >= 1.0:
            passing.setdefault(task.task_id, []).append(render_reference(code))
    return passing, len(candidates)


def agentic_references(cfg, covered) -> tuple[dict[str, list[str]], int]:
    """Ground-truth action sequences of uncovered tasks that replay to reward 1, as observation-lite traces."""
    data = envscaler_split.envscaler_data(cfg)
    candidates = [t for t in data.train if t.task_id not in covered and t.ground_truth]
    passing: dict[str, list[str]] = {}
    with envscaler.EnvScalerSuite(data.envs, candidates) as suite:
        for task in candidates:
            env = suite.make(task)
            try:  # call_tool turns call problems into observations; a failing check scores below 1
                env.reset()
                calls = [ToolCall(c["name"], dict(c.get("arguments", {}))) for c in task.ground_truth]
                actions = [(call, env.call_tool(call.name, call.arguments)) for call in calls]
                if env.score()["reward"] >= 1.0:
                    passing[task.task_id] = [observation_lite(actions)]
            finally:
                env.close()
    return passing, len(candidates)


def main() -> None:
    args, cfg = parse_args(__doc__, domain=DOMAIN_ARG)
    cfg, domain = for_domain(cfg, args.domain), DOMAINS[args.domain]
    if cfg.pool.fill_with_references:  # references are scored before they join the pool
        check_sandbox(args.domain)
    stage = stage_name("build_pool", args.domain)
    with Tracker(cfg, stage) as tracker:
        start = time.perf_counter()
        try:
            successes, _ = read_bank(domain.bank / BANK_FILE)
            tasks = ([(t.task_id, t.task) for t in envscaler_split.envscaler_data(cfg).train]
                     if args.domain == "agentic" else [(t.task_id, task_text(t.messages))
                                                       for t in coding_training_tasks(cfg)[0]])
        except (OSError, ValueError) as err:
            sys.exit(f"error: {stage}: {err}")
        covered = {e.task_id for e in successes}
        passing, tried = ({}, 0)
        if cfg.pool.fill_with_references:
            passing, tried = (agentic_references(cfg, covered) if args.domain == "agentic"
                              else coding_references(cfg, coding_training_tasks(cfg)[0], covered))
        pool = assemble_pool(tasks, successes, passing, cfg.pool.fill_with_references)
        users = [m for m in ("sdft", "opsd") if m in cfg.baseline_methods]
        if not pool and users:
            sys.exit(f"error: {stage}: no demonstration for any training task, but {' and '.join(users)} need "
                     "them (no base-model success in the bank, and pool.fill_with_references is off or no "
                     "reference passed)")
        eval_prompts, missing = evaluation_prompts(cfg, args.domain)
        try:  # before the pool is overwritten
            check_no_eval_overlap(pool, {tid for tid, _ in tasks}, eval_prompts, domain.max_eval_containment)
        except ValueError as err:
            sys.exit(f"error: {stage}: {err}")
        write_pool(domain.pool / POOL_FILE, pool, {"model": cfg.model.name, "profile": cfg.profile, "seed": cfg.seed})
        summary = {"n_train_tasks": len(tasks), "n_demonstrations": len(pool),
                   "coverage": len(pool) / len(tasks),
                   "from_base_model": sum(d.source != REFERENCE_SOLUTION for d in pool),
                   "from_references": sum(d.source == REFERENCE_SOLUTION for d in pool),
                   "references_tried": tried, "references_passed": sum(len(v) for v in passing.values()),
                   "eval_tasks_checked": len(eval_prompts),  # the overlap guard passed against these
                   "wall_s": round(time.perf_counter() - start, 1)}
        record_metrics(tracker, domain.metrics / "pool.json", stage, summary)
    if missing:
        print(f"warning: {stage}: evaluation-overlap check not run for {missing}", file=sys.stderr)
    print(f"pool: {len(pool)} demonstrations for {len(tasks)} tasks ({summary['from_base_model']} base-model, "
          f"{summary['from_references']} reference)")


if __name__ == "__main__":
    run_stage(main)
