import json
import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from baselines.grpo import GRPO
from baselines.vanilla import Vanilla
from lopd.core.checkpoint import policy_dir
from lopd.core.config import resolve
from lopd.core.domain import Domain
from lopd.core.loop import policy_optimizer, reward_metrics, tasks_for_step, train
from lopd.core.rollout import Task, single_turn

TASKS = [Task(f"t{i}", [{"role": "user", "content": f"Say something about the number {i}."}]) for i in range(6)]


def _score(tasks, completions):
    """A reward that varies between rollouts, so GRPO gets a non-zero signal."""
    return [float(len(c) % 2) for c in completions]


def _cfg(steps):
    return resolve({"profile": "smoke", "train": {"steps": steps, "save_every": 1, "val_every": 1}})


NO_DOMAIN = Domain.scratch("unused")  # GRPO and Vanilla read no domain folder


def _weights(path):
    """A training run's final weights (the base folder is never needed: the methods here train)."""
    return load_file(str(policy_dir(path, base_dir=None) / "model.safetensors"))


def test_grpo_updates_weights_and_resume_equals_uninterrupted_run(tiny_model_dir, tmp_path):
    held_out = [Task("v0", [{"role": "user", "content": "Count to three."}])] * 3
    run = lambda steps, out: train(_cfg(steps), GRPO(_cfg(steps), NO_DOMAIN), TASKS, single_turn(_score),  # noqa: E731
                                   tiny_model_dir, tmp_path / out, validation=held_out)
    straight = run(2, "a")
    run(1, "b")
    resumed = run(2, "b")
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    assert any(not torch.equal(a[k], base[k]) for k in a), "GRPO must change the weights"
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-7), k
    assert [h["reward"] for h in straight["history"]] == [h["reward"] for h in resumed["history"]]
    assert straight["history"][-1]["cumulative_rollouts"] == 16
    # greedy validation before training and after every step (val_every 1), carried across the resume
    assert straight["validation"] == resumed["validation"]
    assert [(v["step"], v["cumulative_rollouts"], v["val_n"]) for v in straight["validation"]] == [
        (0, 0, 3), (1, 8, 3), (2, 16, 3)]
    # greedy: the three copies of one task score alike (_score rewards the completion's length parity)
    assert all(v["val_reward"] in (0.0, 1.0) for v in straight["validation"])
    # TRL GRPOTrainer's metric names; num_tokens is cumulative and carries across the resume
    first, last = straight["history"]
    assert [h["num_tokens"] for h in straight["history"]] == [h["num_tokens"] for h in resumed["history"]]
    assert 0 < first["num_tokens"] < last["num_tokens"]
    assert first["num_tokens"] >= 8 * first["completions/mean_length"]
    for h in straight["history"]:
        assert h["completions/min_length"] <= h["completions/mean_length"] <= h["completions/max_length"]
        assert 0 <= h["completions/clipped_ratio"] <= 1 and 0 <= h["frac_reward_zero_std"] <= 1
        assert h["reward_std"] >= 0 and h["learning_rate"] == _cfg(2).train.lr
        assert not {"reward_mean", "response_tokens_mean", "stop_rate"} & h.keys()
        if h["trained_fraction"] > 0:  # computed over the trajectories that ran a forward pass
            assert 0 < h["entropy"] <= math.log(AutoConfig.from_pretrained(tiny_model_dir).vocab_size) + 1e-4
            assert {"clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"} <= h.keys()
    assert any(h["trained_fraction"] > 0 for h in straight["history"])
    # the checkpoint is a plain transformers folder
    from transformers import AutoModelForCausalLM
    AutoModelForCausalLM.from_pretrained(policy_dir(tmp_path / "a", tiny_model_dir))


