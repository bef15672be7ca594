import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from lopd.core import tracking
from lopd.core.config import compose, resolve
from lopd.core.tracking import Terminated, Tracker, invocation_key, is_dvc_command, run_status

_DVC_VARS = ("DVC_STAGE", "DVC_EXP_NAME", "DVC_EXP_BASELINE_REV", "DVC_ROOT")


@pytest.fixture(scope="module")
def _store_uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


@pytest.fixture(scope="module")
def smoke_params(tmp_path_factory):
    """The params.yaml `dvc exp run -S profile=smoke` writes."""
    return compose("smoke")


def write_params(path, params: dict) -> None:
    path.write_text(yaml.safe_dump(params))


@pytest.fixture
def store(_store_uri, smoke_params, monkeypatch, request, tmp_path):
    """A sqlite store shared by this module's tests (its schema is created once, which takes seconds) and an
    experiment of the test's own; no DVC variables from the environment; the smoke profile's params.yaml."""
    from mlflow.tracking import MlflowClient

    write_params(tmp_path / "params.yaml", smoke_params)
    monkeypatch.setattr(tracking, "PARAMS_FILE", tmp_path / "params.yaml")
    monkeypatch.setenv("LOPD_MLFLOW_URI", _store_uri)
    for var in _DVC_VARS:
        monkeypatch.delenv(var, raising=False)
    prefix = re.sub(r"\W", "_", request.node.name)
    cfg = resolve({"profile": "smoke", "tracking": {"experiment_prefix": prefix}})
    return SimpleNamespace(uri=_store_uri, client=MlflowClient(_store_uri), cfg=cfg, experiment=f"{prefix}-smoke")


def in_dvc(monkeypatch, stage: str, experiment: str | None = None, dvc_pid: int = 4242, baseline: str | None = None):
    """Run the next Tracker as DVC would: its env vars, and a `dvc` process `dvc_pid` above this one."""
    monkeypatch.setenv("DVC_STAGE", stage)
    for var, value in (("DVC_EXP_NAME", experiment), ("DVC_EXP_BASELINE_REV", baseline)):
        if value:
            monkeypatch.setenv(var, value)
        else:
            monkeypatch.delenv(var, raising=False)
    ancestors = [(dvc_pid + 1, 1001.5, ["/bin/bash", "-c", "python -m pipelines.train"]),
                 (dvc_pid, 1000.25, ["/repo/.venv/bin/python", "/repo/.venv/bin/dvc", "exp", "run"]),
                 (1, 0.0, ["/sbin/init"])]
    monkeypatch.setattr(tracking, "process_ancestors", lambda: ancestors)


def runs_of(store):
    """(parents, children by parent run id) of the test's experiment; children oldest first."""
    experiment = store.client.get_experiment_by_name(store.experiment)
    runs = store.client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    parents = {r.data.tags["mlflow.runName"]: r for r in runs if tracking.INVOCATION_TAG in r.data.tags}
    children: dict[str, list] = {}
    for r in runs:
        if tracking.PARENT_TAG in r.data.tags:
            children.setdefault(r.data.tags[tracking.PARENT_TAG], []).append(r)
    return parents, children


# --- the invocation key (pure) ---

_SHELL = (301, 50.0, ["/bin/bash", "-c", "python -m pipelines.train --method grpo"])
_DVC_REPRO = (200, 40.5, ["/repo/.venv/bin/python", "/repo/.venv/bin/dvc", "repro"])
_INIT = (1, 0.0, ["/sbin/init"])


def test_stages_of_one_dvc_process_share_the_invocation_key():
    env = {"DVC_STAGE": "prepare_model", "DVC_ROOT": "/repo"}
    first = invocation_key(env, [_SHELL, _DVC_REPRO, _INIT], "host")
    later = invocation_key({**env, "DVC_STAGE": "train@grpo"}, [(302, 60.0, ["python"]), _DVC_REPRO, _INIT], "host")
    assert first == later == "repro@host:200:40.50"


