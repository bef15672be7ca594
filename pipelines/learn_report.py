"""Stage `<race>_report` (a learning race, pipelines/learn/dvc.yaml; `--race learn`: coding tasks, `--race
learn_tool`: tool-use episodes): every run's held-in curve in one figure (the shape of the paper's Fig. 4: held-in
reward against rollouts with 95% CI bands; methods in one panel, the controls beside GRPO in the other) and one table:
per run, the held-in reward at step 0 and at the end with the paired 95% CI of the change (a call only where it
excludes 0), the rollouts it needed to reach GRPO's final held-in reward, and the method's own objective (KL to its
teacher; LOPD's Δ and β). A run that has not finished is a row of n/a. The code race's are
reports/{tables,figures}/learning_race.*, the tool-use race's tool_learning_race.*."""

from __future__ import annotations

import csv

from evaluation.learning_race import OBJECTIVES, race_row
from evaluation.paper_figures import draw_race
from evaluation.stats import score_ci
from evaluation.tables import Table, to_csv, to_markdown
from lopd.core import registry
from lopd.core.config import LearnRun
from lopd.core.jsonl import read_json
from lopd.core.tracking import Tracker
from pipelines.common import RACE_ARG, RACES, parse_args, record_metrics, run_stage

COLUMNS = (("rollouts", "Rollouts"), ("start", "Held-in, step 0"), ("end", "Held-in, end"),
           ("change", "Change"), ("change_ci", "95% CI"), ("call", "Call"),
           ("rollouts_to_grpo_final", "Rollouts to GRPO's final"), ("objective", "Objective: first → last"),
           ("objective_slope", "Objective slope / 1k rollouts [95% CI]"))


def is_control(run: LearnRun) -> bool:
    """A control of the race: the update off, or the advantages negated."""
    return run.lr == 0 or run.negate_advantages


def reference_run(runs: dict[str, LearnRun]) -> str | None:
    """The run the others are measured against: the first plain GRPO run (no lr, step or sign override)."""
    return next((name for name, r in runs.items() if r.method == "grpo" and r.lr is None and r.steps is None
                 and not r.negate_advantages), None)


def run_label(run: LearnRun) -> str:
    """`GRPO · seed 0`, `GRPO · lr 0 · seed 0`, `GRPO · negated advantages · seed 0`: the method and what the run
    changes, then its seed (draw_race colours a curve by what comes before the seed)."""
    parts = [registry.label(run.method), *([f"lr {run.lr:g}"] if run.lr is not None else []),
             *([f"{run.steps} steps"] if run.steps else []), *(["negated advantages"] if run.negate_advantages else [])]
    return " · ".join([*parts, f"seed {run.seed}"])


def objective_cells(row: dict) -> tuple[str, str]:
    """The method's own objective, first and last step, and the trend of the first of them it logs (the training
    reward for a method without a teacher)."""
    keys = [(key, name) for key, name in OBJECTIVES if f"{key}_first" in row] or [("reward", "training reward")]
    values = "; ".join(f"{name} {row[f'{key}_first']:.3g} → {row[f'{key}_last']:.3g}" for key, name in keys)
    key, name = keys[0]
    slope = (f"{name} {row[f'{key}_slope']:+.3g} [{row[f'{key}_slope_low']:+.3g}, {row[f'{key}_slope_high']:+.3g}]"
             if f"{key}_slope" in row else "n/a: fewer than 3 steps")
    return values, slope


