"""SDFT, OPSD, SDPO and Skill-SD on the shared loop: templates, teacher kinds, selection rules, training."""

import itertools
import json
import math
import re

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from baselines import opsd, sdft, sdpo, skill_sd
from baselines.config import SDFTConfig, SDPOConfig
from baselines.pool import (
    BASE_MODEL_ROLLOUT,
    POOL_FILE,
    REFERENCE_SOLUTION,
    Demonstration,
    assemble_pool,
    load_pool,
    render_reference,
    write_pool,
)
from baselines.skills import Skill, ucb1_choice
from baselines.teachers import Teacher, ema_update_
from lopd.core import loop, rollout
from lopd.core.adapters import is_lora
from lopd.core.checkpoint import MANIFEST, policy_dir
from lopd.core.config import ConfigError, resolve
from lopd.core.domain import Domain
from lopd.core.loop import MethodInputError, train
from lopd.core.models import load_model
from lopd.core.rollout import Task, single_turn
from lopd.core.sampling import HFBackend
from lopd.latent.bank import BankEntry
from lopd.latent.retrieval import QUERIES_FILE, TextEmbedder, query_text, save_vectors

SYSTEM = "You are an expert Python programmer."
TASKS = [Task(f"t{i}", [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": f"Print the number {i} times two."}]) for i in range(6)]


def _score(tasks, completions):
    return [float(len(c) % 2) for c in completions]


def _cfg(**overrides):
    return resolve({"profile": "smoke", "train": {"steps": 2, "save_every": 1}, **overrides})


def _domain(**folders):
    """The code domain with the given bank or pool folder (the others unused)."""
    return Domain.scratch("unused", **folders)


@pytest.fixture(scope="module")
def pool_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("pool") / POOL_FILE
    write_pool(path, [Demonstration(t.task_id, "task", f"```python\nprint({i} * 2)\n```", REFERENCE_SOLUTION)
                      for i, t in enumerate(TASKS[:4])], {})
    return path


@pytest.fixture(scope="module")
def bank_dir(tmp_path_factory):
    """Only what Skill-SD reads from the bank: the cached query embedding of every training task."""
    out = tmp_path_factory.mktemp("bank")
    embedder = TextEmbedder("all-minilm-l6-v2")
    save_vectors(out / QUERIES_FILE, [t.task_id for t in TASKS],
                 embedder.embed([query_text(t.messages[1]["content"], "q") for t in TASKS]))
    return out


def _weights(model_dir):
    """The weights of a base model folder or of a training run's checkpoint."""
    folder = policy_dir(model_dir, model_dir) if (model_dir / MANIFEST).exists() else model_dir
    return load_file(str(folder / "model.safetensors"))


# --- templates: the teacher's context is rendered exactly as Appendix B shows -----------------------------------

def test_sdft_appends_the_demonstration_to_the_user_message():
    method = sdft.SDFT(_cfg(), Domain.scratch("unused"))
    got = method.with_demonstration(TASKS[1].messages, "DEMO")
    assert got == [{"role": "system", "content": SYSTEM},
                   {"role": "user", "content": "Print the number 1 times two.\n\nThis is an example for a response to "
                    "the question:\nDEMO\n\nNow answer with a response of your own, including the thinking process."}]
    assert TASKS[1].messages[1]["content"] == "Print the number 1 times two."  # the student's prompt is untouched


def test_opsd_appends_the_oracle_trajectory_to_the_system_message_or_creates_one():
    block = ("The following is a reference plan for the upcoming task. Use it only as guidance for your own reasoning; "
             "you must still interact with the environment to complete the task.\nGT\n\nAfter reading the reference "
             "solution above, make sure you truly understand the reasoning behind each step. Now, using your own words "
             "and independent reasoning, derive the same final answer.")
    method = opsd.OPSD(_cfg(), Domain.scratch("unused"))
    assert method.with_demonstration(TASKS[0].messages, "GT") == [
        {"role": "system", "content": f"{SYSTEM}\n\n{block}"}, TASKS[0].messages[1]]
    assert method.with_demonstration([TASKS[0].messages[1]], "GT") == [
        {"role": "system", "content": block}, TASKS[0].messages[1]]


def test_sdpo_reprompts_with_a_successful_sibling(tokenizer):
    method = sdpo.SDPO(_cfg(sdpo={"success_threshold": 0.9}), Domain.scratch("unused"))
    method.tokenizer, method.messages = tokenizer, {t.task_id: t.messages for t in TASKS}
    from lopd.core.trajectory import Trajectory, Turn
    solution_ids = tokenizer.encode("print(2)")
    trajs = [Trajectory("t1", [Turn([1], ids, [0.0] * len(ids))], reward=r, group=0,
                        response=tokenizer.decode(ids))
             for ids, r in ((tokenizer.encode("x"), 0.0), (solution_ids, 1.0))]
    first, second = method.privileged_messages(trajs)
    assert first[1]["content"] == ("Print the number 1 times two.\n\nCorrect solution:\n\nprint(2)\n\n"
                                   "Correctly solve the original question.")
    assert second is None  # its only success is itself


def test_skill_sd_renders_the_three_sections():
    skill = Skill("t9", "task", "WORKS", "AVOID", "FLOW")
    got = skill_sd.render_skill(TASKS[2].messages, skill)[1]["content"]
    assert got == ("Print the number 2 times two.\n\nHere is a skill summary from a similar past task that may help "
                   "guide your approach:\n\n**What works:** WORKS\n**What to avoid:** AVOID\n**Suggested workflow:** "
                   "FLOW\n\nNow solve the current task using your own reasoning.")


# --- selection rules against brute force -----------------------------------------------------------------------

def test_successful_siblings_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 9))
        rewards, groups = rng.choice([0.0, 0.5, 1.0], n).tolist(), sorted(rng.integers(0, 3, n).tolist())
        got = sdpo.successful_siblings(rewards, groups, 1.0)
        for i in range(n):
            others = [j for j in range(n) if j != i and groups[j] == groups[i] and rewards[j] >= 1.0]
            assert got[i] == (others[0] if others else None)


def test_ucb1_choice_matches_brute_force():
    c = math.sqrt(2)
    for means, counts in itertools.product([(0.1, 0.5, 0.3), (0.9, 0.0, 0.2)], [(1, 1, 1), (5, 1, 2), (3, 0, 4)]):
        total = sum(counts)
        scores = [math.inf if n == 0 else m + c * math.sqrt(math.log(total) / n) for m, n in zip(means, counts)]
        assert ucb1_choice(list(means), list(counts), total, c) == scores.index(max(scores))
    assert ucb1_choice([0.0, 0.0], [0, 0], 0, c) == 0  # nothing tried: the most similar candidate


def test_pool_prefers_base_model_successes_then_passing_references():
    tasks = [("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")]
    successes = [BankEntry("b", "B", "x", "first b", 1.0, [[[], [1]]]),
                 BankEntry("b", "B", "y", "second b", 1.0, [[[], [2]]])]
    references = {"a": [render_reference("print(1)")], "b": [render_reference("print(2)")], "d": []}
    pool = assemble_pool(tasks, successes, references, fill_with_references=True)
    assert [(d.task_id, d.source, d.text) for d in pool] == [
        ("a", REFERENCE_SOLUTION, "```python\nprint(1)\n```"), ("b", BASE_MODEL_ROLLOUT, "first b")]
    assert [d.task_id for d in assemble_pool(tasks, successes, {"a": ["print(1)"]}, False)] == ["b"]


# --- teacher kinds ----------------------------------------------------------------------------------------------

def test_ema_update_moves_the_teacher_by_the_rate():
    teacher, student = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    ema_update_(teacher, student, 0.05)
    for k, v in teacher.state_dict().items():
        assert torch.allclose(v, 0.95 * before[k] + 0.05 * student.state_dict()[k], atol=1e-7)


@pytest.mark.parametrize("name", ["sdft", "sdpo"])
def test_ema_teacher_after_one_step_is_the_rate_weighted_average(name, tiny_model_dir, pool_path, tmp_path):
    cfg = _cfg(train={"steps": 1}, sdpo={"success_threshold": 0.5})
    method = (sdft.SDFT if name == "sdft" else sdpo.SDPO)(cfg, _domain(pool=pool_path.parent))
    rate = cfg.section(SDFTConfig).ema_rate if name == "sdft" else cfg.section(SDPOConfig).ema_rate
    train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / name)
    base, student = _weights(tiny_model_dir), _weights(tmp_path / name)
    teacher = {k: v.cpu() for k, v in method.teacher_model.model.state_dict().items()}  # on the GPU if there is one
    assert any(not torch.equal(base[k], student[k]) for k in base)  # the student did move
    for k in base:
        assert torch.allclose(teacher[k], (1 - rate) * base[k] + rate * student[k], atol=1e-6), k