def test_each_experiment_of_one_queue_worker_gets_its_own_key():
    worker = (200, 40.5, ["/usr/bin/python3", "-m", "dvc", "exp", "queue-worker", "dvc-exp-worker-1"])
    ancestors = [_SHELL, worker, _INIT]
    a = invocation_key({"DVC_STAGE": "s", "DVC_EXP_NAME": "exp-a"}, ancestors, "host")
    b = invocation_key({"DVC_STAGE": "s", "DVC_EXP_NAME": "exp-b"}, ancestors, "host")
    assert a != b and a.startswith("exp-a@host:200:") and b.startswith("exp-b@host:200:")


def test_a_reused_pid_or_another_host_is_another_invocation():
    env = {"DVC_STAGE": "s"}
    again = (200, 99.0, _DVC_REPRO[2])  # the same pid, a later process
    keys = {invocation_key(env, [_DVC_REPRO], "host"), invocation_key(env, [again], "host"),
            invocation_key(env, [_DVC_REPRO], "other")}
    assert len(keys) == 3


def test_no_invocation_outside_dvc_or_without_a_visible_dvc_process():
    assert invocation_key({}, [_SHELL, _DVC_REPRO]) is None  # not a DVC stage: a top-level run
    assert invocation_key({"DVC_STAGE": "s", "DVC_EXP_NAME": "e"}, [_SHELL, _INIT]) is None
    assert invocation_key({"DVC_STAGE": "s"}, []) is None


def test_the_key_is_safe_in_a_search_filter():
    key = invocation_key({"DVC_STAGE": "s", "DVC_EXP_NAME": "it's mine"}, [_DVC_REPRO], "h'st")
    assert "'" not in key and " " not in key


@pytest.mark.parametrize("cmdline, expected", [
    (["dvc", "repro"], True),
    (["/repo/.venv/bin/dvc", "exp", "run"], True),
    (["/repo/.venv/bin/python3.11", "/repo/.venv/bin/dvc", "exp", "exec-run", "--infofile", "x"], True),
    (["python", "-m", "dvc", "repro"], True),
    (["dvc.exe", "repro"], True),
    (["/bin/bash", "-c", "dvc repro"], False),
    (["python", "-m", "pipelines.train"], False),
    (["python", "/repo/scripts/dvc_helper.py"], False),
    ([], False),
])
def test_is_dvc_command(cmdline, expected):
    assert is_dvc_command(cmdline) is expected


@pytest.mark.parametrize("exc, status", [
    (None, "FINISHED"), (SystemExit(0), "FINISHED"), (SystemExit(None), "FINISHED"),
    (SystemExit(1), "FAILED"), (SystemExit("error: bad input"), "FAILED"), (ValueError("x"), "FAILED"),
    (KeyboardInterrupt(), "KILLED"), (Terminated(143), "KILLED"),
])
def test_run_status(exc, status):
    assert run_status(exc) == status


# --- runs on a real sqlite store ---

def test_a_stage_outside_dvc_is_a_top_level_run_with_sanitised_metric_names(store):
    with Tracker(store.cfg, "eval@x") as tracker:
        tracker.log_metrics({"pass@1_plus": 12.5, "note": "text is skipped"})
        assert tracker.enabled and tracker.parent_run_id is None
    parents, children = runs_of(store)
    assert not parents and not children
    run = store.client.get_run(tracker.run_id)
    assert run.data.metrics == {"pass_at_1_plus": 12.5} and run.data.params["model.name"] == "tiny-random"
    assert run.info.run_name == run.data.tags["dvc.stage"] == "eval@x"
    assert "dvc.experiment" not in run.data.tags and run.info.status == "FINISHED"


