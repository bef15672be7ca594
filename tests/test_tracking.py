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
