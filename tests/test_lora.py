"""LoRA students (`train.lora_rank`, lopd/core/adapters.py) on the tiny model: the merged weights, teachers that share
the student's base, step 0 equal to the full fine-tune, the engine's weights and an exact resume."""

import pytest
import torch
from safetensors.torch import load_file

from baselines import opsd, sdpo
from baselines.grpo import GRPO
from baselines.pool import POOL_FILE, REFERENCE_SOLUTION, Demonstration, write_pool
from baselines.teachers import Teacher
from lopd.core import adapters, checkpoint
from lopd.core.config import resolve
from lopd.core.distributed import full_parameters
from lopd.core.domain import Domain
from lopd.core.loop import load_student, train
from lopd.core.models import load_model
from lopd.core.rollout import Task, single_turn
from lopd.core.sampling import HFBackend
from lopd.core.trajectory import collate, with_prompt

TASKS = [Task(f"t{i}", [{"role": "user", "content": f"Print the number {i} times two."}]) for i in range(4)]
RANK, ALPHA = 4, 8.0


def _cfg(lora_rank=RANK, steps=2, **overrides):
    return resolve({"profile": "smoke", "seed": 3, "grpo": {"group_size": 2}, "sampling": {"max_new_tokens": 4},
                    "train": {"steps": steps, "save_every": 1, "rollouts_per_step": 4, "lora_rank": lora_rank,
                              "lora_alpha": ALPHA, "activation_checkpointing": False}, **overrides})


def _score(tasks, completions):
    return [float(i % 2) for i in range(len(completions))]  # ties never: every group has a success and a failure


def _randomise(model, seed):
    """Give every adapter weight (B too) random values, as training would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in adapters.adapter_parameters(model).values():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.05)


def _merged_by_hand(base_weights, model, adapter=adapters.STUDENT):
    """W + (alpha / r) B A for every adapted projection, from the raw factors: the reference merge."""
    out = dict(base_weights)
    for name, p in adapters.adapter_parameters(model, adapter).items():
        if ".lora_A." in name:
            a = p.detach()
            b = adapters.adapter_parameters(model, adapter)[name.replace(".lora_A.", ".lora_B.")].detach()
            key = name.removeprefix("base_model.model.").split(".lora_A.")[0] + ".weight"
            out[key] = base_weights[key] + (ALPHA / RANK) * b @ a
    return out


@pytest.fixture
def student(tiny_model_dir):
    return load_student(_cfg(), tiny_model_dir, sharded=False)


def test_the_student_starts_as_the_base_and_merges_as_w_plus_scaled_b_a(student, tiny_model_dir):
    base = load_file(tiny_model_dir / "model.safetensors")
    merged = dict(adapters.merged_parameters(student))
    assert merged.keys() == load_model(tiny_model_dir).state_dict().keys()
    assert all(torch.equal(merged[k], base[k]) for k in base)  # B = 0
    trained = [n for n, p in student.named_parameters() if p.requires_grad]
    assert trained and all(".lora_A.student." in n or ".lora_B.student." in n for n in trained)
    _randomise(student, 0)
    merged = dict(adapters.merged_parameters(student))
    for key, want in _merged_by_hand(base, student).items():
        torch.testing.assert_close(merged[key], want, rtol=0, atol=1e-6)
    assert sum(not torch.equal(merged[k], base[k]) for k in base) == 7 * 2  # 7 projections x 2 layers
    untouched = dict(adapters.base_module(student).state_dict())
    assert all(torch.equal(untouched[k.replace(".weight", ".base_layer.weight")] if k not in untouched else
                           untouched[k], base[k]) for k in base)


def _hidden(model, batch):
    with torch.no_grad():
        out = model.get_decoder()(input_ids=batch.input_ids_B_L, attention_mask=batch.attention_mask_B_L)
    return out.last_hidden_state[:, :-1][batch.action_mask_B_T > 0]


@pytest.fixture
def batch(tiny_model_dir):
    from lopd.core.models import load_tokenizer
    from lopd.core.rollout import encode_prompt
    from lopd.core.trajectory import Trajectory, Turn

    tokenizer = load_tokenizer(tiny_model_dir)
    rows = []
    for task in TASKS[:2]:
        prompt = encode_prompt(tokenizer, task.messages)
        traj = Trajectory(task.task_id, [Turn(prompt, [17, 42, 99], [-1.0] * 3)], reward=1.0)
        rows.append(with_prompt(traj, prompt))
    return collate(rows, tokenizer.pad_token_id, "cpu")


def test_a_frozen_teacher_is_the_base_model_and_leaves_the_student_as_it_was(student, tiny_model_dir, batch):
    _randomise(student, 1)
    before = _hidden(student, batch)
    teacher = Teacher("frozen", student, tiny_model_dir)
    assert teacher.model is student  # no copy
    assert torch.equal(teacher.hidden_at_actions(batch), _hidden(load_model(tiny_model_dir), batch))
    assert torch.equal(_hidden(student, batch), before)


def test_an_ema_teacher_is_an_ema_of_the_adapters_factors_on_the_shared_base(student, tiny_model_dir, batch):
    rate = 0.3
    teacher = Teacher("ema", student, tiny_model_dir, ema_rate=rate)
    assert teacher.model is student
    factors = {n: p.detach().clone() for n, p in adapters.adapter_parameters(student).items()}  # the initial student
    for seed in range(3):  # three optimizer steps move the student's adapter
        _randomise(student, 10 + seed)
        teacher.after_step()
        for name, p in adapters.adapter_parameters(student).items():
            factors[name] = (1 - rate) * factors[name] + rate * p.detach()
    ema = adapters.adapter_parameters(student, adapters.EMA_TEACHER)
    for name, want in factors.items():
        torch.testing.assert_close(ema[name.replace(".student.", ".ema_teacher.")].detach(), want, rtol=0, atol=1e-7)
    reference = load_model(tiny_model_dir)
    base = {k: v.clone() for k, v in reference.state_dict().items()}
    reference.load_state_dict(_merged_by_hand(base, student, adapters.EMA_TEACHER))
    torch.testing.assert_close(teacher.hidden_at_actions(batch), _hidden(reference, batch), rtol=1e-5, atol=1e-5)
    assert not any(p.requires_grad for p in ema.values())
    state = teacher.state_dict()
    assert state and all(".ema_teacher." in n for n in state)


def test_the_engine_gets_the_merged_student(student, tiny_model_dir):
    from lopd.core.models import load_tokenizer

    _randomise(student, 2)
    tokenizer = load_tokenizer(tiny_model_dir)
    engine = HFBackend(load_model(tiny_model_dir), stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id,
                       batch_size=2, tokenizer=tokenizer)
    engine.load_weights(full_parameters(student))
    merged = dict(adapters.merged_parameters(student))
    assert all(torch.equal(v, merged[k]) for k, v in engine.model.state_dict().items())


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pool")
    write_pool(folder / POOL_FILE, [Demonstration(t.task_id, "task", f"```python\nprint({i} * 2)\n```",
                                                  REFERENCE_SOLUTION) for i, t in enumerate(TASKS)], {})
    return folder


@pytest.mark.parametrize("method", ["grpo", "sdpo", "opsd"])
def test_step_0_is_the_full_fine_tunes_step_0(method, tiny_model_dir, pool_dir, tmp_path):
    """B = 0: the same rollouts, the same loss and the same metrics as a full fine-tune's first step (no teacher,
    the EMA teacher and the frozen one), all but the gradient's norm."""
    build = {"grpo": lambda cfg: GRPO(cfg, Domain.scratch("unused")),
             "sdpo": lambda cfg: sdpo.SDPO(cfg, Domain.scratch("unused")),
             "opsd": lambda cfg: opsd.OPSD(cfg, Domain.scratch("unused", pool=pool_dir))}[method]
    steps = [train(cfg, build(cfg), TASKS, single_turn(_score), tiny_model_dir, tmp_path / str(rank))["history"][0]
             for rank, cfg in ((0, _cfg(0, steps=1)), (RANK, _cfg(steps=1)))]
    full, lora = ({k: v for k, v in h.items() if not k.startswith("time_") and k != "rollout_tokens_per_s"}
                  for h in steps)
    assert lora.pop("grad_norm") != full.pop("grad_norm")  # the one difference: the gradient of other parameters
    assert lora == full and (full["loss"] > 0 or method == "grpo")  # GRPO's on-policy surrogate starts at 0
    merged = load_file(checkpoint.load(tmp_path / str(RANK)).model_dir / "model.safetensors")
    assert merged.keys() == load_file(tiny_model_dir / "model.safetensors").keys()  # a plain model evaluation loads