def test_frozen_teacher_stays_frozen_and_no_gradient_reaches_any_teacher(tiny_model_dir, pool_path, tmp_path):
    cfg = _cfg()
    method = opsd.OPSD(cfg, _domain(pool=pool_path.parent))
    train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / "opsd")
    base = _weights(tiny_model_dir)
    teacher = method.teacher_model.model
    assert all(torch.equal(p.cpu(), base[k]) for k, p in teacher.named_parameters())
    assert all(not p.requires_grad and p.grad is None for p in teacher.parameters())
    student = load_model(tiny_model_dir)
    live = Teacher("live", student, tiny_model_dir)
    from lopd.core.trajectory import Trajectory, Turn, collate
    batch = collate([Trajectory("t", [Turn([1, 2, 3], [4, 5], [0.0, 0.0])])], 0)
    hidden = live.hidden_at_actions(batch)
    assert hidden.shape[0] == 2 and not hidden.requires_grad and not live.weight_V_D.requires_grad


# --- training through the shared loop ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sdft", "opsd"])
def test_pool_methods_train_and_log(name, tiny_model_dir, pool_path, tmp_path):
    cfg = _cfg()
    method = (sdft.SDFT if name == "sdft" else opsd.OPSD)(cfg, _domain(pool=pool_path.parent))
    result = train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / name)
    history = result["history"]
    assert [h["cumulative_rollouts"] for h in history] == [8, 16]
    for h in history:  # 4 of the 6 tasks have a demonstration
        assert 0 < h["privileged_fraction"] < 1 and h["teacher_context_tokens"] > 20
        assert h["distill_loss"] > 0 and math.isfinite(h["loss"])


