"""Stage `validate_base`: the base model's validation point on the code domain's held-out training tasks
(`data.validation_tasks`), measured as a training run measures its points (greedy, one sample a task, each process
its share). Every code training run starts from these weights, so this is the step 0 each of them would measure;
they take it from here (`lopd.core.loop.train`'s `step0`) instead of measuring it again, one time per method. Writes
results/validation/base.json: the point (null without validation tasks) and how it was measured
(`base_validation_measurement`), which a run checks before taking it; and its summary (metrics/validation_base.json)."""

from __future__ import annotations

import time

from accelerate import Accelerator, PartialState

from lopd.core.device import device
from lopd.core.loop import validate
from lopd.core.models import load_tokenizer
from lopd.core.rollout import check_backend, greedy_params, make_backend, step_seed
from lopd.core.tracking import Tracker
from pipelines.common import (
    BASE_MODEL_DIR,
    DOMAINS,
    base_validation_file,
    base_validation_measurement,
    check_sandbox,
    check_writable,
    parse_args,
    record_metrics,
    run_stage,
    training_domain,
    write_json,
)


def main() -> None:
    args, cfg = parse_args(__doc__)
    check_backend(cfg, BASE_MODEL_DIR)  # before any work: the rollout engine can run this model
    check_sandbox("code")  # and the sandbox can score code
    out, metrics = base_validation_file(), DOMAINS["code"].metrics / "validation_base.json"
    check_writable([out, metrics])
    accelerator = Accelerator(cpu=device().type == "cpu")
    with Tracker(cfg, "validate_base") as tracker, training_domain(cfg, "code") as (_, collect, source, validation):
        start = time.perf_counter()
        point = None
        if validation:
            tokenizer = load_tokenizer(BASE_MODEL_DIR)
            backend = make_backend(BASE_MODEL_DIR, tokenizer, cfg, cfg.sampling.batch_size)
            point = validate(backend, tokenizer, collect, validation, greedy_params(cfg.sampling.max_new_tokens), 1,
                             step_seed(cfg.seed, 0, accelerator.process_index), accelerator)
        if not PartialState().is_main_process:  # one process writes the outputs
            return
        write_json(out, {"data": source, "step0": point, "measurement": base_validation_measurement(
            cfg, validation, accelerator.num_processes)})
        summary = {"val_reward": point and point["val_reward"], "val_n": point["val_n"] if point else 0,
                   "wall_s": round(time.perf_counter() - start, 1)}
        record_metrics(tracker, metrics, "validate_base", summary)
        tracker.log_artifact(out)
    measured = f"{point['val_reward']:.3f} over {point['val_n']} validation tasks" if point else \
        "no validation tasks (data.validation_tasks: 0)"
    print(f"validate_base: {measured}; wrote {out}")


if __name__ == "__main__":
    run_stage(main)
