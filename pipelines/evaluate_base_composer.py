"""Stage `eval_base_composer`: the paper's "Base + Composer" (Table 3) on the code benchmarks, the base model read with
the latent context LOPD's trained composer builds from each task's retrieved bank entries, evaluated exactly as the
methods are (pipelines/evaluate.py). Results go under the name `base_composer`, with each task's retrieved bank
entries."""

from __future__ import annotations

import sys

from lopd.core.rollout import Task
from lopd.latent.composer import FRAMINGS
from lopd.latent.context import BASE_COMPOSER, latent_context_backend
from pipelines import evaluate
from pipelines.common import BASE_MODEL_DIR, DOMAINS, parse_args, run_stage, stage_name


def main() -> None:
    _, cfg = parse_args(__doc__)
    domain = DOMAINS["code"]

    def wrap(backend, tokenizer, messages, continue_final):
        try:
            wrapped, composer = latent_context_backend(cfg, backend, tokenizer, BASE_MODEL_DIR, domain.bank,
                                                       domain.composer, domain.checkpoints / "lopd",
                                                       FRAMINGS["code"], continue_final=continue_final)
        except (OSError, ValueError) as err:
            sys.exit(f"error: {stage_name('eval', 'code', BASE_COMPOSER)}: {err}")
        wrapped.add_tasks([Task(tid, m) for tid, m in messages.items()])
        return wrapped, {"composer": composer, "n_ret": cfg.n_ret, "latent_tokens": cfg.latent_tokens,
                         "per_task": {tid: {"retrieved_entries": idx} for tid, idx in wrapped.retrieved.items()}}

    evaluate.run(cfg, BASE_COMPOSER, lambda: BASE_MODEL_DIR, wrap)


if __name__ == "__main__":
    run_stage(main)
