"""Stage `eval_agentic@<method>`: play a trained agentic policy on every agentic benchmark (EnvScaler-format
test split, BFCL-v3 multi-turn x4, ACEBench agent x2). Writes one metrics file with each benchmark's score and its
95% CI, and per benchmark a results file with the summary (the behaviour metrics of the paper's Table 3 too) and
every episode. Missing data gives an "n/a" summary and n_tasks 0, never a crash."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any, Callable

from accelerate import PartialState

from evaluation.agentic.acebench.user_simulator import LocalModelUser, OpenAICompatibleUser
from evaluation.agentic.benchmarks import Benchmark, load_benchmark
from evaluation.stats import score_ci
from lopd.core.config import Config, resolve_model
from lopd.core.device import device
from lopd.core.distributed import gather_shares, process_share
from lopd.core.models import load_tokenizer
from lopd.core.multiturn import run_episodes
from lopd.core.progress import progress
from lopd.core.rollout import check_backend, make_backend, process_seed, sampling_params
from lopd.core.sampling import RolloutBackend
from lopd.core.tracking import Tracker
from lopd.core.trajectory import BEHAVIOUR_KEYS, Trajectory
from pipelines.common import (
    BASE_MODEL_DIR,
    DOMAINS,
    METHOD_ARG,
    parse_args,
    replacing,
    run_stage,
    stage_name,
    trained_policy,
    write_json,
    write_metrics,
)
from pipelines.domains.agentic import check_sandbox

SCORE_KEYS = ("score", "score_ci_low", "score_ci_high", "n_tasks")
"""What DVC shows per benchmark (score 0-100 with its 95% CI); behaviour and timings are in the results files."""
EXTRA_SCORES = ("end_to_end", "process")
"""Per-episode scores a benchmark may add to its reward (ACEBench), averaged into the summary."""


def user_simulator(cfg):
    """ACEBench's simulated user: an OpenAI-compatible endpoint if configured, else a local model in-process
    (the base model unless agentic.user_model names another)."""
    a = cfg.agentic
    if a.user_base_url:
        return OpenAICompatibleUser(a.user_base_url, a.user_model or "default", a.user_api_key_env,
                                    max_tokens=a.user_max_tokens)
    model = resolve_model(a.user_model) if a.user_model else BASE_MODEL_DIR
    tokenizer = load_tokenizer(model)
    return LocalModelUser(make_backend(model, tokenizer, cfg, 1), tokenizer, sampling_params(cfg, a.user_max_tokens),
                          seed=cfg.seed)


def summarise(trajectories) -> dict:
    """Benchmark score (mean reward x 100, its 95% CI over tasks as the tables have it) and the behaviour means over
    episodes. An episode whose scoring
    failed lacks the benchmark's extra scores and counts 0 there, as in its reward."""
    if not trajectories:
        return {"note": "n/a: the benchmark has no tasks", "n_tasks": 0}
    reward = mean(t.reward for t in trajectories)
    low, high = score_ci([t.reward for t in trajectories])  # Wilson for 0/1 rewards, else (EnvScaler) the bootstrap
    out = {"score": 100 * reward, "score_ci_low": 100 * low, "score_ci_high": 100 * high, "reward_mean": reward,
           "n_tasks": len(trajectories)}
    episodes = [t.behaviour for t in trajectories]
    out.update({key: mean(getattr(b, key) for b in episodes) for key in BEHAVIOUR_KEYS})
    out["tool_calls_mean"] = mean(b.tool_calls for b in episodes)
    out.update(call_rates(episodes))
    for key in EXTRA_SCORES:
        if any(key in b.scores for b in episodes):
            out[key] = 100 * mean(b.scores.get(key, 0.0) for b in episodes)
    ends = [b.ended for b in episodes]
    out["ended"] = {reason: ends.count(reason) for reason in sorted(set(ends))}
    return out


