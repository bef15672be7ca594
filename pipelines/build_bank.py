"""Stage `build_bank` (code) / `build_bank_agentic`: the experience bank from base-model rollouts on a
domain's training split, its document embeddings, and the cached query embedding of every training task."""

from __future__ import annotations

import sys
import time

import numpy as np
from accelerate import PartialState

from evaluation import evalplus_bench, livecodebench
from evaluation.agentic import envscaler_split
from lopd.core.progress import progress
from lopd.core.rollout import check_backend, evenly_spaced
from lopd.core.tracking import Tracker
from lopd.latent.bank import (
    check_no_eval_overlap,
    sample_rollouts,
    successful_entries,
    task_text,
    write_bank,
)
from lopd.latent.retrieval import (
    BANK_FILE,
    DOCUMENTS_FILE,
    QUERIES_FILE,
    TextEmbedder,
    document_text,
    query_text,
    save_vectors,
)
from pipelines.common import (
    BASE_MODEL_DIR,
    DOMAIN_ARG,
    DOMAINS,
    check_sandbox,
    for_domain,
    parse_args,
    record_metrics,
    run_stage,
    stage_name,
    training_domain,
)


def evaluation_prompts(cfg, domain: str = "code") -> tuple[dict[str, str], str]:
    """Every evaluation task's prompt text, for the overlap guard (and a note if data is missing). For the
    agentic domain: the held-out EnvScaler-format tasks (BFCL and ACEBench are other task families)."""
    if domain == "agentic":
        return {t.task_id: t.task for t in envscaler_split.envscaler_data(cfg).test}, ""
    prompts, missing = {}, []
    for benchmark in cfg.benchmarks:
        try:
            if benchmark in livecodebench.BENCHMARKS:
                problems = livecodebench.load_problems(cfg.data.livecodebench_release(),
                                                       cfg.data.livecodebench_window(benchmark))
                prompts.update({p.question_id: p.content for p in problems})
            else:
                problems = evalplus_bench.load_problems(benchmark, cfg.data.shared_path("evalplus"))
                prompts.update({tid: p["prompt"] for tid, p in problems.items()})
        except (OSError, ValueError, evalplus_bench.EvalPlusDataUnavailable) as err:
            missing.append(f"{benchmark} ({str(err).splitlines()[0]})")
    return prompts, "; ".join(missing)


def embed(embedder: TextEmbedder, texts: list[str], desc: str) -> np.ndarray:
    """`embedder.embed(texts)` under a bar, a batch of the embedder's at a time (the vectors do not depend on it)."""
    size, parts = embedder.batch_size, []
    with progress(total=len(texts), desc=desc, unit="text") as bar:
        for start in range(0, len(texts), size):
            parts.append(embedder.embed(texts[start:start + size]))
            bar.update(len(parts[-1]))
    return np.concatenate(parts) if parts else embedder.embed(texts)


def main() -> None:
    args, cfg = parse_args(__doc__, domain=DOMAIN_ARG)
    check_backend(cfg, BASE_MODEL_DIR)  # before any work: the rollout engine can run this model
    check_sandbox(args.domain)  # and the sandbox can score the domain
    cfg, domain = for_domain(cfg, args.domain), DOMAINS[args.domain]
    stage = stage_name("build_bank", args.domain)
    with Tracker(cfg, stage) as tracker, training_domain(cfg, args.domain) as (tasks, collect, source, _):
        start = time.perf_counter()
        sampled = evenly_spaced(tasks, cfg.bank.task_limit or len(tasks))
        if not sampled:
            sys.exit(f"error: {stage}: no training tasks to sample ({source})")
        try:
            rollouts = sample_rollouts(cfg, sampled, collect, BASE_MODEL_DIR)
        except FileNotFoundError as err:  # no base model: say which stage to run
            sys.exit(f"error: {stage}: {err}")
        sampling_s = time.perf_counter() - start
        if not PartialState().is_main_process:  # every process sampled its share; process 0 writes the bank
            return
        entries = successful_entries(rollouts, cfg.bank.success_threshold, trace_of=domain.bank_trace)
        eval_prompts, missing = evaluation_prompts(cfg, args.domain)
        try:  # before anything in the bank is overwritten
            check_no_eval_overlap(entries, {t.task_id for t in tasks}, eval_prompts, domain.max_eval_containment)
        except ValueError as err:
            sys.exit(f"error: {stage}: {err}")
        embedder = TextEmbedder(cfg.bank.embedder)
        domain.bank.mkdir(parents=True, exist_ok=True)
        save_vectors(domain.bank / DOCUMENTS_FILE, [e.task_id for e in entries],
                     embed(embedder, [document_text(e) for e in entries], "embed entries"))
        save_vectors(domain.bank / QUERIES_FILE, [t.task_id for t in tasks],
                     embed(embedder, [query_text(task_text(t.messages), cfg.bank.query_instruction) for t in tasks],
                           "embed tasks"))
        meta = {"model": cfg.model.name, "profile": cfg.profile, "seed": cfg.seed, "embedder": cfg.bank.embedder,
                "success_threshold": cfg.bank.success_threshold, "domain": args.domain, "data": source}
        write_bank(domain.bank / BANK_FILE, entries, meta)
        summary = {"n_train_tasks": len(tasks), "n_tasks_sampled": len(sampled), "n_rollouts": len(rollouts),
                   "rollout_success_rate": sum(t.reward >= cfg.bank.success_threshold
                                               for *_, t in rollouts) / len(rollouts),
                   "rollout_reward_mean": sum(t.reward for *_, t in rollouts) / len(rollouts),
                   "n_entries": len(entries), "n_tasks_in_bank": len({e.task_id for e in entries}),
                   "eval_tasks_checked": len(eval_prompts),  # the overlap guard passed against these
                   "sampling_s": round(sampling_s, 1), "wall_s": round(time.perf_counter() - start, 1)}
        record_metrics(tracker, domain.metrics / "bank.json", stage, summary)
    if missing:
        print(f"warning: {stage}: evaluation-overlap check not run for {missing}", file=sys.stderr)
    print(f"bank: {len(entries)} entries from {summary['n_tasks_in_bank']} tasks ({len(rollouts)} rollouts)")


if __name__ == "__main__":
    run_stage(main)