def test_stages_of_one_invocation_share_a_parent_and_another_invocation_gets_its_own(store, monkeypatch):
    in_dvc(monkeypatch, "prepare_model", "exp-a", baseline="b4se")
    with Tracker(store.cfg, "prepare_model") as tracker:
        tracker.log_metrics({"wall_s": 1.5})
    in_dvc(monkeypatch, "train@grpo", "exp-a", baseline="b4se")
    with Tracker(store.cfg, "train_grpo"):  # the run is named after DVC's stage address, not the argument
        pass
    in_dvc(monkeypatch, "prepare_model", "exp-b")  # the same queue worker's next experiment
    with Tracker(store.cfg, "prepare_model"):
        pass
    in_dvc(monkeypatch, "report", None, dvc_pid=777)  # a plain `dvc repro`
    with Tracker(store.cfg, "report"):
        pass

    parents, children = runs_of(store)
    assert set(parents) == {"exp-a", "exp-b", "dvc repro"}
    a = parents["exp-a"]
    assert [c.info.run_name for c in children[a.info.run_id]] == ["prepare_model · exp-a", "train@grpo · exp-a"]
    assert [c.info.run_name for c in children[parents["exp-b"].info.run_id]] == ["prepare_model · exp-b"]
    assert [c.info.run_name for c in children[parents["dvc repro"].info.run_id]] == ["report"]
    assert all(p.info.status == "FINISHED" for p in parents.values())
    assert a.info.end_time == max(c.info.end_time for c in children[a.info.run_id])
    assert children[a.info.run_id][0].data.params["model.name"] == "tiny-random"  # a stage has every param
    stage_params = {**children[a.info.run_id][0].data.params, "tracking.experiment_prefix": "lopd-suite"}
    assert a.data.params == stage_params  # and so has its parent, for Compare (this test's prefix aside)

    commit = tracking.git_commit()
    for run in [a, *children[a.info.run_id]]:
        tags = run.data.tags
        assert tags["dvc.experiment"] == "exp-a" and tags["profile"] == "smoke"
        assert tags["git.commit"] == tags["mlflow.source.git.commit"] == commit
        assert tags["git.dirty"] in ("true", "false")
    assert a.data.tags["dvc.baseline_rev"] == "b4se"
    assert [c.data.tags["dvc.stage"] for c in children[a.info.run_id]] == ["prepare_model", "train@grpo"]
    assert "dvc.experiment" not in parents["dvc repro"].data.tags
    assert not any(k.startswith("system/") for c in children[a.info.run_id] for k in c.data.metrics)


def test_an_experiment_dvc_named_at_random_is_named_after_its_overrides(store, monkeypatch, smoke_params, tmp_path):
    sdpo = {**smoke_params["sdpo"], "ema_rate": 0.1}
    write_params(tracking.PARAMS_FILE, {**smoke_params, "margin": 0.02, "sdpo": sdpo})
    in_dvc(monkeypatch, "train_lopd", "mated-cony", baseline="no-such-commit")
    with Tracker(store.cfg, "train_lopd"):
        pass
    in_dvc(monkeypatch, "report", "sedgy-tipi", dvc_pid=99)
    monkeypatch.setattr(tracking, "baseline_params", lambda rev: smoke_params)  # the baseline commit ran smoke
    with Tracker(store.cfg, "report"):
        pass
    parents, children = runs_of(store)
    assert set(parents) == {"smoke_margin-0.02_sdpo.ema_rate-0.1", "margin-0.02_sdpo.ema_rate-0.1"}
    first = parents["smoke_margin-0.02_sdpo.ema_rate-0.1"]
    assert first.data.params["margin"] == "0.02" and first.data.params["sdpo.ema_rate"] == "0.1"
    assert len(first.data.params) > 100  # every resolved param, logged in batches of MLflow's 100
    assert first.data.tags["dvc.experiment"] == "mated-cony"  # DVC's name stays on record
    (child,) = children[first.info.run_id]
    assert child.info.run_name == "train_lopd · smoke_margin-0.02_sdpo.ema_rate-0.1"
    assert child.data.tags["dvc.stage"] == "train_lopd"


