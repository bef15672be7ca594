"""Stage `train@<method>`: run the shared on-policy loop for one method on the coding training split."""

from __future__ import annotations

import sys
import time

from lopd.loop import MethodInputError, train
from lopd.rollout import single_turn
from lopd.tracking import Tracker
from pipelines.common import (BASE_MODEL_DIR, CHECKPOINTS_DIR, METRICS_DIR, build_method, coding_training_tasks,
                              parse_args, write_json)


def main() -> None:
    args, cfg = parse_args(__doc__, method={"required": True, "help": "method name, e.g. grpo"})
    method = build_method(args.method, cfg)
    tasks, score = coding_training_tasks(cfg)
    with Tracker(cfg, f"train@{method.name}") as tracker:
        start = time.perf_counter()
        try:
            result = train(cfg, method, tasks, single_turn(score), BASE_MODEL_DIR, CHECKPOINTS_DIR / method.name, tracker)
        except (FileNotFoundError, MethodInputError) as err:  # a missing upstream output: say which stage to run
            sys.exit(f"error: {err}")
        result["summary"].update({"profile": cfg.profile, "seed": cfg.seed, "n_train_tasks": len(tasks),
                                  "wall_s": round(time.perf_counter() - start, 1)})
        path = METRICS_DIR / "train" / f"{method.name}.json"
        write_json(path, result)
        tracker.log_artifact(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
