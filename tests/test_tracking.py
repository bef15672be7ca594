import os

from lopd.core.config import resolve
from lopd.core.tracking import Tracker, flatten


def test_mlflow_outage_disables_logging_without_raising(monkeypatch, capsys):
    monkeypatch.setenv("LOPD_MLFLOW_URI", "sqlite:////proc/no-such-dir/mlflow.db")
    with Tracker(resolve({"profile": "smoke"}), "unit") as tracker:
        tracker.log_metrics({"x": 1.0}, step=1)
        assert not tracker.enabled
    assert "MLflow logging disabled" in capsys.readouterr().err


def test_runs_land_in_the_profile_experiment_with_sanitised_metric_names(tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("LOPD_MLFLOW_URI", uri)
    cfg = resolve({"profile": "smoke"})
    with Tracker(cfg, "eval@x") as tracker:
        tracker.log_metrics({"pass@1_plus": 12.5, "note": "text is skipped"})
        assert tracker.enabled
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["lopd-suite-smoke"])
    assert runs.iloc[0]["metrics.pass_at_1_plus"] == 12.5
    assert runs.iloc[0]["tags.stage"] == "eval@x" and runs.iloc[0]["params.model.name"] == "tiny-random"


def test_flatten():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


# Each child imports mlflow first, reports ready, then waits for the go file so all four open a Tracker on the
# fresh store at the same moment (imports alone take seconds and would otherwise stagger them).
_CHILD = """
import sys, time
from pathlib import Path
import mlflow  # noqa: F401 - warm the import before the race
from lopd.core.config import resolve
from lopd.core.tracking import Tracker

i, tmp = int(sys.argv[1]), Path(sys.argv[2])
(tmp / f"ready{i}").touch()
while not (tmp / "go").exists():
    time.sleep(0.01)
artifact = tmp / f"metrics{i}.json"
artifact.write_text('{"i": %d}' % i)
with Tracker(resolve({"profile": "smoke"}), f"stage{i}") as tracker:
    for step in range(3):
        tracker.log_metrics({"loss": i + step / 10, "pass@1": float(i)}, step=step)
    tracker.log_artifact(artifact)
    assert tracker.enabled
"""


def test_concurrent_stages_on_a_fresh_sqlite_store_lose_no_run(tmp_path):
    import subprocess
    import sys
    import time

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    env = {**os.environ, "LOPD_MLFLOW_URI": uri}
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(i), str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(4)) and time.monotonic() < deadline:
        time.sleep(0.05)
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0 and "MLflow logging disabled" not in err, err

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("lopd-suite-smoke").experiment_id])
    assert sorted(r.data.tags["stage"] for r in runs) == [f"stage{i}" for i in range(4)]
    for run in runs:
        i = int(run.data.tags["stage"][-1])
        assert run.info.status == "FINISHED" and run.data.params["profile"] == "smoke"
        assert run.data.metrics["pass_at_1"] == float(i)
        assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [i, i + 0.1, i + 0.2]
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == [f"metrics{i}.json"]


def test_dead_tracking_server_is_given_up_within_seconds(monkeypatch, capsys):
    import time

    monkeypatch.setenv("LOPD_MLFLOW_URI", "http://127.0.0.1:9")  # discard port: nothing listens
    start = time.monotonic()
    with Tracker(resolve({"profile": "smoke"}), "unit") as tracker:
        work = sum(range(10))  # the stage's own work still runs
        tracker.log_metrics({"x": 1.0}, step=1)
        tracker.log_artifact(__file__)
    elapsed = time.monotonic() - start
    assert work == 45 and not tracker.enabled
    assert elapsed < 15, f"took {elapsed:.1f} s to give up on a dead server"
    err = capsys.readouterr().err
    assert err.count("MLflow logging disabled") == 1 and len(err.strip().splitlines()) == 1, err


def test_tracking_off_logs_nothing_and_imports_no_mlflow():
    import subprocess
    import sys

    code = ("import sys; from lopd.core.config import resolve; from lopd.core.tracking import Tracker\n"
            "with Tracker(resolve({'profile': 'smoke'}), 'unit') as t:\n"
            "    t.log_metrics({'x': 1.0}, step=1)\n"
            "assert not t.enabled and 'mlflow' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LOPD_MLFLOW_URI": "off"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
