"""The latent-decoding case study (paper Fig. 6): LM-head projections, example choice and the written report."""

import numpy as np
import pytest
import torch

from lopd.core.config import resolve
from lopd.core.rollout import Task
from lopd.latent.bank import BankEntry
from lopd.latent.cold_start import build_composer
from lopd.latent.composer import encoder_text, trace_text
from lopd.latent.context import trained_composer
from lopd.latent.decode import DecodedExample, csv_rows, decode_examples, markdown, pick_examples, top_tokens
from lopd.latent.retrieval import Retriever

TASKS = [Task(f"t{i}", [{"role": "user", "content": f"Print {i} squared."}]) for i in range(4)]


def test_top_tokens_are_the_largest_lm_head_logits_best_first():
    gen = torch.Generator().manual_seed(0)
    latents, head = torch.randn(5, 8, generator=gen), torch.randn(30, 8, generator=gen)
    got = top_tokens(latents, head, 3)
    for row, ids in zip(latents, got.tolist()):
        logits = [float(row @ head[v]) for v in range(30)]
        assert ids == sorted(range(30), key=lambda v: -logits[v])[:3]


def test_without_task_conditioning_the_encoder_reads_the_trace_alone():
    with_task = encoder_text("Sort a list.", "print(sorted(x))")
    assert with_task == "Task to solve:\nSort a list.\n\nReference past trajectory:\nprint(sorted(x))"
    assert trace_text("print(sorted(x))") == "Reference past trajectory:\nprint(sorted(x))"


def test_examples_pair_each_task_with_its_rank_2_retrieval():
    docs = np.eye(4, dtype=np.float32)
    queries = {"t0": np.array([1, 0.9, 0.5, 0], np.float32), "t1": np.array([0, 1, 0, 0], np.float32),
               "t2": np.array([0, 0.2, 1, 0.8], np.float32), "t3": np.array([0, 0, 0, 1], np.float32)}
    owners = ["t0", "t1", "t2", "t1"]  # t1 owns two entries, so only its other-task neighbours count for it
    retriever = Retriever(docs, owners, {k: v / np.linalg.norm(v) for k, v in queries.items()})
    picked = pick_examples(TASKS, retriever, n=10, seed=0)
    assert sorted((t.task_id, i) for t, i in picked) == sorted(
        (t.task_id, retriever.retrieve(t.task_id, 2)[1]) for t in TASKS if len(retriever.retrieve(t.task_id, 2)) == 2)
    assert pick_examples(TASKS, retriever, n=2, seed=0) == pick_examples(TASKS, retriever, n=2, seed=0)
    assert len(pick_examples(TASKS, retriever, n=2, seed=0)) == 2


def test_decoded_examples_and_their_summaries(tiny_model_dir):
    cfg = resolve({"profile": "smoke"})
    composer, tokenizer = build_composer(cfg, tiny_model_dir)
    bank = [BankEntry("t1", "Print 1 squared.", "print(1 ** 2)", "print(1 ** 2)", 1.0, [[[], [5]]])]
    (example,) = decode_examples(composer, tokenizer, [(TASKS[0], 0)], bank, top_k=4)
    assert example.retrieved_task_id == "t1" and example.retrieved_trace == "print(1 ** 2)"
    assert len(example.with_task) == len(example.without_task) == cfg.latent_tokens
    assert all(len(row) == 4 for row in example.with_task + example.without_task)
    with torch.no_grad():  # brute force: the two encodings, the head, and the summaries counted by hand
        head = composer.backbone.get_output_embeddings().weight
        # each text encoded alone (a group of one), not together as decode_examples does
        alone = [[encoder_text("Print 0 squared.", "print(1 ** 2)")], ["Reference past trajectory:\nprint(1 ** 2)"]]
        lat_with, lat_without = (group[0] for group in composer.encode(alone))
    best_with = [int(torch.argmax(head @ v)) for v in lat_with]
    best_without = [int(torch.argmax(head @ v)) for v in lat_without]
    assert [row[0] for row in example.with_task] == [tokenizer.decode([i]) for i in best_with]
    assert example.changed_by_task == pytest.approx(np.mean([a != b for a, b in zip(best_with, best_without)]))
    trace_ids = set(tokenizer("print(1 ** 2)", add_special_tokens=False)["input_ids"])
    assert example.top_in_trace == pytest.approx(np.mean([i in trace_ids for i in best_with]))


def test_report_lists_every_example_and_says_when_a_domain_has_none():
    e = DecodedExample("t0", "Print | 0.", "t1", "print(1)\nprint(2)", [["a", "b"], ["|", "c"]], [["a"], ["d"]],
                       0.5, 0.0)
    text = markdown([("code", "phi_0", [e]), ("agentic", "phi_0", [])], latent_tokens=2)
    assert "### t0 ← t1" in text and "| with task | `a` · `\\|` | 0.50 | 0.00 |" in text
    assert "print(1)⏎print(2)" in text and "## agentic" in text and "n/a: no training task" in text
    rows = csv_rows("code", [e])
    assert len(rows) == 2 * 2 + 2 and rows[0] == {"domain": "code", "task_id": "t0", "retrieved_task_id": "t1",
                                                  "condition": "with_task", "latent": 0, "rank": 1, "token": "a"}


def test_a_missing_composer_is_a_clear_error(tiny_model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="run the cold_start stage"):
        trained_composer(resolve({"profile": "smoke"}), tiny_model_dir, tmp_path / "composer", tmp_path / "lopd")
