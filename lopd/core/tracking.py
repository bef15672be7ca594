"""MLflow logging that can never lose results.

Every stage is one MLflow run in the experiment `<prefix>-<profile>`, tagged with the git commit,
the profile and the stage. The JSON metrics files each stage writes are the source of truth: if
MLflow is unavailable or fails mid-run, the tracker warns once and the stage carries on.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from lopd.core.config import REPO_ROOT, Config, mlflow_uri

_METRIC_NAME = re.compile(r"[^0-9A-Za-z_\-. :/]")


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat.update(flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


class Tracker:
    """One MLflow run per stage; every call is a no-op after the first MLflow failure."""

    def __init__(self, cfg: Config, stage: str):
        self.enabled = True
        self._mlflow = None
        self._guard(self._start, cfg, stage)

    def _start(self, cfg: Config, stage: str) -> None:
        import mlflow

        uri = mlflow_uri(cfg)
        mlflow.set_tracking_uri(uri)
        name = f"{cfg.tracking.experiment_prefix}-{cfg.profile}"
        if mlflow.get_experiment_by_name(name) is None:
            artifacts = Path(uri.removeprefix("sqlite:///")).parent / "artifacts" if uri.startswith("sqlite:///") else None
            mlflow.create_experiment(name, artifact_location=artifacts.as_uri() if artifacts else None)
        mlflow.set_experiment(name)
        mlflow.start_run(run_name=stage, tags={"stage": stage, "profile": cfg.profile, "git_commit": git_commit()})
        mlflow.log_params({k: str(v)[:500] for k, v in flatten(cfg.to_dict()).items()})
        self._mlflow = mlflow

    def _guard(self, fn, *args, **kwargs) -> None:
        if not self.enabled:
            return
        try:
            fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - an MLflow outage must not stop a stage
            self.enabled = False
            print(f"warning: MLflow logging disabled ({type(err).__name__}: {err}); JSON metrics are unaffected",
                  file=sys.stderr)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        numeric = {_METRIC_NAME.sub("_", k.replace("@", "_at_")): float(v) for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._guard(lambda: self._mlflow.log_metrics(numeric, step=step))

    def log_artifact(self, path: str | Path) -> None:
        self._guard(lambda: self._mlflow.log_artifact(str(path)))

    def close(self, status: str = "FINISHED") -> None:
        self._guard(lambda: self._mlflow.end_run(status=status))

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("FAILED" if exc_type else "FINISHED")
