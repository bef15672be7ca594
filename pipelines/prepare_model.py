"""Stage `prepare_model`: materialise the configured base model as models/base (save_pretrained); its metrics hold
the build time and, for a model converted from a GGUF file, the largest logit difference to the GGUF model."""

from __future__ import annotations

import sys
import time

from safetensors import SafetensorError

from lopd.core.config import resolve_model
from lopd.core.jsonl import read_json
from lopd.core.models import CONVERSION_CHECK_FILE, prepare_base_model
from lopd.core.tracking import Tracker
from pipelines.common import BASE_MODEL_DIR, METRICS_DIR, parse_args, record_metrics, run_stage, stage_name


def main() -> None:
    _, cfg = parse_args(__doc__)
    stage = stage_name("prepare_model")
    with Tracker(cfg, stage) as tracker:
        start = time.perf_counter()
        try:  # builds beside models/base and swaps it in only once it loads: a failure keeps the old model
            prepare_base_model(resolve_model(cfg.model.name), BASE_MODEL_DIR, seed=cfg.seed)
        except (OSError, ValueError) as err:
            sys.exit(f"error: model {cfg.model.name!r}: {' '.join(str(err).split())}")
        except SafetensorError as err:  # how safetensors says a write failed (a full disk, a file-size limit)
            sys.exit(f"error: {BASE_MODEL_DIR}: cannot save model {cfg.model.name!r} ({type(err).__name__}: "
                     f"{str(err).splitlines()[0]}); the previous model, if any, is kept")
        metrics = {"wall_s": round(time.perf_counter() - start, 1)}
        if (check := BASE_MODEL_DIR / CONVERSION_CHECK_FILE).exists():
            metrics["max_abs_logit_diff"] = read_json(check)["max_abs_logit_diff"]
        record_metrics(tracker, METRICS_DIR / "model.json", stage, metrics)
    print(f"prepared {cfg.model.name} -> {BASE_MODEL_DIR}")


if __name__ == "__main__":
    run_stage(main)
