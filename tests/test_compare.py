"""scripts/compare.py: MLflow invocations on a real sqlite store with fabricated pipeline invocations, and DVC
experiments from a fabricated `dvc exp show --json` (the smoke DAG test runs it on real experiments)."""

import subprocess
import sys

import pytest
import yaml

from lopd.core import tracking
from lopd.core.config import REPO_ROOT, compose, resolve
from lopd.core.tracking import Tracker

EXPERIMENT = "cmp-smoke"


@pytest.fixture(scope="module")
def compare(load_script):
    return load_script("compare")


def _invocation(monkeypatch, tmp_path, name: str, dvc_pid: int, lr: float, scores: dict[str, float]) -> None:
    """One `dvc exp run -n <name> -S train.lr=<lr>`: a training stage and the report stage, as DVC runs them."""
    params = compose("smoke", [f"train.lr={lr}", "tracking.experiment_prefix=cmp"])
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setattr(tracking, "PARAMS_FILE", tmp_path / f"{name}.yaml")
    monkeypatch.setenv("DVC_EXP_NAME", name)
    monkeypatch.setattr(tracking, "process_ancestors", lambda: [(dvc_pid, 1000.0, ["dvc", "exp", "run"])])
    cfg = resolve({"profile": "smoke", "train": {"lr": lr}, "tracking": {"experiment_prefix": "cmp"}})
    summaries = (("train@grpo", {"loss": 0.5, "reward": lr * 1e5, "wall_s": dvc_pid}), ("report", scores))
    for stage, metrics in summaries:
        monkeypatch.setenv("DVC_STAGE", stage)
        with Tracker(cfg, stage) as tracker:
            tracker.log_metrics(metrics)
            tracker.log_to_parent(metrics)
        assert tracker.enabled


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding two invocations that differ in train.lr and in their metrics."""
    tmp_path = tmp_path_factory.mktemp("compare")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("LOPD_MLFLOW_URI", uri)
        monkeypatch.delenv("DVC_EXP_BASELINE_REV", raising=False)
        _invocation(monkeypatch, tmp_path, "exp-slow", 501, 3e-6, {"pass_at_1": 10.0, "code.mean": 0.123456})
        _invocation(monkeypatch, tmp_path, "exp-fast", 502, 1e-5, {"pass_at_1": 12.5, "code.mean": 0.25})
    return uri


def _table(compare, capsys, *args: str) -> tuple[list[str], dict[str, list[str]], str]:
    """(column names, cells by line label, whole output) of one comparison."""
    assert compare.main(["--experiment", EXPERIMENT, *args]) == 0
    out = capsys.readouterr().out
    lines = [line.split("  ") for line in out.splitlines() if line.strip() and not line.startswith("  ")]
    lines = [[cell.strip() for cell in line if cell.strip()] for line in lines]
    names = next(line for line in lines if line[0] == "run")[1:]
    return names, {line[0]: line[1:] for line in lines[1:]}, out


def test_one_column_per_invocation_with_the_params_and_metrics_that_differ(compare, store, capsys):
    names, cells, out = _table(compare, capsys, "--uri", store)
    assert names == ["exp-slow", "exp-fast"]  # oldest first
    assert cells["status"] == ["FINISHED", "FINISHED"]
    assert cells["train.lr"] == ["3e-06", "1e-05"]
    assert cells["report.code.mean"] == ["0.1235", "0.25"] and cells["report.pass_at_1"] == ["10", "12.5"]
    assert cells["train@grpo.reward"] == ["0.3", "1"]
    assert "train@grpo.loss" not in cells  # equal in both
    assert "train@grpo.wall_s" not in cells  # a timing: differs in every re-run
    assert "params equal in every column" in out and "metrics equal in every column" in out


def test_stage_metrics_and_runs_options(compare, store, capsys):
    names, cells, _ = _table(compare, capsys, "--uri", store, "--stage", "train", "--metrics", "^rew",
                             "--runs", "exp-fast")
    assert names == ["exp-fast"] and [k for k in cells if "." in k and "@" in k] == ["train@grpo.reward"]

    _, cells, _ = _table(compare, capsys, "--uri", store, "--all-params")
    assert {"train.lr", "cold_start.lr", "margin", "profile", "model.name"} <= set(cells)


def test_all_metrics_shows_the_equal_ones_and_the_timings(compare, store, capsys):
    _, cells, _ = _table(compare, capsys, "--uri", store, "--stage", "train", "--all-metrics")
    assert {"train@grpo.loss", "train@grpo.reward", "train@grpo.wall_s"} <= set(cells)
    _, cells, _ = _table(compare, capsys, "--uri", store, "--stage", "train", "--runs", "exp-fast")
    assert {"train@grpo.loss", "train@grpo.reward"} <= set(cells)  # one column: nothing to compare, all shown


def test_default_experiment_and_store_come_from_params_yaml(compare, store, capsys, monkeypatch):
    cfg = resolve({"profile": "smoke", "tracking": {"experiment_prefix": "cmp"}})
    monkeypatch.setattr("lopd.core.config.load_config", lambda path=None: cfg)
    monkeypatch.setenv("LOPD_MLFLOW_URI", store)
    assert compare.main([]) == 0
    assert "exp-fast" in capsys.readouterr().out


def test_a_missing_experiment_is_a_one_line_error(compare, store, capsys):
    assert compare.main(["--experiment", "no-such", "--uri", store]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no MLflow experiment 'no-such'") and len(err.strip().splitlines()) == 1


def test_a_missing_store_is_a_one_line_error_without_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "compare.py"), "--experiment", "x",
                           "--uri", f"sqlite:///{tmp_path / 'none.db'}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: no MLflow store at {tmp_path / 'none.db'}"
    assert not (tmp_path / "none.db").exists()


def test_an_unreadable_store_is_a_one_line_error(compare, tmp_path, capsys):
    (tmp_path / "bad.db").write_text("not a database")
    assert compare.main(["--experiment", "x", "--uri", f"sqlite:///{tmp_path / 'bad.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the MLflow runs") and len(err.strip().splitlines()) == 1


def test_many_columns_continue_in_blocks_led_by_the_labels(compare):
    names = [f"experiment-{i}" for i in range(12)]
    lines = [("margin", [f"0.0{i}" for i in range(12)]), ("train_lopd.beta_final", [f"{i}.5" for i in range(12)])]
    text = compare.render(names, lines, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    blocks = text.split("\n\n")
    assert len(blocks) > 1 and all(block.startswith("run") for block in blocks)
    assert all(name in text for name in names) and all("train_lopd.beta_final" in b for b in blocks)


@pytest.mark.parametrize("value, shown", [
    (0.123456, "0.1235"), (12.0, "12"), (1234567.0, "1.235e+06"), ("3e-06", "3e-06"), ("1.4142135623730951", "1.414"),
    ("32", "32"), ("tiny-random", "tiny-random"), (None, "-"), ("x" * 30, "x" * 23 + "…"), (True, "true"),
    (["sdpo", "lopd"], "sdpo,lopd"),
])
def test_cells_are_short(compare, value, shown):
    assert compare._fmt(value) == shown


def _revision(rev: str, name: str | None, params: dict, metrics: dict) -> dict:
    """A revision as `dvc exp show --json` gives it."""
    return {"rev": rev, "name": name, "data": {"rev": rev, "timestamp": "2026-11-27T15:30:00",
                                              "params": {"params.yaml": {"data": params}},
                                              "metrics": {"metrics/train/lopd.json": {"data": metrics}}}}


def test_dvc_experiments_are_grouped_by_profile_led_by_their_baseline(compare, monkeypatch, capsys):
    smoke, cpu = compose("smoke"), compose("cpu")
    show = [_revision("workspace", None, cpu, {}),
            {**_revision("a" * 40, "main", cpu, {"train_lopd": {"beta_final": 0.05}}), "experiments": [
                {"revs": [_revision("b" * 40, "cross-gape", smoke, {"train_lopd": {"beta_final": 0.047}})]},
                {"revs": [_revision("c" * 40, "mated-cony", {**smoke, "margin": 0.02},
                                    {"train_lopd": {"beta_final": 0.017, "wall_s": 3}})]},
                {"revs": [_revision("d" * 40, "fig3-m_0.0", {**cpu, "margin": 0.0},
                                    {"train_lopd": {"beta_final": 0.0}})]}]}]
    calls = []

    def fake_dvc(*args):
        calls.append(args)
        return __import__("json").dumps(show) if args[:2] == ("exp", "show") else ""

    monkeypatch.setattr(compare, "dvc", fake_dvc)
    assert compare.main(["--dvc"]) == 0
    out = capsys.readouterr().out
    assert ("exp", "rename", "cross-gape", "smoke") in calls and ("exp", "rename", "mated-cony",
                                                                   "smoke_margin-0.02") in calls
    assert "fig3-m_0.0" not in [c[2] for c in calls if c[1] == "rename"]  # named by the user: kept
    smoke_table, cpu_table = out.split("profile smoke: against smoke")[1].split("profile cpu: against main")
    head = next(line for line in smoke_table.splitlines() if line.startswith("run"))
    assert head.split() == ["run", "smoke", "smoke_margin-0.02"]
    assert any(line.split() == ["margin", "0.05", "0.02"] for line in smoke_table.splitlines())
    assert any(line.split() == ["train_lopd.beta_final", "0.047", "0.017"] for line in smoke_table.splitlines())
    assert "wall_s" not in smoke_table
    assert next(line for line in cpu_table.splitlines() if line.startswith("run")).split() == ["run", "main",
                                                                                               "fig3-m_0.0"]


def test_a_readable_name_already_taken_gets_a_number(compare):
    smoke = compare._dvc_column("x", {}, {"params": {"params.yaml": {"data": {**compose("smoke"), "margin": 0.02}}}})
    experiments = [("smoke_margin-0.02", smoke), ("mated-cony", smoke), ("sedgy-tipi", smoke)]
    assert compare.readable_names(experiments, compose("cpu")) == {"mated-cony": "smoke_margin-0.02-2",
                                                          "sedgy-tipi": "smoke_margin-0.02-3"}
