"""Cold start and LOPD training on the tiny model through the shared loop."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from lopd.core.adapters import is_lora
from lopd.core.checkpoint import load as load_checkpoint
from lopd.core.checkpoint import policy_dir
from lopd.core.config import resolve
from lopd.core.domain import Domain
from lopd.core.loop import MethodInputError, train
from lopd.core.methods import MethodContext
from lopd.core.models import load_tokenizer
from lopd.core.rollout import Task, single_turn
from lopd.latent import cold_start as cold_start_module
from lopd.latent.bank import BankEntry, task_text, write_bank
from lopd.latent.cold_start import COMPOSER_FILE, PROGRESS_FILE, build_composer, cold_start
from lopd.latent.composer import FRAMINGS, compose
from lopd.latent.config import LOPDConfig
from lopd.latent.method import LOPD
from lopd.latent.retrieval import BANK_FILE, DOCUMENTS_FILE, QUERIES_FILE, save_vectors

TASKS = [Task(f"t{i}", [{"role": "system", "content": "You are an expert Python programmer."},
                        {"role": "user", "content": f"Print the number {i} times two."}]) for i in range(6)]


def _score(tasks, completions):
    return [float(len(c) % 2) for c in completions]


def _cfg(**overrides):
    """The smoke profile's, with no task held out of the cold start unless asked (tests/test_privilege.py)."""
    raw = {"profile": "smoke", "train": {"steps": 2, "save_every": 1}, **overrides}
    raw["cold_start"] = {"held_out_tasks": 0, **raw.get("cold_start", {})}
    return resolve(raw)


@pytest.fixture(scope="module")
def bank_dir(tmp_path_factory, write_seeded_bank):
    """Four entries from four tasks, with seeded random unit vectors standing in for embeddings."""
    entries = [BankEntry(t.task_id, task_text(t.messages), f"print({i} * 2)", f"```python\nprint({i} * 2)\n```", 1.0,
                         [[[], [20 + i, 21, 22, 23]]]) for i, t in enumerate(TASKS[:4])]
    return write_seeded_bank(tmp_path_factory.mktemp("bank"), entries, TASKS)


@pytest.fixture(scope="module")
def composer_dir(tiny_model_dir, bank_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("composer")
    cfg = _cfg(cold_start={"steps": 0})
    cold_start(cfg, tiny_model_dir, bank_dir, TASKS, out, FRAMINGS["code"])
    return out


def test_cold_start_lowers_nll_and_saves_phi0(tiny_model_dir, bank_dir, tmp_path):
    cfg = _cfg(cold_start={"steps": 8, "batch_size": 4, "lr": 1e-3})
    result = cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path, FRAMINGS["code"])
    s = result["summary"]
    assert s["n_examples"] == 4 and len(result["history"]) == 8
    assert s["nll_after"] < s["nll_before"] - 0.05
    assert sorted(p.name for p in tmp_path.iterdir()) == [COMPOSER_FILE]


def test_lopd_anchors_the_tasks_it_trains_on_to_phi0s_latents(tiny_model_dir, bank_dir, tmp_path):
    """c_phi0 is composed when a task first comes up, by phi_0 even once phi has trained: the same latents as phi_0
    composing that task's retrieved entries on its own."""
    cold = tmp_path / "composer"
    cold_start(_cfg(cold_start={"steps": 2, "batch_size": 4, "lr": 1e-3}), tiny_model_dir, bank_dir, TASKS, cold,
               FRAMINGS["code"])
    cfg = _cfg(train={"steps": 2, "rollouts_per_step": 4})
    method = _method(cfg, bank_dir, cold)
    train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / "run")
    phi0 = torch.load(cold / COMPOSER_FILE)
    assert any(not torch.equal(phi0[k], v) for k, v in method.composer.trainable_state().items()), "phi trained"
    reference, _ = build_composer(cfg, tiny_model_dir)
    reference.load_trainable_state(phi0)
    assert 4 <= len(method.anchors) <= 6
    for task_id, anchor in method.anchors.items():
        task = next(t for t in TASKS if t.task_id == task_id)
        assert len(anchor["entries"]) == cfg.n_ret and int(task_id[1:]) not in anchor["entries"]  # entry i: task t{i}
        with torch.no_grad(), method.accelerator.autocast():  # the smoke profile's bf16
            (expected,) = compose(reference, [task_text(task.messages)],
                                  [[method.bank[i].trace for i in anchor["entries"]]])
        assert torch.equal(anchor["latents"], expected.float())


