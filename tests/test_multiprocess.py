"""Two processes on the CPU (torchrun, gloo backend) running scripts/ddp_check.py, once with DDP and once with FSDP2
(`train.sharding: fsdp2`): after 2 steps of GRPO, SDPO (EMA teacher), Skill-SD (live teacher) and LOPD, both ranks hold
the same weights and method state, the logged metrics are over both processes and each run is recorded once; the
FSDP2 run ends where the DDP run does (up to summation order), and a resumed FSDP2 run equals an uninterrupted one.

Launched with torchrun: `accelerate launch --cpu --num_processes 2` started two independent single-process runs here.
accelerate's own FSDP plugin is not exercised: on the CPU it falls back to DDP.
"""

import importlib.util
import os
import shutil
import socket
import subprocess
import sys

import mlflow
import numpy as np
import pytest
import torch

from lopd.core.config import REPO_ROOT
from lopd.core.distributed import ProcessSplitError, check_split

pytestmark = pytest.mark.slow
SCRIPT = REPO_ROOT / "scripts" / "ddp_check.py"
_spec = importlib.util.spec_from_file_location("ddp_check", SCRIPT)
ddp_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ddp_check)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FSDP2_ATOL = 1e-7
"""FSDP2 vs DDP after 2 steps: the same trajectories, gradients summed in another order. Measured: at most 7.5e-9
apart (torch 2.13, CPU), against a 2-step update of ~2e-5 per weight."""
TIMING = ("time_update_s", "time_sampling_s", "time_reward_s", "rollout_tokens_per_s")


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory):
    """The bank and cold-start composer both launches read."""
    work = tmp_path_factory.mktemp("inputs")
    ddp_check.prepare_inputs(tiny_model_dir, work)
    return work


def _launch(model_dir, inputs, work, *args):
    """Both ranks' results, the work folder, the MLflow store and stdout, after one 2-process launch."""
    for name in ("bank", "composer"):
        shutil.copytree(inputs / name, work / name)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "LOPD_MLFLOW_URI": uri,
           "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), str(SCRIPT), str(model_dir), str(work), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return ddp_check.load_ranks(work, 2), work, uri, done.stdout


@pytest.fixture(scope="module")
def runs(tiny_model_dir, inputs, tmp_path_factory):
    return _launch(tiny_model_dir, inputs, tmp_path_factory.mktemp("ddp"))


@pytest.fixture(scope="module")
def fsdp_runs(tiny_model_dir, inputs, tmp_path_factory):
    return _launch(tiny_model_dir, inputs, tmp_path_factory.mktemp("fsdp2"), "fsdp2")


def _untimed(history):
    return [{k: v for k, v in h.items() if k not in TIMING} for h in history]


@pytest.mark.parametrize("method", ["grpo", "sdpo", "skill_sd", "lopd", "sdpo_lora", "lopd_lora"])
def test_both_ranks_end_with_the_same_weights_and_method_state(runs, method):
    (r0, r1), work, *_ = runs
    a, b = r0[method], r1[method]
    assert a["device"] == b["device"] == "cpu" and a["finite"] and b["finite"]
    assert a["weights"].keys() == b["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"]), "student weights differ"
    # metrics reduced over processes: the same on both (but each process's own update time)
    assert [{k: v for k, v in h.items() if k != "time_update_s"} for h in a["history"]] == \
        [{k: v for k, v in h.items() if k != "time_update_s"} for h in b["history"]]
    if method.startswith("sdpo"):  # the EMA teacher follows identical students
        assert a["extra"] and all(torch.equal(a["extra"][k], b["extra"][k]) for k in a["extra"])
    if method == "skill_sd":  # skills written from every process's groups, the same on both
        assert a["extra"] == b["extra"] and len(a["extra"]["skills"]) == 2 * 2  # 2 steps x 2 groups (one per rank)
    if method.startswith("lopd"):
        assert a["extra"]["beta"] == b["extra"]["beta"] == a["history"][-1]["beta_next"]
        composer = a["extra"]["composer"]
        assert all(torch.equal(composer[k], b["extra"]["composer"][k]) for k in composer)
        assert any(not torch.equal(composer[k], v) for k, v in
                   torch.load(work / "composer" / "composer.pt", weights_only=True).items()), "composer did not train"
        assert a["extra"]["bank"] == b["extra"]["bank"]
        grown = sum(r >= 0.5 for rank in (a, b) for step in rank["local_rewards"] for r in step)
        assert len(a["extra"]["bank"]) == 3 + grown  # every process's successes joined both banks


