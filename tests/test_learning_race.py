"""The learning races' mechanics (`make learn`: coding tasks; `make learn-tool`: tool-use episodes): the candidates and
the held-in task selection (0/1 and partial-credit rewards), sampled measurement points through the shared loop (step 0
shared, the same draws in every run), a run's config and controls per race, the CLIs' `--race`, and the verdicts,
figure and table, each against a brute-force reference or on the tiny model."""

import dataclasses
import hashlib
import importlib.util
import random
import statistics
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from baselines.grpo import GRPO
from baselines.opsd import OPSD
from evaluation.learning_race import (
    pass_rates,
    race_row,
    reusable_step0,
    sample_rewards,
    select_tasks,
    step0_measurement,
    verdict,
)
from lopd.core.checkpoint import policy_dir
from lopd.core.config import REPO_ROOT, ConfigError, resolve
from lopd.core.domain import Domain
from lopd.core.loop import SampledValidation, train
from lopd.core.rollout import Task, evenly_spaced, single_turn
from lopd.core.trajectory import Trajectory, Turn
from pipelines.common import RACES
from pipelines.learn_race import negate_advantages, race_config
from pipelines.learn_report import race_table, reference_run, run_label
from pipelines.learn_select import screen

TASKS = [Task(f"t{i}", [{"role": "user", "content": f"Write a function about {i}."}]) for i in range(4)]
NO_DOMAIN = Domain.scratch("unused")


def _coin(tasks, completions):
    """A reward that differs between samples of a task (a hash of the completion), so points are fractional."""
    return [float(hashlib.sha256(c.encode()).digest()[0] % 2) for c in completions]


def _old_rule(rates: dict[str, float], n: int) -> list[str]:
    """The code race's rule before partial credit, as it was written: a pass rate strictly between 0 and 1, the `n`
    nearest 1/2, ties by the id's sha256."""
    qualifying = [task for task, rate in rates.items() if 0.0 < rate < 1.0]
    return sorted(qualifying, key=lambda t: (abs(rates[t] - 0.5), hashlib.sha256(t.encode()).hexdigest()))[:n]


def test_select_tasks_on_0_1_rewards_is_the_code_races_rule_unchanged():
    """For pass/fail rewards the spread rule picks exactly what the pass-rate rule picked, in the same order (k of 2,
    4 and 8 samples: pass rates the old float rule compared exactly)."""
    rng = random.Random(0)
    for _ in range(200):
        k = rng.choice([2, 4, 8])
        samples = {f"task{i}": [float(rng.random() < rng.random()) for _ in range(k)]
                   for i in range(rng.randint(0, 12))}
        n = rng.randint(1, 8)
        assert select_tasks(samples, n) == _old_rule(pass_rates(samples), n)


def test_select_tasks_with_partial_credit_matches_brute_force():
    """A task qualifies when its samples' rewards are not all equal; the most spread first (population variance),
    ties by the id's sha256: a reference that ranks each task by how many others beat it."""
    rng = random.Random(1)
    for _ in range(100):
        samples = {f"task{i}": [rng.choice([0.0, 0.25, 0.5, 0.6, 1.0]) for _ in range(rng.choice([2, 3, 4]))]
                   for i in range(rng.randint(0, 12))}
        n = rng.randint(1, 8)

        def spread(task):
            values = [Fraction(r) for r in samples[task]]
            return statistics.pvariance(values)

        def better(a, b):  # a ranks before b: more spread, else the smaller hash
            digest = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
            return spread(a) > spread(b) or (spread(a) == spread(b) and digest(a) < digest(b))

        varied = [t for t in samples if max(samples[t]) != min(samples[t])]
        rank = {t: sum(better(o, t) for o in varied) for t in varied}
        assert select_tasks(samples, n) == sorted((t for t in varied if rank[t] < n), key=rank.get)


FIXED = {"flat_floor": [0.2, 0.2, 0.2, 0.2],  # every episode at the no-action floor: no signal
         "flat_solved": [1.0, 1.0, 1.0, 1.0],
         "one_lucky": [0.2, 0.2, 0.2, 0.6],  # variance 0.03
         "half_way": [0.25, 0.75, 0.25, 0.75],  # variance 1/16 = 0.0625
         "shifted_twin": [0.0, 0.5, 0.0, 0.5],  # the same spread as half_way: a tie, by the id's hash
         "wide": [0.0, 1.0, 0.0, 0.5],  # variance 0.171875
         "pass_3_of_4": [1.0, 1.0, 0.0, 1.0]}  # variance 0.1875: 0/1 and partial credit on one scale


