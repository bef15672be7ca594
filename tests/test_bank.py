"""Experience bank and retriever: success filter, the evaluation-overlap guard, exact cosine retrieval
without self-retrieval, and the embedded MiniLM embedder."""

import json
import re
from dataclasses import asdict

import numpy as np
import pytest

from lopd.core.trajectory import Trajectory, Turn
from lopd.latent.bank import BankEntry, check_no_eval_overlap, episode_turns, read_bank, successful_entries, write_bank
from lopd.latent.retrieval import BANK_FILE, EMBEDDED_MINILM, Retriever, TextEmbedder, load_bank


def _rollout(task_id, response, reward, action_ids=(7, 8)):
    turn = Turn([1, 2, 3], list(action_ids), [-0.5] * len(action_ids))
    return task_id, f"task {task_id}", Trajectory(task_id, [turn], reward=reward, response=response)


def test_successful_entries_keeps_successes_once_per_distinct_trace():
    rollouts = [_rollout("a", "```python\nx=1\n```", 1.0, (5,)), _rollout("a", "```python\nx=1\n```", 1.0),
                _rollout("a", "```python\nx=2\n```", 1.0, (6, 9)), _rollout("b", "bad", 0.0), _rollout("c", "ok", 0.5)]
    entries = successful_entries(rollouts, threshold=1.0, trace_of=lambda r: r.strip("`python\n"))
    assert [(e.task_id, e.trace, e.turns) for e in entries] == [("a", "x=1", [[[], [5]]]), ("a", "x=2", [[[], [6, 9]]])]
    assert [e.task_id for e in successful_entries(rollouts, threshold=0.5, trace_of=str)] == ["a", "a", "c"]


def _entry(task_id, task="Reverse a list of integers and print it."):
    return BankEntry(task_id, task, "print(x[::-1])", "```python\nprint(x[::-1])\n```", 1.0, [[[], [11, 12]]])


def test_an_entry_keeps_the_episode_after_its_prompt_and_trains_only_on_actions():
    """Multi-turn: the prompt is dropped, the environment's tokens are kept as (masked) context."""
    episode = Trajectory("t", [Turn([1, 2, 3], [10, 11], [-0.1, -0.2]), Turn([50, 51, 52], [12], [-0.3]),
                               Turn([53], [13, 14], [-0.4, -0.5])], reward=1.0)
    turns = episode_turns(episode)
    assert turns == [[[], [10, 11]], [[50, 51, 52], [12]], [[53], [13, 14]]]
    replayed = BankEntry("t", "task", "trace", "text", 1.0, turns).episode()
    assert replayed.token_ids == [10, 11, 50, 51, 52, 12, 53, 13, 14]
    assert replayed.action_mask == [1, 1, 0, 0, 0, 1, 0, 1, 1]


@pytest.mark.parametrize("turns, message", [
    ([], "non-empty array"), ([[[], [1]], [[2]]], "pairs"), ([[[1], [2]]], "first turn's context must be empty"),
    ([[[], [1, "2"]]], "integer token ids"), ([[[], [True]]], "integer token ids"), ([[[], 3]], "integer token ids"),
])
def test_malformed_turns_are_rejected(turns, message):
    with pytest.raises(ValueError, match=message):
        BankEntry("t", "task", "trace", "text", 1.0, turns)


EVAL = {"HumanEval/0": "def has_close_elements(numbers, threshold):\n    \"\"\" Check if in given list of numbers, "
                       "are any two numbers closer to each other than given threshold.\"\"\""}


def test_eval_overlap_guard_rejects_eval_tasks_and_accepts_training_tasks():
    check_no_eval_overlap([_entry("builtin/1")], {"builtin/1"}, EVAL)
    with pytest.raises(ValueError, match="not a training task"):
        check_no_eval_overlap([_entry("HumanEval/0")], {"builtin/1"}, EVAL)
    with pytest.raises(ValueError, match="is an evaluation task id"):
        check_no_eval_overlap([_entry("HumanEval/0")], {"HumanEval/0"}, EVAL)
    smuggled = _entry("builtin/2", task="Solve this:\n" + EVAL["HumanEval/0"] + "\nAnswer in Python.")
    with pytest.raises(ValueError, match="overlaps evaluation task 'HumanEval/0'"):
        check_no_eval_overlap([smuggled], {"builtin/2"}, EVAL)


