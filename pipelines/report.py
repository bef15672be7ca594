"""Stage `report`: the paper's Table 1 (tool use), Table 2 (code) and Table 3 (behaviour) layouts, each as md, csv
and tex, from the evaluation results files (results/eval/*/*.json, results/agentic/eval/*/*.json): scores with
95% CIs and paired differences from the per-task scores, behaviour from the summaries; the training curves of every
method per domain and the paper's Fig. 4 (reports/figures/); all of them, and every table cell as a metric, on one
MLflow run. The cells also go to the invocation's parent run, with the recorded summaries (metrics/) of the stages DVC
did not re-run, so that two parents compare whole."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Callable

from evaluation.curves import EVIDENCE_COLUMNS, evidence_row
from evaluation.figures import draw_curves
from evaluation.paper_figures import draw_dynamics
from evaluation.stats import score_ci
from evaluation.sweeps import figure_domain
from evaluation.tables import (
    Estimate,
    ResultTable,
    Scores,
    Table,
    behaviour_table,
    code_table,
    describe,
    to_csv,
    to_latex,
    to_markdown,
    tool_use_table,
)
from lopd.core import registry
from lopd.core.config import REPO_ROOT, AgenticConfig
from lopd.core.jsonl import read_json
from lopd.core.tracking import Tracker
from pipelines.common import DOMAINS, parse_args, recorded_summaries, run_stage, stage_name

TABLES_DIR = REPO_ROOT / "reports" / "tables"
FIGURES_DIR = REPO_ROOT / "reports" / "figures"
DYNAMICS_BASELINES = 2
"""Fig. 4 draws LOPD, GRPO and this many other baselines: those with the highest final validation reward."""


def histories(methods: list[str], domain: str) -> dict[str, list[dict] | None]:
    """Each method's per-step training history in a domain (None if it has not been trained)."""
    paths = {m: DOMAINS[domain].plots / "train" / f"{m}.json" for m in methods}
    return {m: read_json(path) if path.exists() else None for m, path in paths.items()}


def validations(methods: list[str]) -> dict[str, list[dict]]:
    """Each trained code method's validation points (greedy reward on the held-out tasks); [] where there are none."""
    paths = {m: DOMAINS["code"].plots / "validation" / f"{m}.json" for m in methods}
    return {m: read_json(path) if path.exists() else [] for m, path in paths.items()}


def evidence_table(trained: dict[str, list[dict] | None], validated: dict[str, list[dict]]) -> Table:
    """Training evidence of the code domain's trained methods (evaluation/curves.py), against GRPO's final
    validation point (the paper's sample-efficiency claim: LOPD reaches it with a fraction of GRPO's rollouts) and
    against its best one."""
    grpo = validated.get("grpo") or []
    final = best = "n/a"
    if grpo:
        top = max(grpo, key=lambda v: v["val_reward"])
        final, best = (f"{v['val_reward']:.3f} at {v['cumulative_rollouts']} rollouts" for v in (grpo[-1], top))
    rows = [(registry.label(m), evidence_row(steps, validated[m], grpo)) for m, steps in trained.items() if steps]
    notes = ["Reward slope: OLS of the per-step training reward on cumulative rollouts, x1000, with its 95% t-interval "
             "(a rise beyond noise where low > 0).",
             "Val. reward: greedy reward on the held-out training-distribution tasks (data.validation_tasks) before "
             "the first step and after the last; Val. change: end minus start with its paired bootstrap 95% CI over "
             "those tasks.",
             f"Rollouts to GRPO's final val.: rollouts at a method's first validation point at or above GRPO's final "
             f"validation reward ({final}); n/a: never reached, or no validation. Share of GRPO's rollouts: those "
             "rollouts over GRPO's.",
             "There − GRPO's final: the method's validation reward at that point (at its last point where it never "
             "reached it) minus GRPO's final, with its paired bootstrap 95% CI over the same tasks.",
             f"The same against GRPO's best validation point ({best}; the first of its highest), chosen after the "
             "fact: the maximum of GRPO's noisy points, so it overstates GRPO's expected reward there."]
    if len(grpo) >= 2 and grpo[-1]["val_reward"] <= grpo[0]["val_reward"]:
        notes.append("GRPO's final validation reward is not above its start, so a method that starts from the same "
                     "model reaches it at 0 rollouts: only the comparison with GRPO's best tells methods apart.")
    return Table(EVIDENCE_COLUMNS, rows, notes, digits=3)


def dynamics_methods(trained: dict[str, list[dict] | None], validated: dict[str, list[dict]]) -> list[str]:
    """Fig. 4's methods, of those with a training history: LOPD and GRPO, then the DYNAMICS_BASELINES others with
    the highest final validation reward (a method without validation last; ties by name)."""
    ran = [m for m, steps in trained.items() if steps]
    final = {m: validated[m][-1]["val_reward"] if validated.get(m) else -1.0 for m in ran}
    others = sorted((m for m in ran if m not in ("lopd", "grpo")), key=lambda m: (-final[m], m))
    return [m for m in ("lopd", "grpo") if m in ran] + others[:DYNAMICS_BASELINES]


