"""Stage `report`: build the paper's Table 2 layout from metrics/eval/*/*.json (md, csv, tex)."""

from __future__ import annotations

import json

from evaluation.tables import METHOD_LABELS, code_table, to_csv, to_latex, to_markdown
from lopd.config import REPO_ROOT
from lopd.tracking import Tracker
from pipelines.common import METRICS_DIR, parse_args

TABLES_DIR = REPO_ROOT / "reports" / "tables"


def rollouts_trained(method: str) -> int | str:
    """The rollout budget a method's checkpoint was trained with, from its train metrics."""
    path = METRICS_DIR / "train" / f"{method}.json"
    if not path.exists():
        return "n/a"
    history = json.loads(path.read_text())["history"]
    return history[-1]["cumulative_rollouts"] if history else 0


def main() -> None:
    _, cfg = parse_args(__doc__)
    metrics: dict[str, dict[str, dict]] = {}
    for method in cfg.methods:
        for benchmark in cfg.benchmarks:
            path = METRICS_DIR / "eval" / method / f"{benchmark}.json"
            if path.exists():
                metrics.setdefault(method, {})[benchmark] = json.loads(path.read_text())
    table = code_table(metrics, cfg.methods)
    table.notes.append("Training rollouts: " + ", ".join(
        f"{METHOD_LABELS.get(m, m)} {rollouts_trained(m)}" for m in cfg.methods) + ".")
    subset = "all tasks" if cfg.eval.task_limit is None else f"first {cfg.eval.task_limit} tasks per benchmark"
    title = (f"Code results ({cfg.profile} profile, model {cfg.model.name}, pass@1 over "
             f"{cfg.eval.n_samples} sample(s), {subset})")
    TABLES_DIR.mkdir(parents=True, exist_ok=True)
    outputs = {"code_results.md": to_markdown(table, title), "code_results.csv": to_csv(table),
               "code_results.tex": to_latex(table, title)}
    with Tracker(cfg, "report") as tracker:
        for name, text in outputs.items():
            (TABLES_DIR / name).write_text(text)
            tracker.log_artifact(TABLES_DIR / name)
    print(outputs["code_results.md"])


if __name__ == "__main__":
    main()
