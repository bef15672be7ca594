"""Stage `cold_start` (code) / `cold_start_agentic`: train the latent composer on a domain's experience bank
(backbone frozen); writes phi_0 and the cached cold-start latents c_phi0 of every training task, the run's metrics
and its per-step NLL (a DVC plot), and the composer's privilege on held-out trajectories (lopd_privilege.json: the
teacher's NLL with no context, latent context and text; privilege.json: the latent NLL every few steps)."""

from __future__ import annotations

import sys

from accelerate import PartialState

from lopd.core.tracking import Tracker
from lopd.latent.cold_start import cold_start
from lopd.latent.composer import FRAMINGS
from lopd.latent.privilege import share_note
from pipelines.common import (
    BASE_MODEL_DIR,
    DOMAIN_ARG,
    DOMAINS,
    for_domain,
    parse_args,
    record_metrics,
    run_stage,
    stage_name,
    training_domain,
    write_history,
)

METRIC_KEYS = ("n_examples", "steps", "nll_examples", "nll_before", "nll_after", "wall_s")
PRIVILEGE_KEYS = ("n_trajectories", "nll_none", "nll_latent", "nll_text", "nll_text_retrieved", "nll_text_self",
                  "share_closed")


def main() -> None:
    args, cfg = parse_args(__doc__, domain=DOMAIN_ARG)
    cfg, domain = for_domain(cfg, args.domain), DOMAINS[args.domain]
    stage = stage_name("cold_start", args.domain)
    with Tracker(cfg, stage, resumable=True) as tracker, training_domain(cfg, args.domain) as split:
        try:
            result = cold_start(cfg, BASE_MODEL_DIR, domain.bank, split.tasks, domain.composer, FRAMINGS[domain.name],
                                tracker)
        except (OSError, ValueError) as err:
            sys.exit(f"error: {stage}: {err}")
        if not PartialState().is_main_process:  # every process trained; process 0 writes
            return
        s, held_out = result["summary"], result["held_out"]
        write_history(domain.plots / "cold_start.json", result["history"])
        write_history(domain.plots / "privilege.json", result["privilege_history"])
        record_metrics(tracker, domain.metrics / "cold_start.json", stage, {k: s[k] for k in METRIC_KEYS})
        record_metrics(tracker, domain.metrics / "lopd_privilege.json", stage,
                       {"held_out": {k: held_out.get(k) for k in PRIVILEGE_KEYS}})
    for note in (s.get("note"), held_out.get("note")):
        if note:
            print(f"{stage}: {note}")
    print(f"cold start: {s['n_examples']} examples, {s['steps']} steps, NLL {s['nll_before']} -> {s['nll_after']}")
    if held_out["n_trajectories"]:
        retrieval = "self-retrieval" if held_out["text_retrieval"] == "self" else "the cold start's retrieval"
        print(f"held out: {held_out['n_trajectories']} trajectories of {len(held_out['tasks'])} tasks, NLL none "
              f"{held_out['nll_none']:.4f}, latent {held_out['nll_latent']:.4f}, text {held_out['nll_text']:.4f} "
              f"(under {retrieval}): {share_note(held_out['share_closed'])}")


if __name__ == "__main__":
    run_stage(main)
