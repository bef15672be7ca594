"""Checkpoints: a kill at any point of a save resumes to exactly the uninterrupted run, broken files fall back to
the previous good checkpoint, and only the same config, code and inputs resume."""

import shutil
from collections import Counter

import pytest
import torch
from safetensors.torch import load_file

from baselines.grpo import GRPO
from lopd.core import checkpoint, provenance
from lopd.core.config import resolve
from lopd.core.domain import Domain
from lopd.core.loop import train
from lopd.core.rollout import Task, single_turn

TASKS = [Task(f"t{i}", [{"role": "user", "content": f"Say something about the number {i}."}]) for i in range(6)]
STEPS = 2
SAVE_POINTS = ("save_started", "model_written", "state_written", "renamed", "manifest_written", "committed")
"""The crash points of `checkpoint.save`, in order; `pruning` (in `checkpoint.prune`) comes after them."""


class Killed(BaseException):
    """A simulated SIGKILL: a BaseException, which nothing in the save path catches."""


def _score(tasks, completions):
    """Alternates within each group whatever was sampled, so GRPO's advantages (and updates) are never zero."""
    return [float(i % 2) for i in range(len(completions))]


def _cfg(steps=STEPS, seed=0):
    # tiny (2 tasks x 2 rollouts of 2 tokens per step); dtypes and mixed precision as the smoke profile has them
    # (accelerate allows one mixed-precision setting per process, shared with the other tests)
    return resolve({"profile": "smoke", "seed": seed, "grpo": {"group_size": 2},
                    "sampling": {"max_new_tokens": 2},
                    "train": {"steps": steps, "save_every": 1, "rollouts_per_step": 4,
                              "activation_checkpointing": False}})


def _train(base, out, steps=STEPS, seed=0):
    cfg = _cfg(steps, seed)
    return train(cfg, GRPO(cfg, Domain.scratch("unused")), TASKS, single_turn(_score), base, out)


def _work(out, base):
    """Where a run of `_cfg` (any budget) publishing into `out` saves its steps until it ends."""
    cfg = _cfg()
    return checkpoint.work_dir(out, checkpoint.fingerprint(cfg, GRPO(cfg, Domain.scratch("unused")), base))


def _kill_at(monkeypatch, point, nth, error=Killed):
    """Make the `nth` pass through crash point `point` raise `error` (a kill; OSError: a full disk)."""
    calls = Counter()

    def crash(name):
        calls[name] += 1
        if name == point and calls[name] == nth:
            raise error(name)

    monkeypatch.setattr(checkpoint, "_crash_point", crash)


def _untimed(history):
    """Metric history without wall-clock timings (the only values a resumed run may not reproduce)."""
    return [{k: v for k, v in h.items() if not k.startswith("time_") and k != "rollout_tokens_per_s"} for h in history]


