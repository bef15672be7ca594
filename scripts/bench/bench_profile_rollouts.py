"""Rollouts at a profile's own settings -> reports/perf/profile_rollouts.json (one entry per profile; `make estimate`
reads it).

On the profile's rollout engine (`sampling.backend`) and the prepared model (models/base), each part as its stage runs
it, timed end to end (sampling and the sandbox's scoring):
- train_step: one step's rollouts (train.rollouts_per_step: the first tasks, grpo.group_size rollouts each, the
  profile's sampling settings and budget);
- validation: one validation point (data.validation_tasks held-out tasks, greedy);
- eval: the first --eval-tasks tasks of each code benchmark with its protocol (prompt, stop strings, eval budget),
  those of one protocol in one call as the stage samples them (vLLM's rate grows with the prompts it runs together:
  the stage's whole benchmarks run faster than this sample); a benchmark's wall time is its share of the call's,
  apportioned by the tokens it sampled (`call_sampling_s`: the call's), plus its own scoring;
- agentic: the tool-use episodes as their stages play them, with the backend's sampler only: `agentic_train_step`, a
  training step's (`agentic.rollouts_per_step` from the first training tasks) in groups of grpo.group_size (GRPO,
  SDPO, Skill-SD); `agentic_train_step_single`, the same rollouts one per task (OPSD, SDFT, LOPD: a prompt to read
  for every episode); `agentic_bank_batch`, build_bank_agentic's first batch (its tasks, seed and samples, up to
  BANK_TASKS_PER_BATCH tasks played together). Each: its seconds, policy steps and sampled tokens an episode, how
  long the episodes really run (their cap, `agentic.max_steps`, is only a bound), and their rewards: how many reach
  the agentic bank's threshold.
Each records its wall time, sampled tokens and mean completion length: what a rollout costs and how long it is at the
profile's budget, which the engines' token rates (rollout.json, gpu.json) do not say.
On a CPU engine every part is measured twice in the run, side by side: with the backend's sampler (`top_k_first`,
`top_k_top_p_cpu`) and, under `vocabulary_sort`, with vLLM's own, which runs recorded before it sampled with
(`scripts/estimate.py --check` compares such a run with the rates it sampled at). `same_sampled_tokens`: each part
sampled as many tokens with both (the tokens themselves are compared in tests/test_vllm_backend.py).
`--parts` measures some parts only and keeps the profile's other parts as the file holds them: `train_step` is the code
training step alone with the backend's sampler, which with `agentic` is the same work timed on another machine in a
few minutes (`scripts/estimate.py --check --record-rollouts FILE`: the sampling speed of the machine that recorded a
run).
Run: python scripts/bench/bench_profile_rollouts.py [--profile cpu] [--eval-tasks 64] [--parts code train_step agentic]
  [--out FILE]   (15 minutes on 2 cores with one tool-use play, before the other two; train_step alone 3 on a
  slower Zen 3; agentic alone, its three plays, 3.5 on a Zen 5)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from accelerate import Accelerator, PartialState

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from baselines.config import GRPOConfig  # noqa: E402
from lopd.core.config import resolve  # noqa: E402
from lopd.core.device import device, malloc_mode  # noqa: E402
from lopd.core.loop import validate  # noqa: E402
from lopd.core.models import load_tokenizer  # noqa: E402
from lopd.core.rollout import greedy_params, make_backend, sampling_params  # noqa: E402
from lopd.core.sampling import SamplingParams  # noqa: E402
from lopd.core.vllm_backend import CPU_SAMPLER, VLLMBackend, vocabulary_sort_sampler  # noqa: E402
from lopd.latent.bank import BANK_TASKS_PER_BATCH, bank_batch_seed  # noqa: E402
from pipelines.common import BASE_MODEL_DIR, for_domain, run_stage, training_domain  # noqa: E402
from pipelines.domains.code import training_tasks  # noqa: E402
from pipelines.evaluate import NotAvailable, code_benchmark, evaluate_together, protocol_groups  # noqa: E402
from scripts.wall_time import this_cpu  # noqa: E402

OUT = REPO / "reports" / "perf" / "profile_rollouts.json"


def part(wall_s: float, tokens: int, rollouts: int) -> dict:
    return {"rollouts": rollouts, "wall_s": round(wall_s, 1), "sampled_tokens": tokens,
            "mean_tokens": round(tokens / rollouts, 1)}


def measure_train_step(cfg, backend, tokenizer, split) -> dict:
    """One code training step's rollouts: the first training tasks of `split`, grpo.group_size rollouts each."""
    group = cfg.section(GRPOConfig).group_size
    tasks = split.tasks[:cfg.train.rollouts_per_step // group]
    start = time.perf_counter()
    rollouts = split.collect(backend, tokenizer, tasks, sampling_params(cfg, cfg.sampling.max_new_tokens), cfg.seed,
                             group)
    return {**part(time.perf_counter() - start, sum(t.num_action_tokens for t in rollouts), len(rollouts)),
            "mean_prompt_tokens": round(sum(len(t.turns[0].context_ids) for t in rollouts) / len(rollouts), 1)}


def measure_parts(cfg, backend, tokenizer) -> dict:
    """The profile's train_step, validation and eval parts, timed on `backend` (its prefix cache emptied first, so a
    second measurement finds what the first did)."""
    if isinstance(backend, VLLMBackend):
        backend.llm.reset_prefix_cache()
    parts: dict = {}
    with training_tasks(cfg) as split:
        parts["train_step"] = measure_train_step(cfg, backend, tokenizer, split)
        start = time.perf_counter()
        before = backend.stats["sampled_tokens"]
        validate(backend, tokenizer, split.collect, split.validation, greedy_params(cfg.sampling.max_new_tokens), 1,
                 cfg.seed, Accelerator(cpu=device().type == "cpu"))
        parts["validation"] = part(time.perf_counter() - start, backend.stats["sampled_tokens"] - before,
                                   len(split.validation))
    parts["eval"] = {}
    available = {}
    for benchmark in cfg.benchmarks:
        try:
            available[benchmark] = code_benchmark(cfg, benchmark)
        except NotAvailable as err:
            parts["eval"][benchmark] = str(err)
    for together in protocol_groups(available):
        results = evaluate_together(cfg, "bench", {name: available[name] for name in together}, backend, tokenizer,
                                    None, PartialState())
        summaries = [results[name]["summary"] for name in together]
        call_s, call_tokens = summaries[0]["sampling_s"], sum(s["generated_tokens"] for s in summaries)
        for name, summary in zip(together, summaries):
            # the call's time apportioned by sampled tokens: each benchmark at the call's rate
            sampling_s = call_s * summary["generated_tokens"] / call_tokens
            parts["eval"][name] = {**part(sampling_s + summary["scoring_s"], summary["generated_tokens"],
                                          summary["n_tasks"]), "scoring_s": summary["scoring_s"],
                                   "sampled_together": together, "call_sampling_s": call_s}
    return parts


def measure_agentic_play(backend, tokenizer, split, tasks, params, seed: int, rollouts_per_task: int,
                         threshold: float) -> dict:
    """`rollouts_per_task` episodes of each of `tasks` played together, as a stage plays them (the engine's prefix
    cache emptied first): seconds, policy steps and sampled tokens an episode, how long the episodes run (their cap,
    `agentic.max_steps`, is only a bound), and how many rewards reach the bank's `threshold`."""
    if isinstance(backend, VLLMBackend):
        backend.llm.reset_prefix_cache()
    start = time.perf_counter()
    played = split.collect(backend, tokenizer, tasks, params, seed, rollouts_per_task)
    wall_s = time.perf_counter() - start
    steps, tokens = sum(t.behaviour.steps for t in played), sum(t.num_action_tokens for t in played)
    return {"tasks": len(tasks), "episodes": len(played), "rewards": [round(t.reward, 4) for t in played],
            "bank_success_threshold": threshold, "bank_successes": sum(t.reward >= threshold for t in played),
            "wall_s": round(wall_s, 1), "policy_steps": steps, "sampled_tokens": tokens,
            "seconds_per_episode": round(wall_s / len(played), 2), "mean_steps": round(steps / len(played), 2),
            "mean_step_tokens": round(tokens / steps, 1),
            "mean_first_context_tokens": round(sum(len(t.turns[0].context_ids) for t in played) / len(played), 1),
            "mean_sequence_tokens": round(sum(len(t.token_ids) for t in played) / len(played), 1)}


def measure_agentic(cfg, backend, tokenizer) -> dict:
    """The agentic episodes as the stages play them: a training step's (`agentic.rollouts_per_step` from the first
    training tasks) in groups of grpo.group_size (GRPO, SDPO, Skill-SD) and one per task (OPSD, SDFT, LOPD: a prompt
    of its own for every episode), and the bank's first batch (build_bank_agentic's tasks, seed and samples)."""
    agentic = for_domain(cfg, "agentic")
    rollouts, group = agentic.train.rollouts_per_step, agentic.section(GRPOConfig).group_size
    params = sampling_params(agentic, agentic.sampling.max_new_tokens)
    threshold = agentic.bank.success_threshold  # agentic.bank_success_threshold: what build_bank_agentic keeps
    with training_domain(agentic, "agentic") as split:
        def play(tasks, seed: int, per_task: int) -> dict:
            return measure_agentic_play(backend, tokenizer, split, tasks, params, seed, per_task, threshold)

        banked = split.tasks[:agentic.bank.task_limit][:BANK_TASKS_PER_BATCH]
        return {"agentic_train_step": play(split.tasks[:rollouts // group], agentic.seed, group),
                "agentic_train_step_single": play(split.tasks[:rollouts], agentic.seed, 1),
                "agentic_bank_batch": play(banked, bank_batch_seed(agentic, 0, 0), agentic.bank.samples_per_task)}


def sampled_tokens(parts: dict) -> list[int]:
    return [parts["train_step"]["sampled_tokens"], parts["validation"]["sampled_tokens"],
            *(e["sampled_tokens"] for e in parts["eval"].values() if isinstance(e, dict))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--eval-tasks", type=int, default=64,
                        help="tasks per code benchmark, sampled at once as the evaluation does (the concurrency sets "
                             "the rate)")
    parser.add_argument("--parts", nargs="+", choices=("code", "train_step", "agentic"), default=["code", "agentic"],
                        help="code: train_step, validation and eval (with both CPU samplers); train_step: the code "
                             "training step alone (the backend's sampler); agentic: the tool-use plays (agentic_*)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    cfg = resolve({"profile": args.profile, "eval": {"task_limit": args.eval_tasks}})
    tokenizer = load_tokenizer(BASE_MODEL_DIR)
    backend = make_backend(BASE_MODEL_DIR, tokenizer, cfg, cfg.sampling.batch_size)
    backend.generate([tokenizer("warm-up")["input_ids"]] * 2, SamplingParams(max_new_tokens=4), seed=0)
    result = {"profile": cfg.profile, "model": cfg.model.name, "backend": type(backend).__name__,
              "machine": this_cpu(), "malloc": malloc_mode(),
              "max_new_tokens": cfg.sampling.max_new_tokens, "eval_max_new_tokens": cfg.eval.max_new_tokens}
    cpu_engine = isinstance(backend, VLLMBackend) and not backend.cuda
    if cpu_engine:
        result["sampler"] = CPU_SAMPLER
    if "code" in args.parts:
        result.update(measure_parts(cfg, backend, tokenizer))
        if cpu_engine:
            with vocabulary_sort_sampler():
                result["vocabulary_sort"] = measure_parts(cfg, backend, tokenizer)
            result["same_sampled_tokens"] = sampled_tokens(result) == sampled_tokens(result["vocabulary_sort"])
    elif "train_step" in args.parts:
        with training_tasks(cfg) as split:
            result["train_step"] = measure_train_step(cfg, backend, tokenizer, split)
    if "agentic" in args.parts:
        result.update(measure_agentic(cfg, backend, tokenizer))
    out = Path(args.out)
    entries = json.loads(out.read_text()) if out.exists() else {}
    entries[cfg.profile] = {**entries.get(cfg.profile, {}), **result}  # the parts not measured stay as they were
    out.write_text(json.dumps(entries, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    run_stage(main)
