"""Every stage's CLI on a bad input ends in one `error:` line, never a traceback, and writes nothing.

The stages run in a copy of the code in a temporary folder (REPO_ROOT is where the code is, so every output they
could write lands there, never in this repository). Nothing upstream is there: no models/base, bank, pool,
checkpoints or results; the data is the real shared data. Each stage's commands come from dvc.yaml (a foreach stage
with a method of each matrix), so a new stage is swept too; then two typos. One process runs them all, as
`python -m` would (runpy), to pay for the imports once.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lopd.core.config import REPO_ROOT, ConfigError, resolve_path

CODE = ("lopd", "baselines", "evaluation", "pipelines", "conf", "dvc.yaml")

_RUN_ALL = """
import json, runpy, sys, traceback

for argv in json.loads(sys.argv[1]):
    print("=== " + " ".join(argv), flush=True)
    sys.argv = list(argv)
    try:
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:  # printed as the interpreter prints it when it ends a process
        code = stop.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = "traceback"
    sys.stderr.flush()
    print(f"=== exit {code!r}", flush=True)
"""


def stage_commands(params: dict) -> list[list[str]]:
    """Each distinct stage command of dvc.yaml as [module, *args], a matrix stage's with the last value of each of
    its lists (`${methods}`: params' `methods`; the first, vanilla, trains nothing); `pipelines.launch <stage>` runs
    as the stage it launches (the launcher replaces its process with it)."""
    commands = []
    for stage in yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"].values():
        cmd = stage["cmd"]
        for key, values in stage.get("matrix", {}).items():
            cmd = cmd.replace(f"${{item.{key}}}", str(params[values.strip("${}")][-1]))
        argv = cmd.split()[2:]  # past `python -m`
        if argv[0] == "pipelines.launch":
            argv = [f"pipelines.{argv[1]}", *argv[2:]]
        if argv not in commands:
            commands.append(argv)
    return commands


def files_in(folder):
    return {p.relative_to(folder) for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_each_stage_on_a_bad_input_prints_one_error_line_not_a_traceback(tmp_path):
    repo = tmp_path / "repo"
    for name in CODE:
        copy = shutil.copytree if (REPO_ROOT / name).is_dir() else shutil.copy
        copy(REPO_ROOT / name, repo / name)
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["data"]["shared_dir"] = str(resolve_path(params["data"]["shared_dir"]))  # the real data
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    unknown_model = {**params, "model": {**params["model"], "name": "no-such-org/no-model"}}
    (repo / "unknown_model.yaml").write_text(yaml.safe_dump(unknown_model))
    (repo / "metrics").mkdir()
    (repo / "metrics" / "model.json").write_text('{"prepare_model": {"wall_s"')  # a truncated write: for report
    before = files_in(repo)

    commands = stage_commands(params)
    assert {c[0] for c in commands} >= {"pipelines.prepare_model", "pipelines.train", "pipelines.report"}
    commands = [c + ["--params", "unknown_model.yaml"] if c[0] == "pipelines.prepare_model" else c
                for c in commands] + [["pipelines.evaluate", "--method", "grp0"],  # typos
                                      ["pipelines.launch", "trian", "--method", "grpo"]]
    # no HF_HUB_OFFLINE from this process (importing lopd sets it) and an empty Hugging Face cache
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "HF_"))} | {
        "LOPD_MLFLOW_URI": "off", "PYTHONPATH": str(repo), "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", _RUN_ALL, json.dumps(commands)], cwd=repo, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600).stdout

    runs = out.split("=== ")[1:]
    ran = [run.split("\n", 1)[0] for run in runs if not run.startswith("exit ")]
    assert ran == [" ".join(c) for c in commands], out
    for command, lines, ended in zip(ran, runs[0::2], runs[1::2]):
        printed = [line for line in lines.splitlines()[1:] if line.strip()]
        assert "Traceback" not in lines and ended.split()[1] not in ("0", "None"), f"{command}:\n{lines}"
        assert printed and "error: " in printed[-1], f"{command}:\n{lines}"
    assert files_in(repo) == before  # nothing written
    assert "huggingface.co" not in out and "the suite downloads nothing at run time" in runs[0]  # no hub contacted


def _ended(main, capsys):
    """How `run_stage(main)` ends: (exit status or message, stderr)."""
    from pipelines.common import run_stage

    try:
        run_stage(main)
    except SystemExit as end:
        return end.code, capsys.readouterr().err
    raise AssertionError("run_stage returned")


def test_a_full_disk_and_ctrl_c_end_a_stage_in_one_line(capsys, tmp_path):
    def full():
        raise OSError(28, "No space left on device", str(tmp_path / "metrics.json"))

    def interrupted():
        raise KeyboardInterrupt

    def bug():
        raise OSError(9, "Bad file descriptor")

    assert _ended(full, capsys)[0] == (f"error: {tmp_path / 'metrics.json'}: No space left on device; the stage's "
                                       "previous outputs are kept")
    code, err = _ended(interrupted, capsys)
    assert code == 130 and err.count("\n") == 1 and err.startswith("interrupted: the stage's previous outputs")
    with pytest.raises(OSError, match="Bad file descriptor"):  # not a disk's: a bug keeps its traceback
        _ended(bug, capsys)


_SAVE_UNDER_LIMIT = """
import resource, sys
from pathlib import Path
from baselines.grpo import GRPO
from lopd.core import checkpoint
from lopd.core.config import resolve
from lopd.core.domain import Domain
from lopd.core.models import load_model, load_tokenizer

base, out = Path(sys.argv[1]), Path(sys.argv[2])
model, cfg = load_model(base), resolve({"profile": "smoke"})
optimizer = __import__("torch").optim.AdamW(model.parameters())
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # `ulimit -f 4`: no file past 4 KiB
try:
    checkpoint.save(out, model, load_tokenizer(base), optimizer, 1, [], [], {}, GRPO(cfg, Domain.scratch("x")))
except checkpoint.UnwritableOutput as err:
    print(err)
"""


def test_a_save_past_the_file_size_limit_says_so_and_leaves_no_temporary_folder(tiny_model_dir, tmp_path):
    out = tmp_path / "grpo"
    proc = subprocess.run([sys.executable, "-c", _SAVE_UNDER_LIMIT, str(tiny_model_dir), str(out)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert proc.stdout.startswith(f"{out}: cannot save step 1 ("), proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("the last saved step is kept") and list(out.iterdir()) == []


RUN_CACHED = {"build_bank", "build_pool", "build_bank_agentic", "build_pool_agentic"}
"""The stages (of both pipelines) whose outputs DVC deletes before it runs them: `persist` would turn off the run
cache, which brings a bank or pool (hours of rollouts) back without a re-run whenever its inputs recur."""


def test_every_stage_keeps_its_outputs_unless_the_run_cache_can_bring_them_back():
    """DVC deletes each output that is not `persist` before its stage runs. Every output of both DAGs persists but
    those of the stages DVC's run cache restores: no persist output, every output but metrics and plots cached (else
    DVC saves no run). The error line's check (`deletes_outputs`, on dvc.yaml's text) agrees with DVC on every stage of
    both pipelines."""
    from dvc.repo import Repo

    from pipelines.restore import deletes_outputs

    with Repo(str(REPO_ROOT)) as repo:
        stages = list(repo.index.stages)
    kept = {s.addressing for s in stages if all(out.persist for out in s.outs)}
    cached = {s.addressing for s in stages if not any(out.persist for out in s.outs)
              and all(out.use_cache for out in s.outs if not (out.is_metric or out.is_plot))}
    assert {s.addressing for s in stages} - kept == RUN_CACHED and RUN_CACHED <= cached  # the race's stages persist
    assert {s.addressing for s in stages if deletes_outputs(s.addressing)} == {s.addressing for s in stages} - kept


def test_a_stage_error_under_dvc_names_the_command_that_restores_what_dvc_deleted(capsys, monkeypatch, tmp_path):
    def unreadable():
        raise ConfigError("params.yaml: seed: expected int, got 'abc'")

    def full():
        raise OSError(28, "No space left on device", str(tmp_path / "bank.json"))

    restore = "DVC deleted the stage's previous outputs before it ran: python -m pipelines.restore build_bank puts " \
              "them back"
    monkeypatch.setenv("DVC_STAGE", "build_bank")
    assert _ended(unreadable, capsys)[0] == f"error: params.yaml: seed: expected int, got 'abc'; {restore}"
    assert _ended(full, capsys)[0] == f"error: {tmp_path / 'bank.json'}: No space left on device; {restore}"
    monkeypatch.setenv("DVC_STAGE", "eval@grpo")  # its outputs persist: DVC deleted none
    assert _ended(unreadable, capsys)[0] == "error: params.yaml: seed: expected int, got 'abc'"


def _git_dvc(cmd, cwd, env, ok=True):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert (proc.returncode == 0) == ok, f"{' '.join(cmd)}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_a_stage_that_fails_under_dvc_keeps_its_outputs_or_its_error_names_how_to_restore_them(tmp_path):
    """In a copy of the project (code, dvc.yaml, params) with recorded outputs, a bad param fails validate_base, whose
    outputs persist, and build_bank, which DVC's run cache serves: validate_base's outputs stay; DVC deletes
    build_bank's, and the command its error line names puts them back as dvc.lock records them, from DVC's cache or,
    for a file git tracks, from git's HEAD."""
    repo = tmp_path / "repo"
    for name in CODE:
        copy = shutil.copytree if (REPO_ROOT / name).is_dir() else shutil.copy
        copy(REPO_ROOT / name, repo / name)
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    previous = {"models/base/config.json": "{}\n",  # a dependency only: no stage reads it before the params
                "results/validation/base.json": '{"step0": {"val_reward": 0.25}}\n',
                "metrics/validation_base.json": '{"validate_base": {"val_reward": 0.25}}\n',
                "bank/experience.jsonl": '{"version": 1}\n{"task_id": "t0"}\n',
                "metrics/bank.json": '{"build_bank": {"n_entries": 1}}\n'}
    for path, text in previous.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")} | {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(repo),
        "LOPD_MLFLOW_URI": "off", "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "commit", "-fq", "validate_base", "build_bank"],
                ["git", "add", "-A"], ["git", "commit", "-qm", "recorded outputs"]):
        _git_dvc(cmd, repo, env)
    (repo / "params.yaml").write_text(yaml.safe_dump({**params, "seed": "abc"}))

    out = _git_dvc(["dvc", "repro", "--keep-going", "--single-item", "validate_base", "build_bank"], repo, env,
                   ok=False)
    files = lambda: {path: (repo / path).read_text() for path in previous if (repo / path).exists()}  # noqa: E731
    assert files() == {k: v for k, v in previous.items() if "bank" not in k}, out
    errors = sorted(line for line in out.splitlines() if line.startswith("error: "))
    assert errors == [f"error: {repo / 'params.yaml'}: seed: expected int, got 'abc'",
                      f"error: {repo / 'params.yaml'}: seed: expected int, got 'abc'; DVC deleted the stage's previous "
                      "outputs before it ran: python -m pipelines.restore build_bank puts them back"], out

    command = re.search(r"python (-m pipelines\.restore \S+)", errors[1]).group(1).split()
    assert "restored bank (DVC's cache)\nrestored metrics/bank.json (DVC's cache)" in _git_dvc(
        [sys.executable, *command], repo, env)
    assert files() == previous
    shutil.rmtree(repo / "bank")
    (repo / "metrics" / "bank.json").unlink()
    digest = hashlib.md5(previous["metrics/bank.json"].encode()).hexdigest()
    (repo / ".dvc" / "cache" / "files" / "md5" / digest[:2] / digest[2:]).unlink()  # a clone's cache: no metrics
    assert "restored metrics/bank.json (git HEAD)" in _git_dvc([sys.executable, *command], repo, env)
    assert files() == previous