def test_cold_start_target_is_the_entrys_actions_with_environment_tokens_masked(tiny_model_dir):
    """The cold start's objective (latent_nlls, per entry) against a brute-force reference: one full forward per entry
    over prompt + latents + every turn, the NLL averaged over the action tokens only (the environment's tokens are
    read, never scored)."""
    from accelerate import Accelerator

    from lopd.latent.composer import compose, teacher_prompt_ids
    from lopd.latent.privilege import latent_nlls

    cfg = _cfg()
    composer, tokenizer = build_composer(cfg, tiny_model_dir)
    bank = [BankEntry("t0", task_text(TASKS[0].messages), "ask() -> 3", "ask() -> 3", 1.0,
                      [[[], [20, 21, 22]], [[50, 51, 52, 53], [23, 24]]]),
            BankEntry("t1", task_text(TASKS[1].messages), "print(2)", "print(2)", 1.0, [[[], [25, 26]]])]
    retrieved = [[1], [0]]
    with torch.no_grad():
        got = latent_nlls(composer, tokenizer, bank, retrieved, bank, TASKS[:2], FRAMINGS["code"],
                          Accelerator(cpu=True))
        composer.backbone.eval()
        reference = []
        for entry, idx, task in zip(bank, retrieved, TASKS):
            (latents,) = compose(composer, [entry.task], [[bank[i].trace for i in idx]])
            prompt, start = teacher_prompt_ids(tokenizer, task.messages, FRAMINGS["code"], latents.shape[0])
            ids, scored = list(prompt), []
            for context, actions in entry.turns:
                ids += context
                scored += range(len(ids), len(ids) + len(actions))
                ids += actions
            embeds = composer.backbone.get_input_embeddings()(torch.tensor([ids]))[0].clone()
            embeds[start:start + latents.shape[0]] = latents
            with composer.model.disable_adapter():
                logp = torch.log_softmax(composer.backbone(inputs_embeds=embeds[None]).logits[0].float(), -1)
            reference.append(-sum(logp[p - 1, ids[p]] for p in scored) / len(scored))
    # padded batch vs one row at a time: float32 sums in another order (scoring the environment's tokens: +0.04)
    assert got.tolist() == pytest.approx([r.item() for r in reference], abs=1e-3)


def _method(cfg, bank_dir, composer_dir):
    return LOPD(cfg, Domain.scratch("unused", bank=bank_dir, composer=composer_dir))


def test_lopd_trains_student_and_composer_with_the_dual_update(tiny_model_dir, bank_dir, composer_dir, tmp_path):
    cfg = _cfg()
    method = _method(cfg, bank_dir, composer_dir)
    result = train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / "run")
    history = result["history"]
    beta = cfg.section(LOPDConfig).beta_init
    for h in history:  # beta <- [beta + eta (m - Delta)]_+ after every step, Delta measured on the step
        assert h["beta"] == pytest.approx(beta)
        beta = max(0.0, beta + cfg.section(LOPDConfig).dual_lr * (cfg.margin - h["privilege_margin"]))
        assert h["beta_next"] == pytest.approx(beta)
        assert h["distill_loss"] >= 0 and h["method_grad_norm"] > 0
    assert history[0]["anchor"] == 0.0 and history[1]["anchor"] > 0  # phi moved away from phi_0 after step 1
    start = torch.load(composer_dir / COMPOSER_FILE)
    now = method.composer.trainable_state()
    assert any(not torch.equal(start[k], now[k]) for k in start), "the composer must train"
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    teacher = method.composer.backbone.state_dict()
    assert all(torch.equal(base[k], teacher[k]) for k in base if k in teacher), "the teacher backbone stays frozen"
    student = load_file(str(policy_dir(tmp_path / "run", tiny_model_dir) / "model.safetensors"))
    assert any(not torch.equal(base[k], student[k]) for k in base)
    # the latent-decoding case study reads this trained composer, and phi_0 only when LOPD has not trained
    from lopd.latent.context import trained_composer
    decoded, _, source = trained_composer(cfg, tiny_model_dir, composer_dir, tmp_path / "run")
    assert source.startswith("LOPD after 2 steps")
    assert all(torch.equal(now[k], v) for k, v in decoded.trainable_state().items())
    phi0, _, source = trained_composer(cfg, tiny_model_dir, composer_dir, tmp_path / "never-trained")
    assert source.startswith("phi_0") and all(torch.equal(start[k], v) for k, v in phi0.trainable_state().items())


