"""Stage `eval@<method>-<benchmark>`: sample from a trained policy and score it with the official harness. Writes
pass@1 with its 95% CI (metrics), and every completion with its verdicts and the full summary (results).

Sampling follows EvalPlus' own chat protocol (its HF and vLLM providers): the assistant turn is prefilled with the
response prefix and an opened python fence, generation stops at EvalPlus' stop strings (the closing fence among
them), and the text scored is the output cut there: scores comparable with EvalPlus' own runs, and no tokens spent
on the explanation or demo code an instruct model may write after its code."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Callable

from evaluation import evalplus_bench
from lopd.core.config import Config
from lopd.core.rollout import encode_prompt, make_backend, sampling_params
from lopd.core.models import load_tokenizer
from lopd.core.sampling import RolloutBackend
from lopd.core.tracking import Tracker
from pipelines.common import DOMAINS, parse_args, record_metrics, stage_name, trained_policy, write_json

METRICS = {"pass@1": "pass@1_plus", "pass@1_ci_low": "pass@1_plus_ci_low", "pass@1_ci_high": "pass@1_plus_ci_high",
           "pass@1_base": "pass@1_base", "n_tasks": "n_tasks"}
"""What DVC shows of an evaluation (metric name -> summary key; pass@1 on EvalPlus+ tests with its 95% CI, in
percent). Timings, token counts and the base tests' CI are in the results file."""
PROTOCOL = "evalplus-chat (response prefix + stop \\n```\\n and evalplus' EOS strings)"
"""Recorded in the summary: how completions were sampled (module docstring)."""


Wrap = Callable[[RolloutBackend, object, dict[str, list[dict]]], tuple[RolloutBackend, dict[str, Any]]]
"""How an evaluation changes the backend (pipelines/evaluate_base_composer.py: latent context): (backend, tokenizer,
task id -> chat messages) -> (backend to sample from, what to record in the summary)."""


def main() -> None:
    args, cfg = parse_args(__doc__, method={"required": True}, benchmark={"required": True,
                           "choices": evalplus_bench.BENCHMARKS})
    run(cfg, args.method, args.benchmark, lambda: trained_policy("code", args.method))


def run(cfg: Config, method: str, benchmark: str, model_dir: Callable[[], Path], wrap: Wrap | None = None) -> None:
    """Evaluate `model_dir()` (called inside the stage's MLflow run, so a missing model fails it) on `benchmark` as
    the results of `method`; `wrap` changes the backend (prompt embeddings are then turned on)."""
    stage = stage_name("eval", "code", method, benchmark)
    domain = DOMAINS["code"]
    with Tracker(cfg, stage) as tracker:
        model_dir = model_dir()
        data_dir = cfg.data.shared_path("evalplus")
        try:
            problems = evalplus_bench.load_problems(benchmark, data_dir, limit=cfg.eval.task_limit)
        except (OSError, ValueError, evalplus_bench.EvalPlusDataUnavailable) as err:
            sys.exit(f"error: {err}")
        tokenizer = load_tokenizer(model_dir)
        backend = make_backend(model_dir, tokenizer, cfg, cfg.eval.batch_size, prompt_embeds=wrap is not None)
        messages = {tid: evalplus_bench.build_messages(problem, benchmark, prefill_response=True)
                    for tid, problem in problems.items()}
        context: dict[str, Any] = {}
        if wrap is not None:
            backend, context = wrap(backend, tokenizer, messages)
        task_ids = [tid for tid in problems for _ in range(cfg.eval.n_samples)]
        task_prompts = {tid: encode_prompt(tokenizer, m, continue_final=True) for tid, m in messages.items()}
        prompts = [task_prompts[tid] for tid in task_ids]
        params = dataclasses.replace(sampling_params(cfg, cfg.eval.max_new_tokens), stop=evalplus_bench.STOP_STRINGS)
        start = time.perf_counter()
        outputs = backend.generate(prompts, params, seed=cfg.seed)
        sampling_s = time.perf_counter() - start
        completions: dict[str, list[str]] = {tid: [] for tid in problems}
        for tid, out in zip(task_ids, outputs):
            generated = tokenizer.decode(out.token_ids, skip_special_tokens=True)
            completions[tid].append(evalplus_bench.chat_solution(generated))
        start = time.perf_counter()
        scored = evalplus_bench.score(benchmark, problems, completions, data_dir=data_dir, workers=cfg.eval.workers)
        scoring_s = time.perf_counter() - start
        summary = {k: v for k, v in scored.items() if k != "per_task"}
        per_task_context = context.pop("per_task", {})
        summary.update({"method": method, **context, "profile": cfg.profile, "seed": cfg.seed, "protocol": PROTOCOL,
                        "task_limit": cfg.eval.task_limit, "max_new_tokens": cfg.eval.max_new_tokens,
                        "generated_tokens": sum(len(o.token_ids) for o in outputs),
                        "sampling_s": round(sampling_s, 1), "scoring_s": round(scoring_s, 1)})
        results_path = domain.results / "eval" / method / f"{benchmark}.json"
        write_json(results_path, {"summary": summary, "per_task": {
            tid: {**scored["per_task"][tid], "completions": completions[tid], **per_task_context.get(tid, {})}
            for tid in problems}})
        tracker.log_metrics({k: summary[k] for k in ("generated_tokens", "sampling_s", "scoring_s")})
        record_metrics(tracker, domain.metrics / "eval" / method / f"{benchmark}.json", stage,
                       {name: summary[key] for name, key in METRICS.items()})
    print(f"{method} on {benchmark}: pass@1 {summary['pass@1_plus']:.2f} (base {summary['pass@1_base']:.2f})")


if __name__ == "__main__":
    main()
