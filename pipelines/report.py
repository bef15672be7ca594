"""Stage `report`: the paper's Table 1 (tool use), Table 2 (code) and Table 3 (behaviour) layouts, each as md, csv
and tex, from the evaluation summaries (results/eval/*/*.json, results/agentic/eval/*/*.json); the training curves
of every method per domain (reports/figures/); all of them, and every table cell as a metric, on one MLflow run."""

from __future__ import annotations

import json

from evaluation.figures import draw_curves
from evaluation.tables import Table, behaviour_table, code_table, to_csv, to_latex, to_markdown, tool_use_table
from lopd.core import registry
from lopd.core.config import REPO_ROOT
from lopd.core.tracking import Tracker
from pipelines.common import DOMAINS, parse_args, stage_name

TABLES_DIR = REPO_ROOT / "reports" / "tables"
FIGURES_DIR = REPO_ROOT / "reports" / "figures"


def histories(methods: list[str], domain: str) -> dict[str, list[dict] | None]:
    """Each method's per-step training history in a domain (None if it has not been trained)."""
    paths = {m: DOMAINS[domain].plots / "train" / f"{m}.json" for m in methods}
    return {m: json.loads(path.read_text()) if path.exists() else None for m, path in paths.items()}


def rollouts_trained(steps: list[dict] | None) -> int | str:
    """The rollout budget a checkpoint was trained with, from its history."""
    return "n/a" if steps is None else steps[-1]["cumulative_rollouts"] if steps else 0


def load_summaries(domain: str, methods: list[str], benchmarks: list[str]) -> dict[str, dict[str, dict]]:
    """summaries[method][benchmark]: the evaluation summary in its results file, for those that exist."""
    summaries: dict[str, dict[str, dict]] = {}
    for method in methods:
        for benchmark in benchmarks:
            path = DOMAINS[domain].results / "eval" / method / f"{benchmark}.json"
            if path.exists():
                summaries.setdefault(method, {})[benchmark] = json.loads(path.read_text())["summary"]
    return summaries


def budget_note(trained: dict[str, list[dict] | None]) -> str:
    return "Training rollouts: " + ", ".join(f"{registry.label(m)} {rollouts_trained(steps)}"
                                             for m, steps in trained.items()) + "."


def outputs(stem: str, table: Table, title: str) -> dict[str, str]:
    return {f"{stem}.md": to_markdown(table, title), f"{stem}.csv": to_csv(table), f"{stem}.tex": to_latex(table, title)}


def table_metrics(name: str, table: Table) -> dict[str, float]:
    """Every cell with a value, as `<table>.<method>.<column>` (for MLflow)."""
    return {f"{name}.{label}.{key}": value for label, row in table.rows for key, value in row.items()
            if value is not None}


def main() -> None:
    _, cfg = parse_args(__doc__)
    with Tracker(cfg, stage_name("report")) as tracker:
        trained = {domain: histories(cfg.methods, domain) for domain in DOMAINS}
        code = code_table(load_summaries("code", cfg.methods, cfg.benchmarks), cfg.methods)
        code.notes.append(budget_note(trained["code"]))
        subset = "all tasks" if cfg.eval.task_limit is None else f"first {cfg.eval.task_limit} tasks per benchmark"
        title = (f"Code results ({cfg.profile} profile, model {cfg.model.name}, pass@1 (%) over "
                 f"{cfg.eval.n_samples} sample(s), {subset})")
        agentic = load_summaries("agentic", cfg.methods, cfg.agentic.benchmarks)
        tool_use = tool_use_table(agentic, cfg.methods)
        tool_use.notes.append(budget_note(trained["agentic"]))
        data = sorted({s["data"] for runs in agentic.values() for b, s in runs.items()
                       if b == "envscaler" and "data" in s})
        limit = cfg.agentic.task_limit
        agentic_subset = ("all tasks" if limit is None else "the first task of each benchmark" if limit == 1
                          else f"first {limit} tasks per benchmark")
        tool_title = (f"Tool-use results ({cfg.profile} profile, model {cfg.model.name}, score 0-100, "
                      f"{agentic_subset}, EnvScaler data: {', '.join(data) or 'n/a'})")
        behaviour = behaviour_table(agentic, cfg.methods)
        behaviour_title = f"Behaviour on the EnvScaler test split ({cfg.profile} profile, means per episode)"
        files = {**outputs("tool_use_results", tool_use, tool_title), **outputs("code_results", code, title),
                 **outputs("behavior", behaviour, behaviour_title)}
        TABLES_DIR.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (TABLES_DIR / name).write_text(text)
            tracker.log_artifact(TABLES_DIR / name)
        for domain in DOMAINS:
            figure = FIGURES_DIR / f"training_curves_{domain}.png"
            draw_curves({registry.label(m): steps or [] for m, steps in trained[domain].items()}, figure,
                        f"Training curves, {domain} domain ({cfg.profile} profile, model {cfg.model.name})")
            tracker.log_artifact(figure)
        tracker.log_metrics({**table_metrics("code", code), **table_metrics("tool_use", tool_use),
                             **table_metrics("behaviour", behaviour)})
    print(files["tool_use_results.md"], files["code_results.md"], files["behavior.md"], sep="\n")


if __name__ == "__main__":
    main()