def test_a_lora_student_takes_the_full_students_first_step_and_is_its_own_teacher(tiny_model_dir, bank_dir,
                                                                                    composer_dir, tmp_path):
    """`train.lora_rank`: B = 0, so step 1's rollouts, losses, margin and beta are the full fine-tune's, and so is
    the composer's update (its encoder adapter, recomputed in the backward pass, on alone); only the student's
    gradient norm differs (other parameters). The teacher and encoder are the student's own base, not a copy, and
    the checkpoint is a plain (merged) model."""
    def first_step(rank):
        cfg = _cfg(train={"steps": 1, "save_every": 1, "lora_rank": rank})
        method = _method(cfg, bank_dir, composer_dir)
        history = train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / str(rank))["history"]
        return method, {k: v for k, v in history[0].items() if not k.startswith("time_")
                        and k != "rollout_tokens_per_s"}

    (full_method, full), (lora_method, lora) = first_step(0), first_step(4)
    assert lora.pop("grad_norm") != full.pop("grad_norm")
    assert lora == full and full["distill_loss"] > 0 and full["method_grad_norm"] > 0
    phi_full, phi_lora = full_method.composer.trainable_state(), lora_method.composer.trainable_state()
    assert phi_lora.keys() == phi_full.keys() and all(torch.equal(phi_lora[k], v) for k, v in phi_full.items())
    assert is_lora(lora_method.composer.model) and not is_lora(full_method.composer.model.get_base_model())
    assert sorted(lora_method.composer.model.peft_config) == ["default", "student"]  # one base, two adapters
    merged = load_file(str(policy_dir(tmp_path / "4", tiny_model_dir) / "model.safetensors"))
    assert merged.keys() == load_file(str(tiny_model_dir / "model.safetensors")).keys()


def test_margin_zero_with_and_without_the_constraint(tiny_model_dir, bank_dir, composer_dir, tmp_path):
    """`margin: 0` alone is the literal constraint Delta >= 0 (beta rises whenever Delta < 0); with
    `lopd.margin_constraint: false` there is no constraint: beta stays 0 whatever Delta is."""
    runs = {}
    for constrained in (True, False):
        cfg = _cfg(margin=0.0, lopd={"margin_constraint": constrained, "dual_lr": 50.0})
        runs[constrained] = train(cfg, _method(cfg, bank_dir, composer_dir), TASKS, single_turn(_score),
                                  tiny_model_dir, tmp_path / str(constrained))["history"]
    deltas, beta = [h["privilege_margin"] for h in runs[True]], 0.0
    assert any(d < 0 for d in deltas), deltas  # so the literal constraint does act in this run
    for h, delta in zip(runs[True], deltas):
        beta = max(0.0, beta + 50.0 * (0.0 - delta))
        assert h["beta_next"] == pytest.approx(beta)
    assert max(h["beta_next"] for h in runs[True]) > 0  # the constraint raised beta at least once
    assert all(h["beta"] == h["beta_next"] == 0.0 for h in runs[False])


