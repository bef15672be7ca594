"""Stage `train@<method>` (code) / `train_agentic@<method>`: run the shared on-policy loop for one method on a
domain's training split (TACO-style coding, or EnvScaler-format tool use)."""

from __future__ import annotations

import sys
import time

from lopd.core.loop import MethodInputError, train
from lopd.core.tracking import Tracker
from pipelines.common import (BASE_MODEL_DIR, DOMAIN_ARG, DOMAINS, build_method, for_domain, parse_args, stage_modules,
                              stage_name, training_domain, write_json)


def main() -> None:
    args, cfg = parse_args(__doc__, method={"required": True, "help": "method name, e.g. grpo"}, domain=DOMAIN_ARG)
    cfg, domain = for_domain(cfg, args.domain), DOMAINS[args.domain]
    method = build_method(args.method, cfg, args.domain)
    with (training_domain(cfg, args.domain) as (tasks, collect, source),
          Tracker(cfg, stage_name("train", args.domain, method.name)) as tracker):
        start = time.perf_counter()
        try:
            result = train(cfg, method, tasks, collect, BASE_MODEL_DIR, domain.checkpoints / method.name, tracker,
                           stage_modules("pipelines.train", domain=args.domain))
        except (FileNotFoundError, MethodInputError) as err:  # a missing upstream output: say which stage to run
            sys.exit(f"error: {err}")
        result["summary"].update({"profile": cfg.profile, "seed": cfg.seed, "domain": args.domain, "data": source,
                                  "n_train_tasks": len(tasks), "wall_s": round(time.perf_counter() - start, 1)})
        path = domain.metrics / "train" / f"{method.name}.json"
        write_json(path, result)
        tracker.log_artifact(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
