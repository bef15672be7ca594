"""Stage `cold_start`: train the latent composer on the experience bank (backbone frozen); writes phi_0
and the cached cold-start latents c_phi0 of every training task to checkpoints/composer."""

from __future__ import annotations

import sys

from lopd.cold_start import cold_start
from lopd.composer import FRAMINGS
from lopd.tracking import Tracker
from pipelines.common import (BANK_DIR, BASE_MODEL_DIR, COMPOSER_DIR, METRICS_DIR, coding_training_tasks, parse_args,
                              write_json)


def main() -> None:
    _, cfg = parse_args(__doc__)
    tasks, _ = coding_training_tasks(cfg)
    with Tracker(cfg, "cold_start") as tracker:
        try:
            result = cold_start(cfg, BASE_MODEL_DIR, BANK_DIR, tasks, COMPOSER_DIR, FRAMINGS["coding"], tracker)
        except (OSError, ValueError) as err:
            sys.exit(f"error: cold_start: {err}")
        result["summary"].update({"profile": cfg.profile, "seed": cfg.seed})
        path = METRICS_DIR / "cold_start.json"
        write_json(path, result)
        tracker.log_metrics({k: v for k, v in result["summary"].items() if isinstance(v, (int, float))})
        tracker.log_artifact(path)
    s = result["summary"]
    print(f"cold start: {s['n_examples']} examples, {s['steps']} steps, NLL {s['nll_before']} -> {s['nll_after']}")


if __name__ == "__main__":
    main()