def test_bank_file_round_trips_and_bad_files_give_one_line_errors(tmp_path):
    entries = [_entry("t1"), _entry("t2")]
    write_bank(tmp_path / "bank.jsonl", entries, {"model": "tiny"})
    got, meta = read_bank(tmp_path / "bank.jsonl")
    assert got == entries and meta["model"] == "tiny"
    (tmp_path / "bad.jsonl").write_text('{"bank_version": 2}\n{"task_id": 3}\n')
    with pytest.raises(ValueError, match="not a valid experience bank") as err:
        read_bank(tmp_path / "bad.jsonl")
    assert "\n" not in str(err.value)
    with pytest.raises(FileNotFoundError, match="build_bank"):
        read_bank(tmp_path / "missing.jsonl")


GOOD_LINE = json.dumps(asdict(_entry("t1")))


@pytest.mark.parametrize("lines, message", [
    (["[1, 2]"], r"line 1 is a JSON array, not an object"),
    (['"x"'], r"line 1 is a JSON string, not an object"),
    (["3"], r"line 1 is a JSON number, not an object"),
    ([], r"not a valid experience bank \(empty, no header line\)"),
    (['{"bank_version": 1}'], r"line 1: not a valid experience bank header \(bank_version 1, expected 2\)"),
    (['{"bank_version": 2}', GOOD_LINE, "null"], r"line 3 is a JSON null, not an object"),
    (['{"bank_version": 2}', GOOD_LINE, "{oops"], r"line 3 is not valid JSON"),
    (['{"bank_version": 2}', json.dumps({**asdict(_entry("t1")), "task": 123})],
     r"line 2: not a valid experience bank entry: field 'task' must be a string, got number"),
    (['{"bank_version": 2}', json.dumps({**asdict(_entry("t1")), "reward": "1"})],
     r"line 2: .*field 'reward' must be a number, got string"),
    (['{"bank_version": 2}', json.dumps({**asdict(_entry("t1")), "reward": True})],
     r"line 2: .*field 'reward' must be a number, got boolean"),
    (['{"bank_version": 2}', "", json.dumps({k: v for k, v in asdict(_entry("t1")).items() if k != "trace"})],
     r"line 3: .*missing field 'trace'"),
    (['{"bank_version": 2}', json.dumps({**asdict(_entry("t1")), "extra": 1})], r"line 2: .*unknown field 'extra'"),
    (['{"bank_version": 2}', json.dumps({**asdict(_entry("t1")), "turns": [[[5], [6]]]})],
     r"line 2: not a valid experience bank entry: field 'turns': the first turn's context must be empty"),
])
def test_malformed_bank_lines_are_one_line_errors_naming_file_line_and_field(tmp_path, lines, message):
    path = tmp_path / "bank" / BANK_FILE
    path.parent.mkdir()
    path.write_text("".join(line + "\n" for line in lines))
    for read in (lambda: read_bank(path), lambda: load_bank(path.parent, self_retrieval=False)):
        with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: {message}") as err:
            read()
        assert "\n" not in str(err.value)


def test_a_bank_that_is_not_utf8_is_a_one_line_error_naming_file_and_line(tmp_path):
    path = tmp_path / "bank.jsonl"
    path.write_bytes(b'{"bank_version": 2}\n' + GOOD_LINE.encode() + b"\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"bank.jsonl: line 3: not UTF-8 text"):
        read_bank(path)


def test_integer_rewards_read_back_as_floats(tmp_path):
    path = tmp_path / "bank.jsonl"
    path.write_text('{"bank_version": 2}\n' + json.dumps({**asdict(_entry("t1")), "reward": 1}) + "\n")
    (entry,), _ = read_bank(path)
    assert entry == _entry("t1") and isinstance(entry.reward, float)


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_retrieval_is_exact_cosine_top_n_without_the_query_task():
    rng = np.random.default_rng(0)
    docs = _unit(rng, 12, 8)
    owners = [f"t{i % 5}" for i in range(12)]
    queries = {f"t{i}": _unit(rng, 1, 8)[0] for i in range(5)}
    retriever = Retriever(docs, owners, queries)
    for task, q in queries.items():
        ranked = sorted(range(12), key=lambda i: -float(docs[i] @ q))
        want = [i for i in ranked if owners[i] != task][:3]
        assert retriever.retrieve(task, 3) == want
    with_self = Retriever(docs, owners, queries, self_retrieval=True)
    assert with_self.retrieve("t0", 3) == sorted(range(12), key=lambda i: -float(docs[i] @ queries["t0"]))[:3]
    assert len(retriever.retrieve("t0", 50)) == sum(o != "t0" for o in owners)
    with pytest.raises(KeyError, match="no cached query embedding"):
        retriever.retrieve("unknown", 3)


def test_an_empty_bank_retrieves_nothing():
    retriever = Retriever(np.zeros((0, 4), np.float32), [], {"t": np.ones(4, np.float32) / 2})
    assert retriever.retrieve("t", 3) == []


def test_embedded_minilm_gives_unit_vectors_that_rank_related_text_first():
    embedder = TextEmbedder(EMBEDDED_MINILM)
    vecs = embedder.embed(["Sort a list of numbers in ascending order.", "Order an array of integers from smallest "
                           "to largest.", "The weather in Paris is sunny today."])
    assert vecs.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=2e-4)  # rounded to VECTOR_GRID: 2^-17 * 384^0.5 at most
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.2