def _fixed_collect(backend, tokenizer, tasks, params, seed, rollouts_per_task):
    """A fake domain whose i-th sample of a task scores FIXED[task][i], returned grouped by task like a domain's."""
    return [Trajectory(task_id=t.task_id, group=g, turns=[Turn([1], [2], [0.0])], reward=FIXED[t.task_id][i])
            for g, t in enumerate(tasks) for i in range(rollouts_per_task)]


def test_the_race_selects_partial_credit_tasks_on_a_fake_domain():
    candidates = [Task(task, [{"role": "user", "content": task}]) for task in FIXED]
    rewards = screen(_fixed_collect, None, None, candidates, None, 0, 4)
    assert rewards == FIXED and pass_rates(rewards)["one_lucky"] == pytest.approx(0.3)
    tie = sorted(["half_way", "shifted_twin"], key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    assert select_tasks(rewards, 10) == ["pass_3_of_4", "wide", *tie, "one_lucky"]  # the flat two never qualify
    assert select_tasks(rewards, 2) == ["pass_3_of_4", "wide"]
    # an exact tie whatever the samples' order or float rounding: 1 of 3 and 2 of 3 spread alike (p(1 - p) = 2/9)
    thirds = {"a": [1.0, 0.0, 0.0], "b": [0.0, 1.0, 1.0], "c": [0.0, 0.0, 1.0]}
    assert select_tasks(thirds, 3) == sorted(thirds, key=lambda t: hashlib.sha256(t.encode()).hexdigest())


def test_sample_rewards_and_pass_rates_keep_each_tasks_samples_in_first_seen_order():
    samples = sample_rewards(["b", "a", "b", "a", "b"], [1.0, 0.0, 0.0, 0.0, 1.0])
    assert samples == {"b": [1.0, 0.0, 1.0], "a": [0.0, 0.0]} and list(samples) == ["b", "a"]
    assert pass_rates(samples) == {"b": 2 / 3, "a": 0.0}


def test_evenly_spaced_candidates_match_brute_force():
    """N candidates spread over the whole split in its order: for each i the last position j with j * N <= i * len
    (the floor of i * len / N), every one once; all of them where N >= len."""
    for length in range(0, 40):
        items = [f"t{j}" for j in range(length)]
        for n in range(1, 45):
            expected = items if n >= length else [
                items[max(j for j in range(length) if j * n <= i * length)] for i in range(n)]
            got = evenly_spaced(items, n)
            assert got == expected, (length, n)
            assert len(set(got)) == min(n, length)
    # envscaler-mini's train split: 12 domains in turn, each base task followed by its hinted twin: every domain and
    # both tiers get their share (the first 40 would be two domains')
    split = [f"{i * 12 // 244}.{tier}{i}" for i in range(244) for tier in ("base", "hinted")]
    picked = evenly_spaced(split, 40)
    assert sum(".hinted" in t for t in picked) == 20
    assert {t.split(".")[0] for t in picked} == {str(d) for d in range(12)}


def _point(step, rewards):
    return {"step": step, "cumulative_rollouts": 8 * step, "val_reward": float(np.mean(rewards)),
            "val_rewards": list(rewards), "val_n": len(rewards), "val_success_rate": 0.0}


def test_race_row_against_direct_computations():
    rng = np.random.default_rng(1)
    start = rng.choice([0.0, 0.25, 0.5, 0.75], size=12)
    points = [_point(0, start), _point(4, np.clip(start + 0.25, 0, 1)), _point(8, np.clip(start + 0.5, 0, 1))]
    history = [{"cumulative_rollouts": 8 * s, "reward": 0.1 * s, "kl_mean": 1.0 / s} for s in range(1, 9)]
    reference = [_point(0, start), _point(8, np.clip(start + 0.25, 0, 1))]
    row = race_row(points, history, reference)
    assert row["change"] == pytest.approx(points[-1]["val_reward"] - points[0]["val_reward"])
    assert row["change_low"] > 0 and row["call"] == "up"
    # the first point at or above the reference's final reward
    assert row["rollouts_to_grpo_final"] == next(p["cumulative_rollouts"] for p in points
                                                 if p["val_reward"] >= reference[-1]["val_reward"]) == 32
    slope = np.polyfit([h["cumulative_rollouts"] for h in history], [h["kl_mean"] for h in history], 1)[0]
    assert row["kl_mean_slope"] == pytest.approx(1000 * slope)
    assert (row["kl_mean_first"], row["kl_mean_last"]) == (1.0, 1 / 8)
    assert "privilege_margin_first" not in row  # only what the method logs
    flat = race_row([_point(0, start), _point(8, start)], history, [])
    assert (flat["change"], flat["call"], flat["rollouts_to_grpo_final"]) == (0.0, "no change", None)


@pytest.mark.parametrize("low, high, call", [(0.01, 0.2, "up"), (-0.2, -0.01, "down"), (-0.1, 0.1, "no change"),
                                             (0.0, 0.2, "no change")])
def test_a_change_is_called_only_where_its_ci_excludes_zero(low, high, call):
    assert verdict(low, high) == call


def test_a_runs_config_is_the_pipelines_with_the_race_budgets_and_the_runs_overrides():
    cfg = resolve({"profile": "cpu", "learn": {"runs": {
        "sdpo": {"method": "sdpo", "seed": 0, "lr": None, "steps": None, "negate_advantages": False},
        "grpo_lr0": {"method": "grpo", "seed": 3, "lr": 0.0, "steps": 5, "negate_advantages": False}}}})
    sdpo, off = race_config(cfg, RACES["learn"], "sdpo"), race_config(cfg, RACES["learn"], "grpo_lr0")
    assert sdpo.sampling.max_new_tokens == off.sampling.max_new_tokens == cfg.learn.max_new_tokens
    assert sdpo.train.rollouts_per_step == cfg.learn.rollouts_per_step
    assert sdpo.train.val_every == sdpo.train.save_every == cfg.learn.eval_every
    assert sdpo.method_sections["sdpo"].steps == cfg.learn.steps and off.method_sections["grpo"].steps == 5
    assert sdpo.method_sections["sdpo"].lr == cfg.method_sections["sdpo"].lr  # null keeps the method's own
    assert off.method_sections["grpo"].lr == 0.0 and (sdpo.seed, off.seed) == (0, 3)
    assert GRPO(off, NO_DOMAIN).lr(off) == 0.0
    with pytest.raises(ConfigError, match="learn.runs: no run named 'nope'"):
        race_config(cfg, RACES["learn"], "nope")


def test_a_tool_use_runs_config_is_the_agentic_domains_with_the_race_budgets_per_policy_step():
    """learn_tool's budget is the tokens of each policy step (agentic.max_step_tokens), an episode keeps its
    agentic.max_steps and context, and the race's steps and rollouts replace the agentic domain's own; the rest is the
    agentic domain's config (`for_domain`: its bank threshold), the code race's untouched."""
    cfg = resolve({"profile": "cpu", "learn_tool": {"max_new_tokens": 96, "steps": 3, "rollouts_per_step": 12},
                   "agentic": {"steps": 7, "rollouts_per_step": 16, "max_step_tokens": 200}})
    run = race_config(cfg, RACES["learn_tool"], "lopd_seed1")
    assert run.agentic.max_step_tokens == run.sampling.max_new_tokens == 96
    assert (run.agentic.max_steps, run.agentic.max_context_tokens) == (cfg.agentic.max_steps,
                                                                       cfg.agentic.max_context_tokens)
    assert run.train.rollouts_per_step == 12 and run.method_sections["lopd"].steps == 3 and run.seed == 1
    assert run.train.val_every == run.train.save_every == cfg.learn_tool.eval_every
    assert run.bank.success_threshold == cfg.agentic.bank_success_threshold  # the agentic bank's, not the code one's
    code = race_config(cfg, RACES["learn"], "lopd_seed1")
    assert code.sampling.max_new_tokens == cfg.learn.max_new_tokens and code.agentic.max_step_tokens == 200
    assert code.bank.success_threshold == cfg.bank.success_threshold
    with pytest.raises(ConfigError, match="learn_tool.runs: no run named 'nope'"):
        race_config(cfg, RACES["learn_tool"], "nope")
    tool = RACES["learn_tool"]
    assert (tool.domain, tool.max_steps(cfg), RACES["learn"].max_steps(cfg)) == ("agentic", cfg.agentic.max_steps, None)
    assert [tool.selection, tool.plots / "grpo.json", tool.table.with_suffix(".md"), tool.figure.with_suffix(".png")] \
        == [REPO_ROOT / p for p in ("results/learn_tool/selection.json", "plots/learn_tool/grpo.json",
                                    "reports/tables/tool_learning_race.md", "reports/figures/tool_learning_race.png")]
    assert [RACES["learn"].selection, RACES["learn"].table] == [REPO_ROOT / "results/learn/selection.json",
                                                                REPO_ROOT / "reports/tables/learning_race"]


@pytest.mark.parametrize("raw, message", [
    ({"learn_tool": {"rollouts_per_step": 6}}, "learn_tool.rollouts_per_step: must be a multiple of grpo.group_size"),
    ({"learn_tool": {"runs": {"grpo": {"method": "vanilla"}}}},
     "learn_tool.runs.grpo.method: 'vanilla' is not a trained method"),
    ({"learn_tool": {"runs": {"grpo": {"seed": 1000}}}},
     "learn_tool.runs.grpo.seed: must differ from learn_tool.eval_seed"),
    ({"learn_tool": {"max_new_tokens": 8192}}, "learn_tool.max_new_tokens: must be < agentic.max_context_tokens"),
])
def test_a_bad_tool_race_setting_is_one_line_naming_its_key(raw, message):
    with pytest.raises(ConfigError, match=message):
        resolve({"profile": "cpu", **raw})


class _Stop(Exception):
    """Raised by a stand-in to end a CLI's main once it has shown what it was wired to."""


@pytest.mark.parametrize("argv, domain", [([], "code"), (["--race", "learn"], "code"),
                                          (["--race", "learn_tool"], "agentic")])
def test_the_race_clis_take_their_domain_from_race(monkeypatch, argv, domain):
    """`--race` picks the domain whose sandbox the select and run stages check, the tasks they play and the race's
    params, and the report's table: each CLI is stopped at its first use of them."""
    import pipelines.learn_race as learn_race
    import pipelines.learn_report as learn_report
    import pipelines.learn_select as learn_select

    monkeypatch.setenv("LOPD_MLFLOW_URI", "off")
    seen = {}

    def sandbox(name):
        seen["sandbox"] = name
        raise _Stop

    for module in (learn_select, learn_race):
        monkeypatch.setattr(module, "check_backend", lambda cfg, model_dir: None)
        monkeypatch.setattr(module, "check_sandbox", sandbox)
    monkeypatch.setattr(sys, "argv", ["learn_select", *argv])
    with pytest.raises(_Stop):
        learn_select.main()
    assert seen.pop("sandbox") == domain
    monkeypatch.setattr(sys, "argv", ["learn_race", *argv, "--run", "grpo_seed1"])
    with pytest.raises(_Stop):
        learn_race.main()
    assert seen.pop("sandbox") == domain

    def table(runs, points, histories, reference, section):
        seen["section"] = section
        raise _Stop

    monkeypatch.setattr(learn_report, "race_table", table)
    monkeypatch.setattr(sys, "argv", ["learn_report", *argv])
    with pytest.raises(_Stop):
        learn_report.main()
    assert seen["section"] == ("learn_tool" if domain == "agentic" else "learn")
    monkeypatch.setattr(sys, "argv", ["learn_select", "--race", "learn_code"])
    with pytest.raises(SystemExit):
        learn_select.main()


def _trajectory(group, reward):
    return Trajectory(task_id=f"t{group}", group=group, turns=[Turn([1], [2], [0.0])], reward=reward)


def test_negated_advantages_flip_grpos_and_a_method_without_advantages_is_refused():
    cfg = resolve({"profile": "smoke"})
    plain, broken = GRPO(cfg, NO_DOMAIN), negate_advantages(GRPO(cfg, NO_DOMAIN), "learn.runs.grpo_negated")
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    a, b = ([_trajectory(i // 4, r) for i, r in enumerate(rewards)] for _ in range(2))
    plain.prepare(a)
    broken.prepare(b)
    assert any(t.advantage for t in a)
    assert [t.advantage for t in b] == [-t.advantage for t in a]
    with pytest.raises(ConfigError, match="learn.runs.x.negate_advantages: opsd's loss uses no advantages"):
        negate_advantages(OPSD(cfg, NO_DOMAIN), "learn.runs.x")


def _race(tiny_model_dir, out, lr, seed, sampled, step0=None):
    cfg = resolve({"profile": "smoke", "seed": seed, "grpo": {"lr": lr},
                   "train": {"steps": 2, "save_every": 1, "val_every": 1}})
    return train(cfg, GRPO(cfg, NO_DOMAIN), TASKS, single_turn(_coin), tiny_model_dir, out, validation=TASKS,
                 sampled=sampled, step0=step0)


def test_sampled_points_share_their_draws_over_runs_and_the_update_off_changes_nothing(tiny_model_dir, tmp_path):
    measure = SampledValidation(samples=2, seed=1000)
    off_a = _race(tiny_model_dir, tmp_path / "a", 0.0, 0, measure)
    off_b = _race(tiny_model_dir, tmp_path / "b", 0.0, 1, measure)  # another run seed: other training samples
    points = off_a["validation"]
    assert [(p["step"], p["val_n"]) for p in points] == [(0, 4), (1, 4), (2, 4)]
    # a task's score is the mean of its 2 samples' rewards
    assert all(r in (0.0, 0.5, 1.0) for p in points for r in p["val_rewards"])
    assert any(r == 0.5 for p in points for r in p["val_rewards"]), "the coin reward should split some samples"
    # lr 0: the weights never move, so every run measures the same model with the same draws at each point
    assert points == off_b["validation"]
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    final = load_file(str(policy_dir(tmp_path / "a", tiny_model_dir) / "model.safetensors"))
    assert all(torch.equal(final[k], base[k]) for k in base)
    # the points draw afresh at each step: not one sample replayed
    assert points[0]["val_rewards"] != points[1]["val_rewards"] or points[1]["val_rewards"] != points[2]["val_rewards"]
    # a step 0 measured elsewhere (learn_select's) is taken as it is, and the later points still measured
    given = {**{k: v for k, v in points[0].items() if k.startswith("val_")}, "val_reward": 0.123}
    shared = _race(tiny_model_dir, tmp_path / "c", 0.0, 0, measure, given)["validation"]
    assert shared[0]["val_reward"] == 0.123 and shared[1:] == points[1:]


def test_report_table_calls_each_run_against_grpo_and_marks_missing_runs():
    cfg = resolve({"profile": "cpu"})
    runs = cfg.learn.runs
    start = [0.25, 0.5, 0.5, 0.75] * 3
    up, down = [min(1.0, s + 0.25) for s in start], [max(0.0, s - 0.25) for s in start]
    points = {"grpo": [_point(0, start), _point(8, up)], "grpo_lr0": [_point(0, start), _point(8, start)],
              "grpo_negated": [_point(0, start), _point(8, down)], "lopd": [_point(0, start), _point(4, up)]}
    histories = {name: [{"cumulative_rollouts": 8, "reward": 0.5}] for name in points}
    histories["lopd"] = [{"cumulative_rollouts": 8 * s, "reward": 0.5, "kl_mean": 0.1 / s, "privilege_margin": 0.01,
                          "beta_next": 0.05 * s} for s in range(1, 5)]
    assert reference_run(runs) == "grpo"
    table, results = race_table(runs, points, histories, "grpo", "learn")
    rows = {label.split("(")[-1].rstrip(")"): cells for label, cells in table.rows}  # "GRPO · seed 0 (grpo)"
    assert [results[n]["call"] for n in ("grpo", "grpo_lr0", "grpo_negated")] == ["up", "no change", "down"]
    assert rows["lopd"]["rollouts_to_grpo_final"] == 32 and rows["grpo_negated"]["rollouts_to_grpo_final"] == \
        "not reached"
    assert rows["lopd"]["objective"].startswith("KL to teacher 0.1 → 0.025; Δ 0.01 → 0.01; β 0.05 → 0.2")
    assert rows["sdft"]["change"] is None and set(results) == set(points)  # not run: a row of n/a
    assert run_label(runs["grpo_lr0"]) == "GRPO · lr 0 · seed 0"
    assert run_label(runs["grpo_negated"]) == "GRPO · negated advantages · seed 0"


def test_the_race_figure_draws_every_panel_and_says_when_none_has_run(tmp_path):
    from evaluation.paper_figures import draw_race
    from evaluation.stats import score_ci

    start = [0.25, 0.5, 0.75, 0.5]
    panels = {"Methods": {"GRPO · seed 0": [_point(0, start), _point(4, start)], "GRPO · seed 1": [_point(0, start)],
                          "SDFT · seed 0": []},
              "Controls (against GRPO)": {"GRPO · lr 0 · seed 0": []}}
    files = draw_race(panels, tmp_path / "race.png", "a title", score_ci)
    assert [f.suffix for f in files] == [".png", ".pdf"] and all(f.stat().st_size > 0 for f in files)


def _sweep_module():
    spec = importlib.util.spec_from_file_location("learn_sweep", REPO_ROOT / "scripts" / "learn_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sweep_table_takes_the_points_of_its_run_and_setting_only():
    sweep = _sweep_module()
    assert sweep.point_args("grpo", "lr", 3e-5) == ["-n", "learn-grpo-lr3e-05", "-s", "-S", "learn.runs.grpo.lr=3e-05",
                                                    "pipelines/learn/dvc.yaml:learn@grpo"]
    params = resolve({"profile": "cpu"}).to_dict()

    def point(name, lr, change, low, high, **elsewhere):
        p = {**params, **elsewhere, "learn": {**params["learn"], "runs": {**params["learn"]["runs"]}}}
        p["learn"]["runs"]["grpo"] = {**p["learn"]["runs"]["grpo"], "lr": lr}
        metrics = {"lr": lr, "rollouts": 48, "start": 0.5, "end": 0.5 + change, "change": change,
                   "change_low": low, "change_high": high}
        return {"name": name, "baseline": "abcdef0123", "params": p,
                "metrics": {"results/learn/metrics/grpo.json": {"learn@grpo": metrics}}}

    exps = [point("learn-grpo-lr3e-05", 3e-5, 0.25, 0.05, 0.4),
            point("learn-grpo-lr3e-05", 3e-5, -0.1, -0.3, 0.1),  # an older run of the same point: the newest wins
            point("learn-grpo-lr1e-05", 1e-5, 0.1, -0.1, 0.3),
            point("learn-grpo-lr1e-04", 1e-4, 0.3, 0.1, 0.5, seed=7),  # another setting changed too: not this sweep
            point("learn-opsd-lr1e-05", 1e-5, 0.3, 0.1, 0.5),  # another run's sweep
            point("fig3-m_0.02", 1e-5, 0.3, 0.1, 0.5)]
    committed = {"lr": 3e-6, "rollouts": 48, "start": 0.5, "end": 0.5, "change": 0.0, "change_low": -0.2,
                 "change_high": 0.2}
    rows = sweep.sweep_rows("grpo", "lr", exps, params, committed)
    assert [(r["point"], r["call"], r["commit"]) for r in rows] == [
        ("GRPO · lr null (its own)", "no change", "workspace"),
        ("GRPO · lr 1e-05", "no change", "learn-grpo-lr1e-05 (abcdef0)"),
        ("GRPO · lr 3e-05", "up", "learn-grpo-lr3e-05 (abcdef0)")]
    assert rows[2]["change_ci"] == "[+0.050, +0.400]" and rows[0]["lr"] == "3e-06"
    assert sweep.sweep_rows("grpo", "lr", exps[:1], params, None)[0]["end"] == 0.75  # nothing committed yet


def test_a_sweep_measured_otherwise_names_its_points_so_and_takes_only_them():
    sweep = _sweep_module()
    measure = {"eval_samples": 16, "eval_every": 6}
    assert sweep.point_args("grpo", "steps", 24, measure) == [
        "-n", "learn-grpo-steps24-eval_every6-eval_samples16", "-s", "-S", "learn.runs.grpo.steps=24",
        "-S", "learn.eval_every=6", "-S", "learn.eval_samples=16", "pipelines/learn/dvc.yaml:learn@grpo"]
    assert sweep.parse_measure("eval_samples=16") == ("eval_samples", 16)
    for bad in ("tasks=16", "eval_samples=0", "eval_samples=x"):
        with pytest.raises(ValueError, match=f"--measure {bad}"):
            sweep.parse_measure(bad)
    params = resolve({"profile": "cpu"}).to_dict()

    def point(name, steps, **learn):
        p = {**params, "learn": {**params["learn"], **learn, "runs": {**params["learn"]["runs"]}}}
        p["learn"]["runs"]["grpo"] = {**p["learn"]["runs"]["grpo"], "steps": steps}
        metrics = {"lr": 3e-6, "rollouts": 8 * steps, "start": 0.5, "end": 0.7, "change": 0.2, "change_low": 0.05,
                   "change_high": 0.35}
        return {"name": name, "baseline": "abcdef0123", "params": p,
                "metrics": {"results/learn/metrics/grpo.json": {"learn@grpo": metrics}}}

    exps = [point("learn-grpo-steps24-eval_every6-eval_samples16", 24, eval_samples=16, eval_every=6),
            point("learn-grpo-steps24", 24),  # measured as the workspace's race: another sweep
            point("learn-grpo-steps12-eval_every6-eval_samples16", 12, eval_samples=8, eval_every=6)]  # params differ
    committed = {"lr": 3e-6, "rollouts": 48, "start": 0.5, "end": 0.5, "change": 0.0, "change_low": -0.2,
                 "change_high": 0.2}
    rows = sweep.sweep_rows("grpo", "steps", exps, params, committed, measure)
    assert [(r["point"], r["rollouts"], r["call"]) for r in rows] == [("GRPO · steps 24", 192, "up")]
    assert [r["point"] for r in sweep.sweep_rows("grpo", "steps", exps, params, committed)] == [
        "GRPO · steps null (its own)", "GRPO · steps 24"]


def test_a_sweep_holding_a_run_setting_takes_every_experiment_of_the_run_at_it():
    sweep = _sweep_module()
    measure, hold = {"eval_samples": 16}, {"steps": 24}
    assert sweep.point_args("lopd", "lr", 3e-5, measure, hold) == [
        "-n", "learn-lopd-lr3e-05-eval_samples16-steps24", "-s", "-S", "learn.runs.lopd.lr=3e-05",
        "-S", "learn.runs.lopd.steps=24", "-S", "learn.eval_samples=16", "pipelines/learn/dvc.yaml:learn@lopd"]
    assert sweep.parse_hold("steps=24", "lr") == ("steps", 24) and sweep.parse_hold("lr=1e-5", "steps") == ("lr", 1e-5)
    for bad, setting in (("steps=24", "steps"), ("seed=1", "lr"), ("steps=x", "lr")):
        with pytest.raises(ValueError, match=f"--hold {bad}"):
            sweep.parse_hold(bad, setting)
    params = resolve({"profile": "cpu"}).to_dict()

    def point(name, lr, steps, change, **entry):
        p = {**params, "learn": {**params["learn"], **measure, "runs": {**params["learn"]["runs"]}}}
        p["learn"]["runs"]["lopd"] = {**p["learn"]["runs"]["lopd"], "lr": lr, "steps": steps, **entry}
        metrics = {"lr": lr or 3e-6, "rollouts": 8 * steps, "start": 0.5, "end": 0.5 + change, "change": change,
                   "change_low": change - 0.1, "change_high": change + 0.1}
        return {"name": name, "baseline": "abcdef0123", "params": p,
                "metrics": {"results/learn/metrics/lopd.json": {"learn@lopd": metrics}}}

    exps = [point("learn-lopd-lr3e-05-eval_samples16-steps24", 3e-5, 24, 0.3),
            point("learn-lopd-steps24-eval_samples16", None, 24, 0.0),  # the steps sweep's point: its own lr
            point("learn-lopd-lr1e-05-eval_samples16-steps12", 1e-5, 12, 0.3),  # held otherwise
            point("learn-lopd-lr1e-05-eval_samples16-steps24", 1e-5, 24, 0.3, seed=1)]  # another seed
    committed = {"lr": 3e-6, "rollouts": 48, "start": 0.5, "end": 0.5, "change": 0.0, "change_low": -0.2,
                 "change_high": 0.2}
    rows = sweep.sweep_rows("lopd", "lr", exps, params, committed, measure, hold)
    assert [(r["point"], r["rollouts"], r["call"]) for r in rows] == [
        ("LOPD · lr null (its own)", 192, "no change"), ("LOPD · lr 3e-05", 192, "up")]


def test_a_sweep_of_a_param_of_the_runs_stage_changes_that_param_only():
    sweep = _sweep_module()
    params = resolve({"profile": "cpu"}).to_dict()
    hold = {"steps": 24}
    assert sweep.point_args("lopd", "lopd.composer_lr", 1e-4, None, hold) == [
        "-n", "learn-lopd-composer_lr0.0001-steps24", "-s", "-S", "lopd.composer_lr=0.0001",
        "-S", "learn.runs.lopd.steps=24", "pipelines/learn/dvc.yaml:learn@lopd"]
    assert sweep.setting_type(params, "lopd", "lopd.composer_lr") is float
    assert sweep.setting_type(params, "lopd", "margin") is float and sweep.setting_type(params, "grpo", "lr") is float
    for bad, match in (("sdpo.ema_rate", "a param of the run's stage"), ("lopd.nothing", "no such param"),
                       ("bank.embedder", "a sweep varies a number or a true/false switch")):
        with pytest.raises(ValueError, match=match):
            sweep.setting_type(params, "lopd", bad)
    # GRPO's stage reads no LOPD param: its point would not re-run (`-s` skips a stage whose deps are unchanged)
    with pytest.raises(ValueError, match=r"^margin: .*param of the run's stage \(bank.embedder, bank.self_retrieval, "
                                         r"grpo.<key>\)$"):
        sweep.setting_type(params, "grpo", "margin")
    # a switch: written true/false in its name and override, parsed from exactly those words
    assert sweep.setting_type(params, "lopd", "bank.self_retrieval") is bool
    assert sweep.point_args("lopd", "bank.self_retrieval", True, None, hold) == [
        "-n", "learn-lopd-self_retrievaltrue-steps24", "-s", "-S", "bank.self_retrieval=true",
        "-S", "learn.runs.lopd.steps=24", "pipelines/learn/dvc.yaml:learn@lopd"]
    assert [sweep.parse_value(bool, w) for w in ("true", "false")] == [True, False]
    assert sweep.parse_value(float, "1e-4") == 1e-4 and sweep.parse_value(int, "24") == 24
    for kind, bad in ((bool, "True"), (bool, "1"), (int, "2.5"), (float, "x")):
        with pytest.raises(ValueError, match=f"^{bad}: "):
            sweep.parse_value(kind, bad)

    def point(name, composer_lr, steps=24, **elsewhere):
        p = {**params, **elsewhere, "lopd": {**params["lopd"], "composer_lr": composer_lr},
             "learn": {**params["learn"], "runs": {**params["learn"]["runs"]}}}
        p["learn"]["runs"]["lopd"] = {**p["learn"]["runs"]["lopd"], "steps": steps}
        metrics = {"lr": 3e-6, "rollouts": 8 * steps, "start": 0.5, "end": 0.8, "change": 0.3, "change_low": 0.1,
                   "change_high": 0.5}
        return {"name": name, "baseline": "abcdef0123", "params": p,
                "metrics": {"results/learn/metrics/lopd.json": {"learn@lopd": metrics}}}

    exps = [point("learn-lopd-composer_lr0.0001-steps24", 1e-4),
            point("learn-lopd-steps24", 1e-5),  # the run's own composer lr, at 24 steps
            point("learn-lopd-composer_lr0.001-steps24", 1e-3, margin=0.1),  # another param changed too
            point("learn-lopd-composer_lr0.001-steps12", 1e-3, steps=12)]  # held otherwise
    rows = sweep.sweep_rows("lopd", "lopd.composer_lr", exps, params, None, None, hold)
    assert [r["point"] for r in rows] == ["LOPD · lopd.composer_lr 1e-05", "LOPD · lopd.composer_lr 0.0001"]

    switched = {**exps[1], "name": "learn-lopd-self_retrievaltrue-steps24",
                "params": {**exps[1]["params"], "bank": {**params["bank"], "self_retrieval": True}}}
    rows = sweep.sweep_rows("lopd", "bank.self_retrieval", [switched, *exps], params, None, None, hold)
    assert [r["point"] for r in rows] == ["LOPD · bank.self_retrieval false", "LOPD · bank.self_retrieval true"]


def test_a_run_takes_the_selections_step_0_only_where_it_was_measured_as_the_run_measures():
    learn = resolve({"profile": "cpu"}).learn
    point = {"step": 0, "val_reward": 0.5}
    selection = {"step0": point, "step0_measurement": step0_measurement(learn)}
    assert reusable_step0(selection, learn) is point
    finer = dataclasses.replace(learn, eval_samples=4 * learn.eval_samples)  # a sweep's `-S learn.eval_samples`, `-s`
    assert reusable_step0(selection, finer) is None
    assert reusable_step0(selection, dataclasses.replace(learn, eval_seed=learn.eval_seed + 1)) is None
    assert reusable_step0({"step0": point}, learn) is None  # a selection that does not say how it measured
    # a tool-use race's measurement plays episodes of agentic.max_steps steps: another step cap measures anew
    episodes = {"step0": point, "step0_measurement": step0_measurement(learn, 5)}
    assert reusable_step0(episodes, learn, 5) is point and reusable_step0(episodes, learn, 3) is None
    assert reusable_step0(episodes, learn) is None