def test_a_method_sections_lr_overrides_the_shared_one(tiny_model_dir, tmp_path):
    shared = resolve({"profile": "smoke", "train": {"steps": 1, "lr": 3e-6}})
    own = resolve({"profile": "smoke", "train": {"steps": 1, "lr": 3e-6}, "grpo": {"lr": 1e-6}})
    for cfg, expected in ((shared, 3e-6), (own, 1e-6)):
        out = train(cfg, GRPO(cfg, NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / str(expected))
        assert [h["learning_rate"] for h in out["history"]] == [expected]


def test_activation_checkpointing_gives_the_same_weights(tiny_model_dir, tmp_path):
    for checkpointing in (True, False):
        cfg = resolve({"profile": "smoke", "train": {"steps": 1, "activation_checkpointing": checkpointing}})
        train(cfg, GRPO(cfg, NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / str(checkpointing))
    on, off = _weights(tmp_path / "True"), _weights(tmp_path / "False")
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    assert any(not torch.equal(on[k], base[k]) for k in on)
    assert all(torch.equal(on[k], off[k]) for k in on)


def test_changed_config_does_not_resume_stale_state(tiny_model_dir, tmp_path, capsys):
    train(_cfg(1), GRPO(_cfg(1), NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "c")
    other = resolve({"profile": "smoke", "seed": 5, "train": {"steps": 1, "save_every": 1}})
    result = train(other, GRPO(other, NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "c")
    assert "resuming" not in capsys.readouterr().out
    assert len(result["history"]) == 1 and result["history"][0]["time_update_s"] > 0  # trained here, not read back


def test_a_shorter_run_does_not_reuse_a_longer_checkpoint(tiny_model_dir, tmp_path, capsys):
    train(_cfg(2), GRPO(_cfg(2), NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "d")
    result = train(_cfg(1), GRPO(_cfg(1), NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "d")
    assert "resuming" not in capsys.readouterr().out
    assert len(result["history"]) == 1 and result["history"][0]["time_update_s"] > 0
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["steps"] == 1


def test_vanilla_checkpoint_points_at_base(tiny_model_dir, tmp_path):
    train(_cfg(2), Vanilla(_cfg(2), NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "v")
    assert json.loads((tmp_path / "v" / "manifest.json").read_text())["weights"] == "base"
    assert policy_dir(tmp_path / "v", tiny_model_dir) == tiny_model_dir
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        policy_dir(tmp_path / "missing", tiny_model_dir)


def test_reward_metrics_match_trl():
    """reward_std is Bessel-corrected (TRL's nanstd); a group with one rollout or equal rewards has zero std."""
    from lopd.core.trajectory import Trajectory, Turn

    def traj(reward, group):
        return Trajectory("t", [Turn([1], [2], [-1.0])], reward=reward, group=group)

    rewards, groups = [1.0, 0.0, 1.0, 0.5, 0.5, 0.2], [0, 0, 1, 2, 2, 3]
    got = reward_metrics([traj(r, g) for r, g in zip(rewards, groups)])
    mean = sum(rewards) / len(rewards)
    assert got["reward"] == pytest.approx(mean)
    assert got["reward_std"] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)))
    assert got["frac_reward_zero_std"] == pytest.approx(3 / 4)  # groups 1 (one rollout), 2 (equal), 3 (one)
    one = reward_metrics([traj(0.7, 0)])
    assert one == {"reward": pytest.approx(0.7), "reward_std": 0.0, "frac_reward_zero_std": 1.0}


def test_tasks_for_step_covers_each_epoch_once():
    tasks = [Task(str(i), []) for i in range(10)]
    first_epoch = [t.task_id for s in range(5) for t in tasks_for_step(tasks, 2, seed=0, step=s)]
    assert sorted(first_epoch) == [str(i) for i in range(10)]
    assert tasks_for_step(tasks, 3, 0, 7) == tasks_for_step(tasks, 3, 0, 7)


def test_skipping_zero_advantage_groups_is_exact(tiny_model_dir):
    """The loop skips trajectories whose gradient is exactly zero; the step must equal the full one."""
    from accelerate import Accelerator

    from lopd.core.loop import update
    from lopd.core.models import load_model
    from lopd.core.trajectory import Trajectory, Turn

    class GRPONoSkip(GRPO):
        def contributes(self, trajectory):
            return True

    cfg = _cfg(1)
    rewards = [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]  # group 0: all equal (zero advantage)
    def trajectories():
        return [Trajectory("t", [Turn([1, 2, 3], [5 + i, 9, 4 + g], [-1.0, -1.0, -1.0])], reward=r, group=g)
                for i, (r, g) in enumerate(zip(rewards, [0, 0, 0, 0, 1, 1, 1, 1]))]

    params = []
    for method in (GRPO(cfg, NO_DOMAIN), GRPONoSkip(cfg, NO_DOMAIN)):
        torch.manual_seed(0)
        model = load_model(tiny_model_dir)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        metrics = update(model, optimizer, Accelerator(cpu=True), method, trajectories(), pad_id=0, cfg=cfg)
        params.append([p.detach().clone() for p in model.parameters()])
        if isinstance(method, GRPONoSkip):
            assert metrics["trained_fraction"] == 1.0
        else:
            assert metrics["trained_fraction"] == 0.5
    for a, b in zip(*params):
        assert torch.allclose(a, b, atol=1e-6)
    initial = list(load_model(tiny_model_dir).parameters())
    assert any(not torch.equal(a, p) for a, p in zip(params[0], initial)), "the step must change the weights"


@pytest.mark.parametrize("micro", [1, 3])
def test_micro_batches_accumulate_to_the_whole_batchs_gradient(tiny_model_dir, micro):
    """train.micro_batch_size changes memory, not the step: micro-batches of 1 or of 3 (uneven: 3, 3, 2; other
    padding per micro-batch) give the gradient of all 8 trajectories in one batch."""
    from accelerate import Accelerator

    from lopd.core.loop import update
    from lopd.core.models import load_model
    from lopd.core.trajectory import Trajectory, Turn

    rewards, groups = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0], [0, 0, 0, 0, 1, 1, 1, 1]

    def trajectories():  # 2 to 5 action tokens, prompts of 2 or 3: padding differs between micro-batches
        return [Trajectory("t", [Turn([1, 2, 3][:2 + i % 2], [5 + j for j in range(2 + i % 4)], [-1.0] * (2 + i % 4))],
                           reward=r, group=g) for i, (r, g) in enumerate(zip(rewards, groups))]

    grads = []
    for size in (8, micro):
        cfg = resolve({"profile": "smoke", "train": {"micro_batch_size": size, "grad_clip": 1e9}})
        model = load_model(tiny_model_dir)
        update(model, torch.optim.SGD(model.parameters(), lr=0.0), Accelerator(cpu=True), GRPO(cfg, NO_DOMAIN),
               trajectories(), pad_id=0, cfg=cfg)
        grads.append([p.grad.clone() for p in model.parameters()])
    assert any(g.abs().sum() > 0 for g in grads[0])
    for whole, accumulated in zip(*grads):
        torch.testing.assert_close(accumulated, whole, rtol=1e-5, atol=1e-7)


def test_the_fused_adamw_on_cpu_takes_adamws_steps(tiny_model_dir):
    """The loop's CPU optimizer (torch's fused kernel: fast, no temporaries) takes AdamW's steps, written out here in
    float64: decoupled weight decay, bias-corrected moments."""
    cfg = resolve({"profile": "smoke", "train": {"weight_decay": 0.1}})
    method = GRPO(cfg, NO_DOMAIN)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    optimizer = policy_optimizer(model, method, cfg)
    assert optimizer.defaults["fused"] is True
    lr, (beta1, beta2), eps = method.lr(cfg), optimizer.defaults["betas"], optimizer.defaults["eps"]
    params = list(model.parameters())
    reference = [p.detach().double().clone() for p in params]
    moments = [(torch.zeros_like(r), torch.zeros_like(r)) for r in reference]
    generator = torch.Generator(device="cpu").manual_seed(0)
    for step in range(1, 4):
        grads = [torch.randn(p.shape, generator=generator, device="cpu") for p in params]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
        for r, (m, v), g in zip(reference, moments, grads):
            m.mul_(beta1).add_((1 - beta1) * g.double())
            v.mul_(beta2).add_((1 - beta2) * g.double() ** 2)
            r.mul_(1 - lr * 0.1)
            r.sub_(lr * (m / (1 - beta1 ** step)) / ((v / (1 - beta2 ** step)).sqrt() + eps))
    for p, r, start in zip(params, reference, AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters()):
        assert (p.detach() - start).abs().max() > 0.5 * lr  # it moved by about lr a step
        torch.testing.assert_close(p.detach().double(), r, rtol=1e-6, atol=2e-7)


def _truncate(file):
    data = file.read_bytes()
    file.write_bytes(data[:len(data) // 2])


def test_a_truncated_base_model_is_one_line_and_overwrites_nothing(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """The error names the file and how to rebuild it, before the resume check could call the corrupt file a changed
    input ("starting fresh") and before anything is written."""
    import shutil

    from lopd.core import models
    from lopd.core.models import UnreadableWeights
    from pipelines.common import run_stage

    root = tmp_path / "repo"
    base = root / "models" / "base"
    shutil.copytree(tiny_model_dir, base)
    train(_cfg(1), GRPO(_cfg(1), NO_DOMAIN), TASKS, single_turn(_score), base, tmp_path / "run")
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    _truncate(base / "model.safetensors")
    monkeypatch.setattr(models, "REPO_ROOT", root)  # the folder `dvc repro prepare_model` rebuilds
    capsys.readouterr()
    with pytest.raises(UnreadableWeights) as err:
        train(_cfg(2), GRPO(_cfg(2), NO_DOMAIN), TASKS, single_turn(_score), base, tmp_path / "run")
    message = str(err.value)
    assert message.startswith(f"{base / 'model.safetensors'}: unreadable weights (Error while deserializing header")
    assert message.endswith("rebuild it: dvc repro prepare_model") and "\n" not in message
    assert "starting fresh" not in capsys.readouterr().out
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before
    with pytest.raises(SystemExit, match=r"^error: .*model.safetensors: unreadable weights"):  # what a stage prints
        run_stage(lambda: models.load_model(base))


def test_a_truncated_checkpoint_names_the_stage_to_rerun(tiny_model_dir, tmp_path):
    """An evaluation reads a trained student's folder: its corrupt weights are one line too, before any engine."""
    import shutil

    from lopd.core.models import UnreadableWeights, load_model
    from lopd.core.rollout import make_backend

    student = tmp_path / "checkpoints" / "grpo" / "step-2" / "model"
    shutil.copytree(tiny_model_dir, student)
    _truncate(student / "model.safetensors")
    for load in (lambda: load_model(student), lambda: make_backend(student, None, _cfg(1), 4)):
        with pytest.raises(UnreadableWeights, match=r"weights .*re-run the stage that wrote it \(dvc repro\)$"):
            load()


def test_the_base_models_point_measured_once_is_every_runs_step_0(tiny_model_dir, tmp_path, monkeypatch):
    """Stage validate_base measures the base model as a run measures its step 0 (greedy, one sample a task, the run's
    step-0 seed, on a fresh engine), so the point is the same, and a run given it takes it and measures the rest; the
    point is taken only where its recorded measurement is the run's (pipelines.common.base_validation_step0)."""
    from accelerate import Accelerator

    from lopd.core.loop import validate
    from lopd.core.models import load_tokenizer
    from lopd.core.rollout import greedy_params, make_backend, step_seed
    from pipelines import common

    held_out = [Task(f"v{i}", [{"role": "user", "content": f"Count to {i}."}]) for i in range(3)]
    cfg = _cfg(1)
    own = train(cfg, GRPO(cfg, NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "a",
                validation=held_out)["validation"]
    tokenizer = load_tokenizer(tiny_model_dir)
    backend = make_backend(tiny_model_dir, tokenizer, cfg, cfg.sampling.batch_size)
    base = validate(backend, tokenizer, single_turn(_score), held_out, greedy_params(cfg.sampling.max_new_tokens), 1,
                    step_seed(cfg.seed, 0, 0), Accelerator(cpu=True))
    assert own[0] == {"step": 0, "cumulative_rollouts": 0, **base}
    given = train(cfg, GRPO(cfg, NO_DOMAIN), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "b",
                  validation=held_out, step0={**base, "val_reward": 0.5})["validation"]
    assert given[0]["val_reward"] == 0.5 and given[1:] == own[1:]

    monkeypatch.setattr(common, "base_validation_file", lambda: tmp_path / "base.json")
    assert common.base_validation_step0(cfg, held_out, 1) is None  # no file: the run measures its own
    common.write_json(tmp_path / "base.json", {"step0": base, "measurement": common.base_validation_measurement(
        cfg, held_out, 1)})
    assert common.base_validation_step0(cfg, held_out, 1) == base
    assert common.base_validation_step0(cfg, held_out, 2) is None  # two processes: other shares, another order
    assert common.base_validation_step0(cfg, held_out[:2], 1) is None  # other tasks
    longer = resolve({"profile": "smoke", "sampling": {"max_new_tokens": cfg.sampling.max_new_tokens + 1}})
    assert common.base_validation_step0(longer, held_out, 1) is None