def test_the_parent_holds_each_stages_summary_and_the_report_adds_the_cached_ones(store, monkeypatch):
    in_dvc(monkeypatch, "train_lopd", "exp-m")
    with Tracker(store.cfg, "train_lopd") as tracker:
        tracker.log_to_parent({"beta_final": 0.02, "val_reward_final": 0.5})
    in_dvc(monkeypatch, "report", "exp-m")
    with Tracker(store.cfg, "report") as tracker:
        tracker.log_to_parent({"code.LOPD.humaneval_plus": 12.5})
        tracker.log_cached_stages({"train_lopd": {"beta_final": 0.05}, "eval@grpo": {"pass@1": 10.0}})
    parents, _ = runs_of(store)
    parent = parents["exp-m"]
    assert parent.data.metrics == {"train_lopd.beta_final": 0.02, "train_lopd.val_reward_final": 0.5,
                                   "report.code.LOPD.humaneval_plus": 12.5,
                                   "eval_at_grpo.pass_at_1": 10.0}  # train_lopd ran: its own value
    assert parent.data.tags[tracking.CACHED_STAGES_TAG] == "eval@grpo"


def test_a_failing_stage_fails_its_run_and_its_parent(store, monkeypatch):
    in_dvc(monkeypatch, "prepare_model", "exp-f")
    with Tracker(store.cfg, "prepare_model"):
        pass
    in_dvc(monkeypatch, "train@grpo", "exp-f")
    with pytest.raises(SystemExit), Tracker(store.cfg, "train@grpo"):
        sys.exit("error: x")
    parents, children = runs_of(store)
    assert parents["exp-f"].info.status == "FAILED"
    assert [c.info.status for c in children[parents["exp-f"].info.run_id]] == ["FINISHED", "FAILED"]

    in_dvc(monkeypatch, "eval@vanilla", "exp-f")  # `dvc repro --keep-going` carries on with other stages
    with Tracker(store.cfg, "eval@vanilla") as tracker:
        assert store.client.get_run(tracker.parent_run_id).info.status == "RUNNING"
    assert runs_of(store)[0]["exp-f"].info.status == "FAILED"  # it stays failed


def test_sigterm_ends_the_run_killed_and_restores_the_previous_handler(store, monkeypatch):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed in the main thread only")
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        in_dvc(monkeypatch, "train@grpo", "exp-k")
        with pytest.raises(Terminated) as stopped, Tracker(store.cfg, "train@grpo") as tracker:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the handler interrupts this
        assert stopped.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert store.client.get_run(tracker.run_id).info.status == "KILLED"
    assert store.client.get_run(tracker.parent_run_id).info.status == "FAILED"


def test_a_forked_child_still_dies_of_sigterm(store):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed in the main thread only")
    with Tracker(store.cfg, "unit"):
        pid = os.fork()
        if pid == 0:  # a data-loader worker, say: it inherits the handler
            try:
                time.sleep(30)
            finally:
                os._exit(7)  # reached only if the handler raised instead of letting SIGTERM end the process
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


def test_keyboard_interrupt_ends_the_run_killed(store):
    with pytest.raises(KeyboardInterrupt), Tracker(store.cfg, "unit") as tracker:
        raise KeyboardInterrupt
    assert store.client.get_run(tracker.run_id).info.status == "KILLED"


def test_the_experiment_opens_in_the_model_training_view(store):
    from mlflow.tracking import MlflowClient

    kind = tracking.EXPERIMENT_KIND_TAG
    with Tracker(store.cfg, "unit"):
        pass
    assert store.client.get_experiment_by_name(store.experiment).tags[kind] == "custom_model_development"

    client: MlflowClient = store.client
    old = client.create_experiment("old-smoke")  # made before the tag existed
    chosen = client.create_experiment("chosen-smoke", tags={kind: "genai_development"})  # a user's own choice
    for prefix in ("old", "chosen"):
        with Tracker(resolve({"profile": "smoke", "tracking": {"experiment_prefix": prefix}}), "unit"):
            pass
    assert client.get_experiment(old).tags[kind] == "custom_model_development"
    assert client.get_experiment(chosen).tags[kind] == "genai_development"


