"""The composer's privilege on held-out trajectories (lopd/latent/privilege.py): the teacher's NLL with no context,
latent context and text against a direct computation, the share of the text gap, the held-out split, and the cold
start measuring it."""

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

from lopd.core.config import resolve
from lopd.core.models import load_tokenizer
from lopd.core.rollout import Task
from lopd.latent import privilege
from lopd.latent.bank import BankEntry, task_text
from lopd.latent.cold_start import build_composer, cold_start
from lopd.latent.composer import FRAMINGS, teacher_prompt_ids
from lopd.latent.privilege import (
    HeldOut,
    held_out_task_ids,
    latent_geometry,
    reference_nlls,
    share_closed,
    share_note,
)
from lopd.latent.retrieval import load_bank

TASKS = [Task(f"t{i}", [{"role": "system", "content": "You are an expert Python programmer."},
                        {"role": "user", "content": f"Print the number {i} times two."}]) for i in range(6)]
FRAMING = FRAMINGS["code"]


def _entry(i: int, task: Task) -> BankEntry:
    turns = [[[], [20 + i, 21, 22]], [[50, 51, 52], [23 + i, 24]]] if i % 2 else [[[], [20 + i, 21, 22, 23]]]
    return BankEntry(task.task_id, task_text(task.messages), f"print({i} * 2)", f"print({i} * 2)", 1.0, turns)


@pytest.fixture(scope="module")
def bank_dir(tmp_path_factory, write_seeded_bank):
    """Five entries of four tasks (t1 twice), seeded random unit vectors standing in for embeddings."""
    entries = [_entry(i, t) for i, t in enumerate(TASKS[:4])] + [_entry(5, TASKS[1])]
    return write_seeded_bank(tmp_path_factory.mktemp("bank"), entries, TASKS)


def _cfg(**cold_start):
    return resolve({"profile": "smoke", "cold_start": {"steps": 0, **cold_start}})


def _held_out(bank_dir, task_ids, n_ret=2):
    bank, retriever = load_bank(bank_dir, self_retrieval=False)
    return bank, HeldOut.of(bank, task_ids, {t.task_id: t for t in TASKS}, retriever,
                            load_bank(bank_dir, self_retrieval=True)[1], n_ret)


def _mean(items, nlls_of):
    return float(torch.cat([nlls_of(items[i:i + 2]) for i in range(0, len(items), 2)]).mean())


