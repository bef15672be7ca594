"""Stage `build_bank`: the experience bank from base-model rollouts on the training split, its document
embeddings, and the cached query embedding of every training task."""

from __future__ import annotations

import time

from evaluation import evalplus_bench
from evaluation.coding import taco
from lopd.bank import check_no_eval_overlap, sample_rollouts, successful_entries, task_text, write_bank
from lopd.retrieval import (BANK_FILE, DOCUMENTS_FILE, QUERIES_FILE, TextEmbedder, document_text, query_text,
                            save_vectors)
from lopd.rollout import single_turn
from lopd.tracking import Tracker
from pipelines.common import BANK_DIR, BASE_MODEL_DIR, METRICS_DIR, coding_training_tasks, parse_args, write_json


def evaluation_prompts(cfg) -> tuple[dict[str, str], str]:
    """Every benchmark task's prompt text, for the bank's overlap guard (and a note if data is missing)."""
    prompts, missing = {}, []
    for benchmark in cfg.benchmarks:
        try:
            problems = evalplus_bench.load_problems(benchmark, cfg.data.shared_path("evalplus"))
        except (OSError, ValueError) as err:
            missing.append(f"{benchmark} ({str(err).splitlines()[0]})")
            continue
        prompts.update({tid: p["prompt"] for tid, p in problems.items()})
    return prompts, "; ".join(missing)


def main() -> None:
    _, cfg = parse_args(__doc__)
    tasks, score = coding_training_tasks(cfg)
    with Tracker(cfg, "build_bank") as tracker:
        start = time.perf_counter()
        rollouts = sample_rollouts(cfg, tasks, single_turn(score), BASE_MODEL_DIR)
        sampling_s = time.perf_counter() - start
        entries = successful_entries(rollouts, cfg.bank.success_threshold, trace_of=taco.extract_code)
        eval_prompts, missing = evaluation_prompts(cfg)
        check_no_eval_overlap(entries, {t.task_id for t in tasks}, eval_prompts)
        embedder = TextEmbedder(cfg.bank.embedder)
        BANK_DIR.mkdir(parents=True, exist_ok=True)
        save_vectors(BANK_DIR / DOCUMENTS_FILE, [e.task_id for e in entries],
                     embedder.embed([document_text(e) for e in entries]))
        save_vectors(BANK_DIR / QUERIES_FILE, [t.task_id for t in tasks],
                     embedder.embed([query_text(task_text(t.messages), cfg.bank.query_instruction) for t in tasks]))
        meta = {"model": cfg.model.name, "profile": cfg.profile, "seed": cfg.seed, "embedder": cfg.bank.embedder,
                "success_threshold": cfg.bank.success_threshold}
        write_bank(BANK_DIR / BANK_FILE, entries, meta)
        summary = {**meta, "n_train_tasks": len(tasks), "n_rollouts": len(rollouts),
                   "rollout_success_rate": sum(r >= cfg.bank.success_threshold for *_, r in rollouts) / len(rollouts),
                   "n_entries": len(entries), "n_tasks_in_bank": len({e.task_id for e in entries}),
                   "eval_tasks_checked": len(eval_prompts),
                   "eval_overlap_check": f"n/a for {missing}" if missing else "passed",
                   "sampling_s": round(sampling_s, 1), "wall_s": round(time.perf_counter() - start, 1)}
        path = METRICS_DIR / "bank.json"
        write_json(path, summary)
        tracker.log_metrics({k: v for k, v in summary.items() if isinstance(v, (int, float))})
        tracker.log_artifact(path)
    print(f"bank: {len(entries)} entries from {summary['n_tasks_in_bank']} tasks ({len(rollouts)} rollouts)")


if __name__ == "__main__":
    main()
