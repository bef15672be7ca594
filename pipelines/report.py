"""Stage `report`: the paper's Table 1 (tool use), Table 2 (code) and Table 3 (behaviour) layouts from the
evaluation metrics files (metrics/agentic/eval/*/*.json, metrics/eval/*/*.json), each as md, csv and tex."""

from __future__ import annotations

import json

from evaluation.tables import Table, behaviour_table, code_table, to_csv, to_latex, to_markdown, tool_use_table
from lopd.core import registry
from lopd.core.config import REPO_ROOT
from lopd.core.tracking import Tracker
from pipelines.common import DOMAINS, parse_args

TABLES_DIR = REPO_ROOT / "reports" / "tables"


def rollouts_trained(method: str, domain: str) -> int | str:
    """The rollout budget a method's checkpoint was trained with, from its train metrics."""
    path = DOMAINS[domain].metrics / "train" / f"{method}.json"
    if not path.exists():
        return "n/a"
    history = json.loads(path.read_text())["history"]
    return history[-1]["cumulative_rollouts"] if history else 0


def load_metrics(domain: str, methods: list[str], benchmarks: list[str]) -> dict[str, dict[str, dict]]:
    metrics: dict[str, dict[str, dict]] = {}
    for method in methods:
        for benchmark in benchmarks:
            path = DOMAINS[domain].metrics / "eval" / method / f"{benchmark}.json"
            if path.exists():
                metrics.setdefault(method, {})[benchmark] = json.loads(path.read_text())
    return metrics


def budget_note(methods: list[str], domain: str) -> str:
    return "Training rollouts: " + ", ".join(f"{registry.label(m)} {rollouts_trained(m, domain)}"
                                             for m in methods) + "."


def outputs(stem: str, table: Table, title: str) -> dict[str, str]:
    return {f"{stem}.md": to_markdown(table, title), f"{stem}.csv": to_csv(table), f"{stem}.tex": to_latex(table, title)}


def main() -> None:
    _, cfg = parse_args(__doc__)
    code = code_table(load_metrics("code", cfg.methods, cfg.benchmarks), cfg.methods)
    code.notes.append(budget_note(cfg.methods, "code"))
    subset = "all tasks" if cfg.eval.task_limit is None else f"first {cfg.eval.task_limit} tasks per benchmark"
    title = (f"Code results ({cfg.profile} profile, model {cfg.model.name}, pass@1 (%) over "
             f"{cfg.eval.n_samples} sample(s), {subset})")
    agentic = load_metrics("agentic", cfg.methods, cfg.agentic.benchmarks)
    tool_use = tool_use_table(agentic, cfg.methods)
    tool_use.notes.append(budget_note(cfg.methods, "agentic"))
    data = sorted({s["data"] for runs in agentic.values() for b, s in runs.items() if b == "envscaler" and "data" in s})
    limit = cfg.agentic.task_limit
    agentic_subset = ("all tasks" if limit is None else "the first task of each benchmark" if limit == 1
                      else f"first {limit} tasks per benchmark")
    tool_title = (f"Tool-use results ({cfg.profile} profile, model {cfg.model.name}, score 0-100, {agentic_subset}, "
                  f"EnvScaler data: {', '.join(data) or 'n/a'})")
    behaviour_title = f"Behaviour on the EnvScaler test split ({cfg.profile} profile, means per episode)"
    files = {**outputs("tool_use_results", tool_use, tool_title), **outputs("code_results", code, title),
             **outputs("behavior", behaviour_table(agentic, cfg.methods), behaviour_title)}
    TABLES_DIR.mkdir(parents=True, exist_ok=True)
    with Tracker(cfg, "report") as tracker:
        for name, text in files.items():
            (TABLES_DIR / name).write_text(text)
            tracker.log_artifact(TABLES_DIR / name)
    print(files["tool_use_results.md"], files["code_results.md"], files["behavior.md"], sep="\n")


if __name__ == "__main__":
    main()