def dynamics_rows(methods: list[str], trained: dict[str, list[dict] | None],
                  validated: dict[str, list[dict]]) -> list[dict]:
    """Fig. 4's points: per method, the mean training reward of each step, then each validation reward with its 95%
    CI and n (held-out tasks), against rollouts so far."""
    rows = []
    for m in methods:
        rows += [{"method": m, "curve": "train", "rollouts": h["cumulative_rollouts"], "value": h["reward"]}
                 for h in trained[m] or []]
        for v in validated.get(m, []):
            low, high = score_ci(v["val_rewards"])
            rows.append({"method": m, "curve": "validation", "rollouts": v["cumulative_rollouts"],
                         "value": v["val_reward"], "ci_low": low, "ci_high": high, "n": v["val_n"]})
    return rows


def draw_fig4(trained: dict[str, list[dict] | None], validated: dict[str, list[dict]], title: str) -> list[Path]:
    """The paper's Fig. 4 from one domain's histories, as reports/figures/fig4.{png,pdf,csv}; the files written."""
    methods = dynamics_methods(trained, validated)
    out = FIGURES_DIR / "fig4"
    files = draw_dynamics({registry.label(m): trained[m] for m in methods},
                          {registry.label(m): validated.get(m, []) for m in methods}, out.with_suffix(".png"), title,
                          score_ci)
    with out.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, ["method", "curve", "rollouts", "value", "ci_low", "ci_high", "n"])
        writer.writeheader()
        writer.writerows(dynamics_rows(methods, trained, validated))
    return [*files, out.with_suffix(".csv")]


def rollouts_trained(steps: list[dict] | None) -> int | str:
    """The rollout budget a checkpoint was trained with, from its history."""
    return "n/a" if steps is None else steps[-1]["cumulative_rollouts"] if steps else 0


def load_results(domain: str, methods: list[str], benchmarks: list[str]) -> dict[str, dict[str, dict]]:
    """results[method][benchmark]: the results file an evaluation stage wrote, for those that exist."""
    results: dict[str, dict[str, dict]] = {}
    for method in methods:
        for benchmark in benchmarks:
            path = DOMAINS[domain].results / "eval" / method / f"{benchmark}.json"
            if path.exists():
                results.setdefault(method, {})[benchmark] = read_json(path)
    return results