@pytest.mark.parametrize("method", ["grpo", "lopd"])
def test_logged_metrics_are_over_both_processes(runs, method):
    (r0, r1), *_ = runs
    for step, entry in enumerate(r0[method]["history"]):
        local = [r0[method]["local_rewards"][step], r1[method]["local_rewards"][step]]
        assert local[0] and local[1]
        assert entry["reward"] == pytest.approx(np.mean(local[0] + local[1]))
        assert entry["cumulative_rollouts"] == 8 * (step + 1) == len(local[0] + local[1]) * (step + 1)


def test_one_checkpoint_and_one_mlflow_run_per_training(runs):
    _, work, uri, stdout = runs
    assert (work / "runs" / "grpo" / "manifest.json").is_file()
    mlflow.set_tracking_uri(uri)
    found = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert sorted(r.info.run_name for r in found) == ["train@grpo", "train@lopd", "train@lopd_lora", "train@sdpo",
                                                      "train@sdpo_lora", "train@skill_sd"]
    grpo = next(r for r in found if r.info.run_name == "train@grpo")
    assert mlflow.MlflowClient().get_metric_history(grpo.info.run_id, "reward")[-1].step == 2
    assert stdout.count("[grpo] step 2/2") == 1  # progress printed by one process


def test_an_uneven_split_stops_with_one_line_naming_the_key(runs):
    (r0, r1), *_ = runs
    assert r0["uneven"] == r1["uneven"]
    assert "\n" not in r0["uneven"] and r0["uneven"].startswith("train.rollouts_per_step: 3 tasks per step")
    with pytest.raises(ProcessSplitError, match="over 4 processes"):
        check_split(6, 4)
    check_split(6, 3)


@pytest.mark.parametrize("method", ["grpo", "sdpo", "skill_sd", "lopd"])
def test_fsdp2_ranks_agree_and_end_where_ddp_does(runs, fsdp_runs, method):
    (f0, f1), *_ = fsdp_runs
    a, b, ddp = f0[method], f1[method], runs[0][0][method]
    assert a["device"] == b["device"] == "cpu" and a["finite"] and b["finite"]
    assert a["weights"].keys() == b["weights"].keys() == ddp["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"]), "gathered weights differ"
    assert _untimed(a["history"]) == _untimed(b["history"])
    gap = max((a["weights"][k] - ddp["weights"][k]).abs().max().item() for k in a["weights"])
    assert gap <= FSDP2_ATOL, f"FSDP2 and DDP weights {gap:.2e} apart"
    assert a["local_rewards"] == ddp["local_rewards"]  # the same rollouts
    for mine, theirs in zip(_untimed(a["history"]), _untimed(ddp["history"])):
        assert mine == pytest.approx(theirs, rel=1e-4, abs=1e-7)  # grad_norm: ~2e-7 relative
    if method == "sdpo":  # the EMA teacher followed the gathered student
        assert all(torch.equal(a["extra"][k], b["extra"][k]) for k in a["extra"])
        assert max((a["extra"][k] - ddp["extra"][k]).abs().max().item() for k in a["extra"]) <= FSDP2_ATOL
    if method == "skill_sd":
        assert a["extra"] == b["extra"] == ddp["extra"]
    if method.startswith("lopd"):
        assert a["extra"]["beta"] == b["extra"]["beta"] == pytest.approx(ddp["extra"]["beta"], rel=1e-6)
        assert a["extra"]["bank"] == b["extra"]["bank"] == ddp["extra"]["bank"]


