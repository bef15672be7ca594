"""Well-formed tool-call rate of a model on envscaler-mini, strict vs lenient parsing -> reports/perf/tool_calls.json.

Plays every envscaler-mini task (training and test split, as `evaluation.agentic.envscaler_split` loads them) with
the project's episode driver (`lopd.core.multiturn.run_episodes`), `--samples` episodes per task of at most
`--steps` policy steps. Sampled once, scored twice: each episode's first policy step (whose sampling cannot depend
on the parser) is parsed under both `agentic.tool_call_format`s, so the two rates are over the very same texts.
Reported per format: the share of first steps holding a well-formed call, with its Wilson 95% CI, and the share
holding only a malformed call attempt. Later steps depend on the format the driver played with (`--play-format`,
default lenient: a fenced call is executed and the episode goes on), so their rates are reported separately.

Run: python scripts/bench/tool_call_rate.py [--model-dir models/base] [--steps 3] [--samples 1] [--step-tokens 256]
     [--task-limit N] [--profile cpu]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from evaluation.agentic import envscaler
from evaluation.agentic.envscaler_split import envscaler_data
from evaluation.stats import wilson_interval
from lopd.core.config import REPO_ROOT, repo_relative, resolve
from lopd.core.models import load_tokenizer
from lopd.core.multiturn import TOOL_CALL_FORMATS, parse_step, run_episodes
from lopd.core.rollout import make_backend, sampling_params
from pipelines.common import run_stage


def rates(texts: list[str]) -> dict:
    """Per format: steps with a well-formed call (rate and Wilson 95% CI) and steps with only a malformed attempt."""
    out: dict = {"n_steps": len(texts)}
    for mode in TOOL_CALL_FORMATS:
        parsed = [parse_step(text, mode) for text in texts]
        well_formed = sum(bool(p.calls) for p in parsed)
        malformed = sum(bool(p.errors) and not p.calls for p in parsed)
        entry: dict = {"well_formed": well_formed, "malformed_only": malformed}
        if texts:
            rate = well_formed / len(texts)
            low, high = wilson_interval(rate, len(texts))
            entry.update(well_formed_rate=round(rate, 4), ci_low=round(low, 4), ci_high=round(high, 4),
                         malformed_rate=round(malformed / len(texts), 4))
        out[mode] = entry
    return out


def model_name(model_dir: Path) -> str:
    """What the folder holds: the upstream GGUF an embedded model was converted from, else its config's name."""
    for name, key in (("gguf_provenance.json", "upstream"), ("config.json", "_name_or_path")):
        try:
            if value := json.loads((model_dir / name).read_text()).get(key):
                return value
        except (OSError, ValueError, AttributeError):
            continue
    return model_dir.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default=str(REPO_ROOT / "models" / "base"))
    parser.add_argument("--steps", type=int, default=3, help="policy steps per episode")
    parser.add_argument("--samples", type=int, default=1, help="episodes per task")
    parser.add_argument("--step-tokens", type=int, default=256, help="tokens sampled per policy step")
    parser.add_argument("--task-limit", type=int, default=None, help="only the first N tasks (train, then test)")
    parser.add_argument("--profile", default="cpu", help="config profile for the sampling settings and context budget")
    parser.add_argument("--batch", type=int, default=None, help="episodes sampled together (default eval.batch_size)")
    parser.add_argument("--play-format", choices=TOOL_CALL_FORMATS, default="lenient",
                        help="how the driver reads the calls it executes (matters from the second step on)")
    parser.add_argument("--examples", type=int, default=3, help="first-step texts kept in the report")
    parser.add_argument("--out", default=str(REPO_ROOT / "reports" / "perf" / "tool_calls.json"))
    args = parser.parse_args()
    if min(args.steps, args.samples, args.step_tokens) < 1:
        parser.error("--steps, --samples and --step-tokens must be >= 1")

    # envscaler-mini whatever the profile says about official EnvScaler files
    cfg = resolve({"profile": args.profile, "agentic": {"envscaler_envs": None, "envscaler_tasks": None}})
    model_dir = Path(args.model_dir)
    tokenizer = load_tokenizer(model_dir)
    batch = args.batch or cfg.eval.batch_size
    backend = make_backend(model_dir, tokenizer, cfg, batch)
    params = sampling_params(cfg, args.step_tokens)
    data = envscaler_data(cfg)
    tasks = [*data.train, *data.test][:args.task_limit]
    runs = [(task, sample) for task in tasks for sample in range(args.samples)]

    start = time.perf_counter()
    trajectories = []
    with envscaler.EnvScalerSuite(data.envs, tasks) as suite:
        for i in range(0, len(runs), batch):
            chunk = runs[i:i + batch]
            trajectories += run_episodes(backend, tokenizer, [(t.task_id, s, suite.make(t)) for t, s in chunk], params,
                                         cfg.seed + i, args.steps, cfg.agentic.max_context_tokens,
                                         tool_call_format=args.play_format)
    wall_s = time.perf_counter() - start

    # decoded as the driver decodes a step before parsing it
    steps = [[tokenizer.decode(turn.action_ids, skip_special_tokens=True) for turn in t.turns if turn.action_ids]
             for t in trajectories]
    first = [texts[0] for texts in steps if texts]
    train_ids = {t.task_id for t in data.train}
    result = {
        "model": model_name(model_dir), "model_dir": repo_relative(model_dir), "data": data.source,
        "n_tasks": {"train": sum(t.task_id in train_ids for t in tasks),
                    "test": sum(t.task_id not in train_ids for t in tasks)},
        "settings": {"steps_per_episode": args.steps, "samples_per_task": args.samples,
                     "step_tokens": args.step_tokens, "profile": cfg.profile, "seed": cfg.seed,
                     "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                     "max_context_tokens": cfg.agentic.max_context_tokens, "play_format": args.play_format,
                     "backend": type(backend).__name__},
        "n_episodes": len(trajectories),
        "first_step": {**rates(first), "note": "the same sampled first steps parsed under both formats"},
        "all_steps": {**rates([text for texts in steps for text in texts]),
                      "note": f"every policy step; steps after the first depend on play_format ({args.play_format})"},
        "episodes": {"reward_mean": sum(t.reward for t in trajectories) / max(len(trajectories), 1),
                     "ended": dict(sorted(Counter(t.behaviour.ended for t in trajectories).items()))},
        "first_step_examples": [text[:600] for text in first[:args.examples]],
        "wall_s": round(wall_s, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    summary = {mode: result["first_step"][mode] for mode in TOOL_CALL_FORMATS}
    print(json.dumps({"n_steps": result["first_step"]["n_steps"], **summary}, indent=2))
    print(f"wrote {args.out} ({wall_s:.1f}s)")


if __name__ == "__main__":
    run_stage(main)
