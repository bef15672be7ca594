"""MLflow logging that can never lose results.

Run hierarchy, in the experiment `<prefix>-<profile>`:

    parent run: one per pipeline invocation (`dvc repro`, one `dvc exp run`, each experiment `dvc queue start` runs),
    |           named after the DVC experiment (one DVC named at random after the `-S` overrides instead,
    |           `margin-0.02`; `dvc repro` otherwise), tagged with the invocation key (`lopd.invocation`). Its params
    |           are the profile and the overrides; its metrics, each stage's summary under the stage's name
    |           (`train_lopd.beta_final`), so two parents compare in the UI. The report stage adds the recorded
    |           summaries of the stages DVC did not re-run and names them in the tag `lopd.cached_stages`.
    +-- child run: one per stage, named after the DVC stage and the parent (`train_lopd · margin-0.02`), with the
                   stage's name exact in the tag `dvc.stage` and all the params it ran with

DVC runs every stage as its own process, so there is no shared object to hold the parent: the first stage of an
invocation creates it and later stages find it by its invocation key (`invocation_key`: the DVC experiment name
plus the pid and start time of the `dvc` process the stage descends from). A stage not run by DVC (no DVC_STAGE
in its environment) is a top-level run with no parent. The parent's status follows its children: RUNNING while
one runs, then FINISHED, or FAILED once any child failed or was killed; its end time is its last child's.

A run ends FINISHED, FAILED (an exception or a non-zero `sys.exit`) or KILLED (Ctrl-C, or SIGTERM while the Tracker
is open). A SIGKILL ends nothing, so each run names its host and process (`lopd.host`, `lopd.process`): the next start
of the same stage on that host marks a RUNNING run whose process is gone KILLED, ended at its last logged metric, and
settles its parent. A training stage (`resumable=True`) opens its run once it knows its checkpoint (`Tracker.begin`):
resumed from a checkpoint, it continues the interrupted run of that checkpoint, so a stage's curve is one run with
each step once. The JSON metrics files each stage writes are the source of truth: if MLflow is unavailable or fails
mid-run, the tracker warns once and the stage carries on.

Safe under concurrency: stages share one sqlite store, so every MLflow call on it (schema creation on first
use, experiment and parent-run creation, run writes) holds a file lock next to the db. Fast to fail: an http(s)
server is probed once with a short timeout (it must answer an HTTP request, not just accept the connection), and
MLflow's own retries are capped, so a dead or silent server costs seconds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lopd.core.config import REPO_ROOT, Config, ConfigError, load_config, mlflow_uri, parse_yaml, read_yaml
from lopd.core.experiments import flatten, is_dvc_generated, readable_name
from lopd.core.provenance import PACKAGES

OFF = "off"
"""`tracking.mlflow_uri: off` (or LOPD_MLFLOW_URI=off) logs nothing to MLflow; the JSON metrics files are unaffected."""
RUNNING, FINISHED, FAILED, KILLED = "RUNNING", "FINISHED", "FAILED", "KILLED"
INVOCATION_TAG = "lopd.invocation"
"""Marks a parent run; its value is the invocation key later stages look the parent up by."""
PARENT_TAG = "mlflow.parentRunId"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
"""The UI's model-training view (runs, params, metrics); without the tag it may open its GenAI (traces) view."""
REPRO_RUN_NAME = "dvc repro"
"""Name of the parent run of an invocation that is not a DVC experiment."""
PARAMS_FILE = REPO_ROOT / "params.yaml"
"""What DVC runs an invocation's stages with (conf/ composed with the profile and the `-S` overrides)."""
STAGE_TAG = "dvc.stage"
CACHED_STAGES_TAG = "lopd.cached_stages"
"""On a parent run: the stages whose summaries the report stage copied from their metrics files (DVC did not re-run
them in this invocation)."""
HOST_TAG, PROCESS_TAG = "lopd.host", "lopd.process"
"""On a stage's run: the host and `pid:create_time` of the process logging it, what a later start checks it by."""
CHECKPOINT_TAG = "lopd.checkpoint"
"""On a training stage's run: the fingerprint of the checkpoint it writes, which a resumed stage continues it by."""
RESUMED_TAG, PAUSED_TAG = "lopd.resumed_from_step", "lopd.paused_s"
"""On a continued run: the step its latest resume started from, and the seconds it spent interrupted (its duration less
this is the stage's wall time)."""
CODE_PATHS = (*PACKAGES, "scripts", "conf", "dvc.yaml", "requirements.txt", "Makefile")
"""What `git.dirty` looks at: the code and its definition. Not params.yaml and dvc.lock (DVC rewrites them and records
them itself) nor the git-tracked stage outputs (metrics/, plots/, reports/), which every re-run rewrites: otherwise
every experiment, and every stage after the first, would be dirty."""