def test_lopd_resume_equals_uninterrupted_run(tiny_model_dir, bank_dir, composer_dir, tmp_path):
    straight = train(_cfg(), _method(_cfg(), bank_dir, composer_dir), TASKS, single_turn(_score), tiny_model_dir,
                     tmp_path / "a")
    one = _cfg(train={"steps": 1, "save_every": 1})
    train(one, _method(one, bank_dir, composer_dir), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "b")
    resumed = train(_cfg(), _method(_cfg(), bank_dir, composer_dir), TASKS, single_turn(_score), tiny_model_dir,
                    tmp_path / "b")
    a, b = (load_file(str(policy_dir(tmp_path / run, tiny_model_dir) / "model.safetensors")) for run in "ab")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    keys = ("beta_next", "privilege_margin", "distill_loss")
    assert [h[k] for h in straight["history"] for k in keys] == pytest.approx(
        [h[k] for h in resumed["history"] for k in keys], abs=1e-6)


def test_two_lopd_runs_of_one_config_write_the_same_bytes(tiny_model_dir, bank_dir, composer_dir, tmp_path):
    """The checkpoint holds the composer's state and β too: still no timings, so DVC re-runs nothing downstream."""
    for run in "ab":
        train(_cfg(), _method(_cfg(), bank_dir, composer_dir), TASKS, single_turn(_score), tiny_model_dir,
              tmp_path / run)
    a, b = ({p.relative_to(tmp_path / run): p.read_bytes() for p in sorted((tmp_path / run).rglob("*")) if p.is_file()}
            for run in "ab")
    assert a == b and len(a) > 3


def test_frozen_composer_keeps_phi0_and_has_no_anchor(tiny_model_dir, bank_dir, composer_dir, tmp_path):
    cfg = _cfg(lopd={"train_composer": False}, margin=0.0)
    method = _method(cfg, bank_dir, composer_dir)
    result = train(cfg, method, TASKS, single_turn(_score), tiny_model_dir, tmp_path / "frozen")
    start = torch.load(composer_dir / COMPOSER_FILE)
    assert all(torch.equal(start[k], v) for k, v in method.composer.trainable_state().items())
    assert all(h["anchor"] == 0.0 and "method_grad_norm" not in h for h in result["history"])


def test_missing_composer_is_a_clear_error(tiny_model_dir, bank_dir, tmp_path):
    with pytest.raises(MethodInputError, match="run the cold_start stage"):
        train(_cfg(), _method(_cfg(), bank_dir, tmp_path), TASKS, single_turn(_score), tiny_model_dir, tmp_path / "x")


def test_bank_growth_adds_training_successes_and_survives_resume(tiny_model_dir, tmp_path):
    """With bank.grow_during_training, successful rollouts (here: reward >= 0.5) join the bank each step."""
    from lopd.latent.retrieval import EMBEDDED_MINILM, TextEmbedder, document_text, query_text
    bank_dir, embedder = tmp_path / "bank", TextEmbedder(EMBEDDED_MINILM)
    entries = [BankEntry(t.task_id, task_text(t.messages), f"print({i} * 2)", "ok", 1.0, [[[], [30 + i, 31]]])
               for i, t in enumerate(TASKS[:3])]
    write_bank(bank_dir / BANK_FILE, entries, {})
    save_vectors(bank_dir / DOCUMENTS_FILE, [e.task_id for e in entries],
                 embedder.embed([document_text(e) for e in entries]))
    save_vectors(bank_dir / QUERIES_FILE, [t.task_id for t in TASKS],
                 embedder.embed([query_text(task_text(t.messages), "q") for t in TASKS]))
    cfg = _cfg(cold_start={"steps": 0}, bank={"grow_during_training": True, "success_threshold": 0.5})
    cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / "composer", FRAMINGS["code"])
    result = train(cfg, _method(cfg, bank_dir, tmp_path / "composer"), TASKS, single_turn(_score), tiny_model_dir,
                   tmp_path / "r")
    successes = [round(h["reward"] * cfg.train.rollouts_per_step) for h in result["history"]]
    assert [h["bank_size"] for h in result["history"]] == [3 + successes[0], 3 + sum(successes)]
    resumed = _method(cfg, bank_dir, tmp_path / "composer")
    resumed.setup(MethodContext(cfg, None, load_tokenizer(tiny_model_dir), tiny_model_dir, None, TASKS))
    resumed.load_state_dict(load_checkpoint(tmp_path / "r").state["method"])
    assert len(resumed.bank) == 3 + sum(successes) and resumed.retriever.index.ntotal == len(resumed.bank)