def test_sdpo_without_a_successful_sibling_has_no_signal(tiny_model_dir, tmp_path):
    cfg = _cfg(sdpo={"success_threshold": 0.9})
    result = train(cfg, sdpo.SDPO(cfg, _domain()), TASKS,
                   single_turn(lambda tasks, completions: [0.5] * len(completions)), tiny_model_dir, tmp_path / "sdpo")
    assert all(h["privileged_fraction"] == 0 and h["trained_fraction"] == 0 for h in result["history"])
    assert all(torch.equal(v, _weights(tiny_model_dir)[k]) for k, v in _weights(tmp_path / "sdpo").items())


def test_skill_sd_builds_skills_picks_them_by_ucb_and_resumes(tiny_model_dir, bank_dir, tmp_path):
    cfg = _cfg(train={"steps": 3, "save_every": 1})
    method = skill_sd.SkillSD(cfg, _domain(bank=bank_dir))
    history = train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / "run")["history"]
    assert history[0]["privileged_fraction"] == 0  # no skill exists before the first step's summaries
    assert [h["skill_bank_size"] for h in history] == [2, 4, 6]  # one skill per group (8 rollouts / G=4)
    assert history[1]["privileged_fraction"] == 1 and history[1]["ucb_selections"] == 2
    assert all(s.what_works and s.what_to_avoid and s.workflow for s in method.skills.skills)
    resumed = skill_sd.SkillSD(_cfg(train={"steps": 4, "save_every": 1}), _domain(bank=bank_dir))
    train(resumed.cfg, resumed, TASKS, single_turn(_score), tiny_model_dir, tmp_path / "run")
    assert resumed.skills.skills[:6] == method.skills.skills and len(resumed.skills.skills) == 8
    assert resumed.skills.counts[:6] != [0] * 6


def test_skill_sd_with_a_lora_student_reads_skills_with_the_student_as_its_teacher(tiny_model_dir, bank_dir,
                                                                                    tmp_path):
    """`train.lora_rank`: the live teacher is the LoRA student itself (no copy), adapter on; the run trains."""
    cfg = _cfg(train={"steps": 2, "save_every": 1, "lora_rank": 4, "lora_alpha": 8.0})
    method = skill_sd.SkillSD(cfg, _domain(bank=bank_dir))
    history = train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / "run")["history"]
    assert is_lora(method.teacher_model.model) and method.teacher_model.model is method.teacher_model.student
    assert history[1]["privileged_fraction"] == 1 and all(math.isfinite(h["loss"]) for h in history)
    base = _weights(tiny_model_dir)
    assert any(not torch.equal(v, base[k]) for k, v in _weights(tmp_path / "run").items())


