"""MLflow logging that can never lose results.

Every stage is one MLflow run in the experiment `<prefix>-<profile>`, tagged with the git commit,
the profile and the stage. The JSON metrics files each stage writes are the source of truth: if
MLflow is unavailable or fails mid-run, the tracker warns once and the stage carries on.

Safe under concurrency: stages share one sqlite store, so every MLflow call on it (schema creation on first
use, experiment creation, run writes) holds a file lock next to the db. Fast to fail: an http(s) server is
probed once with a short timeout, and MLflow's own retries are capped, so a dead server costs seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lopd.core.config import REPO_ROOT, Config, mlflow_uri

OFF = "off"
"""`tracking.mlflow_uri: off` (or LOPD_MLFLOW_URI=off) logs nothing to MLflow; the JSON metrics files are unaffected."""
_METRIC_NAME = re.compile(r"[^0-9A-Za-z_\-. :/]")
_LOCK_TIMEOUT_S = 60  # bounds a wait on a stuck peer; the longest holder is the first-use schema migration
_PROBE_TIMEOUT_S = 3
# MLflow's defaults (7 retries with exponential backoff, 120 s timeout) spend minutes on a dead server.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


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


def store_lock(uri: str):
    """A cross-process lock for a sqlite store (`<db>.lock` beside it); a no-op for any other store.

    sqlite gives concurrent first users a schema-migration race (`table ... already exists`, lost runs)
    and concurrent writers `database is locked`; holding this around each MLflow call serialises both."""
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    from filelock import FileLock

    return FileLock(uri.removeprefix("sqlite:///") + ".lock", timeout=_LOCK_TIMEOUT_S)


def probe_server(uri: str) -> None:
    """Raise ConnectionError unless an http(s) tracking server accepts a TCP connection within a few seconds."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=_PROBE_TIMEOUT_S).close()
    except OSError as err:
        raise ConnectionError(f"tracking server {uri} unreachable: {err}") from err


def get_or_create_experiment(mlflow, name: str, artifact_location: str | None) -> str:
    """The id of experiment `name`, creating it if needed; tolerates another process creating it meanwhile."""
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return mlflow.create_experiment(name, artifact_location=artifact_location)
    except mlflow.exceptions.MlflowException:
        experiment = mlflow.get_experiment_by_name(name)  # lost the race to a peer (e.g. on a shared server)
        if experiment is None:
            raise
        return experiment.experiment_id


class Tracker:
    """One MLflow run per stage; every call is a no-op after the first MLflow failure."""

    def __init__(self, cfg: Config, stage: str):
        self.enabled = True
        self._mlflow = None
        self._lock = contextlib.nullcontext()
        self._guard(self._start, cfg, stage)

    def _start(self, cfg: Config, stage: str) -> None:
        uri = mlflow_uri(cfg)
        if uri == OFF:
            self.enabled = False
            return
        for key, value in _HTTP_DEFAULTS.items():  # a user's own setting wins
            os.environ.setdefault(key, value)
        probe_server(uri)
        import mlflow

        self._lock = store_lock(uri)
        sqlite = uri.startswith("sqlite:///")
        artifacts = (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").as_uri() if sqlite else None
        name = f"{cfg.tracking.experiment_prefix}-{cfg.profile}"
        tags = {"stage": stage, "profile": cfg.profile, "git_commit": git_commit()}
        with self._lock:  # first use of a fresh store creates its schema: only one process may do that
            mlflow.set_tracking_uri(uri)
            mlflow.set_experiment(experiment_id=get_or_create_experiment(mlflow, name, artifacts))
            mlflow.start_run(run_name=stage, tags=tags)
            mlflow.log_params({k: str(v)[:500] for k, v in flatten(cfg.to_dict()).items()})
        self._mlflow = mlflow

    def _guard(self, fn, *args, **kwargs) -> None:
        if not self.enabled:
            return
        try:
            fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - an MLflow outage must not stop a stage
            self.enabled = False
            detail = " ".join(f"{type(err).__name__}: {err}".split())  # one line, whatever the error's text
            print(f"warning: MLflow logging disabled ({detail}); JSON metrics are unaffected", file=sys.stderr)

    def _locked(self, fn) -> None:
        """Run one MLflow write under the store lock (see `store_lock`)."""
        with self._lock:
            fn()

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        numeric = {_METRIC_NAME.sub("_", k.replace("@", "_at_")): float(v) for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._guard(self._locked, lambda: self._mlflow.log_metrics(numeric, step=step))

    def log_artifact(self, path: str | Path) -> None:
        self._guard(self._locked, lambda: self._mlflow.log_artifact(str(path)))

    def close(self, status: str = "FINISHED") -> None:
        self._guard(self._locked, lambda: self._mlflow.end_run(status=status))

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("FAILED" if exc_type else "FINISHED")