def test_system_metrics_are_logged_offline_and_stop_with_the_run(store, monkeypatch):
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")

    def monitors():
        return [t for t in threading.enumerate() if t.name == "SystemMetricsMonitor" and t.is_alive()]

    with Tracker(store.cfg, "train@grpo", system_metrics=True) as tracker:
        assert len(monitors()) == 1
        time.sleep(1.5)
    assert not monitors()
    assert tracker.enabled
    metrics = store.client.get_run(tracker.run_id).data.metrics
    for name in ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes",
                 "system/disk_usage_percentage", "system/network_receive_megabytes"):
        assert name in metrics, sorted(metrics)
    assert len(store.client.get_metric_history(tracker.run_id, "system/cpu_utilization_percentage")) >= 2


def test_system_metrics_sample_every_10_s_unless_the_user_chose(monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "")  # restored (unset) after the test
    monkeypatch.delenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL")
    tracking._configure_system_metrics(mlflow)
    assert os.environ["MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"] == "10"
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    tracking._configure_system_metrics(mlflow)
    assert os.environ["MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"] == "1"


def test_log_figure_stores_a_matplotlib_figure(store):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [3.0, 2.0, 1.5])
    with Tracker(store.cfg, "unit") as tracker:
        tracker.log_figure(fig, "curves/loss.png")
    plt.close(fig)
    assert tracker.enabled
    assert [a.path for a in store.client.list_artifacts(tracker.run_id, "curves")] == ["curves/loss.png"]


def test_files_of_one_name_in_different_folders_are_all_kept(store, monkeypatch, tmp_path):
    """A training stage's history, validation curve and metrics are all `<method>.json`: each keeps its own path."""
    monkeypatch.setattr(tracking, "REPO_ROOT", tmp_path)
    paths = ["plots/train/grpo.json", "plots/validation/grpo.json", "metrics/train/grpo.json", "top.json"]
    with Tracker(store.cfg, "train@grpo") as tracker:
        for i, name in enumerate(paths):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(f"[{i}]")
            tracker.log_artifact(tmp_path / name)
    got = {name: Path(store.client.download_artifacts(tracker.run_id, name, str(tmp_path / f"got{i}"))).read_text()
           for i, name in enumerate(paths)}
    assert got == {name: f"[{i}]" for i, name in enumerate(paths)}


# --- failure and concurrency ---

def test_mlflow_outage_disables_logging_without_raising(monkeypatch, capsys):
    monkeypatch.setenv("LOPD_MLFLOW_URI", "sqlite:////proc/no-such-dir/mlflow.db")
    with Tracker(resolve({"profile": "smoke"}), "unit") as tracker:
        tracker.log_metrics({"x": 1.0}, step=1)
        tracker.log_figure(None, "x.png")
        assert not tracker.enabled
    assert "MLflow logging disabled" in capsys.readouterr().err


# Stands in for `dvc exp run`: named `dvc`, so the four stages it starts find it as their invocation.
_DVC = """
import os, subprocess, sys
env = {**os.environ, "DVC_EXP_NAME": "exp-race"}
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[1], str(i), sys.argv[2]],
                          env={**env, "DVC_STAGE": f"stage{i}"}) for i in range(4)]
sys.exit(max(p.wait() for p in procs))
"""

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


