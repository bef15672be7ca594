"""Stage `prepare_model`: materialise the configured base model as models/base (save_pretrained)."""

from __future__ import annotations

import sys
import time

from lopd.core.config import resolve_model
from lopd.core.models import prepare_base_model
from lopd.core.tracking import Tracker
from pipelines.common import BASE_MODEL_DIR, parse_args, stage_name


def main() -> None:
    _, cfg = parse_args(__doc__)
    with Tracker(cfg, stage_name("prepare_model")) as tracker:
        start = time.perf_counter()
        try:  # builds beside models/base and swaps it in only once it loads: a failure keeps the old model
            prepare_base_model(resolve_model(cfg.model.name), BASE_MODEL_DIR, seed=cfg.seed)
        except (OSError, ValueError) as err:
            sys.exit(f"error: model {cfg.model.name!r}: {' '.join(str(err).split())}")
        tracker.log_metrics({"wall_s": time.perf_counter() - start})
    print(f"prepared {cfg.model.name} -> {BASE_MODEL_DIR}")


if __name__ == "__main__":
    main()