def test_a_resumed_fsdp2_run_equals_an_uninterrupted_one(fsdp_runs):
    """LOPD (two optimizer param groups: the sharded student and the composer) for 1 step, then resumed to 2 steps:
    the full AdamW state went through the checkpoint and back into the shards."""
    ranks, _, _, stdout = fsdp_runs
    assert "resuming lopd from step 1" in stdout
    for rank in ranks:
        resumed, straight = rank["lopd_resumed"], rank["lopd"]
        assert all(torch.equal(resumed["weights"][k], straight["weights"][k]) for k in straight["weights"])
        composer = straight["extra"]["composer"]
        assert all(torch.equal(resumed["extra"]["composer"][k], composer[k]) for k in composer)
        assert resumed["extra"]["beta"] == straight["extra"]["beta"]
        assert _untimed(resumed["history"]) == _untimed(straight["history"])


def test_interleave_puts_every_process_share_back_in_order():
    """process_share gives rank r the items r, r + world, ...; interleave undoes it (a brute-force reference)."""
    from lopd.core.distributed import interleave

    for n in range(0, 12):
        for world in range(1, 5):
            items = [f"item{i}" for i in range(n)]
            parts = [items[r::world] for r in range(world)]
            expected = [None] * n
            for r, part in enumerate(parts):
                for j, item in enumerate(part):
                    expected[r + j * world] = item
            assert interleave(parts, n) == expected == items


def test_process_seeds_keep_the_seed_on_process_0_and_differ_between_processes():
    from lopd.core.rollout import process_seed

    assert process_seed(7, 0) == 7
    assert len({process_seed(7, r) for r in range(8)}) == 8


def test_a_two_process_cold_start_is_the_one_process_one_up_to_rounding(runs, inputs, tiny_model_dir, tmp_path):
    """2 steps on batches of 3 bank entries, scored 2 + 1 by the two processes and their gradients summed with each
    share's weight: both processes end with the same composer and NLLs, and match one process training on
    the whole batch up to rounding. The run is under bf16 autocast (the processes' accelerate state is set by then),
    whose backward roundings depend on each share's loss scale: measured, step 1's NLL (before any update) agreed to
    2e-8 and its gradient norm to 1.3e-4 (relative), and 1.5% of the composer's weights differed by more than 1e-7
    after 2 AdamW steps; a share weighted wrongly (a plain mean of the shares' means) moves the norm by percents and
    the sign of Adam's update for about half of the weights."""
    from lopd.latent.cold_start import COMPOSER_FILE, cold_start
    from lopd.latent.composer import FRAMINGS

    (r0, r1), *_ = runs
    one = cold_start(ddp_check.cold_start_config(ddp_check.overrides()), tiny_model_dir, inputs / "bank",
                     ddp_check.TASKS, tmp_path, FRAMINGS["code"])
    composer = torch.load(tmp_path / COMPOSER_FILE, weights_only=True)
    a, b = r0["cold_start"], r1["cold_start"]
    assert a["history"] == b["history"] and len(a["history"]) == 2
    assert all(torch.equal(a["composer"][k], b["composer"][k]) for k in composer)
    assert any(not torch.equal(composer[k], v) for k, v in
               torch.load(inputs / "composer" / COMPOSER_FILE, weights_only=True).items()), "the composer trained"
    assert a["history"][0]["nll"] == pytest.approx(one["history"][0]["nll"], rel=1e-6)
    for mine, single in zip(a["history"], one["history"]):
        assert mine["grad_norm"] == pytest.approx(single["grad_norm"], rel=1e-3)
    assert a["summary"]["nll_before"] == pytest.approx(one["summary"]["nll_before"], rel=1e-6)
    apart = torch.cat([(a["composer"][k] - composer[k]).abs().flatten() for k in composer]) > 1e-7
    assert apart.float().mean().item() < 0.05


def test_the_banks_rollouts_are_split_over_the_processes_and_gathered_in_task_order(runs):
    """build_bank's sampling (lopd.latent.bank.sample_rollouts) under 2 processes: each samples its share of the tasks,
    and every process ends with all of them, in task order, `bank.samples_per_task` each."""
    (r0, r1), *_ = runs
    assert r0["bank_rollouts"] == r1["bank_rollouts"]
    assert [task_id for task_id, _ in r0["bank_rollouts"]] == [t.task_id for t in ddp_check.TASKS]  # 1 per task
    assert all(tokens for _, tokens in r0["bank_rollouts"])