def test_concurrent_stages_on_a_fresh_sqlite_store_lose_no_run_and_make_one_parent(tmp_path):
    """Four stages of one invocation start at once on a fresh store: the schema, the experiment and the parent run
    are each created once, and every stage's run lands under that parent."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    (tmp_path / "dvc").write_text(_DVC)
    env = {k: v for k, v in os.environ.items() if k not in _DVC_VARS} | {"LOPD_MLFLOW_URI": uri}
    dvc = subprocess.Popen([sys.executable, str(tmp_path / "dvc"), _CHILD, str(tmp_path)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(4)) and time.monotonic() < deadline:
        time.sleep(0.05)
    (tmp_path / "go").touch()
    _, err = dvc.communicate(timeout=180)
    assert dvc.returncode == 0 and "MLflow logging disabled" not in err, err

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("lopd-suite-smoke").experiment_id])
    (parent,) = [r for r in runs if tracking.INVOCATION_TAG in r.data.tags]
    assert parent.info.run_name == "exp-race" and parent.info.status == "FINISHED"
    children = [r for r in runs if r is not parent]
    assert sorted(r.info.run_name for r in children) == [f"stage{i} · exp-race" for i in range(4)]
    for run in children:
        i = int(run.data.tags["dvc.stage"][-1])
        assert run.data.tags[tracking.PARENT_TAG] == parent.info.run_id
        assert run.info.status == "FINISHED" and run.data.params["profile"] == "smoke"
        assert run.data.metrics["pass_at_1"] == float(i)
        assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [i, i + 0.1, i + 0.2]
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == [f"metrics{i}.json"]


def test_dead_tracking_server_is_given_up_within_seconds(monkeypatch, capsys):
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
    code = ("import signal, sys; from lopd.core.config import resolve; from lopd.core.tracking import Tracker\n"
            "with Tracker(resolve({'profile': 'smoke'}), 'unit') as t:\n"
            "    t.log_metrics({'x': 1.0}, step=1)\n"
            "    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # no handler when nothing is logged\n"
            "assert not t.enabled and 'mlflow' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LOPD_MLFLOW_URI": "off"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


def test_git_dirty_looks_at_code_not_at_what_dvc_rewrites(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    for name in ("lopd/core/x.py", "metrics/train/lopd.json", "plots/train/lopd.json", "params.yaml", "dvc.lock"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("0\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "c")
    monkeypatch.setattr(tracking, "REPO_ROOT", tmp_path)
    assert tracking.git_dirty() == "false"
    for rewritten in ("metrics/train/lopd.json", "plots/train/lopd.json", "params.yaml", "dvc.lock"):
        (tmp_path / rewritten).write_text("1\n")  # a re-run stage or DVC itself rewrote it
    (tmp_path / "lopd" / "core" / "new.py").write_text("")  # untracked: not part of the commit's code either way
    assert tracking.git_dirty() == "false"
    (tmp_path / "lopd" / "core" / "x.py").write_text("1\n")
    assert tracking.git_dirty() == "true"


def test_a_server_that_accepts_but_never_answers_is_given_up_by_the_probe(monkeypatch, capsys):
    """A listening socket that never answers (the kernel completes the connection; nothing replies): the probe's
    HTTP request times out, so the stage logs nothing to MLflow instead of waiting out MLflow's own timeouts."""
    import socket

    from lopd.core.tracking import probe_server

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(ConnectionError, match=f"tracking server {uri} does not answer"):
            probe_server(uri)
        monkeypatch.setenv("LOPD_MLFLOW_URI", uri)
        with Tracker(resolve({"profile": "smoke"}), "unit") as tracker:
            tracker.log_metrics({"x": 1.0}, step=1)
    assert not tracker.enabled
    err = capsys.readouterr().err
    assert err.count("MLflow logging disabled") == 1 and len(err.strip().splitlines()) == 1, err


# --- a SIGKILLed stage, and a resumed one ---

# A stage of invocation `exp-dead` (a `dvc` process 4300 above it) logs steps 1-3 of a run with checkpoint "fp", says
# its run id, then dies of SIGKILL (`kill`) or waits until its stdin closes (`live`).
_KILLED_STAGE = """
import os, signal, sys
from lopd.core import tracking
from lopd.core.config import resolve

prefix, stage, end, experiment = sys.argv[1:]
os.environ |= {"DVC_STAGE": stage, "DVC_EXP_NAME": experiment}
tracking.process_ancestors = lambda: [(4300, 1000.0, ["/usr/bin/dvc", "repro"])]
tracker = tracking.Tracker(resolve({"profile": "smoke", "tracking": {"experiment_prefix": prefix}}), stage,
                           resumable=True)
tracker.begin("fp", 0)
for step in (1, 2, 3):
    tracker.log_metrics({"loss": step / 10}, step=step)
print(tracker.run_id, flush=True)
if end == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()
"""


