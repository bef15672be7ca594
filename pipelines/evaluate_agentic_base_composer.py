"""Stage `eval_agentic_base_composer`: the paper's "Base + Composer" (Table 3) on the agentic benchmarks, the base
model read with the latent context LOPD's trained composer builds from each task's retrieved bank entries, played
exactly as the methods are (pipelines/evaluate_agentic.py; each episode registers its task when it resets).
Results go under the name `base_composer`."""

from __future__ import annotations

import sys

from lopd.latent.composer import FRAMINGS
from lopd.latent.context import BASE_COMPOSER, RegisteringEnvironment, latent_context_backend
from pipelines import evaluate_agentic
from pipelines.common import BASE_MODEL_DIR, DOMAINS, parse_args, run_stage, stage_name


def main() -> None:
    _, cfg = parse_args(__doc__)
    domain = DOMAINS["agentic"]

    def wrap(backend, tokenizer):
        try:
            wrapped, composer = latent_context_backend(cfg, backend, tokenizer, BASE_MODEL_DIR, domain.bank,
                                                       domain.composer, domain.checkpoints / "lopd",
                                                       FRAMINGS["agentic"])
        except (OSError, ValueError) as err:
            sys.exit(f"error: {stage_name('eval', 'agentic', BASE_COMPOSER)}: {err}")
        return (wrapped, {"composer": composer, "n_ret": cfg.n_ret, "latent_tokens": cfg.latent_tokens},
                lambda task_id, env: RegisteringEnvironment(env, task_id, wrapped))

    evaluate_agentic.run(cfg, BASE_COMPOSER, lambda: BASE_MODEL_DIR, wrap)


if __name__ == "__main__":
    run_stage(main)