def test_round_vectors_matches_a_brute_force_rounding():
    """Each component goes to the nearest multiple of VECTOR_GRID, a tie to the even multiple, -0.0 to 0.0, exactly
    (reference: exact rationals)."""
    from fractions import Fraction

    from lopd.latent.retrieval import VECTOR_GRID, round_vectors

    steps = 1 / VECTOR_GRID

    def reference(x: float) -> float:
        return float(Fraction(round(Fraction(x) * Fraction(steps)), int(steps)))  # round() on a Fraction: half to even

    g = VECTOR_GRID
    edges = [0.0, -0.0, 1.0, -1.0, 1 - g / 2, -1 + g / 2, 2.5 * g, 3.5 * g, -2.5 * g, -3.5 * g, g / 2, -g / 2,
             0.4 * g, -0.4 * g, 2.5 * g + 1e-12, 2.5 * g - 1e-12, 0.1, -0.3333333333333333]
    values = np.array([*edges, *np.random.default_rng(0).uniform(-1, 1, 2000)])
    rounded = round_vectors(values.reshape(-1, 2))
    assert rounded.dtype == np.float32 and rounded.shape == (len(values) // 2, 2)
    assert rounded.ravel().tobytes() == np.array([reference(x) for x in values], dtype=np.float32).tobytes()


def test_saved_vectors_are_the_same_bytes_whenever_they_are_written(tmp_path, monkeypatch):
    """A member of an .npz carries a date: were it the time of writing, a rebuilt bank would get another hash."""
    import time

    from lopd.latent.retrieval import load_vectors, save_vectors

    ids, vectors = ["t1", "task/22"], np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    save_vectors(tmp_path / "a.npz", ids, vectors)
    monkeypatch.setattr(time, "time", lambda: 2e9)  # another day
    save_vectors(tmp_path / "b.npz", ids, vectors)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    got_ids, got = load_vectors(tmp_path / "b.npz")
    assert got_ids == ids and got.dtype == np.float32 and np.array_equal(got, vectors)


def test_the_stored_embeddings_are_the_same_bytes_at_any_thread_count_batch_size_and_matmul_kernel(tmp_path):
    """The bank's vectors do not follow the CPU's float kernels: embedded on 2 threads in batches of 32, and on 1 thread
    in batches of 5 with float32 products sent to oneDNN (other padding, blocking and kernels), the files are equal."""
    import torch

    from lopd.latent.retrieval import save_vectors

    texts = [f"Instruct: retrieve a solved problem\nQuery: {'Given a list of integers, ' * (1 + i % 7)}return the "
             f"{['sum', 'maximum', 'sorted order', 'median'][i % 4]} of item {i}." for i in range(20)]
    embedder = TextEmbedder(EMBEDDED_MINILM)
    threads, precision = torch.get_num_threads(), torch.backends.mkldnn.matmul.fp32_precision
    try:
        torch.set_num_threads(2)
        save_vectors(tmp_path / "a.npz", range(len(texts)), embedder.embed(texts))
        torch.set_num_threads(1)
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"  # oneDNN's kernels (float32 on a CPU without AMX)
        embedder.batch_size = 5
        save_vectors(tmp_path / "b.npz", range(len(texts)), embedder.embed(texts))
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.matmul.fp32_precision = precision
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
