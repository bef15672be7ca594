"""scripts/compare.py on a real sqlite store with two fabricated pipeline invocations."""

import subprocess
import sys

import pytest

from lopd.core import tracking
from lopd.core.config import REPO_ROOT, resolve
from lopd.core.tracking import Tracker

EXPERIMENT = "cmp-smoke"


@pytest.fixture(scope="module")
def compare(load_script):
    return load_script("compare")


def _invocation(monkeypatch, name: str, dvc_pid: int, lr: float, scores: dict[str, float]) -> None:
    """One `dvc exp run -n <name> -S train.lr=<lr>`: a training stage and the report stage, as DVC runs them."""
    monkeypatch.setenv("DVC_EXP_NAME", name)
    monkeypatch.setattr(tracking, "process_ancestors", lambda: [(dvc_pid, 1000.0, ["dvc", "exp", "run"])])
    cfg = resolve({"profile": "smoke", "train": {"lr": lr}, "tracking": {"experiment_prefix": "cmp"}})
    for stage, metrics in (("train@grpo", {"loss": 0.5, "reward": lr * 1e5}), ("report", scores)):
        monkeypatch.setenv("DVC_STAGE", stage)
        with Tracker(cfg, stage) as tracker:
            tracker.log_metrics(metrics)
        assert tracker.enabled


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding two invocations that differ in train.lr and in their report metrics."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('compare') / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("LOPD_MLFLOW_URI", uri)
        monkeypatch.delenv("DVC_EXP_BASELINE_REV", raising=False)
        _invocation(monkeypatch, "exp-slow", 501, 3e-6, {"pass_at_1": 10.0, "code.mean": 0.123456})
        _invocation(monkeypatch, "exp-fast", 502, 1e-5, {"pass_at_1": 12.5, "code.mean": 0.25})
    return uri


def _table(compare, capsys, *args: str) -> tuple[list[str], dict[str, list[str]], str]:
    """(header, rows by run name, whole output) of one comparison; a row's `started` cell is split in date and time."""
    assert compare.main(["--experiment", EXPERIMENT, *args]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.strip()]
    header = next(line for line in lines if line[0] == "run")
    rows = {line[0]: line for line in lines if line[0].startswith("exp-")}
    return header, rows, out


def test_one_row_per_invocation_with_the_params_that_differ_and_the_report_metrics(compare, store, capsys):
    header, rows, out = _table(compare, capsys, "--uri", store)
    assert header == ["run", "started", "status", "commit", "train.lr", "code.mean", "pass_at_1"]
    assert list(rows) == ["exp-slow", "exp-fast"]  # oldest first
    assert rows["exp-slow"][3] == "FINISHED" and rows["exp-slow"][5:] == ["3e-06", "0.1235", "10"]
    assert rows["exp-fast"][5:] == ["1e-05", "0.25", "12.5"]
    assert "params equal in every row" in out and "metrics from stage run(s): report" in out


def test_stage_metrics_runs_and_all_params_options(compare, store, capsys):
    header, rows, _ = _table(compare, capsys, "--uri", store, "--stage", "train", "--metrics", "^rew",
                             "--runs", "exp-fast")
    assert header[-1] == "reward" and list(rows) == ["exp-fast"] and rows["exp-fast"][-1] == "1"

    _, _, out = _table(compare, capsys, "--uri", store, "--all-params")  # wide: it continues in blocks
    headers = {cell for line in out.splitlines() if line.startswith("run ") for cell in line.split()}
    assert {"train.lr", "cold_start.lr", "margin", "profile", "model.name"} <= headers


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


def test_a_wide_table_continues_in_blocks_led_by_the_run_column(compare):
    header = ["run", "started", "status", "commit"] + [f"param{i}" for i in range(12)]
    rows = [["exp-a", "2026-01-01 10:00", "FINISHED", "abc1234"] + [f"{i}.5" for i in range(12)]]
    text = compare.render(header, rows, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    blocks = text.split("\n\n")
    assert len(blocks) > 1 and all(block.startswith("run") for block in blocks)
    assert all(f"param{i}" in text for i in range(12))


@pytest.mark.parametrize("value, shown", [
    (0.123456, "0.1235"), (12.0, "12"), (1234567.0, "1.235e+06"), ("3e-06", "3e-06"), ("1.4142135623730951", "1.414"),
    ("32", "32"), ("tiny-random", "tiny-random"), (None, "-"), ("x" * 30, "x" * 19 + "…"),
])
def test_cells_are_short(compare, value, shown):
    assert compare._fmt(value) == shown


def test_metrics_equal_in_every_row_are_hidden_unless_asked_for(compare, store, capsys):
    header, _, out = _table(compare, capsys, "--uri", store, "--stage", "train")
    assert header[-1] == "reward" and "loss" not in header  # loss is 0.5 in both invocations
    assert "1 metrics equal in every row (--all-metrics shows them)" in out
    header, _, _ = _table(compare, capsys, "--uri", store, "--stage", "train", "--all-metrics")
    assert header[-2:] == ["loss", "reward"]
    header, _, _ = _table(compare, capsys, "--uri", store, "--stage", "train", "--runs", "exp-fast")
    assert header[-2:] == ["loss", "reward"]  # a single row: nothing to compare, everything shown