def summaries(results: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """summaries[method][benchmark]: the summary of each results file."""
    return {m: {b: r["summary"] for b, r in runs.items()} for m, runs in results.items()}


def code_scores(result: dict) -> Scores:
    """Per-task pass@1 of an eval stage's results file: the share of a task's samples passing the EvalPlus+ tests."""
    verdicts = {tid: task["plus"] for tid, task in result["per_task"].items()}
    return Scores({tid: mean(map(float, v)) for tid, v in verdicts.items()},
                  min((len(v) for v in verdicts.values()), default=0),
                  None if verdicts else result["summary"].get("note"))


def agentic_scores(result: dict) -> Scores:
    """Per-task score of an eval_agentic results file: the mean reward of the task's episodes. A benchmark that ran
    no episode (its data missing) has no tasks and keeps its summary's note."""
    rewards: dict[str, list[float]] = defaultdict(list)
    for episode in result["episodes"]:
        rewards[episode["task_id"]].append(episode["reward"])
    return Scores({tid: mean(r) for tid, r in rewards.items()}, min(map(len, rewards.values()), default=0),
                  None if rewards else result["summary"].get("note"))


def per_task_scores(results: dict[str, dict[str, dict]],
                    parse: Callable[[dict], Scores]) -> dict[str, dict[str, Scores]]:
    """scores[method][benchmark]: each results file's per-task scores, as `parse` reads them."""
    return {m: {b: parse(r) for b, r in runs.items()} for m, runs in results.items()}


def budget_note(trained: dict[str, list[dict] | None]) -> str:
    return "Training rollouts: " + ", ".join(f"{registry.label(m)} {rollouts_trained(steps)}"
                                             for m, steps in trained.items()) + "."


def outputs(stem: str, table: Table | ResultTable, title: str) -> dict[str, str]:
    return {f"{stem}.md": to_markdown(table, title), f"{stem}.csv": to_csv(table),
            f"{stem}.tex": to_latex(table, title)}


def table_metrics(name: str, table: Table | ResultTable) -> dict[str, float]:
    """Every cell with a value, as `<table>.<method>.<column>` (for MLflow), a score's CI as `<...>.ci_low` and
    `<...>.ci_high`."""
    metrics: dict[str, float] = {}
    for label, row in table.rows:
        for key, cell in row.items():
            prefix = f"{name}.{label}.{key}"
            if isinstance(cell, Estimate):
                metrics.update({prefix: cell.value, f"{prefix}.ci_low": cell.low, f"{prefix}.ci_high": cell.high})
            elif cell is not None:
                metrics[prefix] = cell
    return metrics


def tool_use_subset(a: AgenticConfig) -> str:
    """Which tasks of each benchmark Table 1 holds, for its title."""
    limit, envscaler = a.task_limit, a.benchmark_limit("envscaler")
    subset = ("all tasks" if limit is None else "the first task of each benchmark" if limit == 1
              else f"first {limit} tasks per benchmark")
    if envscaler != limit:
        subset += f" ({'all' if envscaler is None else f'first {envscaler}'} of EnvScaler's test split)"
    return subset


def main() -> None:
    _, cfg = parse_args(__doc__)
    with Tracker(cfg, stage_name("report")) as tracker:
        recorded = recorded_summaries()  # every input is read before any table or figure is written
        trained = {domain: histories(cfg.methods, domain) for domain in DOMAINS}
        rows = [*cfg.methods, *registry.EVALUATION_ROWS]  # Base + Composer: a row where its evaluation has run
        code_results = load_results("code", rows, cfg.benchmarks)
        code = code_table(per_task_scores(code_results, code_scores), [m for m in rows if m in cfg.methods
                                                                       or m in code_results])
        code.notes.append(budget_note(trained["code"]))
        subset = "all tasks" if cfg.eval.task_limit is None else f"first {cfg.eval.task_limit} tasks per benchmark"
        title = (f"Code results ({cfg.profile} profile, model {cfg.model.name}, pass@1 (%), {subset}; "
                 f"{describe(code)})")
        agentic_results = load_results("agentic", rows, cfg.agentic.benchmarks)
        agentic = summaries(agentic_results)
        agentic_rows = [m for m in rows if m in cfg.methods or m in agentic_results]
        tool_use = tool_use_table(per_task_scores(agentic_results, agentic_scores), agentic_rows)
        tool_use.notes.append(budget_note(trained["agentic"]))
        data = sorted({s["data"] for runs in agentic.values() for b, s in runs.items()
                       if b == "envscaler" and "data" in s})
        agentic_subset = tool_use_subset(cfg.agentic)
        tool_title = (f"Tool-use results ({cfg.profile} profile, model {cfg.model.name}, score 0-100, "
                      f"{agentic_subset}, EnvScaler data: {', '.join(data) or 'n/a'}; {describe(tool_use)})")
        validated = validations(cfg.methods)
        evidence = evidence_table(trained["code"], validated)
        val_n = sorted({v["val_n"] for points in validated.values() for v in points})
        evidence_title = (f"Training evidence, code domain ({cfg.profile} profile, model {cfg.model.name}, "
                          f"validation n = {', '.join(map(str, val_n)) or 'n/a'} held-out tasks)")
        behaviour = behaviour_table(agentic, agentic_rows)
        behaviour_title = f"Behaviour on the EnvScaler test split ({cfg.profile} profile, means per episode)"
        files = {**outputs("tool_use_results", tool_use, tool_title), **outputs("code_results", code, title),
                 **outputs("behavior", behaviour, behaviour_title),
                 **outputs("training_evidence", evidence, evidence_title)}
        TABLES_DIR.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (TABLES_DIR / name).write_text(text)
            tracker.log_artifact(TABLES_DIR / name)
        for domain in DOMAINS:
            figure = FIGURES_DIR / f"training_curves_{domain}.png"
            points = validated if domain == "code" else {}
            curves = {registry.label(m): (steps or []) + points.get(m, []) for m, steps in trained[domain].items()}
            draw_curves(curves, figure,
                        f"Training curves, {domain} domain ({cfg.profile} profile, model {cfg.model.name})")
            tracker.log_artifact(figure)
        domain = figure_domain(cfg.profile)
        for figure in draw_fig4(trained[domain], validated if domain == "code" else {},
                                f"Training dynamics (paper Fig. 4): {domain} domain, {cfg.profile} profile, "
                                f"{cfg.model.name}"):
            tracker.log_artifact(figure)
        cells = {**table_metrics("code", code), **table_metrics("tool_use", tool_use),
                 **table_metrics("behaviour", behaviour), **table_metrics("evidence", evidence)}
        tracker.log_metrics(cells)
        tracker.log_to_parent(cells)
        tracker.log_cached_stages(recorded)
    print(files["tool_use_results.md"], files["code_results.md"], files["behavior.md"], files["training_evidence.md"],
          sep="\n")


if __name__ == "__main__":
    run_stage(main)