def race_table(runs: dict[str, LearnRun], points: dict[str, list[dict]], histories: dict[str, list[dict]],
               reference: str | None, section: str) -> tuple[Table, dict[str, dict]]:
    """The race's table and each finished run's `race_row`, against the reference run's final point (`section`: the
    race's params section, which its notes name)."""
    grpo = points.get(reference) or []
    rows, results = [], {}
    for name, run in runs.items():
        cells = dict.fromkeys(k for k, _ in COLUMNS)
        if points.get(name):
            row = results[name] = race_row(points[name], histories[name], grpo)
            cells.update({k: row[k] for k in ("rollouts", "start", "end", "change", "call", "rollouts_to_grpo_final")})
            cells["change_ci"] = f"[{row['change_low']:+.3f}, {row['change_high']:+.3f}]"
            cells["objective"], cells["objective_slope"] = objective_cells(row)
            if row["rollouts_to_grpo_final"] is None:
                cells["rollouts_to_grpo_final"] = "not reached"
        rows.append((f"{run_label(run)} ({name})", cells))
    target = f"{grpo[-1]['val_reward']:.3f}" if grpo else "n/a: GRPO has not finished"
    notes = ["Held-in reward: the mean over the held-in tasks of each task's mean reward over k samples at the "
             f"training temperature ({section}.eval_samples), measured before the first step and every "
             f"{section}.eval_every steps. Change: end minus step 0 with its paired bootstrap 95% CI over the tasks; "
             "the call is up or down only where the CI excludes 0.",
             "Rollouts to GRPO's final: the rollouts at a run's first measurement at or above GRPO's final held-in "
             f"reward ({target}).",
             "Objective: the method's own, from its per-step history (the first and last step's rollouts, so the KL "
             "is measured on the policy before each update): the KL to its teacher, LOPD's privileged margin Δ and "
             "dual β after the step; GRPO's is its training reward. Slope: OLS on rollouts with its 95% t-interval.",
             "The controls must come out as they do for the check to mean anything: the update off (lr 0) shows no "
             "change, and GRPO with negated advantages shows its reward fall."]
    if missing := [name for name in runs if not points.get(name)]:
        notes.append(f"n/a: not run yet ({', '.join(missing)}).")
    if len(grpo) >= 2 and grpo[-1]["val_reward"] <= grpo[0]["val_reward"]:
        notes.append("GRPO's final held-in reward is not above its step 0, so every run reaches it at 0 rollouts.")
    starts = {tuple(p[0]["val_rewards"]) for p in points.values() if p}
    if len(starts) > 1:
        notes.append(f"Step 0 is the same model measured with the same draws in every run, yet {len(starts)} different "
                     "step-0 measurements came out: the measurement is not deterministic on this machine.")
    return Table(COLUMNS, rows, notes, digits=3), results


def main() -> None:
    args, cfg = parse_args(__doc__, race=RACE_ARG)
    race = RACES[args.race]
    learn, stage = race.settings(cfg), race.stage("report")
    runs, table_path, figure_path = learn.runs, race.table, race.figure
    with Tracker(cfg, stage) as tracker:
        points = {n: read_json(p) for n in runs if (p := race.plots / f"{n}.json").exists()}
        histories = {n: read_json(race.plots / f"{n}_steps.json") for n in points}
        reference = reference_run(runs)
        table, results = race_table(runs, points, histories, reference, race.section)
        held_in = read_json(race.selection)["held_in"]
        name = "Tool-use learning race" if race.domain == "agentic" else "Learning race"
        title = (f"{name}: {len(held_in)} held-in tasks, {learn.eval_samples} samples each per measurement "
                 f"({cfg.profile} profile, model {cfg.model.name})")
        table_path.parent.mkdir(parents=True, exist_ok=True)
        table_path.with_suffix(".md").write_text(to_markdown(table, title))
        table_path.with_suffix(".csv").write_text(to_csv(table))
        labels = {name: run_label(run) for name, run in runs.items()}
        controls = [n for n, r in runs.items() if is_control(r)]
        panels = {"Methods": {labels[n]: points.get(n, []) for n in runs if n not in controls},
                  "Controls (against GRPO)": {labels[n]: points.get(n, [])
                                              for n in [*([reference] if reference else []), *controls]}}
        files = draw_race(panels, figure_path.with_suffix(".png"), title, score_ci)
        with figure_path.with_suffix(".csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, ["run", "rollouts", "held_in_reward", "ci_low", "ci_high", "n"])
            writer.writeheader()
            for name, run_points in points.items():
                for p in run_points:
                    low, high = score_ci(p["val_rewards"])
                    writer.writerow({"run": name, "rollouts": p["cumulative_rollouts"], "ci_low": low,
                                     "held_in_reward": p["val_reward"], "ci_high": high, "n": p["val_n"]})
        for path in (table_path.with_suffix(".md"), table_path.with_suffix(".csv"), *files,
                     figure_path.with_suffix(".csv")):
            tracker.log_artifact(path)
        summary = {"runs": len(runs), "finished": len(results),
                   "up": sum(r["call"] == "up" for r in results.values()),
                   "down": sum(r["call"] == "down" for r in results.values()),
                   "rollouts_to_grpo_final": {n: r["rollouts_to_grpo_final"] for n, r in results.items()}}
        record_metrics(tracker, race.results / "metrics" / "report.json", stage, summary)
    print(f"{stage}: {len(results)} of {len(runs)} runs finished; wrote {table_path.with_suffix('.md')} and "
          f"{figure_path.with_suffix('.png')}")


if __name__ == "__main__":
    run_stage(main)
