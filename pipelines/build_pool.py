"""Stage `build_pool`: the shared oracle pool of SDFT and OPSD (pool/oracle.jsonl), one verified-successful
demonstration per training task with its provenance: the base model's own successes from the experience
bank first, then reference solutions that pass their tests."""

from __future__ import annotations

import sys
import time

from lopd.bank import check_no_eval_overlap, read_bank, task_text
from lopd.pool import POOL_FILE, REFERENCE_SOLUTION, assemble_pool, render_reference, write_pool
from lopd.retrieval import BANK_FILE
from lopd.tracking import Tracker
from pipelines.build_bank import evaluation_prompts
from pipelines.common import (BANK_DIR, METRICS_DIR, POOL_DIR, coding_tasks, coding_training_tasks, parse_args,
                              write_json)


def main() -> None:
    _, cfg = parse_args(__doc__)
    tasks, score = coding_training_tasks(cfg)
    with Tracker(cfg, "build_pool") as tracker:
        start = time.perf_counter()
        try:
            successes, _ = read_bank(BANK_DIR / BANK_FILE)
        except (OSError, ValueError) as err:
            sys.exit(f"error: build_pool: {err}")
        covered = {e.task_id for e in successes}
        references = {t.task_id: list(t.solutions) for t in coding_tasks(cfg)} if cfg.pool.fill_with_references else {}
        candidates = [(task, code) for task in tasks if task.task_id not in covered
                      for code in references.get(task.task_id, [])]
        rewards = score([task for task, _ in candidates], [render_reference(code) for _, code in candidates])
        passing: dict[str, list[str]] = {}
        for (task, code), reward in zip(candidates, rewards):
            if reward >= 1.0:
                passing.setdefault(task.task_id, []).append(code)
        pool = assemble_pool([(t.task_id, task_text(t.messages)) for t in tasks], successes, passing,
                             cfg.pool.fill_with_references)
        users = [m for m in ("sdft", "opsd") if m in cfg.baselines]
        if not pool and users:
            sys.exit(f"error: build_pool: no demonstration for any training task, but {' and '.join(users)} need "
                     "them (no base-model success in the bank, and pool.fill_with_references is off or no "
                     "reference passed)")
        eval_prompts, missing = evaluation_prompts(cfg)
        check_no_eval_overlap(pool, {t.task_id for t in tasks}, eval_prompts)
        write_pool(POOL_DIR / POOL_FILE, pool, {"model": cfg.model.name, "profile": cfg.profile, "seed": cfg.seed})
        summary = {"n_train_tasks": len(tasks), "n_demonstrations": len(pool),
                   "coverage": len(pool) / len(tasks),
                   "from_base_model": sum(d.source != REFERENCE_SOLUTION for d in pool),
                   "from_references": sum(d.source == REFERENCE_SOLUTION for d in pool),
                   "references_tried": len(candidates), "references_passed": sum(r >= 1.0 for r in rewards),
                   "eval_overlap_check": f"n/a for {missing}" if missing else "passed",
                   "wall_s": round(time.perf_counter() - start, 1)}
        path = METRICS_DIR / "pool.json"
        write_json(path, summary)
        tracker.log_metrics({k: v for k, v in summary.items() if isinstance(v, (int, float))})
        tracker.log_artifact(path)
    print(f"pool: {len(pool)} demonstrations for {len(tasks)} tasks ({summary['from_base_model']} base-model, "
          f"{summary['from_references']} reference)")


if __name__ == "__main__":
    main()