def test_an_empty_bank_is_warned_about_in_one_line(tiny_model_dir, composer_dir, tmp_path, capsys):
    bank_dir = tmp_path / "bank"
    write_bank(bank_dir / BANK_FILE, [], {})
    save_vectors(bank_dir / DOCUMENTS_FILE, [], np.zeros((0, 8), dtype=np.float32))
    save_vectors(bank_dir / QUERIES_FILE, [t.task_id for t in TASKS], np.eye(len(TASKS), 8, dtype=np.float32))
    cfg = _cfg()
    _method(cfg, bank_dir, composer_dir).setup(MethodContext(cfg, None, load_tokenizer(tiny_model_dir),
                                                             tiny_model_dir, None, TASKS))
    assert capsys.readouterr().out == (f"warning: {bank_dir}: the bank is empty, so the teacher reads no privileged "
                                       "context: this trains as self-distillation, not LOPD\n")


def test_cold_start_on_a_one_task_bank_retrieves_nothing_and_does_not_crash(tiny_model_dir, tmp_path):
    bank_dir = tmp_path / "bank"
    entry = BankEntry("t0", task_text(TASKS[0].messages), "print(0)", "print(0)", 1.0, [[[], [40, 41]]])
    write_bank(bank_dir / BANK_FILE, [entry], {})
    save_vectors(bank_dir / DOCUMENTS_FILE, ["t0"], np.eye(1, 4, dtype=np.float32))
    save_vectors(bank_dir / QUERIES_FILE, [t.task_id for t in TASKS], np.eye(len(TASKS), 4, dtype=np.float32))
    result = cold_start(_cfg(cold_start={"steps": 2}), tiny_model_dir, bank_dir, TASKS, tmp_path / "c",
                        FRAMINGS["code"])
    assert result["summary"]["nll_before"] == pytest.approx(result["summary"]["nll_after"])


class _Killed(Exception):
    pass


def _kill_after_saves(monkeypatch, n):
    """Make the n-th progress save raise once it has written its file, as a kill right after a step would."""
    real, saves = cold_start_module._save_progress, []

    def save_then_kill(path, state):
        real(path, state)
        saves.append(path)
        if len(saves) == n:
            raise _Killed

    monkeypatch.setattr(cold_start_module, "_save_progress", save_then_kill)


def test_cold_start_resumed_after_a_kill_equals_an_uninterrupted_run(tiny_model_dir, bank_dir, tmp_path,
                                                                     monkeypatch):
    # one task held out (its privilege measured at steps 0, 2 and 4), 2 of the other 3 entries a step: the queue
    # spans steps
    cfg = _cfg(cold_start={"steps": 4, "batch_size": 2, "lr": 1e-3, "held_out_tasks": 1, "privilege_every": 2})
    whole = cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / "whole", FRAMINGS["code"])
    begun, logged = [], []  # what the stage's MLflow run is told: which checkpoint, resumed after which step
    tracker = SimpleNamespace(begin=lambda checkpoint, step: begun.append((checkpoint, step)),
                              log_metrics=lambda metrics, step: logged.append(step))
    with monkeypatch.context() as m:
        _kill_after_saves(m, 2)
        with pytest.raises(_Killed):
            cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / "killed", FRAMINGS["code"], tracker)
    assert (tmp_path / "killed" / PROGRESS_FILE).exists() and not (tmp_path / "killed" / COMPOSER_FILE).exists()
    resumed = cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / "killed", FRAMINGS["code"], tracker)
    assert resumed["history"] == whole["history"] and len(whole["privilege_history"]) == 3
    assert resumed["privilege_history"] == whole["privilege_history"] and resumed["held_out"] == whole["held_out"]
    assert [step for _, step in begun] == [0, 2] and begun[0][0] == begun[1][0] and logged == [1, 2, 3, 4]
    assert {k: v for k, v in resumed["summary"].items() if k != "wall_s"} == \
        {k: v for k, v in whole["summary"].items() if k != "wall_s"}
    a, b = torch.load(tmp_path / "whole" / COMPOSER_FILE), torch.load(tmp_path / "killed" / COMPOSER_FILE)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "killed" / PROGRESS_FILE).exists()  # removed once phi_0 is written


