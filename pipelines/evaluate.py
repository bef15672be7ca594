"""Stage `eval@<method>`: sample from a trained policy on every code benchmark (`benchmarks`, one model load; those of
one protocol in one engine call) and score it with each benchmark's own rules. Writes pass@1 with its 95% CI per
benchmark (metrics/eval/<method>.json), and every completion with its verdicts and the full summary
(results/eval/<method>/<benchmark>.json).

HumanEval+ / MBPP+ follow EvalPlus' own chat protocol (its HF and vLLM providers): the assistant turn is prefilled
with the response prefix and an opened python fence, generation stops at EvalPlus' stop strings (the closing fence
among them), and the text scored is the output cut there: scores comparable with EvalPlus' own runs, and no tokens
spent on the explanation or demo code an instruct model may write after its code. LiveCodeBench v5/v6 follow its
own prompt (evaluation/livecodebench.py), the last fenced block is run on every public and private test in the
sandbox; without a release file those benchmarks report n/a, naming where they looked. Each benchmark samples to its
own protocol's response budget (EvalPlus' 768 tokens, LiveCodeBench's 2,000) unless `eval.max_new_tokens` sets one."""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from accelerate import PartialState

from evaluation import evalplus_bench, livecodebench
from lopd.core.config import Config, repo_relative
from lopd.core.device import device
from lopd.core.distributed import gather_shares, process_share
from lopd.core.models import load_tokenizer
from lopd.core.rollout import check_backend, encode_prompt, make_backend, process_seed, sampling_params
from lopd.core.sampling import RolloutBackend
from lopd.core.tracking import Tracker
from pipelines.common import (
    BASE_MODEL_DIR,
    DOMAINS,
    METHOD_ARG,
    parse_args,
    record_metrics,
    replacing,
    run_stage,
    stage_name,
    trained_policy,
    write_json,
)
from pipelines.domains.code import check_sandbox

METRICS = {"pass@1": "pass@1_plus", "pass@1_ci_low": "pass@1_plus_ci_low", "pass@1_ci_high": "pass@1_plus_ci_high",
           "pass@1_base": "pass@1_base", "n_tasks": "n_tasks", "n_timeout_rechecks": "n_timeout_rechecks"}
"""What DVC shows of an evaluation (metric name -> summary key; pass@1 on EvalPlus+ tests with its 95% CI, in
percent; the samples checked twice because their first check failed only by a time limit). Timings, token counts
and the base tests' CI are in the results file."""
PROTOCOL = "evalplus-chat (response prefix + stop \\n```\\n and evalplus' EOS strings)"
"""Recorded in the summary: how EvalPlus completions were sampled (module docstring)."""
LCB_PROTOCOL = "livecodebench-chat (its system prompt and format instructions; the last fenced code block is scored)"


@dataclass
class CodeBenchmark:
    """What evaluating on one code benchmark needs: the chat messages per task, how the prompt is rendered and
    sampling stops, how a decoded completion is kept, and how the kept completions are scored (`score` dicts)."""

    messages: dict[str, list[dict]]
    continue_final: bool
    stop: tuple[str, ...]
    keep: Callable[[str], str]
    score: Callable[[dict[str, list[str]]], dict]
    protocol: str
    max_new_tokens: int
    """Response budget per sample: `eval.max_new_tokens`, or the benchmark's own where that is null."""


class NotAvailable(Exception):
    """The benchmark's data is not there: the evaluation reports n/a (with this message) instead of failing."""


