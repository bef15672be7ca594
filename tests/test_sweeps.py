"""The analysis sweeps: experiment names and overrides, reading points back from `dvc exp show --json`, the ACEBench
aggregate, the figures (missing points named) and adding files to the newest MLflow `report` run."""

import copy
import math

import mlflow
import pytest

from evaluation import paper_figures, sweeps
from evaluation.paper_figures import draw_dynamics, draw_sweep
from evaluation.stats import score_ci
from lopd.core.config import resolve
from lopd.core.tracking import log_to_latest_run


def test_every_point_has_a_distinct_valid_experiment_name_and_its_overrides():
    names = [sweeps.experiment_name(s.name, p) for s in sweeps.SWEEPS.values() for p in s.points]
    assert len(set(names)) == len(names) and all(n.isascii() and " " not in n for n in names)
    assert sweeps.experiment_name("fig3", "frozen φ0") == "fig3-frozen_phi0"
    assert sweeps.experiment_name("fig3", "m=0 (no constraint)") == "fig3-m_0_no_constraint"
    fig3 = sweeps.SWEEPS["fig3"].points
    assert sweeps.overrides(fig3["m=0 (no constraint)"], "fig3", "smoke") == [
        "-S", "margin=0", "-S", "lopd.margin_constraint=false"]
    assert sweeps.overrides(fig3["frozen φ0"], "fig3", "cpu") == [
        "-S", "lopd.train_composer=false", "-S", "lopd.steps=4"]
    assert sweeps.overrides(sweeps.SWEEPS["fig5a"].points["K=8"], "fig5", "cpu") == [
        "-S", "latent_tokens=8", "-S", "lopd.steps=2", "-S", "cold_start.steps=4"]
    assert [v["latent_tokens"] for v in sweeps.SWEEPS["fig5a"].points.values()] == [8, 16, 32, 64, 128]
    assert [v["n_ret"] for v in sweeps.SWEEPS["fig5b"].points.values()] == [1, 2, 3, 5, 10]
    for sweep in sweeps.SWEEPS.values():  # each sweep's default point is the default configuration
        defaults = resolve({"profile": "cpu"}).to_dict()
        assert all(defaults[k.split(".")[0]] == v if "." not in k else defaults[k.split(".")[0]][k.split(".")[1]] == v
                   for k, v in sweep.points[sweep.default].items()), sweep.name


def _nested(dotted: dict) -> dict:
    out = {}
    for key, value in dotted.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


@pytest.mark.parametrize("profile", ["cpu", "smoke"])
def test_a_figure_runs_one_experiment_per_distinct_configuration(profile):
    for figure, sweep_names in sweeps.FIGURES.items():
        names = sweeps.experiment_names(figure, resolve({"profile": profile}).to_dict(), profile)
        budget = sweeps.SWEEP_BUDGET.get(profile, {}).get(figure, {})
        configs = {(s, p): resolve({"profile": profile, **_nested({**budget, **values})}).to_dict()
                   for s in sweep_names for p, values in sweeps.SWEEPS[s].points.items()}
        assert set(names) == set(configs)
        for a in configs:  # the same experiment exactly where the resolved configurations are equal
            for b in configs:
                assert (names[a] == names[b]) == (configs[a] == configs[b]), (figure, a, b)
        assert set(names.values()) <= {sweeps.experiment_name(*key) for key in configs}
    fig5 = sweeps.experiment_names("fig5", resolve({"profile": "cpu"}).to_dict(), "cpu")
    assert fig5["fig5b", "n_ret=3"] == fig5["fig5a", "K=32"] == "fig5a-K_32" and len(set(fig5.values())) == 9


def _exp(name, metrics, rev="e1"):
    return {"name": name, "revs": [{"rev": rev, "data": {"params": {"params.yaml": {"data": {"margin": 0.02}}},
                                                         "metrics": metrics}}]}