def test_skill_sd_summarises_with_the_hf_sampler_whatever_the_rollout_backend(tiny_model_dir, bank_dir, tmp_path,
                                                                               monkeypatch):
    """A second vLLM engine for a few summaries a step cost ~4.5 GB (OOM on the cpu profile): always the HF loop."""
    rollouts_by_hf = _cfg()
    monkeypatch.setattr(loop, "make_backend", lambda model_dir, tokenizer, cfg, *args, **kwargs:
                        rollout.make_backend(model_dir, tokenizer, rollouts_by_hf, *args, **kwargs))
    cfg = _cfg(train={"steps": 1, "save_every": 1}, sampling={"backend": "vllm"})
    method = skill_sd.SkillSD(cfg, _domain(bank=bank_dir))
    train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / "run")
    assert isinstance(method.summariser, HFBackend) and len(method.skills.skills) == 2


def test_resumed_ema_run_equals_an_uninterrupted_one(tiny_model_dir, pool_path, tmp_path):
    straight = _cfg(train={"steps": 2, "save_every": 2})
    train(straight, sdft.SDFT(straight, _domain(pool=pool_path.parent)), TASKS, single_turn(_score), tiny_model_dir,
          tmp_path / "a")
    first = _cfg(train={"steps": 1, "save_every": 1})
    train(first, sdft.SDFT(first, _domain(pool=pool_path.parent)), TASKS, single_turn(_score), tiny_model_dir,
          tmp_path / "b")
    train(straight, sdft.SDFT(straight, _domain(pool=pool_path.parent)), TASKS, single_turn(_score), tiny_model_dir,
          tmp_path / "b")
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- bad configuration and inputs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,message", [
    ({"sdpo": {"group_size": 1}}, "sdpo.group_size: must be >= 2"),
    ({"sdpo": {"support": "both"}}, "sdpo.support: 'both' is not student or teacher"),
    ({"sdft": {"ema_rate": 0}}, "sdft.ema_rate: must be in (0, 1]"),
    ({"skill_sd": {"group_size": 3}}, "must be a multiple of skill_sd.group_size (3)"),
    ({"opsd": {"steps": -1}}, "opsd.steps: must be >= 1 or null"),
    ({"baseline_methods": ["vanilla", "sdpx"]}, "baseline_methods: unknown baseline 'sdpx'"),
])
def test_bad_baseline_config_is_a_one_line_error(raw, message):
    with pytest.raises(ConfigError) as err:
        resolve(raw)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_empty_pool_stops_sdft_and_opsd_with_a_clear_error(tiny_model_dir, tmp_path):
    write_pool(tmp_path / POOL_FILE, [], {})
    with pytest.raises(ValueError, match="oracle pool is empty"):
        load_pool(tmp_path / POOL_FILE)
    with pytest.raises(MethodInputError, match="opsd: .*oracle pool is empty"):
        train(_cfg(), opsd.OPSD(_cfg(), _domain(pool=tmp_path)), TASKS, single_turn(_score), tiny_model_dir,
              tmp_path / "x")
    with pytest.raises(MethodInputError, match="run the build_pool stage"):
        train(_cfg(), sdft.SDFT(_cfg(), _domain(pool=tmp_path / "none")), TASKS, single_turn(_score), tiny_model_dir,
              tmp_path / "y")


DEMO = {"task_id": "t0", "task": "task", "text": "```python\nprint(0)\n```", "source": REFERENCE_SOLUTION}


@pytest.mark.parametrize("lines, message", [
    (["[1, 2]"], r"line 1 is a JSON array, not an object"),
    (['"x"'], r"line 1 is a JSON string, not an object"),
    (['{"pool_version": 1}', json.dumps(DEMO), "[]"], r"line 3 is a JSON array, not an object"),
    (['{"pool_version": 1}', json.dumps({**DEMO, "text": None})],
     r"line 2: not a valid oracle pool entry: field 'text' must be a string, got null"),
    (['{"pool_version": 1}', json.dumps({**DEMO, "task_id": 7})], r"line 2: .*field 'task_id' must be a string"),
])
def test_a_malformed_pool_is_a_one_line_error_naming_file_line_and_field(tmp_path, lines, message):
    path = tmp_path / POOL_FILE
    path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: {message}") as err:
        load_pool(path)
    assert "\n" not in str(err.value)
    path.write_bytes(b'{"pool_version": 1}\n\xff\n')
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: line 2: not UTF-8 text"):
        load_pool(path)