_METRIC_NAME = re.compile(r"[^0-9A-Za-z_\-. :/]")
_KEY_CHARS = re.compile(r"[^0-9A-Za-z_\-.:@/+]")  # the key goes into a quoted search filter: keep it plain
_LOCK_TIMEOUT_S = 60  # bounds a wait on a stuck peer; the longest holder is the first-use schema migration
_PROBE_TIMEOUT_S = 3
_SYSTEM_METRICS_INTERVAL_S = 10  # one sample per 10 s: a few hundred points for an hour of training
# MLflow's defaults (7 retries with exponential backoff, 120 s timeout) spend minutes on a dead server.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}

Ancestor = tuple[int, float, Sequence[str]]
"""A process above this one: (pid, create_time, cmdline)."""


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> str:
    out = _git("rev-parse", "HEAD")
    return (out.stdout.strip() if out else "") or "unknown"


def git_dirty() -> str:
    """"true" when tracked files of CODE_PATHS differ from HEAD, "false" when not, "unknown" without git.
    Runs in REPO_ROOT: for a queued experiment that is DVC's temporary copy, where the queued changes are
    uncommitted."""
    # --no-optional-locks: never take the index lock that a concurrent `dvc exp` git operation may need
    out = _git("--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    if out is None or out.returncode != 0:
        return "unknown"
    return "true" if out.stdout.strip() else "false"


def store_lock(uri: str):
    """A cross-process lock for a sqlite store (`<db>.lock` beside it); a no-op for any other store.

    sqlite gives concurrent first users a schema-migration race (`table ... already exists`, lost runs)
    and concurrent writers `database is locked`; holding this around each MLflow call serialises both."""
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    from filelock import FileLock

    return FileLock(uri.removeprefix("sqlite:///") + ".lock", timeout=_LOCK_TIMEOUT_S)


def probe_server(uri: str) -> None:
    """Raise ConnectionError unless an http(s) tracking server answers an HTTP request (MLflow's /health) within a
    few seconds: a dead host, a closed port and a server that accepts connections but never answers are all given
    up here, not after MLflow's own timeouts and retries (about 37 s for the silent server)."""
    if urlsplit(uri).scheme not in ("http", "https"):
        return
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=_PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return  # an HTTP status is an answer (a proxy in front of the server may not route /health)
    except OSError as err:  # URLError, a refused connection, a read that timed out
        raise ConnectionError(f"tracking server {uri} does not answer: {err}") from err


def get_or_create_experiment(mlflow, name: str, artifact_location: str | None) -> str:
    """The id of experiment `name`, creating it if needed (tolerates another process creating it meanwhile), with
    the model-training experiment kind unless someone chose a kind explicitly."""
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        try:
            return mlflow.create_experiment(name, artifact_location=artifact_location,
                                            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except mlflow.exceptions.MlflowException:
            experiment = mlflow.get_experiment_by_name(name)  # lost the race to a peer (e.g. on a shared server)
            if experiment is None:
                raise
    kind = experiment.tags.get(EXPERIMENT_KIND_TAG, "")
    if not kind or kind.endswith("_inferred") or kind == "no_inferred_type":  # missing, or only the UI's guess
        mlflow.MlflowClient().set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment.experiment_id


# --- which pipeline invocation a stage belongs to ---

def is_dvc_command(cmdline: Sequence[str]) -> bool:
    """Whether a process is the `dvc` CLI: `dvc ...` (also as an entry-point script run by its interpreter, which
    is how the kernel runs a shebang script) or `python -m dvc ...`."""
    if not cmdline:
        return False
    first = os.path.basename(cmdline[0]).removesuffix(".exe")
    if first == "dvc":
        return True
    if first.startswith("python") and len(cmdline) > 1:
        return os.path.basename(cmdline[1]).removesuffix(".exe") == "dvc" or list(cmdline[1:3]) == ["-m", "dvc"]
    return False


def invocation_key(environ: Mapping[str, str], ancestors: Sequence[Ancestor], host: str = "") -> str | None:
    """The identity of the pipeline invocation a stage runs in, or None outside one (then the run has no parent).

    DVC sets DVC_STAGE for every stage command but no per-invocation id. The nearest `dvc` process above the stage
    is the invocation (`dvc repro`, `dvc exp run`, or the `dvc exp exec-run` a queue worker starts per experiment);
    pid + create_time name a process uniquely on a host. DVC_EXP_NAME is part of the key too, because a long-lived
    `dvc queue start` worker may run several experiments under one process."""
    if not environ.get("DVC_STAGE"):
        return None
    dvc = next(((pid, started) for pid, started, cmdline in ancestors if is_dvc_command(cmdline)), None)
    if dvc is None:  # DVC_STAGE without a visible dvc process (set by hand, or processes unreadable)
        return None
    experiment = environ.get("DVC_EXP_NAME") or "repro"
    return _KEY_CHARS.sub("_", f"{experiment}@{host}:{dvc[0]}:{dvc[1]:.2f}")


def process_ancestors() -> list[Ancestor]:
    """This process's ancestors, nearest first; the ones that cannot be read are left out."""
    try:
        import psutil
    except ImportError:
        return []
    ancestors: list[Ancestor] = []
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process().parents():
            with contextlib.suppress(psutil.Error):
                ancestors.append((proc.pid, proc.create_time(), proc.cmdline()))
    return ancestors


def process_identity() -> str:
    """`pid:create_time` of this process, which names it on its host (pids are reused)."""
    import psutil

    process = psutil.Process()
    return f"{process.pid}:{process.create_time():.2f}"


def is_gone(identity: str) -> bool:
    """Whether the process `identity` (`process_identity` on this host) has ended; False when it cannot tell."""
    import psutil

    pid, _, started = identity.partition(":")
    if not (pid.isdigit() and started):
        return False
    try:
        return f"{psutil.Process(int(pid)).create_time():.2f}" != started  # a reused pid has another create time
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def last_activity_ms(client, run) -> int:
    """When `run` last logged a metric (system metrics included: one every 10 s in a training stage), else its start."""
    times = [m.timestamp for key in run.data.metrics for m in client.get_metric_history(run.info.run_id, key)]
    return max(times, default=run.info.start_time)


def settle_dead_runs(client, experiment_id: str, host: str) -> None:
    """End KILLED every RUNNING run on `host` whose process has ended (a SIGKILL, a lost machine), at its last logged
    metric, and settle its parent: whichever stage starts next, so the UI shows a killed stage as such before that
    stage runs again. Runs of another host are left alone: their process cannot be seen."""
    found = client.search_runs([experiment_id], filter_string=(
        f"attributes.status = '{RUNNING}' and tags.`{HOST_TAG}` = '{host}'"))
    for run in found:
        if is_gone(run.data.tags.get(PROCESS_TAG, "")):
            client.set_terminated(run.info.run_id, KILLED, end_time=last_activity_ms(client, run))
            if parent := run.data.tags.get(PARENT_TAG):
                settle_parent(client, experiment_id, parent)


def interrupted_run(client, experiment_id: str, stage: str, checkpoint: str, params: Mapping[str, str]):
    """The run a stage resuming checkpoint `checkpoint` continues: the newest run of `stage` with that checkpoint if
    it ended KILLED or FAILED and ran with the same `params`; else None (a fresh run is opened)."""
    found = client.search_runs([experiment_id], filter_string=(
        f"tags.`{STAGE_TAG}` = '{stage}' and tags.`{CHECKPOINT_TAG}` = '{checkpoint}' "
        f"and attributes.status != '{RUNNING}'"), order_by=["attributes.start_time DESC"], max_results=1)
    if found and found[0].info.status in (KILLED, FAILED) and found[0].data.params == dict(params):
        return found[0]
    return None


def logged_points(client, run_id: str) -> set[tuple[str, int]]:
    """The (metric, step) pairs run `run_id` holds, system metrics aside (they keep their own step count)."""
    run = client.get_run(run_id)
    return {(key, m.step) for key in run.data.metrics if not key.startswith("system/")
            for m in client.get_metric_history(run_id, key)}


def find_or_create_parent(client, experiment_id: str, key: str, describe) -> tuple[str, str]:
    """The run id and name of invocation `key`'s parent run, created by its first stage with the name, tags and
    params `describe()` returns. Callers hold the store lock, so two stages cannot both create it; should a store
    without the lock (a server) ever get two, every stage picks the oldest."""
    from mlflow.entities import Param

    found = client.search_runs([experiment_id], filter_string=f"tags.`{INVOCATION_TAG}` = '{key}'",
                               order_by=["attributes.start_time ASC"], max_results=1)
    if found:
        return found[0].info.run_id, found[0].info.run_name
    name, tags, params = describe()
    run_id = client.create_run(experiment_id, run_name=name, tags={INVOCATION_TAG: key, **tags}).info.run_id
    entities = [Param(k, v) for k, v in params.items()]
    for start in range(0, len(entities), 100):  # MLflow's limit: 100 params a request
        client.log_batch(run_id, params=entities[start:start + 100])
    return run_id, name


def describe_invocation(environ: Mapping[str, str], source_tags: dict[str, str]) -> tuple[str, dict, dict]:
    """Name, tags and params of an invocation's parent run, from the params.yaml DVC runs it with: every resolved
    param, as its stages log them, so MLflow's Compare sets two invocations' values side by side (its "Show diff only"
    hides the equal ones). An experiment DVC named at random is named after what it changed instead
    (`readable_name`: `margin-0.02`)."""
    params = read_yaml(PARAMS_FILE)
    tags = {**source_tags, **({"dvc.baseline_rev": environ["DVC_EXP_BASELINE_REV"]}
                              if environ.get("DVC_EXP_BASELINE_REV") else {})}
    name = environ.get("DVC_EXP_NAME") or REPRO_RUN_NAME
    if environ.get("DVC_EXP_NAME") and is_dvc_generated(name):
        name = readable_name(params, baseline_params(environ.get("DVC_EXP_BASELINE_REV", "HEAD"))) or name
    return name, tags, run_params(load_config(PARAMS_FILE))


def run_params(cfg: Config) -> dict[str, str]:
    """A config as MLflow params: dotted keys, values cut to 500 characters (MLflow's limit on older stores)."""
    return {k: str(v)[:500] for k, v in flatten(cfg.to_dict()).items()}


def baseline_params(rev: str) -> dict[str, Any] | None:
    """params.yaml at commit `rev`, None when git or the file cannot tell."""
    out = _git("show", f"{rev}:params.yaml")
    if out is None or out.returncode != 0:
        return None
    try:
        params = parse_yaml(out.stdout, f"{rev}:params.yaml")
    except ConfigError:
        return None
    return params if isinstance(params, dict) else None


def settle_parent(client, experiment_id: str, parent_id: str) -> None:
    """End a parent run as its children stand: FAILED once any failed or was killed, else FINISHED; its end time is
    the last child's end time. Called as each child ends (a later child sets the parent RUNNING again)."""
    children = client.search_runs([experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'")
    status = FAILED if any(c.info.status in (FAILED, KILLED) for c in children) else FINISHED
    end_time = max((c.info.end_time for c in children if c.info.end_time), default=None)
    client.set_terminated(parent_id, status, end_time=end_time)


# --- how a stage ended ---

class Terminated(SystemExit):
    """Raised in the main thread on SIGTERM while a Tracker is open, so the `with` block ends its run KILLED; the
    process then exits 128 + SIGTERM, the status a shell reports for a SIGTERM death."""


def _terminate_handler(owner_pid: int):
    """A SIGTERM handler raising Terminated in process `owner_pid`; a child forked from it (a data-loader worker)
    inherits the handler but must still die of SIGTERM as usual."""
    def handler(signum, frame) -> None:
        if os.getpid() != owner_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated(128 + signum)

    return handler


def run_status(exc: BaseException | None) -> str:
    """The MLflow status of a stage that ended with `exc` (None: it returned)."""
    if exc is None:
        return FINISHED
    if isinstance(exc, (KeyboardInterrupt, Terminated)):
        return KILLED
    if isinstance(exc, SystemExit):  # our stages end with sys.exit("error: ...") on bad input
        return FINISHED if exc.code in (None, 0) else FAILED
    return FAILED


@dataclass
class PendingRun:
    """What a stage's run is opened with (see `Tracker.begin`)."""
    name: str
    tags: dict[str, str]
    params: dict[str, str]
    system_metrics: bool
    start_ms: int


class Tracker:
    """One MLflow run per stage, the child of its invocation's parent run (see the module docstring); every call is a
    no-op after the first MLflow failure. `system_metrics=True` (training stages) also samples CPU, memory, disk,
    network and GPU use into the run (`system/...` metrics) every 10 s. `resumable=True`: the stage calls `begin` once
    it knows its checkpoint; its run's start time is still the stage's."""

    def __init__(self, cfg: Config, stage: str, *, system_metrics: bool = False, resumable: bool = False):
        self.enabled = True
        self.stage = stage
        self.run_id: str | None = None
        self.parent_run_id: str | None = None
        self._mlflow = None
        self._client = None
        self._experiment_id: str | None = None
        self._pending: PendingRun | None = None
        self._open = False
        self._logged: set[tuple[str, int]] = set()  # a continued run's (metric, step) pairs: not logged again
        self._lock = contextlib.nullcontext()
        self._previous_sigterm = None
        self._guard(self._start, cfg, stage, system_metrics, resumable)
        if self._open or self._pending:
            self._install_sigterm()

    def _start(self, cfg: Config, stage: str, system_metrics: bool, resumable: bool) -> None:
        start_ms = int(time.time() * 1000)
        uri = mlflow_uri(cfg)
        if uri == OFF or int(os.environ.get("RANK", "0")):  # one run per stage: a multi-process launch logs from rank 0
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
        env, host = os.environ, _KEY_CHARS.sub("_", socket.gethostname())
        key = invocation_key(env, process_ancestors(), host)
        source = _source_tags(cfg, env)  # git runs outside the lock: it can take a moment on a big tree
        self.stage = _KEY_CHARS.sub("_", env.get("DVC_STAGE") or stage)
        # the processes that ran the stage (`launch.processes` may say auto); process 0 alone logs
        tags = {STAGE_TAG: self.stage, "lopd.processes": env.get("WORLD_SIZE", "1"), HOST_TAG: host,
                PROCESS_TAG: process_identity(), **source}
        params = run_params(cfg)
        if system_metrics:
            _configure_system_metrics(mlflow)
        with self._lock:  # first use of a fresh store creates its schema: only one process may do that
            mlflow.set_tracking_uri(uri)
            client = mlflow.MlflowClient()
            experiment_id = get_or_create_experiment(mlflow, name, artifacts)
            mlflow.set_experiment(experiment_id=experiment_id)
            settle_dead_runs(client, experiment_id, host)
            run_name = self.stage
            if key:
                self.parent_run_id, parent_name = find_or_create_parent(
                    client, experiment_id, key, lambda: describe_invocation(env, source))
                client.update_run(self.parent_run_id, status=RUNNING)
                if parent_name != REPRO_RUN_NAME:  # a compare view of two experiments' stages tells them apart
                    run_name = f"{self.stage} · {parent_name}"
            self._mlflow, self._client, self._experiment_id = mlflow, client, experiment_id
            self._pending = PendingRun(run_name, tags, params, system_metrics, start_ms)
            if not resumable:
                self._open_run()

    def begin(self, checkpoint: str, resumed_step: int = 0) -> None:
        """Open a resumable stage's run, tagged with the fingerprint `checkpoint` of the checkpoint the stage writes.
        A stage resuming after step `resumed_step` > 0 continues the run it interrupted (`interrupted_run`) under this
        invocation's parent, and logs no (metric, step) that run already holds: the steps between the checkpoint and
        the interruption come out the same again (a resumed run equals an uninterrupted one)."""
        self._guard(self._locked, lambda: self._open_run(checkpoint, resumed_step))

    def _open_run(self, checkpoint: str | None = None, resumed_step: int = 0) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        from mlflow.tracking.context.registry import resolve_tags  # the user and source tags start_run adds

        client, tags = self._client, dict(pending.tags)
        if checkpoint:
            tags[CHECKPOINT_TAG] = checkpoint
        previous = resumed_step > 0 and checkpoint and interrupted_run(
            client, self._experiment_id, self.stage, checkpoint, pending.params)
        if previous:
            run_id = previous.info.run_id
            paused_s = float(previous.data.tags.get(PAUSED_TAG, 0)) + (pending.start_ms - previous.info.end_time) / 1000
            tags |= {RESUMED_TAG: str(resumed_step), PAUSED_TAG: f"{paused_s:.1f}",
                     **({PARENT_TAG: self.parent_run_id} if self.parent_run_id else {})}
            self._logged = logged_points(client, run_id)
        else:
            tags |= {PARENT_TAG: self.parent_run_id} if self.parent_run_id else {}
            run_id = client.create_run(self._experiment_id, start_time=pending.start_ms, run_name=pending.name,
                                       tags=resolve_tags(tags)).info.run_id
        self._mlflow.start_run(run_id=run_id, run_name=pending.name, tags=tags if previous else None,
                               log_system_metrics=True if pending.system_metrics else None)  # None: MLflow's default
        if not previous:
            self._mlflow.log_params(pending.params)
        self.run_id, self._open = run_id, True

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

    def _in_run(self, fn) -> None:
        """`_locked`, in the stage's run: a resumable stage that logs or ends before `begin` gets a fresh one."""
        with self._lock:
            self._open_run()
            fn()

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        numeric = {k: v for k, v in _numeric(metrics).items() if (k, step or 0) not in self._logged}
        self._guard(self._in_run, lambda: numeric and self._mlflow.log_metrics(numeric, step=step))

    def log_to_parent(self, summary: dict[str, float]) -> None:
        """Log the stage's summary (its metrics file's numbers) to its invocation's parent run, each under the
        stage's name (`train_lopd.beta_final`); nothing without a parent."""
        if self.parent_run_id:
            numeric = _numeric({f"{self.stage}.{k}": v for k, v in summary.items()})
            self._guard(self._locked, lambda: _log_batch(self._client, self.parent_run_id, numeric))

    def log_cached_stages(self, summaries: dict[str, dict[str, float]]) -> None:
        """Complete the parent run with the stages DVC did not re-run in this invocation: of `summaries` (stage ->
        its recorded metrics), those without a child run of the parent go to the parent as `log_to_parent` would
        log them, and the tag `lopd.cached_stages` names them."""
        if self.parent_run_id:
            self._guard(self._locked, lambda: self._log_cached(summaries))

    def _log_cached(self, summaries: dict[str, dict[str, float]]) -> None:
        children = self._client.search_runs([self._experiment_id], f"tags.`{PARENT_TAG}` = '{self.parent_run_id}'")
        ran = {c.data.tags.get(STAGE_TAG) for c in children}
        cached = sorted(set(summaries) - ran)
        numeric = _numeric({f"{stage}.{k}": v for stage in cached for k, v in summaries[stage].items()})
        _log_batch(self._client, self.parent_run_id, numeric)
        self._client.set_tag(self.parent_run_id, CACHED_STAGES_TAG, ", ".join(cached) or "none")

    def log_artifact(self, path: str | Path) -> None:
        """Log a file under its path in the repository (`plots/train/grpo.json`, beside `metrics/train/grpo.json`),
        a file outside it at the artifacts' root."""
        path = Path(path).resolve()
        folder = path.parent.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else ""
        self._guard(self._in_run, lambda: self._mlflow.log_artifact(str(path), artifact_path=folder.strip(".") or None))

    def log_figure(self, fig, artifact_file: str) -> None:
        """Save a matplotlib figure into the run's artifacts as `artifact_file` (e.g. `curves/loss.png`)."""
        self._guard(self._in_run, lambda: self._mlflow.log_figure(fig, artifact_file))

    def close(self, status: str = FINISHED) -> None:
        """End the run with `status` and update its parent; a second call does nothing."""
        self._restore_sigterm()  # first: a SIGTERM while ending the run falls back to the previous handler
        self._guard(self._in_run, lambda: self._end(status))

    def _end(self, status: str) -> None:
        if not self._open:
            return
        self._open = False
        self._mlflow.end_run(status=status)  # also stops the system-metrics thread
        if self.parent_run_id:
            settle_parent(self._client, self._experiment_id, self.parent_run_id)

    def _install_sigterm(self) -> None:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
            previous = signal.signal(signal.SIGTERM, _terminate_handler(os.getpid()))
            self._previous_sigterm = signal.SIG_DFL if previous is None else previous  # None: set outside Python

    def _restore_sigterm(self) -> None:
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(run_status(exc))


def _numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The numbers of `metrics` under names MLflow takes (no `@`: `eval@x.pass@1` -> `eval_at_x.pass_at_1`)."""
    return {_METRIC_NAME.sub("_", k.replace("@", "_at_")): float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _log_batch(client, run_id: str, metrics: dict[str, float]) -> None:
    """Log `metrics` at step 0, in batches of MLflow's limit (1,000 metrics a request)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    entities = [Metric(k, v, now, 0) for k, v in metrics.items()]
    for start in range(0, len(entities), 1000):
        client.log_batch(run_id, metrics=entities[start:start + 1000])


def _source_tags(cfg: Config, environ: Mapping[str, str]) -> dict[str, str]:
    """Tags a stage's run and its parent share: what ran, from which code, in which DVC experiment, and the float32
    matmul path `model.cpu_matmul` and the `train.mixed_precision` they resolved to on this machine."""
    from lopd.core.device import cpu_matmul, mixed_precision  # a stage has torch loaded; the tracker's tools need not

    commit = git_commit()
    tags = {"mlflow.source.git.commit": commit, "git.commit": commit, "git.dirty": git_dirty(),
            "profile": cfg.profile, "cpu_matmul": cpu_matmul(),
            "mixed_precision": mixed_precision(cfg.train.mixed_precision)}
    if environ.get("DVC_EXP_NAME"):
        tags["dvc.experiment"] = environ["DVC_EXP_NAME"]
    return tags


def _configure_system_metrics(mlflow) -> None:
    if not os.environ.get("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"):  # a user's own setting wins
        mlflow.set_system_metrics_sampling_interval(_SYSTEM_METRICS_INTERVAL_S)
    # its INFO lines (started, no GPU found, stopped) would clutter every training log; warnings still show
    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)


def log_to_latest_run(cfg: Config, stage: str, files: Sequence[str | Path]) -> bool:
    """Add `files` as artifacts of the newest run of DVC stage `stage` in the profile's experiment (the figures script
    adds its figures to the `report` run). False when there is no such run or MLflow is off; an MLflow failure
    warns and returns False: the files on disk are the result."""
    uri = mlflow_uri(cfg)
    if uri == OFF:
        return False
    try:
        probe_server(uri)
        import mlflow

        with store_lock(uri):
            client = mlflow.MlflowClient(uri)
            experiment = client.get_experiment_by_name(f"{cfg.tracking.experiment_prefix}-{cfg.profile}")
            runs = [] if experiment is None else client.search_runs(
                [experiment.experiment_id], f"tags.`{STAGE_TAG}` = '{_KEY_CHARS.sub('_', stage)}'",
                order_by=["attributes.start_time DESC"], max_results=1)
            for path in files if runs else []:
                client.log_artifact(runs[0].info.run_id, str(path))
        return bool(runs)
    except Exception as err:  # noqa: BLE001 - an MLflow outage must not lose the figures
        print(f"warning: MLflow: could not add files to the {stage!r} run ({type(err).__name__}: {err})",
              file=sys.stderr)
        return False