def test_points_are_read_from_dvc_exp_show_of_every_baseline_asked_for():
    lopd = {"train_lopd": {"val_reward_final": 0.5, "val_reward_final_ci_low": 0.3, "val_reward_final_ci_high": 0.7,
                           "val_n": 32}}
    show = [{"rev": "workspace", "experiments": None},
            {"rev": "abc123", "experiments": [_exp("fig3-m_0.02", {"metrics/train/lopd.json": {"data": lopd}}),
                                              _exp("fig3-frozen_phi0", {})]},  # queued, no metrics yet
            {"rev": "old999", "experiments": [_exp("fig3-m_0.1", {"metrics/train/lopd.json": {"data": lopd}}, "e2")]}]
    found = sweeps.experiments(show)
    assert [(e["name"], e["baseline"], e["rev"]) for e in found] == [("fig3-m_0.02", "abc123", "e1"),
                                                                      ("fig3-m_0.1", "old999", "e2")]
    assert found[0]["params"] == {"margin": 0.02}
    runs = {e["name"]: e for e in found if e["name"] == "fig3-m_0.02"}
    names = {("fig3", p): sweeps.experiment_name("fig3", p) for p in sweeps.SWEEPS["fig3"].points}
    rows = sweeps.collect(sweeps.SWEEPS["fig3"], "code", runs, names)
    assert [r["point"] for r in rows] == list(sweeps.SWEEPS["fig3"].points)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 1 and ok[0]["point"] == "m=0.02" and (ok[0]["value"], ok[0]["low"], ok[0]["high"],
                                                             ok[0]["n"]) == (0.5, 0.3, 0.7, 32)


def _lock(train_params, composer="c0", cold_params=None, code="k0", bank="b0", cold_code="q0"):
    """A dvc.lock: build_bank -> cold_start (bank -> composer, also running cold.py) -> train_lopd, all running
    code.py, and a report beside them."""
    dep = lambda path, md5: {"path": path, "hash": "md5", "md5": md5}  # noqa: E731
    return {"schema": "2.0", "stages": {
        "build_bank": {"cmd": "bank", "deps": [dep("code.py", code)], "outs": [dep("bank", bank)]},
        "cold_start": {"cmd": "cold", "deps": [dep("bank", bank), dep("code.py", code), dep("cold.py", cold_code)],
                       "params": {"params.yaml": cold_params or {"cold_start.steps": 12, "latent_tokens": 32}},
                       "outs": [dep("checkpoints/composer", composer)]},
        "train_lopd": {"cmd": "train", "deps": [dep("checkpoints/composer", composer), dep("code.py", code)],
                       "params": {"params.yaml": train_params}, "outs": [dep("checkpoints/lopd", "s1")]},
        "report": {"cmd": "report", "deps": [dep("other.py", "o1")]}}}


DEFAULTS = {"margin": 0.05, "lopd": {"steps": 8, "top_m": 20}, "latent_tokens": 32}


def test_a_point_stays_current_until_what_it_ran_changes():
    workspace = _lock(DEFAULTS)
    margin = {"margin": 0.02, "lopd.steps": 4}
    point = _lock({"margin": 0.02, "lopd": {"steps": 4, "top_m": 20}, "latent_tokens": 32})
    assert sweeps.stale_reason(point, workspace, "train_lopd", margin) is None
    # a stage it did not run may differ (the workspace re-recorded its report since)
    later = copy.deepcopy(workspace)
    later["stages"]["report"]["deps"][0]["md5"] = "o2"
    assert sweeps.stale_reason(point, later, "train_lopd", margin) is None
    # its code, an upstream output it did not re-run, a param it did not set, or its own value changed
    assert sweeps.stale_reason(point, _lock(DEFAULTS, code="k1"), "train_lopd", margin) == "train_lopd: code.py changed"
    assert sweeps.stale_reason(point, _lock(DEFAULTS, composer="c9"), "train_lopd", margin) == \
        "train_lopd: checkpoints/composer changed (cold_start was recorded again)"
    top = _lock({**DEFAULTS, "lopd": {"steps": 8, "top_m": 10}})
    assert "lopd.top_m" in sweeps.stale_reason(point, top, "train_lopd", margin)
    assert "margin" in sweeps.stale_reason(point, workspace, "train_lopd", {"margin": 0.01, "lopd.steps": 4})
    moved = copy.deepcopy(workspace)
    moved["stages"]["train_lopd"]["cmd"] = "train --new"
    assert sweeps.stale_reason(point, moved, "train_lopd", margin) == "train_lopd's command changed"
    del moved["stages"]["train_lopd"]
    assert sweeps.stale_reason(point, moved, "train_lopd", margin) == "train_lopd is not in the workspace's dvc.lock"