def _direct_nll(model, tokenizer, messages, entry) -> float:
    """One forward over the chat-rendered prompt and every turn; the mean NLL of the action tokens alone."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(ids, add_special_tokens=False)["input_ids"]
    scored = []
    for context, actions in entry.turns:
        ids = ids + context
        scored += range(len(ids), len(ids) + len(actions))
        ids = ids + actions
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    return -float(sum(logp[p - 1, ids[p]] for p in scored)) / len(scored)


def _with_reference(messages, traces):
    before, after = FRAMING
    reference = "\n\n".join(f"Reference past trajectory:\n{t}" for t in traces)
    return [messages[0], {"role": "user", "content": f"{before}\n{reference}\n{after}\n\n{messages[1]['content']}"}]


def test_held_out_tasks_are_a_seeded_sample_of_whole_tasks_and_none_when_too_few():
    entries = [_entry(i, t) for i, t in enumerate(TASKS[:4])] + [_entry(5, TASKS[1])]
    picked = held_out_task_ids(entries, 2, seed=0)
    assert len(picked) == 2 and picked <= {"t0", "t1", "t2", "t3"}
    assert held_out_task_ids(entries, 2, seed=0) == picked
    assert {frozenset(held_out_task_ids(entries, 2, seed)) for seed in range(20)} != {frozenset(picked)}
    assert held_out_task_ids(entries, 4, seed=0) == set() == held_out_task_ids(entries, 0, seed=0)
    assert held_out_task_ids(entries, 3, seed=0) < {"t0", "t1", "t2", "t3"}


def test_share_closed_is_the_fraction_of_the_text_gap_and_none_without_one():
    assert share_closed(2.0, 1.5, 1.0) == 0.5 and share_closed(2.0, 1.0, 1.0) == 1.0
    assert share_closed(2.0, 2.5, 1.0) == -0.5  # latents worse than nothing
    assert share_closed(2.0, 1.5, 2.0) is None and share_closed(2.0, 1.5, 2.5) is None
    assert share_note(0.5) == "the latents close 50.0% of the text gap" and share_note(None).startswith("n/a: ")


def test_latent_geometry_against_a_loop_over_items_and_pairs():
    generator = torch.Generator().manual_seed(0)
    latents = [torch.randn(2 * 3, 5, generator=generator), torch.randn(3, 5, generator=generator) * 2,
               torch.zeros(0, 5)]  # two tasks of 2 and 1 items of K = 3 latents, one with nothing retrieved
    got = latent_geometry(latents, 3, embed_rms=0.5)
    rows = [x for lat in latents for x in lat.tolist()]
    rms = (sum(v * v for row in rows for v in row) / (len(rows) * 5)) ** 0.5
    cosines = []
    for lat in latents:
        for item in lat.reshape(-1, 3, 5):
            cosines += [torch.nn.functional.cosine_similarity(item[i], item[j], dim=0).item()
                        for i in range(3) for j in range(3) if i != j]
    assert got["latent_rms_ratio"] == pytest.approx(rms / 0.5, rel=1e-6)
    assert got["latent_cosine"] == pytest.approx(sum(cosines) / len(cosines), abs=1e-6)
    collapsed = latent_geometry([torch.ones(3, 5)], 3, embed_rms=1.0)
    assert collapsed == pytest.approx({"latent_rms_ratio": 1.0, "latent_cosine": 1.0})


def test_no_context_and_text_nlls_match_a_direct_computation(tiny_model_dir, bank_dir):
    """The teacher's NLL with no context and with the retrieved traces as text in the framing, against one plain
    forward of the base model per entry over its hand-built prompt and turns."""
    cfg = _cfg()
    composer, tokenizer = build_composer(cfg, tiny_model_dir)
    bank, held = _held_out(bank_dir, {"t1", "t2"})
    assert [e.task_id for e in held.entries] == ["t1", "t2", "t1"]
    assert all(4 not in r and 1 not in r for r, e in zip(held.retrieved, held.entries) if e.task_id == "t1")
    got = reference_nlls(composer, tokenizer, held, bank, FRAMING, Accelerator(cpu=True), _mean)

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    tok = load_tokenizer(tiny_model_dir)

    def direct(texts):
        return float(np.mean([_direct_nll(model, tok, task.messages if texts is None else
                                          _with_reference(task.messages, [bank[j].trace for j in texts[i]]), e)
                              for i, (e, task) in enumerate(zip(held.entries, held.tasks))]))

    assert got["n_trajectories"] == 3
    assert got["nll_none"] == pytest.approx(direct(None), abs=1e-3)
    assert got["nll_text_retrieved"] == pytest.approx(direct(held.retrieved), abs=1e-3)
    assert got["nll_text_self"] == pytest.approx(direct(held.own), abs=1e-3)
    assert got["nll_text"] == min(got["nll_text_retrieved"], got["nll_text_self"])
    assert got["text_retrieval"] == ("self" if got["nll_text_self"] < got["nll_text_retrieved"] else "retrieved")


def test_a_composer_that_copies_its_input_reads_as_text_does_and_a_random_one_does_not(tiny_model_dir, bank_dir,
                                                                                         monkeypatch):
    """Latents that are the embeddings of the traces' own text give the text's NLL (the share of the gap is 1); random
    latents at the embeddings' scale do not."""
    cfg = _cfg()
    composer, tokenizer = build_composer(cfg, tiny_model_dir)
    bank, held = _held_out(bank_dir, {"t0", "t3"})
    accelerator = Accelerator(cpu=True)
    reference = reference_nlls(composer, tokenizer, held, bank, FRAMING, accelerator, _mean)
    embed = composer.backbone.get_input_embeddings()

    def reference_ids(traces):
        return tokenizer("\n\n".join(f"Reference past trajectory:\n{t}" for t in traces),
                         add_special_tokens=False)["input_ids"]

    for entry, task, idx in zip(held.entries, held.tasks, held.retrieved):  # the premise: the text splits there
        ids = reference_ids([bank[j].trace for j in idx])
        latent_prompt, start = teacher_prompt_ids(tokenizer, task.messages, FRAMING, len(ids))
        text_prompt = privilege.text_context_prompt_ids(tokenizer, task.messages, FRAMING, [bank[j].trace for j in idx])
        assert text_prompt == latent_prompt[:start] + ids + latent_prompt[start + len(ids):]

    def copying(composer, tasks, traces):
        return [embed(torch.tensor(reference_ids(ts))).detach() for ts in traces]

    generator = torch.Generator().manual_seed(0)
    scale = embed.weight.detach().pow(2).mean().sqrt()

    def random(composer, tasks, traces):
        return [torch.randn(len(reference_ids(ts)), embed.weight.shape[1], generator=generator) * scale
                for ts in traces]

    nll = {}
    for name, fake in (("copy", copying), ("random", random)):
        monkeypatch.setattr(privilege, "compose", fake)
        nll[name] = privilege.held_out_latent_nll(composer, tokenizer, held, bank, FRAMING, accelerator, _mean)
    text = reference["nll_text_retrieved"]
    assert nll["copy"] == pytest.approx(text, abs=1e-5) and abs(nll["random"] - text) > 100 * abs(nll["copy"] - text)
    gap = reference["nll_none"] - text
    if gap > 0:  # which way text moves a random model's NLL is chance; the copy closes all of it either way
        assert share_closed(reference["nll_none"], nll["copy"], text) == pytest.approx(1)