def _same(a, b):
    """Exact equality of nested state (tensors bit for bit)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _assert_equals_reference(out, reference):
    """`out` holds only the final checkpoint, whose weights and history equal the reference run's (the last step's
    weights depend on the AdamW state a resumed run restored) and which, finished, keeps no AdamW state; no work
    folder is left."""
    assert sorted(p.name for p in out.iterdir()) == [checkpoint.MANIFEST, checkpoint.step_name(STEPS)]
    assert not (out.parent / checkpoint.RESUME).exists()
    got, want = checkpoint.load(out), checkpoint.load(reference)
    assert got.step == STEPS
    assert _same(load_file(got.model_dir / "model.safetensors"), load_file(want.model_dir / "model.safetensors"))
    assert got.state["optimizer"] is None and want.state["optimizer"] is None
    assert _untimed(got.state["history"]) == _untimed(want.state["history"])


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory):
    """One uninterrupted run, shared by every test here."""
    out = tmp_path_factory.mktemp("reference") / "grpo"
    _train(tiny_model_dir, out)
    weights = load_file(checkpoint.load(out).model_dir / "model.safetensors")
    base = load_file(tiny_model_dir / "model.safetensors")
    assert any(not torch.equal(weights[k], base[k]) for k in base), "the run must change the weights"
    return out


@pytest.mark.parametrize("point", SAVE_POINTS)
def test_a_kill_during_a_save_resumes_to_the_uninterrupted_run(point, tiny_model_dir, reference, tmp_path,
                                                                 monkeypatch):
    out = tmp_path / "grpo"
    _kill_at(monkeypatch, point, nth=STEPS)  # during the last step's save: step 1 is committed
    with pytest.raises(Killed):
        _train(tiny_model_dir, out)
    assert checkpoint.load(_work(out, tiny_model_dir)).step == (STEPS if point == "committed" else STEPS - 1)
    assert not out.exists()  # nothing is published before the run ends
    monkeypatch.undo()
    _train(tiny_model_dir, out)
    _assert_equals_reference(out, reference)


def test_a_kill_while_pruning_old_checkpoints_is_cleaned_up_on_rerun(tiny_model_dir, reference, tmp_path,
                                                                      monkeypatch):
    out = tmp_path / "grpo"
    _kill_at(monkeypatch, "pruning", nth=STEPS + 1)  # one prune per save, then the end of the run drops step 1
    with pytest.raises(Killed):
        _train(tiny_model_dir, out)
    monkeypatch.undo()
    assert _train(tiny_model_dir, out)["history"][-1]["step"] == STEPS
    _assert_equals_reference(out, reference)


def test_a_kill_while_dropping_the_optimizer_state_leaves_a_checkpoint_the_rerun_finishes(tiny_model_dir, reference,
                                                                                          tmp_path, monkeypatch):
    out = tmp_path / "grpo"
    _kill_at(monkeypatch, "finishing", nth=1)
    with pytest.raises(Killed):
        _train(tiny_model_dir, out)
    assert checkpoint.load(_work(out, tiny_model_dir)).state["optimizer"] is not None  # the old trainer state, whole
    monkeypatch.undo()
    assert _train(tiny_model_dir, out)["history"][-1]["step"] == STEPS
    assert not list(out.glob(f"{checkpoint.TMP_PREFIX}*"))
    _assert_equals_reference(out, reference)


def test_a_kill_between_publishing_the_step_and_its_manifest_is_finished_by_the_rerun(tiny_model_dir, reference,
                                                                                      tmp_path, monkeypatch, capsys):
    """The step folder has moved into the checkpoint folder, whose manifest does not name it yet (no manifest, for a
    first run): `load` falls back to the moved folder, and the rerun commits it without training again."""
    out = tmp_path / "grpo"
    _kill_at(monkeypatch, "published", nth=1)
    with pytest.raises(Killed):
        _train(tiny_model_dir, out)
    assert sorted(p.name for p in out.iterdir()) == [checkpoint.step_name(STEPS)]
    assert checkpoint.load(out).step == STEPS
    monkeypatch.undo()
    capsys.readouterr()
    assert _train(tiny_model_dir, out)["history"][-1]["step"] == STEPS
    assert f"resuming grpo from step {STEPS}\n" in capsys.readouterr().out
    _assert_equals_reference(out, reference)


def test_finishing_drops_the_optimizer_state_reading_it_memory_mapped(tmp_path, monkeypatch):
    """The live run still holds its model and optimizer when it finishes: reading the AdamW moments into memory only
    to drop them is what had the kernel kill SDPO's and SDFT's cpu-profile runs here."""
    step_dir = tmp_path / checkpoint.step_name(3)
    step_dir.mkdir()
    moments = {"state": {0: {"exp_avg": torch.ones(4), "exp_avg_sq": torch.ones(4)}}, "param_groups": []}
    torch.save({"step": 3, "optimizer": moments, "history": [{"step": 3}], "files": {"model/x": 1}},
               step_dir / checkpoint.TRAINER_STATE)
    checkpoint.write_manifest(tmp_path, "grpo", 3, weights=f"{step_dir.name}/{checkpoint.MODEL}")
    loads = []
    real_load = torch.load
    monkeypatch.setattr(checkpoint.torch, "load", lambda *a, **kw: loads.append(kw) or real_load(*a, **kw))
    checkpoint.finish(tmp_path)
    monkeypatch.undo()
    assert [kw.get("mmap") for kw in loads] == [True]
    state = torch.load(step_dir / checkpoint.TRAINER_STATE, weights_only=True)
    assert state == {"step": 3, "optimizer": None, "history": [{"step": 3}], "files": {"model/x": 1}}


def test_a_larger_budget_retrains_a_finished_run_from_the_start(tiny_model_dir, reference, tmp_path, capsys):
    out = tmp_path / "grpo"
    shutil.copytree(reference, out)
    capsys.readouterr()
    result = _train(tiny_model_dir, out, steps=STEPS + 1)
    assert "resuming" not in capsys.readouterr().out
    assert [h["step"] for h in result["history"]] == [1, 2, 3]
    assert _untimed(result["history"][:STEPS]) == _untimed(checkpoint.load(reference).state["history"])


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_runs_of_the_same_config_write_the_same_bytes(reference, tiny_model_dir, tmp_path):
    """A finished checkpoint holds no timings: DVC sees a rerun with the same weights as unchanged, and does not
    rerun the evaluations that read it."""
    out = tmp_path / "grpo"
    result = _train(tiny_model_dir, out)
    assert _files(out) == _files(reference)
    assert all(h["time_update_s"] > 0 for h in result["history"])  # the stage's own history keeps them


def test_a_run_resumes_from_its_work_folder_after_its_checkpoint_folder_is_restored(reference, tiny_model_dir,
                                                                                    tmp_path, monkeypatch, capsys):
    """What `dvc exp run` does to a killed run of changed params: it restores the committed (other config's)
    checkpoint folder before the next try. The killed run's steps are in its work folder, which it continues."""
    out, uninterrupted = tmp_path / "grpo", tmp_path / "uninterrupted" / "grpo"
    shutil.copytree(reference, out)
    _kill_at(monkeypatch, "committed", nth=1)
    with pytest.raises(Killed):
        _train(tiny_model_dir, out, seed=1)
    monkeypatch.undo()
    assert _files(out) == _files(reference)  # the previous result stays until the new one is done
    shutil.rmtree(out)
    shutil.copytree(reference, out)  # DVC's restore
    capsys.readouterr()
    _train(tiny_model_dir, out, seed=1)
    assert "resuming grpo from step 1\n" in capsys.readouterr().out
    _train(tiny_model_dir, uninterrupted, seed=1)
    assert _files(out) == _files(uninterrupted) != _files(reference)
    assert not (out.parent / checkpoint.RESUME).exists()


def test_a_queued_experiment_keeps_its_work_folder_in_the_repository_dvc_started_in(tmp_path, monkeypatch):
    """A queued experiment runs in a copy of the repository (DVC_ROOT names the original): its work folder is the
    original's, where the next copy looks."""
    fingerprint = {"config": "c0", "code": "c1"}
    copy, original = tmp_path / "copy", tmp_path / "original"
    (copy / ".dvc").mkdir(parents=True)
    out = copy / "checkpoints" / "learn" / "grpo"
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert checkpoint.work_dir(out, fingerprint) == copy / "checkpoints" / "learn" / ".resume" / "grpo" / "c0-c1"
    monkeypatch.setenv("DVC_ROOT", str(original))
    assert checkpoint.work_dir(out, fingerprint) == original / "checkpoints" / "learn" / ".resume" / "grpo" / "c0-c1"
    outside = tmp_path / "elsewhere" / "grpo"  # not in a DVC repository: beside itself
    assert checkpoint.work_dir(outside, fingerprint) == tmp_path / "elsewhere" / ".resume" / "grpo" / "c0-c1"


@pytest.fixture(scope="module")
def interrupted(tiny_model_dir, tmp_path_factory):
    """A run killed right after committing step 2 of 3: step-000001 and step-000002 both on disk."""
    out = tmp_path_factory.mktemp("interrupted") / "grpo"
    with pytest.MonkeyPatch.context() as patch:
        _kill_at(patch, "committed", nth=STEPS)
        with pytest.raises(Killed):
            _train(tiny_model_dir, out, steps=STEPS + 1)
    work = _work(out, tiny_model_dir)
    assert sorted(p.name for p in work.glob("step-*")) == ["step-000001", "step-000002"]
    return work


def _empty_state(out):
    (out / "step-000002" / checkpoint.TRAINER_STATE).write_bytes(b"")


def _truncated_state(out):
    path = out / "step-000002" / checkpoint.TRAINER_STATE
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def _truncated_weights(out):
    path = out / "step-000002" / checkpoint.MODEL / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])