def test_a_point_that_re_ran_an_upstream_stage_is_checked_through_it():
    """Fig. 5's K = 8: the point re-ran the cold start with its own K and steps, so its composer differs from the
    workspace's; the point counts while the cold start's own code and data are the workspace's."""
    k8 = {"latent_tokens": 8, "cold_start.steps": 4, "lopd.steps": 2}
    cold = {"cold_start.steps": 4, "latent_tokens": 8}
    point = _lock({**DEFAULTS, "lopd": {"steps": 2, "top_m": 20}, "latent_tokens": 8}, composer="c8", cold_params=cold)
    assert sweeps.stale_reason(point, _lock(DEFAULTS), "train_lopd", k8) is None
    assert sweeps.stale_reason(point, _lock(DEFAULTS, bank="b1"), "train_lopd", k8) == \
        "cold_start: bank changed (build_bank was recorded again)"
    assert sweeps.stale_reason(point, _lock(DEFAULTS, cold_code="q1"), "train_lopd", k8) == \
        "cold_start: cold.py changed"
    wrong = _lock({**DEFAULTS, "lopd": {"steps": 2, "top_m": 20}, "latent_tokens": 8}, composer="c8",
                  cold_params={"cold_start.steps": 12, "latent_tokens": 8})
    assert "cold_start.steps" in sweeps.stale_reason(wrong, _lock(DEFAULTS), "train_lopd", k8)


def test_the_acebench_aggregate_pools_both_suites():
    a, b = {"value": 0.5, "n": 10}, {"value": 0.2, "n": 30}
    got = sweeps.pooled(a, b)
    p, n, z = (0.5 * 10 + 0.2 * 30) / 40, 40, 1.959963984540054
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert got["value"] == pytest.approx(p) and got["n"] == 40
    assert (got["low"], got["high"]) == pytest.approx((centre - half, centre + half))
    assert sweeps.pooled(a, None) is None and sweeps.pooled(a, {"value": 0.0, "n": 0}) is None
    metrics = {"metrics/agentic/eval/lopd.json": {"eval_agentic@lopd": {
        "envscaler": {"score": 40.0, "score_ci_low": 30.0, "score_ci_high": 50.0, "n_tasks": 20},
        "acebench_multi_step": {"score": 50.0, "n_tasks": 10}, "acebench_multi_turn": {"score": 20.0, "n_tasks": 30}}}}
    names = sweeps.experiment_names("fig5", resolve({"profile": "cpu"}).to_dict(), "cpu")
    rows = sweeps.collect(sweeps.SWEEPS["fig5b"], "agentic", {"fig5a-K_32": {"metrics": metrics}}, names)
    mine = {r["metric"]: r for r in rows if r["point"] == "n_ret=3"}
    assert mine["EnvScaler reward (LOPD student)"]["value"] == pytest.approx(0.4)
    assert mine["ACEBench aggregate"]["value"] == pytest.approx(p)


def test_figures_draw_what_has_run_and_name_the_rest(tmp_path):
    names = {("fig5a", p): sweeps.experiment_name("fig5a", p) for p in sweeps.SWEEPS["fig5a"].points}
    rows = sweeps.collect(sweeps.SWEEPS["fig5a"], "code", {"fig5a-K_32": {"metrics": {"metrics/train/lopd.json": {
        "train_lopd": {"val_reward_final": 0.5, "val_reward_final_ci_low": 0.3, "val_reward_final_ci_high": 0.7,
                       "val_n": 32}}}}}, names)
    files = draw_sweep(rows, list(sweeps.SWEEPS["fig5a"].points), "K=32", "K", True, tmp_path / "f.png", "t")
    assert [f.name for f in files] == ["f.png", "f.pdf"] and all(f.stat().st_size > 0 for f in files)
    history = [{"cumulative_rollouts": 16 * i, "reward": i / 4} for i in range(1, 4)]
    validation = [{"cumulative_rollouts": 0, "val_reward": 0.5, "val_rewards": [0.0, 1.0]},
                  {"cumulative_rollouts": 48, "val_reward": 1.0, "val_rewards": [1.0, 1.0]}]
    files = draw_dynamics({"lopd": history}, {"lopd": validation}, tmp_path / "d.png", "t", score_ci)
    assert files[0].read_bytes()[:4] == b"\x89PNG"


