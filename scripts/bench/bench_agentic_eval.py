"""An agentic evaluation's episodes, benchmark by benchmark against all together -> reports/perf/agentic_eval.json.

On the profile's rollout engine and the prepared model (models/base), every agentic benchmark of the profile is
played twice, side by side in one run, with the same seed and a fresh prefix cache each time:
- apart: each benchmark's episodes in their own batches (how eval_agentic played them before 2026-12-02);
- together: the benchmarks with one step cap in one batch of episodes (`pipelines.evaluate_agentic.play_groups`),
  as the stage plays them now: every policy step samples every running episode of them all.
Each records its wall time, episodes, policy steps and sampled tokens; `speedup` is apart's wall over together's.
`make estimate` reads together's seconds per episode for the evaluation stages of the profile measured. The draws
differ between the two (a step's batch holds other rows), so the scores are not compared.
Run: python scripts/bench/bench_agentic_eval.py [--profile cpu]  (about 15 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from accelerate import PartialState

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from evaluation.agentic.benchmarks import load_benchmark  # noqa: E402
from lopd.core.config import resolve  # noqa: E402
from lopd.core.device import malloc_mode  # noqa: E402
from lopd.core.models import load_tokenizer  # noqa: E402
from lopd.core.rollout import make_backend, sampling_params  # noqa: E402
from lopd.core.vllm_backend import VLLMBackend  # noqa: E402
from pipelines.common import BASE_MODEL_DIR, run_stage  # noqa: E402
from pipelines.evaluate_agentic import play, play_groups, user_simulator  # noqa: E402
from scripts.wall_time import this_cpu  # noqa: E402

OUT = REPO / "reports" / "perf" / "agentic_eval.json"


def measure(cfg, backend, tokenizer, user, groups: list[list[str]]) -> dict:
    """Play every group of benchmarks (fresh environments), timed end to end."""
    if isinstance(backend, VLLMBackend):
        backend.llm.reset_prefix_cache()
    params = sampling_params(cfg, cfg.agentic.max_step_tokens)
    sampled, start, episodes, steps = backend.stats["sampled_tokens"], time.perf_counter(), 0, 0
    for names in groups:
        benches = [load_benchmark(cfg, name, user) for name in names]
        try:
            played = play(cfg, benches, backend, tokenizer, params, lambda task_id, env: env, PartialState())
        finally:
            for bench in benches:
                bench.close()
        episodes += sum(len(t) for t in played.values())
        steps += sum(t.behaviour.steps for trajectories in played.values() for t in trajectories)
    wall = time.perf_counter() - start
    tokens = backend.stats["sampled_tokens"] - sampled
    return {"batches_of_benchmarks": len(groups), "episodes": episodes, "policy_steps": steps,
            "sampled_tokens": tokens, "wall_s": round(wall, 1), "seconds_per_episode": round(wall / episodes, 2),
            "tokens_per_s": round(tokens / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    cfg = resolve({"profile": args.profile})
    tokenizer = load_tokenizer(BASE_MODEL_DIR)
    backend = make_backend(BASE_MODEL_DIR, tokenizer, cfg, cfg.eval.batch_size)
    user = user_simulator(cfg) if "acebench_multi_turn" in cfg.agentic.benchmarks else None
    available = {}
    for name in cfg.agentic.benchmarks:
        try:
            bench = load_benchmark(cfg, name, user)
        except (OSError, ValueError, ImportError) as err:
            sys.exit(f"error: agentic benchmark {name}: {str(err).splitlines()[0]}")
        available[name] = bench
        bench.close()
    apart = measure(cfg, backend, tokenizer, user, [[name] for name in available])
    together = measure(cfg, backend, tokenizer, user, play_groups(available))
    result = {"profile": cfg.profile, "model": cfg.model.name, "backend": type(backend).__name__,
              "machine": this_cpu(), "malloc": malloc_mode(), "benchmarks": list(available),
              "task_limit": cfg.agentic.task_limit,
              "max_step_tokens": cfg.agentic.max_step_tokens, "eval_batch_size": cfg.eval.batch_size,
              "apart": apart, "together": together, "speedup": round(apart["wall_s"] / together["wall_s"], 2)}
    out = Path(args.out)
    entries = json.loads(out.read_text()) if out.exists() else {}
    entries[cfg.profile] = result
    out.write_text(json.dumps(entries, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    run_stage(main)