def test_cold_start_does_not_resume_another_configuration_or_a_broken_file(tiny_model_dir, bank_dir, tmp_path,
                                                                           monkeypatch, capsys):
    cfg = _cfg(cold_start={"steps": 3, "batch_size": 4, "lr": 1e-3})
    fresh = cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / "fresh", FRAMINGS["code"])
    with monkeypatch.context() as m:
        _kill_after_saves(m, 1)
        with pytest.raises(_Killed):
            cold_start(_cfg(cold_start={"steps": 3, "batch_size": 4, "lr": 1e-4}), tiny_model_dir, bank_dir, TASKS,
                       tmp_path / "other", FRAMINGS["code"])
    again = cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / "other", FRAMINGS["code"])
    assert "not resuming" in capsys.readouterr().out and again["history"] == fresh["history"]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / PROGRESS_FILE).write_bytes(b"half a file")
    again = cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / "broken", FRAMINGS["code"])
    assert "unreadable" in capsys.readouterr().out and again["history"] == fresh["history"]


def test_cold_start_measures_nll_on_a_fixed_sample_when_asked(tiny_model_dir, bank_dir, tmp_path):
    cfg = _cfg(cold_start={"steps": 0, "eval_examples": 2})
    runs = [cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / str(i), FRAMINGS["code"]) for i in range(2)]
    whole = cold_start(_cfg(cold_start={"steps": 0}), tiny_model_dir, bank_dir, TASKS, tmp_path / "all",
                       FRAMINGS["code"])
    assert runs[0]["summary"]["nll_examples"] == 2 and whole["summary"]["nll_examples"] == 4
    assert runs[0]["summary"]["nll_before"] == runs[1]["summary"]["nll_before"] != whole["summary"]["nll_before"]


def test_activation_checkpointing_changes_memory_not_results(tiny_model_dir, bank_dir, tmp_path):
    runs = []
    for on in (True, False):
        cfg = _cfg(cold_start={"steps": 2, "batch_size": 4, "lr": 1e-3}, composer={"activation_checkpointing": on,
                   "max_item_tokens": 64, "qformer_layers": 2})
        runs.append(cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path / str(on), FRAMINGS["code"]))
    assert [h["nll"] for h in runs[0]["history"]] == [h["nll"] for h in runs[1]["history"]]
    a, b = torch.load(tmp_path / "True" / COMPOSER_FILE), torch.load(tmp_path / "False" / COMPOSER_FILE)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_lopd_steps_sets_its_own_budget(tiny_model_dir, bank_dir, composer_dir, tmp_path):
    cfg = _cfg(lopd={"steps": 1})
    result = train(cfg, _method(cfg, bank_dir, composer_dir), TASKS, single_turn(_score), tiny_model_dir,
                   tmp_path / "one")
    assert [h["step"] for h in result["history"]] == [1]


def test_a_truncated_composer_file_is_a_one_line_error(tiny_model_dir, bank_dir, composer_dir, tmp_path):
    import shutil

    corrupt = tmp_path / "composer"
    shutil.copytree(composer_dir, corrupt)
    data = (corrupt / COMPOSER_FILE).read_bytes()
    (corrupt / COMPOSER_FILE).write_bytes(data[:len(data) // 2])
    cfg = _cfg(train={"steps": 1})
    with pytest.raises(MethodInputError) as err:
        train(cfg, _method(cfg, bank_dir, corrupt), TASKS, single_turn(lambda t, c: [0.0] * len(c)), tiny_model_dir,
              tmp_path / "run")
    assert str(err.value).startswith(f"lopd: {corrupt / COMPOSER_FILE}: unreadable (") and "\n" not in str(err.value)
    assert not (tmp_path / "run" / "manifest.json").exists()