def call_rates(episodes) -> dict:
    """Shares of all policy steps (pooled over episodes) that held a well-formed tool call (`well_formed_call_rate`)
    and a malformed call attempt (`malformed_call_rate`), as parsed under `agentic.tool_call_format`, and the steps
    counted (`n_policy_steps`). From the episode counts: per episode min(tool_calls, steps) and
    min(invalid_calls, steps), which is exact when no step holds more than one call (the format the system prompt
    asks for) and an upper bound otherwise. 0 when no episode took a step."""
    steps = sum(b.steps for b in episodes)
    well_formed = sum(min(b.tool_calls, b.steps) for b in episodes)
    malformed = sum(min(b.invalid_calls, b.steps) for b in episodes)
    return {"well_formed_call_rate": well_formed / max(steps, 1), "malformed_call_rate": malformed / max(steps, 1),
            "n_policy_steps": steps}


def episode_record(t: Trajectory) -> dict:
    """One episode of the results file: task, reward, stop flag, behaviour, scores and the response trace
    (score_notes and env_error only when there are any)."""
    b = t.behaviour
    assert b is not None, "a multi-turn episode carries its behaviour"
    record = {"task_id": t.task_id, "reward": t.reward, "stopped": t.stopped,
              **{f.name: getattr(b, f.name) for f in dataclasses.fields(b)
                 if f.name not in ("score_notes", "env_error")},
              "response": t.response}
    if b.score_notes:
        record["score_notes"] = b.score_notes
    if b.env_error:
        record["env_error"] = b.env_error
    return record


Wrap = Callable[[RolloutBackend, object], tuple[RolloutBackend, dict[str, Any], Callable[[str, Any], Any]]]
"""How an evaluation changes the backend (pipelines/evaluate_base_composer.py: latent context): (backend, tokenizer)
-> (backend to sample from, what to record in the summaries, (task id, environment) -> the environment to play)."""


def play_groups(benches: dict[str, Benchmark]) -> list[list[str]]:
    """The benchmarks played together, in one batch of episodes: those with the same step cap (one step of a batch
    samples every running episode, so fuller batches sample faster), in `benches`' order."""
    groups: dict[int, list[str]] = {}
    for name, bench in benches.items():
        groups.setdefault(bench.max_steps, []).append(name)
    return list(groups.values())