def start_stage(store, stage: str, end: str, experiment: str = "exp-dead") -> tuple[subprocess.Popen, str]:
    """`_KILLED_STAGE` in a process of its own on the test's store, in DVC experiment `experiment`; the process and
    its run id."""
    env = {k: v for k, v in os.environ.items() if k not in _DVC_VARS} | {"LOPD_MLFLOW_URI": store.uri}
    prefix = store.experiment.removesuffix("-smoke")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_STAGE, prefix, stage, end, experiment], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run_id = proc.stdout.readline().strip()
    assert run_id, proc.stderr.read()
    return proc, run_id


def test_a_sigkilled_stage_is_marked_killed_at_the_next_stage_start_and_a_live_one_is_not(store, monkeypatch):
    killed, killed_id = start_stage(store, "train@grpo", "kill")
    assert killed.wait(timeout=60) == -signal.SIGKILL
    assert store.client.get_run(killed_id).info.status == "RUNNING"  # what a SIGKILL leaves
    last_logged = max(m.timestamp for m in store.client.get_metric_history(killed_id, "loss"))
    # any stage's start, not only the killed stage's; another experiment's, so that it does not rejoin the parent
    live, live_id = start_stage(store, "train@sdpo", "live", "exp-live")
    try:
        dead = store.client.get_run(killed_id)
        assert dead.info.status == "KILLED" and dead.info.end_time == last_logged
        assert store.client.get_run(dead.data.tags[tracking.PARENT_TAG]).info.status == "FAILED"
        in_dvc(monkeypatch, "eval@sdpo", "exp-next")
        with Tracker(store.cfg, "eval@sdpo"):
            pass
        assert store.client.get_run(live_id).info.status == "RUNNING"  # its process is alive
    finally:
        live.communicate(timeout=60)
    assert live.returncode == 0


def history(store, run_id: str, key: str = "loss") -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in store.client.get_metric_history(run_id, key))


def test_a_resumed_stage_continues_its_interrupted_run_with_each_step_once(store, monkeypatch):
    killed, killed_id = start_stage(store, "train@grpo", "kill")  # checkpointed after step 2, killed in step 3
    killed.wait(timeout=60)
    old_parent = store.client.get_run(killed_id).data.tags[tracking.PARENT_TAG]

    in_dvc(monkeypatch, "train@grpo", "exp-resume")
    with Tracker(store.cfg, "train@grpo", resumable=True) as tracker:
        tracker.begin("fp", 2)
        for step in (3, 4):  # step 3 comes out as before
            tracker.log_metrics({"loss": step / 10}, step=step)
        tracker.log_metrics({"reward_final": 0.5})
    assert tracker.run_id == killed_id
    run = store.client.get_run(killed_id)
    assert history(store, killed_id) == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]
    assert run.info.status == "FINISHED" and run.data.metrics["reward_final"] == 0.5
    assert run.data.tags[tracking.RESUMED_TAG] == "2" and float(run.data.tags[tracking.PAUSED_TAG]) >= 0
    parents, children = runs_of(store)
    assert run.data.tags[tracking.PARENT_TAG] == parents["exp-resume"].info.run_id != old_parent
    assert run.info.run_name == "train@grpo · exp-resume"
    assert [c.info.run_id for c in children[parents["exp-resume"].info.run_id]] == [killed_id]
    assert parents["exp-resume"].info.status == "FINISHED" and parents["exp-dead"].info.status == "FAILED"


