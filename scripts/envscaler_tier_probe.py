"""How the base model does on one envscaler-mini tier -> reports/probes/envscaler_<tier>.json (docs/agentic.md,
"The hinted tier").

Plays `--tasks` training tasks of the tier (evenly spaced over the tier's training tasks) `--samples` times each with
the project's episode driver at the profile's sampling settings, and reports per task the rewards and the no-action
floor (the reward of the untouched environment), and over all: the tasks whose samples' rewards differ (a GRPO group
there has signal), the episodes above their task's floor and the episodes solved (reward 1.0: what the bank keeps).

Run: python scripts/envscaler_tier_probe.py [--tier hinted|base] [--tasks 24] [--samples 4] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

from evaluation.agentic import envscaler
from evaluation.agentic.envscaler_split import envscaler_data
from lopd.core.config import REPO_ROOT, resolve
from lopd.core.models import load_tokenizer
from lopd.core.multiturn import run_episodes
from lopd.core.rollout import evenly_spaced, make_backend, sampling_params
from pipelines.common import run_stage

BATCH = 32
"""Episodes sampled together."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", choices=("base", "hinted"), default="hinted")
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="policy steps per episode")
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args()
    if min(args.tasks, args.samples, args.steps) < 1:
        parser.error("--tasks, --samples and --steps must be >= 1")
    # envscaler-mini whatever the profile says about official EnvScaler files
    cfg = resolve({"profile": args.profile, "agentic": {"envscaler_envs": None, "envscaler_tasks": None}})
    model_dir = REPO_ROOT / "models" / "base"
    tokenizer = load_tokenizer(model_dir)
    backend = make_backend(model_dir, tokenizer, cfg, BATCH)
    params = sampling_params(cfg, cfg.agentic.max_step_tokens)
    data = envscaler_data(cfg)
    tasks = evenly_spaced([t for t in data.train if (t.tier or "base") == args.tier], args.tasks)
    runs = [(task, sample) for task in tasks for sample in range(args.samples)]
    start = time.perf_counter()
    rewards: dict[str, list[float]] = defaultdict(list)
    with envscaler.EnvScalerSuite(data.envs, tasks) as suite:
        floors = {t.task_id: envscaler.replay(suite.make(t), [])["reward"] for t in tasks}
        for i in range(0, len(runs), BATCH):
            chunk = runs[i:i + BATCH]
            for trajectory in run_episodes(backend, tokenizer, [(t.task_id, s, suite.make(t)) for t, s in chunk],
                                           params, cfg.seed + i, args.steps, cfg.agentic.max_context_tokens,
                                           tool_call_format=cfg.agentic.tool_call_format):
                rewards[trajectory.task_id].append(trajectory.reward)
    result = {
        "model": cfg.model.name, "data": data.source, "tier": args.tier, "profile": cfg.profile, "seed": cfg.seed,
        "tasks": len(tasks), "samples": args.samples, "steps": args.steps, "temperature": params.temperature,
        "tasks_with_spread": sum(len(set(r)) > 1 for r in rewards.values()),
        "episodes": len(runs),
        "episodes_above_floor": sum(r > floors[task] for task, rs in rewards.items() for r in rs),
        "episodes_solved": sum(r == 1.0 for rs in rewards.values() for r in rs),
        "wall_s": round(time.perf_counter() - start, 1),
        "per_task": {task: {"floor": floors[task], "rewards": rs} for task, rs in rewards.items()},
    }
    out = REPO_ROOT / "reports" / "probes" / f"envscaler_{args.tier}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "per_task"}))
    print(f"wrote {out}")


if __name__ == "__main__":
    run_stage(main)
