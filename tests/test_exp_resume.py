"""A training stage SIGKILLed under `dvc exp run`, in the workspace and queued, resumes on the next try like one under
`dvc repro`, though DVC restores the committed checkpoint folder first (workspace) or runs each try in a new copy of
the repository (queue); a forced re-run of a finished stage trains again. The stage runs the real loop (tiny model,
GRPO); only its task set is a stand-in. That the resumed run equals an uninterrupted one is tests/test_checkpoint.py's
(in one process, at every kill point)."""

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import yaml
from pyfork import stage_python

from lopd.core.config import REPO_ROOT

STAGE = textwrap.dedent("""\
    import os, signal, sys
    from pathlib import Path

    import yaml

    from baselines.grpo import GRPO
    from lopd.core import checkpoint
    from lopd.core.config import resolve
    from lopd.core.domain import Domain
    from lopd.core.loop import train
    from lopd.core.rollout import Task, single_turn

    params = yaml.safe_load(Path("params.yaml").read_text())
    cfg = resolve({"profile": "smoke", "seed": params["seed"], "grpo": {"group_size": 2},
                   "sampling": {"max_new_tokens": 2},
                   "train": {"steps": params["steps"], "save_every": 1, "rollouts_per_step": 4,
                             "activation_checkpointing": False}})
    commits = []

    def die_once(point):  # SIGKILL once step KILL_AFTER's save commits, the first time only
        commits.append(point == "committed")
        marker = Path(os.environ.get("KILL_MARKER", "/nonexistent/marker"))
        if sum(commits) == int(os.environ.get("KILL_AFTER", 0)) and point == "committed" and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint._crash_point = die_once
    tasks = [Task(f"t{i}", [{"role": "user", "content": f"Say something about the number {i}."}]) for i in range(6)]
    score = single_turn(lambda tasks, completions: [float(i % 2) for i in range(len(completions))])
    train(cfg, GRPO(cfg, Domain.scratch("unused")), tasks, score, sys.argv[1], "checkpoints/grpo")
""")
DVC_YAML = {"stages": {"train": {"cmd": "python train.py {base}", "deps": ["train.py"], "params": ["seed", "steps"],
                                 "outs": [{"checkpoints/grpo": {"persist": True}}]}}}
RESUMED = "resuming grpo from step 1"


def _run(cmd, cwd, env, ok=True):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert (proc.returncode == 0) == ok, f"{' '.join(cmd)}: rc {proc.returncode}\n{proc.stdout[-3000:]}\n" \
                                         f"{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _repo(path, base, env):
    path.mkdir()
    (path / "train.py").write_text(STAGE)
    (path / "params.yaml").write_text(yaml.safe_dump({"seed": 0, "steps": 2}))
    stages = yaml.safe_dump(DVC_YAML).replace("{base}", str(base))
    (path / "dvc.yaml").write_text(stages)
    (path / ".gitignore").write_text(".resume/\n")
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "init"]):
        _run(cmd, path, env)
    return path


def test_a_killed_dvc_exp_run_resumes_in_the_workspace_and_in_the_queue(tmp_path, tiny_model_dir):
    # the stage's `python` is a forked child of a server that imported torch once (tests/pyfork.py; MLflow is off)
    forked = stage_python(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{forked}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHONPATH": str(REPO_ROOT),
           "LOPD_MLFLOW_URI": "off", "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    repo = _repo(tmp_path / "repo", tiny_model_dir, env)
    _run(["dvc", "repro"], repo, env)  # committed results: what `dvc exp run` restores before each try
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "results"], repo, env)
    committed = _files(repo / "checkpoints" / "grpo")
    # a forced re-run of the finished run (its checkpoint persists) trains again from step 0, to the same bytes
    forced = _run(["dvc", "repro", "-f"], repo, env)
    assert "resuming" not in forced and "[grpo] step 1/2 " in forced, forced
    assert _files(repo / "checkpoints" / "grpo") == committed

    killed = {**env, "KILL_AFTER": "1", "KILL_MARKER": str(tmp_path / "killed-workspace")}
    # -9 where DVC's shell execs the command (dash), 137 where the shell reports its child's SIGKILL (bash)
    assert re.search(r"exited with (-9|137)\b", _run(["dvc", "exp", "run", "-S", "seed=1"], repo, killed, ok=False))
    assert _files(repo / "checkpoints" / "grpo") == committed  # nothing published by the killed run
    assert RESUMED in _run(["dvc", "exp", "run", "-S", "seed=1"], repo, killed)
    assert _files(repo / "checkpoints" / "grpo") != committed
    assert not (repo / "checkpoints" / ".resume").exists()

    _run(["git", "checkout", "--", "params.yaml", "dvc.lock"], repo, env)
    _run(["dvc", "checkout"], repo, env)
    killed = {**env, "KILL_AFTER": "1", "KILL_MARKER": str(tmp_path / "killed-queue")}
    for attempt, outcome in (("first", "Failed"), ("second", "Success")):
        _run(["dvc", "exp", "run", "--queue", "-n", attempt, "-S", "seed=2"], repo, env)
        _run(["dvc", "queue", "start"], repo, killed)
        deadline = time.monotonic() + 300
        while re.search(r"\b(Queued|Running)\b", status := _run(["dvc", "queue", "status"], repo, env)):
            assert time.monotonic() < deadline, status
            time.sleep(2)
        assert re.search(rf"\b{attempt}\b.*\b{outcome}\b", status), status
    assert RESUMED in _run(["dvc", "queue", "logs", "second"], repo, env)
    assert not (repo / "checkpoints" / ".resume").exists()