def _garbage_manifest(out):
    (out / checkpoint.MANIFEST).write_text('{"method": "grpo", "weig')


def _no_manifest(out):
    (out / checkpoint.MANIFEST).unlink()


@pytest.mark.parametrize("damage, message, resumed_from", [
    (_empty_state, "manifest.json names step-000002, which is incomplete; falling back to step-000001", 1),
    (_truncated_state, "manifest.json names step-000002, which is incomplete; falling back to step-000001", 1),
    (_truncated_weights, "manifest.json names step-000002, which is incomplete; falling back to step-000001", 1),
    (_garbage_manifest, "manifest.json is unreadable; falling back to step-000002", 2),
    (_no_manifest, "no manifest.json; falling back to step-000002", 2),
])
def test_a_damaged_checkpoint_falls_back_to_the_previous_good_one(damage, message, resumed_from, interrupted,
                                                                 tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "grpo"
    work = _work(out, tiny_model_dir)
    shutil.copytree(interrupted, work)
    damage(work)
    capsys.readouterr()
    result = _train(tiny_model_dir, out, steps=STEPS + 1)
    printed = capsys.readouterr()
    assert f"{work}: {message}\n" in printed.out and "Traceback" not in printed.out + printed.err
    assert f"resuming grpo from step {resumed_from}\n" in printed.out
    assert [h["step"] for h in result["history"]] == [1, 2, 3]
    assert sorted(p.name for p in out.iterdir()) == [checkpoint.MANIFEST, "step-000003"]


def test_with_no_good_checkpoint_left_the_run_starts_fresh(interrupted, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "grpo"
    work = _work(out, tiny_model_dir)
    shutil.copytree(interrupted, work)
    for step_dir in work.glob("step-*"):
        (step_dir / checkpoint.TRAINER_STATE).write_bytes(b"")
    capsys.readouterr()
    result = _train(tiny_model_dir, out, steps=STEPS + 1)
    printed = capsys.readouterr().out
    assert (f"{work}: manifest.json names step-000002, which is incomplete; no complete checkpoint to fall back to, "
            "starting fresh\n") in printed and "resuming" not in printed
    assert [h["step"] for h in result["history"]] == [1, 2, 3]


# --- the resume fingerprint ----------------------------------------------------------------------------------------

class GRPOWithInput(GRPO):
    """GRPO that declares an input file, standing in for bank / pool / composer readers."""

    def __init__(self, cfg, path):
        super().__init__(cfg, Domain.scratch("unused"))
        self.path = path

    def inputs(self):
        return [self.path]


def test_the_fingerprint_covers_config_code_and_inputs_but_not_budgets(tiny_model_dir, tmp_path, monkeypatch):
    cfg, data = _cfg(), tmp_path / "input.jsonl"
    data.write_text("a\n")
    method = GRPOWithInput(cfg, data)
    before = checkpoint.fingerprint(cfg, method, tiny_model_dir)
    assert checkpoint.fingerprint(_cfg(steps=9), method, tiny_model_dir) == before  # a longer budget resumes
    assert checkpoint.fingerprint(_cfg(seed=1), method, tiny_model_dir)["config"] != before["config"]
    data.write_text("b\n")
    after_input = checkpoint.fingerprint(cfg, method, tiny_model_dir)
    assert after_input["config"] == before["config"] and after_input["code"] != before["code"]
    source = tmp_path / "module.py"  # a stand-in source file in the closure: the real tree stays untouched
    source.write_text("x = 1\n")
    real = provenance.source_files
    monkeypatch.setattr(provenance, "source_files", lambda modules: [*real(modules), source])
    with_source = checkpoint.fingerprint(cfg, method, tiny_model_dir)
    source.write_text("x = 1  # edited\n")
    assert checkpoint.fingerprint(cfg, method, tiny_model_dir)["code"] != with_source["code"]


def test_the_code_closure_includes_the_train_stage_and_the_method():
    files = {p.relative_to(provenance.REPO_ROOT).as_posix()
             for p in provenance.source_files([checkpoint.STAGE_MODULE, GRPO.__module__])}
    assert {"pipelines/train.py", "lopd/core/loop.py", "lopd/core/checkpoint.py", "baselines/grpo.py"} <= files


def test_a_forced_rerun_of_a_finished_run_trains_from_step_0(reference, tiny_model_dir, tmp_path, capsys):
    """`dvc repro -f` (or `dvc exp run -f`) of a finished run: its checkpoint is there, of the same config, code and
    inputs, and is not resumed. The run trains every step again, with its timings, and publishes the same bytes."""
    out = tmp_path / "grpo"
    shutil.copytree(reference, out)
    capsys.readouterr()
    result = _train(tiny_model_dir, out)
    assert "resuming" not in capsys.readouterr().out
    assert [h["step"] for h in result["history"]] == [1, 2] and all(h["time_update_s"] > 0 for h in result["history"])
    assert _files(out) == _files(reference)
    assert not (out.parent / checkpoint.RESUME).exists()


def test_changed_code_does_not_resume_an_interrupted_run(interrupted, tiny_model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "grpo"
    shutil.copytree(interrupted, _work(out, tiny_model_dir))
    real = provenance.source_files
    edited = tmp_path / "edited.py"
    edited.write_text("# a code change\n")
    monkeypatch.setattr(provenance, "source_files", lambda modules: [*real(modules), edited])
    capsys.readouterr()
    result = _train(tiny_model_dir, out, steps=STEPS + 1)
    assert "resuming" not in capsys.readouterr().out
    assert [h["step"] for h in result["history"]] == [1, 2, 3]


def test_a_resumed_run_counts_the_training_time_before_the_interruption(interrupted, tiny_model_dir, tmp_path,
                                                                         capsys):
    """Each saved step holds the run's training time so far; a resumed run adds its own to it. A finished checkpoint
    holds none (two runs of the same weights write the same bytes)."""
    saved = [torch.load(interrupted / checkpoint.step_name(step) / checkpoint.TRAINER_STATE, weights_only=True)
             for step in (1, 2)]
    assert 0 < saved[0]["elapsed_s"] < saved[1]["elapsed_s"]
    out = tmp_path / "grpo"
    work = _work(out, tiny_model_dir)
    shutil.copytree(interrupted, work)
    state_path = work / checkpoint.step_name(2) / checkpoint.TRAINER_STATE
    torch.save({**saved[1], "elapsed_s": 1000.0}, state_path)  # as if steps 1 and 2 had taken 1000 s
    capsys.readouterr()
    result = _train(tiny_model_dir, out, steps=STEPS + 1)
    assert "resuming grpo from step 2\n" in capsys.readouterr().out
    assert result["elapsed_s"] >= 1000.0
    assert "elapsed_s" not in checkpoint.load(out).state


@pytest.mark.parametrize("nth, kept", [(1, None), (STEPS, 1)])
def test_a_failed_save_keeps_the_last_saved_step_and_a_failed_first_save_no_work_folder(nth, kept, tiny_model_dir,
                                                                                        tmp_path, monkeypatch):
    out = tmp_path / "grpo"
    _kill_at(monkeypatch, "model_written", nth, error=OSError)  # e.g. the disk fills up as step `nth` is written
    with pytest.raises(checkpoint.UnwritableOutput, match=f"cannot save step {nth} "):
        _train(tiny_model_dir, out)
    monkeypatch.undo()
    if kept is None:
        assert not (tmp_path / checkpoint.RESUME).exists()
    else:
        assert checkpoint.load(_work(out, tiny_model_dir)).step == kept


def test_policy_dir_names_the_committed_weights_and_explains_a_missing_checkpoint(reference, tmp_path):
    from transformers import AutoModelForCausalLM

    assert checkpoint.policy_dir(reference, "unused") == reference / checkpoint.step_name(STEPS) / checkpoint.MODEL
    AutoModelForCausalLM.from_pretrained(checkpoint.policy_dir(reference, "unused"))
    with pytest.raises(FileNotFoundError, match="no checkpoint here .run its train stage first."):
        checkpoint.policy_dir(tmp_path / "missing", "unused")
    checkpoint.write_manifest(tmp_path / "vanilla", "vanilla", 0, weights="base")
    assert checkpoint.policy_dir(tmp_path / "vanilla", tmp_path / "base") == tmp_path / "base"
    assert checkpoint.load(tmp_path / "vanilla") is None  # nothing to resume, nothing to complain about
    (tmp_path / "vanilla" / checkpoint.MANIFEST).write_text("{")
    with pytest.raises(ValueError, match="manifest.json: unreadable"):
        checkpoint.policy_dir(tmp_path / "vanilla", tmp_path / "base")


def test_a_checkpoint_in_the_layout_before_step_folders_starts_fresh_with_one_line(tmp_path, capsys):
    old = tmp_path / "grpo"
    (old / "model").mkdir(parents=True)
    (old / checkpoint.TRAINER_STATE).write_bytes(b"")
    checkpoint.write_manifest(old, "grpo", 3, weights="model")
    assert checkpoint.load(old) is None
    assert capsys.readouterr().out == (f"{old}: manifest.json names no step folder (a checkpoint from before them); "
                                       "no complete checkpoint to fall back to, starting fresh\n")
    assert checkpoint.load(tmp_path / "never-trained") is None and capsys.readouterr().out == ""
    (old / "step-000001" / "model").mkdir(parents=True)  # once a save commits, the old layout is removed
    checkpoint.write_manifest(old, "grpo", 1, weights="step-000001/model")
    checkpoint.prune(old, keep=2)
    assert sorted(p.name for p in old.iterdir()) == [checkpoint.MANIFEST, "step-000001"]