def chunks(n: int, size: int) -> list[range]:
    """`n` items in as few consecutive chunks of at most `size` as can hold them, their sizes within one of each
    other (35 in chunks of 32: 17 and 18, not 32 and a tail of 3)."""
    count = -(-n // size) if n else 0
    bounds = [n * i // count for i in range(count + 1)] if count else [0]
    return [range(first, last) for first, last in zip(bounds, bounds[1:])]


def play(cfg: Config, benches: list[Benchmark], backend: RolloutBackend, tokenizer, params,
         environment: Callable[[str, Any], Any], state: PartialState) -> dict[str, list[Trajectory]]:
    """Every episode of `benches` (one step cap), each process its share in chunks of at most `eval.batch_size`
    environments alive at once; every process's trajectories, per benchmark in its episodes' order."""
    episodes = [(tid, env) for bench in benches for tid, env in bench.episodes]
    share = [episodes[i] for i in process_share(len(episodes))]
    seed = process_seed(cfg.seed, state.process_index)
    mine: list[Trajectory] = []
    a = cfg.agentic
    with progress(total=len(share), desc="+".join(b.name for b in benches), unit="ep") as bar:
        for chunk in chunks(len(share), cfg.eval.batch_size):
            played = [(tid, 0, environment(tid, env)) for tid, env in share[chunk.start:chunk.stop]]
            mine += run_episodes(backend, tokenizer, played, params, seed + chunk.start, benches[0].max_steps,
                                 a.max_context_tokens, tool_call_format=a.tool_call_format)
            bar.update(len(chunk))
    trajectories = gather_shares(mine, len(episodes))
    out, first = {}, 0
    for bench in benches:
        out[bench.name] = trajectories[first:first + len(bench.episodes)]
        first += len(bench.episodes)
    return out


def main() -> None:
    args, cfg = parse_args(__doc__, method=METHOD_ARG)
    check_backend(cfg, BASE_MODEL_DIR)  # before any work: the rollout engine can run this model
    run(cfg, args.method, lambda: trained_policy("agentic", args.method))


def run(cfg: Config, method: str, model_dir: Callable[[], Path], wrap: Wrap | None = None) -> None:
    """Play `model_dir()` (called inside the stage's MLflow run) on every agentic benchmark as the results of `method`;
    `wrap` changes the backend and the environments (prompt embeddings are then turned on)."""
    domain = DOMAINS["agentic"]
    a = cfg.agentic
    stage = stage_name("eval", "agentic", method)
    if "envscaler" in a.benchmarks:  # before any work: the EnvScaler worker can run its environments
        check_sandbox()
    device()  # the process state: this process's rank among the launched ones
    state = PartialState()
    with Tracker(cfg, stage) as tracker:
        model_dir = model_dir()
        tokenizer = load_tokenizer(model_dir)
        backend = make_backend(model_dir, tokenizer, cfg, cfg.eval.batch_size, prompt_embeds=wrap is not None)
        context: dict[str, Any] = {}
        environment = lambda task_id, env: env  # noqa: E731
        if wrap is not None:
            backend, context, environment = wrap(backend, tokenizer)
        # Only ACEBench multi-turn talks to a simulated user; a local one is a second model in memory.
        try:
            user = user_simulator(cfg) if "acebench_multi_turn" in a.benchmarks else None
        except OSError as err:  # its local model is not there
            sys.exit(f"error: ACEBench simulated user: {err}")
        params = sampling_params(cfg, a.max_step_tokens)
        with contextlib.ExitStack() as opened:
            benches: dict[str, Benchmark] = {}
            notes: dict[str, str] = {}
            for name in a.benchmarks:
                try:
                    benches[name] = load_benchmark(cfg, name, user)
                except (OSError, ValueError, ImportError) as err:  # data or package missing: say so, run the rest
                    notes[name] = f"n/a: {str(err).splitlines()[0]}"
                    continue
                opened.callback(benches[name].close)
            played: dict[str, tuple[list[Trajectory], dict[str, Any]]] = {}
            for together in play_groups(benches):
                start = time.perf_counter()
                trajectories = play(cfg, [benches[name] for name in together], backend, tokenizer, params,
                                    environment, state)
                shared = {"wall_s": round(time.perf_counter() - start, 1), "played_together": together}
                played.update({name: (trajectories[name], shared) for name in together})
        if not state.is_main_process:  # every process played its share; process 0 writes
            return
        scores = {}
        with replacing(domain.results / "eval" / method) as (folder,):  # whole: no other run's benchmark stays
            folder.mkdir()
            for name in a.benchmarks:
                summary = {"method": method, **context, "benchmark": name, "profile": cfg.profile, "seed": cfg.seed,
                           "task_limit": a.benchmark_limit(name), "tool_call_format": a.tool_call_format}
                if name in notes:
                    summary.update({"note": notes[name], "n_tasks": 0})
                    trajectories = []
                else:
                    trajectories, shared = played[name]
                    bench = benches[name]
                    summary.update({"data": bench.source, "max_steps": bench.max_steps, **summarise(trajectories),
                                    **shared})
                write_json(folder / f"{name}.json",
                           {"summary": summary, "episodes": [episode_record(t) for t in trajectories]})
                tracker.log_metrics({f"{name}.{k}": v for k, v in summary.items() if isinstance(v, (int, float))})
                scores[name] = {k: summary[k] for k in SCORE_KEYS if k in summary}
                print(f"{method} on {name}: {summary.get('score', summary.get('note'))}", flush=True)
        path = domain.metrics / "eval" / f"{method}.json"
        tracker.log_to_parent(write_metrics(path, stage, scores))  # the run has them above, benchmark by benchmark
        tracker.log_artifact(path)


if __name__ == "__main__":
    run_stage(main)