def code_benchmark(cfg: Config, benchmark: str) -> CodeBenchmark:
    """The benchmark's tasks and protocol; NotAvailable when LiveCodeBench has no release, ValueError or OSError
    when data that is there cannot be read."""
    if benchmark in livecodebench.BENCHMARKS:
        release = cfg.data.livecodebench_release()
        try:
            problems = livecodebench.load_problems(release, cfg.data.livecodebench_window(benchmark))
        except FileNotFoundError:
            raise NotAvailable(f"n/a: no LiveCodeBench release at {repo_relative(release)} "
                               f"({livecodebench.HOW_TO_GET})") from None
        by_id = {p.question_id: p for p in problems[:cfg.eval.task_limit]}
        return CodeBenchmark({qid: livecodebench.build_messages(p) for qid, p in by_id.items()}, False, (),
                             lambda text: text, lambda done: livecodebench.score(by_id, done, cfg.eval.workers),
                             LCB_PROTOCOL, budget(cfg, livecodebench.MAX_NEW_TOKENS))
    data_dir = cfg.data.shared_path("evalplus")
    try:
        problems = evalplus_bench.load_problems(benchmark, data_dir, limit=cfg.eval.task_limit)
    except evalplus_bench.EvalPlusDataUnavailable as err:
        raise OSError(str(err)) from None
    return CodeBenchmark({tid: evalplus_bench.build_messages(problem, benchmark, prefill_response=True)
                          for tid, problem in problems.items()}, True, evalplus_bench.STOP_STRINGS,
                         evalplus_bench.chat_solution,
                         lambda done: evalplus_bench.score(benchmark, problems, done, data_dir=data_dir,
                                                           workers=cfg.eval.workers), PROTOCOL,
                         budget(cfg, evalplus_bench.MAX_NEW_TOKENS))


def budget(cfg: Config, own: int) -> int:
    """The response budget of a benchmark whose own protocol allows `own` tokens: `eval.max_new_tokens`, if set."""
    return own if cfg.eval.max_new_tokens is None else cfg.eval.max_new_tokens


Wrap = Callable[[RolloutBackend, object, dict[str, list[dict]], bool], tuple[RolloutBackend, dict[str, Any]]]
"""How an evaluation changes the backend (pipelines/evaluate_base_composer.py: latent context): (backend, tokenizer,
task id -> chat messages, whether the last message is continued) -> (backend to sample from, what to record in the
summary)."""


def main() -> None:
    args, cfg = parse_args(__doc__, method=METHOD_ARG)
    check_backend(cfg, BASE_MODEL_DIR)  # before any work: the rollout engine can run this model
    run(cfg, args.method, lambda: trained_policy("code", args.method))


def run(cfg: Config, method: str, model_dir: Callable[[], Path], wrap: Wrap | None = None) -> None:
    """Evaluate `model_dir()` (called inside the stage's MLflow run, so a missing model fails it) on every benchmark
    of `cfg.benchmarks`, with one model load, as the results of `method`; `wrap` changes the backend (prompt
    embeddings are then turned on). A benchmark without its data (LiveCodeBench) says n/a in its results and
    metrics; without data for any, no model is loaded."""
    stage = stage_name("eval", "code", method)
    domain = DOMAINS["code"]
    check_sandbox()  # before any work: the sandbox can score code
    device()  # the process state: this process's rank among the launched ones
    state = PartialState()
    with Tracker(cfg, stage) as tracker:
        benchmarks: dict[str, CodeBenchmark | NotAvailable] = {}
        for benchmark in cfg.benchmarks:
            try:
                benchmarks[benchmark] = code_benchmark(cfg, benchmark)
            except NotAvailable as err:
                benchmarks[benchmark] = err
            except (OSError, ValueError) as err:
                sys.exit(f"error: {stage}: {benchmark}: {err}")
        backend = tokenizer = None
        if any(isinstance(bench, CodeBenchmark) for bench in benchmarks.values()):
            policy = model_dir()
            tokenizer = load_tokenizer(policy)
            backend = make_backend(policy, tokenizer, cfg, cfg.eval.batch_size, prompt_embeds=wrap is not None)
        available = {name: bench for name, bench in benchmarks.items() if isinstance(bench, CodeBenchmark)}
        results: dict[str, dict[str, Any]] = {}
        for together in protocol_groups(available):
            results.update(evaluate_together(cfg, method, {name: available[name] for name in together}, backend,
                                             tokenizer, wrap, state) or {})
        if not state.is_main_process:  # process 0 scores and writes
            return
        scores = {}
        with replacing(domain.results / "eval" / method) as (folder,):  # whole: no other run's benchmark stays
            folder.mkdir()
            for benchmark, bench in benchmarks.items():
                if isinstance(bench, NotAvailable):
                    result = {"summary": {"benchmark": benchmark, "method": method, "profile": cfg.profile,
                                          "note": str(bench), "n_tasks": 0}, "per_task": {}}
                else:
                    result = results[benchmark]
                summary = result["summary"]
                if "note" not in summary:
                    tracker.log_metrics({f"{benchmark}.{k}": summary[k]
                                         for k in ("generated_tokens", "sampling_s", "scoring_s")})
                write_json(folder / f"{benchmark}.json", result)
                scores[benchmark] = {name: summary[key] for name, key in METRICS.items() if key in summary}
                print(f"{method} on {benchmark}: " + (summary["note"] if "note" in summary else
                                                      f"pass@1 {summary['pass@1_plus']:.2f} "
                                                      f"(base {summary['pass@1_base']:.2f})"), flush=True)
        record_metrics(tracker, domain.metrics / "eval" / f"{method}.json", stage, scores)


