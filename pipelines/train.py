"""Stage `train@<method>` / `train_<method>` (code) and `train_agentic@<method>` / `train_<method>_agentic`: run the
shared on-policy loop for one method on a domain's training split (TACO-style coding, or EnvScaler-format tool use).
Writes the run's summary metrics, its per-step history (a DVC plot) and a PNG of its training curves."""

from __future__ import annotations

import sys
from statistics import mean

import numpy as np
from accelerate import PartialState

from evaluation.figures import draw_curves
from evaluation.stats import score_ci
from lopd.core.distributed import ProcessSplitError
from lopd.core.loop import MethodInputError, train
from lopd.core.rollout import check_backend
from lopd.core.tracking import Tracker
from pipelines.common import (
    BASE_MODEL_DIR,
    DOMAIN_ARG,
    DOMAINS,
    METHOD_ARG,
    base_validation_file,
    base_validation_step0,
    build_method,
    check_sandbox,
    check_writable,
    for_domain,
    parse_args,
    replacing,
    run_stage,
    stage_modules,
    stage_name,
    training_domain,
    write_history,
    write_metrics,
)

FINAL_VALUES = {"kl_final": "kl_mean", "delta_final": "privilege_margin", "beta_final": "beta_next"}
"""Summary name -> the per-step key whose last value it reports, for the methods that log it (Δ and β: LOPD). The
names differ from the per-step keys, which the stage's MLflow run also holds."""


def train_summary(history: list[dict], validation: list[dict]) -> dict[str, float]:
    """The run's scalars for DVC and MLflow: reward at the last step and averaged over steps, rollouts used, the
    validation reward before training and at the end (with its 95% CI over the held-out tasks), and the last step's
    distillation KL, privileged margin Δ and dual β (after the step) where the method has them."""
    if not history:
        return {"rollouts": 0}
    last = history[-1]
    return {"reward_final": last["reward"], "reward_mean": mean(h["reward"] for h in history),
            "rollouts": last["cumulative_rollouts"],
            **({"val_reward_initial": validation[0]["val_reward"], "val_reward_final": validation[-1]["val_reward"],
                **dict(zip(("val_reward_final_ci_low", "val_reward_final_ci_high"),
                           score_ci(np.array(validation[-1]["val_rewards"])))),
                "val_n": validation[-1]["val_n"]} if validation else {}),
            **{name: last[key] for name, key in FINAL_VALUES.items() if key in last}}


def main() -> None:
    args, cfg = parse_args(__doc__, method=METHOD_ARG, domain=DOMAIN_ARG)
    check_backend(cfg, BASE_MODEL_DIR)  # before any work: the rollout engine can run this model
    check_sandbox(args.domain)  # and the sandbox can score the domain
    cfg, domain = for_domain(cfg, args.domain), DOMAINS[args.domain]
    method = build_method(args.method, cfg, args.domain)
    stage = stage_name("train", args.domain, method.name)
    history_path = domain.plots / "train" / f"{method.name}.json"
    outputs = (history_path, domain.plots / "validation" / f"{method.name}.json", history_path.with_suffix(".png"),
               domain.metrics / "train" / f"{method.name}.json")
    check_writable([*outputs, domain.checkpoints / method.name])  # before the checkpoint is replaced
    with (Tracker(cfg, stage, system_metrics=True, resumable=True) as tracker,
          training_domain(cfg, args.domain) as (tasks, collect, source, validation)):
        try:
            validates = bool(validation) and method.trains
            step0 = base_validation_step0(cfg, validation, PartialState().num_processes) if validates else None
            if validates and step0 is None and PartialState().is_main_process:
                print(f"{base_validation_file()}: no base model point measured as this run measures: it measures its "
                      "own step 0")
            result = train(cfg, method, tasks, collect, BASE_MODEL_DIR, domain.checkpoints / method.name, tracker,
                           stage_modules("pipelines.train", domain=args.domain), validation, step0=step0)
        except (FileNotFoundError, MethodInputError, ProcessSplitError) as err:  # e.g. a missing upstream output
            sys.exit(f"error: {err}")
        if not PartialState().is_main_process:  # one process writes the run's outputs
            return
        history, validated = result["history"], result["validation"]
        summary = {**train_summary(history, validated), "n_train_tasks": len(tasks),
                   "wall_s": round(result["elapsed_s"], 1)}  # a resumed run's counts the time before the resume
        with replacing(*outputs) as (history_file, validation_file, figure_file, metrics_file):
            write_history(history_file, history)
            write_history(validation_file, validated)
            draw_curves({method.name: history + validated}, figure_file, f"{stage} ({cfg.profile} profile, {source})")
            summary = write_metrics(metrics_file, stage, summary)
        tracker.log_metrics(summary)
        tracker.log_to_parent(summary)
        for path in outputs:
            tracker.log_artifact(path)
    print(f"wrote {outputs[-1]}, {history_path} and {outputs[2]}")


if __name__ == "__main__":
    run_stage(main)