def test_the_points_not_run_are_named_in_lines_that_fit_under_their_panel(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(paper_figures, "save", lambda fig, path: drawn.append(fig) or [path])
    points = list(sweeps.SWEEPS["fig5b"].points)
    rows = sweeps.collect(sweeps.SWEEPS["fig5b"], "code", {}, {("fig5b", p): sweeps.experiment_name("fig5b", p)
                                                               for p in points})
    draw_sweep(rows, points, points[0], "retrievals", True, tmp_path / "f.png", "t")
    label = drawn[0].axes[0].get_xlabel()
    named = label.split("\n", 1)[1].removeprefix("not run yet: ").replace("\n", " ").split(", ")
    assert named == points
    assert all(len(line) <= 4.6 * 11 for line in label.splitlines())


def test_characters_a_font_cannot_draw_become_their_escapes():
    drawable, text = {ord(c) for c in "ab·Ж"}, "a中b \t·😀ЖΩ"
    expected = "".join(c if c in "ab·Ж \t" else c.encode("unicode_escape").decode("ascii") for c in text)
    assert paper_figures.escape_undrawable(text, drawable) == expected == "a\\u4e2db \t·\\U0001f600Ж\\u03a9"
    assert ord("A") in paper_figures.monospace_code_points() and ord("中") not in paper_figures.monospace_code_points()


def test_files_go_to_the_newest_report_run(tmp_path, monkeypatch):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("LOPD_MLFLOW_URI", store)
    cfg = resolve({"profile": "smoke"})
    figure = tmp_path / "fig3.png"
    figure.write_bytes(b"png")
    assert not log_to_latest_run(cfg, "report", [figure])  # no run yet
    mlflow.set_tracking_uri(store)
    experiment_id = mlflow.create_experiment(f"{cfg.tracking.experiment_prefix}-{cfg.profile}",
                                             artifact_location=(tmp_path / "artifacts").as_uri())
    ids = []
    for _ in range(2):
        with mlflow.start_run(run_name="report · fig3-m_0.02", experiment_id=experiment_id,
                              tags={"dvc.stage": "report"}) as run:  # as the Tracker names a stage's run
            ids.append(run.info.run_id)
    assert log_to_latest_run(cfg, "report", [figure])
    client = mlflow.MlflowClient(store)
    assert [a.path for a in client.list_artifacts(ids[1])] == ["fig3.png"] and not client.list_artifacts(ids[0])


def test_dropping_a_points_student_frees_only_objects_the_workspace_does_not_use():
    listings = {"ws.dir": ["tok", "w_default"], "pt.dir": ["tok", "w_point", "cfg"], "comp.dir": ["c1"]}
    workspace = {"stages": {"train_lopd": {"outs": [{"path": "checkpoints/lopd", "md5": "ws.dir"}]},
                            "build_bank": {"outs": [{"path": "bank", "md5": "cfg"}]}}}  # shares a file by content
    point = {"stages": {"train_lopd": {"outs": [{"path": "checkpoints/lopd", "md5": "pt.dir"},
                                                {"path": "metrics/train/lopd.json", "md5": "m"}]},
                        "cold_start": {"outs": [{"path": "checkpoints/composer", "md5": "comp.dir"}]}}}
    got = sweeps.droppable_objects(point, workspace, "train_lopd", lambda md5: listings.get(md5, []))
    used = {"ws.dir", "cfg", *listings["ws.dir"]}
    reference = {o for o in ["pt.dir", "m", *listings["pt.dir"]] if o not in used}
    assert got == reference == {"pt.dir", "w_point", "m"}
    assert sweeps.droppable_objects(point, workspace, "train_lopd_agentic", listings.get) == set()
