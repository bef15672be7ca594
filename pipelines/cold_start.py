"""Stage `cold_start` (code) / `cold_start_agentic`: train the latent composer on a domain's experience bank
(backbone frozen); writes phi_0 and the cached cold-start latents c_phi0 of every training task."""

from __future__ import annotations

import sys

from lopd.latent.cold_start import cold_start
from lopd.latent.composer import FRAMINGS
from lopd.core.tracking import Tracker
from pipelines.common import (BASE_MODEL_DIR, DOMAIN_ARG, DOMAINS, for_domain, parse_args, stage_name,
                              training_domain, write_json)


def main() -> None:
    args, cfg = parse_args(__doc__, domain=DOMAIN_ARG)
    cfg, domain = for_domain(cfg, args.domain), DOMAINS[args.domain]
    stage = stage_name("cold_start", args.domain)
    with training_domain(cfg, args.domain) as (tasks, _, _), Tracker(cfg, stage) as tracker:
        try:
            result = cold_start(cfg, BASE_MODEL_DIR, domain.bank, tasks, domain.composer, FRAMINGS[domain.name],
                                tracker)
        except (OSError, ValueError) as err:
            sys.exit(f"error: {stage}: {err}")
        result["summary"].update({"profile": cfg.profile, "seed": cfg.seed})
        path = domain.metrics / "cold_start.json"
        write_json(path, result)
        tracker.log_metrics({k: v for k, v in result["summary"].items() if isinstance(v, (int, float))})
        tracker.log_artifact(path)
    s = result["summary"]
    print(f"cold start: {s['n_examples']} examples, {s['steps']} steps, NLL {s['nll_before']} -> {s['nll_after']}")


if __name__ == "__main__":
    main()