def protocol_groups(benchmarks: dict[str, CodeBenchmark]) -> list[list[str]]:
    """The benchmarks sampled in one engine call, in `benchmarks`' order: those whose prompts end alike and whose
    sampling stops alike, at the same budget (HumanEval+ with MBPP+; LiveCodeBench v5 with v6). The engine's batch
    then stays full to the end of the last of them, instead of draining at the end of each."""
    groups: dict[tuple, list[str]] = {}
    for name, bench in benchmarks.items():
        groups.setdefault((bench.stop, bench.continue_final, bench.max_new_tokens), []).append(name)
    return list(groups.values())


def evaluate_together(cfg: Config, method: str, benchmarks: dict[str, CodeBenchmark], backend: RolloutBackend,
                      tokenizer, wrap: Wrap | None, state: PartialState) -> dict[str, dict[str, Any]] | None:
    """Sample every task of `benchmarks` (one protocol: `protocol_groups`) in one call, each process its share
    (every process calls it); score each benchmark on process 0 and return its results file's content (summary and
    per-task verdicts and completions); None on the other processes."""
    first = next(iter(benchmarks.values()))
    context: dict[str, Any] = {}
    if wrap is not None:
        backend, context = wrap(backend, tokenizer, {tid: m for bench in benchmarks.values()
                                                     for tid, m in bench.messages.items()}, first.continue_final)
    rows = [(name, tid) for name, bench in benchmarks.items() for tid in bench.messages
            for _ in range(cfg.eval.n_samples)]
    task_prompts = {(name, tid): encode_prompt(tokenizer, m, continue_final=first.continue_final)
                    for name, bench in benchmarks.items() for tid, m in bench.messages.items()}
    prompts = [task_prompts[row] for row in rows]
    params = dataclasses.replace(sampling_params(cfg, first.max_new_tokens), stop=first.stop)
    start = time.perf_counter()
    share = process_share(len(prompts))
    mine = backend.generate([prompts[i] for i in share], params, seed=process_seed(cfg.seed, state.process_index))
    outputs = gather_shares(mine, len(prompts))
    sampling_s = time.perf_counter() - start  # to the slowest process's end
    if not state.is_main_process:
        return None
    per_task_context = context.pop("per_task", {})
    completions = {name: {tid: [] for tid in bench.messages} for name, bench in benchmarks.items()}
    generated, capped = dict.fromkeys(benchmarks, 0), dict.fromkeys(benchmarks, 0)
    for (name, tid), out in zip(rows, outputs):
        completions[name][tid].append(benchmarks[name].keep(tokenizer.decode(out.token_ids, skip_special_tokens=True)))
        generated[name] += len(out.token_ids)
        capped[name] += not out.stopped
    results = {}
    for name, bench in benchmarks.items():
        start = time.perf_counter()
        scored = bench.score(completions[name])
        scoring_s = time.perf_counter() - start
        summary = {k: v for k, v in scored.items() if k != "per_task"}
        summary.update({"benchmark": name, "method": method, **context, "profile": cfg.profile, "seed": cfg.seed,
                        "protocol": bench.protocol, "task_limit": cfg.eval.task_limit,
                        "max_new_tokens": bench.max_new_tokens, "capped_outputs": capped[name],
                        "generated_tokens": generated[name],
                        "sampled_together": list(benchmarks), "sampling_s": round(sampling_s, 1),
                        "scoring_s": round(scoring_s, 1)})
        results[name] = {"summary": summary, "per_task": {
            tid: {**scored["per_task"][tid], "completions": completions[name][tid], **per_task_context.get(tid, {})}
            for tid in bench.messages}}
    return results


if __name__ == "__main__":
    run_stage(main)
