"""Two training runs' validation rewards, compared task by task -> JSON.

Each run's `plots/validation/<method>.json` (the loop's validation points: greedy reward on the same held-out tasks,
`val_rewards` in task order) gives, at its last point: each run's mean with its 95% CI and the paired difference
(A - B) with its paired bootstrap 95% CI over the tasks (evaluation/stats.py). A difference is called only where that
CI excludes 0. Used for docs/configuration.md's LoRA comparison.

Run: python scripts/paired_validation.py A.json B.json --labels lora full [--out reports/lora_grpo_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evaluation.stats import paired_bootstrap_diff, score_ci
from lopd.core.jsonl import read_json


def final_point(path: Path) -> dict:
    points = read_json(path)
    if not points or "val_rewards" not in points[-1]:
        raise ValueError(f"{path}: no validation point with per-task rewards (val_rewards)")
    return points[-1]


def compare(a: dict, b: dict) -> dict:
    """The two points' means with CIs and their paired difference; the tasks must be the same, in the same order."""
    rewards_a, rewards_b = a["val_rewards"], b["val_rewards"]
    if len(rewards_a) != len(rewards_b):
        raise ValueError(f"the runs validated on different task counts ({len(rewards_a)} vs {len(rewards_b)})")
    diff, low, high = paired_bootstrap_diff(rewards_a, rewards_b)
    return {"n": len(rewards_a), "steps": [a["step"], b["step"]],
            "rollouts": [a["cumulative_rollouts"], b["cumulative_rollouts"]],
            "means": [sum(rewards_a) / len(rewards_a), sum(rewards_b) / len(rewards_b)],
            "cis": [score_ci(rewards_a), score_ci(rewards_b)],
            "difference": diff, "difference_ci": [low, high], "called": not low <= 0 <= high}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--labels", nargs=2, default=["a", "b"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        final = compare(final_point(args.a), final_point(args.b))
    except ValueError as err:  # a file without per-task rewards, or runs on different tasks
        sys.exit(f"error: {err}")
    result = {"labels": args.labels, "files": [str(args.a), str(args.b)], "final": final}
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    from pipelines.common import run_stage

    run_stage(main)
