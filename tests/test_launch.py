"""The launcher (`python -m pipelines.launch STAGE`): how `launch.processes` becomes a command, the one-line errors
before anything starts, and which stages split their work. Multi-process runs of the stages themselves:
tests/test_smoke_dag.py (`dvc exp run -S launch.processes=2`), tests/test_multiprocess.py and
tests/test_vllm_multiprocess.py."""

import os
import subprocess
import sys

import pyfork
import pytest
import yaml

from lopd.core.config import REPO_ROOT, ConfigError, LaunchConfig, process_split_error, read_yaml, resolve
from pipelines import launch


@pytest.mark.parametrize("processes, gpus, cpus, expected", [
    (1, 0, 2, 1), (2, 0, 2, 2), ("auto", 0, 2, 1), ("auto", 8, 2, 8), (4, 8, 2, 4), (8, 8, 2, 8)])
def test_the_process_count(processes, gpus, cpus, expected):
    assert launch.resolve_processes(LaunchConfig(processes=processes), gpus, cpus) == expected


@pytest.mark.parametrize("processes, gpus, cpus, message", [
    (3, 2, 16, "launch.processes: 3 processes but 2 visible GPU(s)"),
    (3, 0, 2, "launch.processes: 3 processes but no GPU and 2 CPU core(s)")])
def test_more_processes_than_devices_is_an_error(processes, gpus, cpus, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        launch.resolve_processes(LaunchConfig(processes=processes), gpus, cpus)


def test_the_commands():
    python = sys.executable
    assert launch.command("train", ["--method", "grpo"], 1, "torchrun") == [python, "-m", "pipelines.train",
                                                                            "--method", "grpo"]
    assert launch.command("train", ["--method", "grpo"], 4, "torchrun") == [
        python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4", "-m", "pipelines.train",
        "--method", "grpo"]
    assert launch.command("evaluate", [], 2, "accelerate", port=1234) == [
        python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--main_process_port", "1234", "-m", "pipelines.evaluate"]


@pytest.mark.parametrize("raw, message", [
    ({"launch": {"processes": 0}}, "launch.processes: 0 is not a count >= 1 or auto"),
    ({"launch": {"processes": "all"}}, "launch.processes: 'all' is not a count >= 1 or auto"),
    ({"launch": {"processes": 1.5}}, "launch.processes: expected int or str, got 1.5"),
    ({"launch": {"launcher": "mpirun"}}, "launch.launcher: 'mpirun' is not one of torchrun, accelerate"),
    # the cpu profile's agentic steps: 8 rollouts, groups of 4 for GRPO: 2 tasks, which 4 processes cannot share
    ({"launch": {"processes": 4}}, "launch.processes: 4 processes do not split agentic.rollouts_per_step (8 rollouts "
                                   "= 2 tasks of 4 for grpo) evenly; use a count that divides 2")])
def test_bad_launch_params_are_one_line_errors(raw, message):
    with pytest.raises(ConfigError) as err:
        resolve(raw)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_split_is_checked_for_every_method_in_both_domains():
    cfg = resolve({"profile": "smoke"})
    assert process_split_error(cfg, 1) is None
    tasks = {n: cfg.train.rollouts_per_step // g for n, g in cfg.rollouts_per_task().items()}
    agentic = {n: cfg.agentic.rollouts_per_step // g for n, g in cfg.rollouts_per_task().items()}
    for n in range(1, 9):
        fits = all(t % n == 0 for t in [*tasks.values(), *agentic.values()])
        assert (process_split_error(cfg, n) is None) == fits, n


def _launch(tmp_path, stage: str, launch_section: dict, *args: str, rollouts: int | None = None):
    params = read_yaml(REPO_ROOT / "params.yaml")
    params["launch"] = {**params["launch"], **launch_section}
    if rollouts:
        params["train"]["rollouts_per_step"] = params["agentic"]["rollouts_per_step"] = rollouts
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return subprocess.run([sys.executable, "-m", "pipelines.launch", stage, "--params", str(path), *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def test_the_launcher_refuses_before_anything_starts(tmp_path):
    """A count past the cores (no GPU is visible), or an unknown launcher, stops with one line before any stage
    starts."""
    count = 2 ** (os.cpu_count() or 1).bit_length()  # more than the cores, and a power of two: it splits 4 x count
    too_many = _launch(tmp_path, "train", {"processes": count}, "--method", "grpo", rollouts=4 * count)
    assert too_many.returncode != 0 and too_many.stderr.strip().count("\n") == 0
    assert "launch.processes:" in too_many.stderr and "CPU core(s)" in too_many.stderr
    bad = _launch(tmp_path, "train", {"launcher": "slurm"}, "--method", "grpo")
    assert bad.returncode != 0 and "launch.launcher: 'slurm'" in bad.stderr and bad.stderr.strip().count("\n") == 0


def test_a_one_process_stage_says_so(tmp_path):
    """latent_decode runs on one process whatever is asked for, and says why; the stage it then starts stops at its
    arguments (an unknown one), so the test never runs the real stage nor writes its outputs."""
    proc = _launch(tmp_path, "latent_decode", {"processes": 2}, "--not-an-option")
    assert "launch: latent_decode runs on one process of the 2 asked for: a short diagnostic" in proc.stderr
    assert proc.returncode == 2 and "unrecognized arguments: --not-an-option" in proc.stderr


def test_a_stage_that_cannot_split_its_work_refuses_to_run_under_torchrun(tmp_path):
    """Started by hand under torchrun, every process of a one-process stage would redo its work: it stops."""
    proc = pyfork.python(["-m", "pipelines.build_pool"], cwd=REPO_ROOT,
                         env={**os.environ, "WORLD_SIZE": "2", "RANK": "0"})
    assert proc.returncode != 0
    assert proc.stderr.strip() == ("error: pipelines.build_pool runs on one process (every process would redo its "
                                   "work): start it with `python -m pipelines.build_pool`, not under torchrun")


def test_dvc_runs_every_model_stage_through_the_launcher_and_records_its_params():
    """Stages that split their work depend on `launch` (their results depend on the count); one-process stages do
    not (changing the count must not re-run them)."""
    stages = read_yaml(REPO_ROOT / "dvc.yaml")["stages"]
    for name, stage in stages.items():
        stage = stage.get("do", stage)
        argv = stage["cmd"].split()
        module = argv[argv.index("-m") + 1]
        cli = argv[argv.index("-m") + 2] if module == "pipelines.launch" else module.removeprefix("pipelines.")
        assert (module == "pipelines.launch") == (cli in (*launch.MULTI_PROCESS, *launch.ONE_PROCESS)), name
        assert ("launch" in stage.get("params", [])) == (cli in launch.MULTI_PROCESS), name