def test_a_stage_that_does_not_resume_that_run_gets_a_fresh_one(store, monkeypatch):
    killed, killed_id = start_stage(store, "train@grpo", "kill")  # one killed run serves the three cases in turn
    killed.wait(timeout=60)
    prefix = store.experiment.removesuffix("-smoke")
    for begin, change in [(("fp", 0), {}),  # no checkpoint to resume: a fresh start
                          (("other", 2), {}),  # another checkpoint (code or inputs changed)
                          (("fp", 2), {"train": {"steps": 7}})]:  # other params (a budget the checkpoint does not pin)
        cfg = resolve({"profile": "smoke", "tracking": {"experiment_prefix": prefix}, **change})
        in_dvc(monkeypatch, "train@grpo", f"exp-fresh-{begin[0]}-{begin[1]}")
        started = time.time()
        with Tracker(cfg, "train@grpo", resumable=True) as tracker:
            time.sleep(0.3)
            tracker.begin(*begin)
            tracker.log_metrics({"loss": 0.9}, step=1)
        assert tracker.run_id != killed_id and history(store, tracker.run_id) == [(1, 0.9)], begin
        run = store.client.get_run(tracker.run_id)
        assert run.data.tags[tracking.CHECKPOINT_TAG] == begin[0] and tracking.RESUMED_TAG not in run.data.tags
        assert run.info.start_time < started * 1000 + 200  # the stage's start, not the moment it called begin
        assert store.client.get_run(killed_id).info.status == "KILLED"


def test_a_resumable_stage_that_ends_before_begin_still_gets_its_run(store):
    with pytest.raises(SystemExit), Tracker(store.cfg, "train@grpo", resumable=True) as tracker:
        sys.exit("error: no bank")
    assert store.client.get_run(tracker.run_id).info.status == "FAILED"


class Killed(BaseException):
    """A crash nothing in the training loop catches."""


def test_a_resumed_training_stage_is_one_run_with_each_step_once(store, monkeypatch, tiny_model_dir, tmp_path):
    """The loop hands the tracker its checkpoint: killed after logging step 3 but before saving it, the stage resumes
    from step 2 in the same run, and step 3 is not logged again."""
    from baselines.grpo import GRPO
    from lopd.core import checkpoint
    from lopd.core.domain import Domain
    from lopd.core.loop import train
    from lopd.core.rollout import Task, single_turn

    tasks = [Task(f"t{i}", [{"role": "user", "content": f"Count to {i}."}]) for i in range(4)]
    cfg = resolve({"profile": "smoke", "tracking": {"experiment_prefix": store.experiment.removesuffix("-smoke")},
                   "grpo": {"group_size": 2}, "sampling": {"max_new_tokens": 2},
                   "train": {"steps": 3, "save_every": 1, "rollouts_per_step": 4, "activation_checkpointing": False}})
    saves = []

    def crash(point):
        saves.append(point)
        if saves.count("save_started") == 3:
            raise Killed

    def run(exp: str):
        in_dvc(monkeypatch, "train@grpo", exp)
        with Tracker(cfg, "train@grpo", resumable=True) as tracker:
            result = train(cfg, GRPO(cfg, Domain.scratch("unused")), tasks,
                           single_turn(lambda ts, cs: [float(i % 2) for i in range(len(cs))]), tiny_model_dir,
                           tmp_path / "grpo", tracker)
        return tracker.run_id, result

    monkeypatch.setattr(checkpoint, "_crash_point", crash)
    with pytest.raises(Killed):
        run("exp-crash")
    (crashed,) = [r for r in store.client.search_runs([store.client.get_experiment_by_name(store.experiment)
                                                        .experiment_id], "tags.`dvc.stage` = 'train@grpo'")]
    assert crashed.info.status == "FAILED" and [s for s, _ in history(store, crashed.info.run_id)] == [1, 2, 3]
    monkeypatch.setattr(checkpoint, "_crash_point", lambda point: None)
    run_id, result = run("exp-resumed")
    assert run_id == crashed.info.run_id and store.client.get_run(run_id).info.status == "FINISHED"
    assert history(store, run_id) == [(h["step"], h["loss"]) for h in result["history"]]