def test_the_cold_start_never_trains_on_the_held_out_tasks_and_measures_them_every_few_steps(tiny_model_dir, bank_dir,
                                                                                              tmp_path, monkeypatch):
    trained = []
    real = privilege.latent_nlls

    def spy(composer, tokenizer, entries, *args):
        if torch.is_grad_enabled():
            trained.extend(e.task_id for e in entries)
        return real(composer, tokenizer, entries, *args)

    monkeypatch.setattr("lopd.latent.cold_start.latent_nlls", spy)
    cfg = _cfg(steps=5, batch_size=2, lr=1e-3, held_out_tasks=1, privilege_every=2)
    result = cold_start(cfg, tiny_model_dir, bank_dir, TASKS, tmp_path, FRAMING)
    held = result["held_out"]
    (task,) = held["tasks"]
    assert task not in trained and len(trained) == 10
    assert result["summary"]["n_examples"] == 5 - sum(e == task for e in ["t0", "t1", "t2", "t3", "t1"])
    assert [p["step"] for p in result["privilege_history"]] == [0, 2, 4, 5]
    assert held["nll_latent"] == result["privilege_history"][-1]["nll_latent"]
    assert result["privilege_history"][0]["nll_latent"] != held["nll_latent"]  # the composer trained
    assert held["share_closed"] == share_closed(held["nll_none"], held["nll_latent"], held["nll_text"])
    point = result["privilege_history"][-1]
    assert point["latent_rms_ratio"] > 0 and -1 <= point["latent_cosine"] <= 1
    assert all(h["grad_norm_queries"] > 0 and h["grad_norm_qformer"] > 0 for h in result["history"])
    assert {"grad_norm_encoder"} <= set(result["history"][0])

    too_many = cold_start(_cfg(held_out_tasks=4), tiny_model_dir, bank_dir, TASKS, tmp_path / "all", FRAMING)
    assert too_many["held_out"]["n_trajectories"] == 0 and "too few" in too_many["held_out"]["note"]
    assert too_many["summary"]["n_examples"] == 5 and too_many["privilege_history"] == []