class Killed(BaseException):
    pass


def test_a_resumed_lora_run_equals_the_uninterrupted_one(tiny_model_dir, tmp_path, monkeypatch):
    def run(out):
        cfg = _cfg(steps=3)
        return train(cfg, sdpo.SDPO(cfg, Domain.scratch("unused")), TASKS, single_turn(_score), tiny_model_dir, out)

    whole = run(tmp_path / "whole")
    saves = []

    def crash(point):
        saves.append(point)
        if saves.count("save_started") == 3:  # step 3's save: step 2 is committed
            raise Killed

    monkeypatch.setattr(checkpoint, "_crash_point", crash)
    with pytest.raises(Killed):
        run(tmp_path / "resumed")
    (work,) = (tmp_path / checkpoint.RESUME / "resumed").iterdir()  # the killed run's steps, until it ends
    assert checkpoint.load(work).state["adapter"]
    monkeypatch.undo()
    resumed = run(tmp_path / "resumed")
    untimed = [[{k: v for k, v in h.items() if not k.startswith("time_") and k != "rollout_tokens_per_s"}
                for h in r["history"]] for r in (whole, resumed)]
    assert untimed[0] == untimed[1]
    a, b = checkpoint.load(tmp_path / "whole"), checkpoint.load(tmp_path / "resumed")
    assert all(torch.equal(a.state["adapter"][k], b.state["adapter"][k]) for k in a.state["adapter"])
    assert a.state["method"]["teacher"].keys() == b.state["method"]["teacher"].keys()
    assert all(torch.equal(v, b.state["method"]["teacher"][k]) for k, v in a.state["method"]["teacher"].items())
    wa, wb = (load_file(c.model_dir / "model.safetensors") for c in (a, b))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], v) for k, v in load_file(tiny_model_dir / "model.safetensors").items())
