"""Stage CLIs turn bad input into a one-line error instead of a traceback (each a process of its own, forked from one
that imported torch and transformers once: tests/pyfork.py; the smoke DAG runs every stage as DVC does)."""

import os

import numpy as np
import pytest
from pyfork import python

from lopd.core.config import REPO_ROOT

# MLflow off (its import and store cost ~2.5 s a stage): these are the stages' own errors. One test keeps it on, for
# an error raised after the stage's MLflow run has started.
NO_MLFLOW = {**os.environ, "LOPD_MLFLOW_URI": "off"}


def _run_stage(module, *args, env=NO_MLFLOW):
    return python(["-m", module, *args], cwd=REPO_ROOT, env=env)


def test_unknown_param_is_a_one_line_error(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text(_params(tmp_path).read_text().replace("train:\n  steps:", "train:\n  stpes:", 1))
    proc = _run_stage("pipelines.train", "--params", str(params), "--method", "grpo")
    assert proc.returncode != 0
    assert proc.stderr.strip() == f"error: {params}: unknown key 'train.stpes'"


def test_missing_training_data_file_is_a_one_line_error(tmp_path):
    params = _params(tmp_path, f"data.taco_path={tmp_path / 'nope.jsonl'}")
    proc = _run_stage("pipelines.train", "--params", str(params), "--method", "grpo", env=None)
    last = _error(proc)  # after the stage's MLflow run started (and ended FAILED)
    assert last.startswith("error: training tasks:") and "nope.jsonl" in last


def _run_isolated(module, root, *args):
    """`python -m module args` with the base model and every domain's stage outputs under `root` instead of the
    repository's (pipelines.common's paths are repointed before the stage module is imported)."""
    code = ("import dataclasses, runpy, sys; from pathlib import Path; import pipelines.common as c\n"
            "root = Path(sys.argv.pop(1))\n"
            "c.BASE_MODEL_DIR = root / 'models' / 'base'\n"
            "for name, d in list(c.DOMAINS.items()):\n"
            "    c.DOMAINS[name] = dataclasses.replace(d, **{f: root / name / f for f in\n"
            "        ('bank', 'pool', 'composer', 'checkpoints', 'metrics', 'results', 'plots')})\n"
            "c.BANK_DIR, c.POOL_DIR, c.COMPOSER_DIR = (c.DOMAINS['code'].bank, c.DOMAINS['code'].pool,\n"
            "                                          c.DOMAINS['code'].composer)\n"
            "c.CHECKPOINTS_DIR, c.METRICS_DIR, c.RESULTS_DIR, c.PLOTS_DIR = (\n"
            "    c.DOMAINS['code'].checkpoints, c.DOMAINS['code'].metrics, c.DOMAINS['code'].results,\n"
            "    c.DOMAINS['code'].plots)\n"
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
    return python(["-c", code, str(root), *args], cwd=REPO_ROOT, env=NO_MLFLOW)


def _params(tmp_path, *overrides):
    """A complete params file, as `dvc exp run -S profile=smoke -S <override>...` composes it from conf/."""
    from dvc.utils.hydra import compose_and_dump

    from lopd.core.config import CONF_DIR

    path = tmp_path / "params.yaml"
    compose_and_dump(path, str(CONF_DIR), None, "config", str(tmp_path), ["profile=smoke", *overrides])
    return path


def _error(proc):
    """The one-line error a failed stage ended with (MLflow may log INFO lines before it; no traceback)."""
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


def _files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_empty_taco_file_stops_build_bank_before_it_writes_anything(tmp_path):
    root, empty = tmp_path / "root", tmp_path / "empty.jsonl"
    (root / "code" / "bank").mkdir(parents=True)
    (root / "code" / "bank" / "experience.jsonl").write_text("the previous bank\n")
    empty.write_text("\n")
    params = _params(tmp_path, f"data.taco_path='{empty}'")
    before = _files(root)
    proc = _run_isolated("pipelines.build_bank", root, "--params", str(params))
    assert _error(proc) == f"error: training tasks: {empty}: no TACO records in the file"
    assert _files(root) == before


def test_a_missing_base_model_is_a_one_line_error_in_every_stage_that_reads_it(tmp_path):
    from lopd.latent.bank import write_bank
    from lopd.latent.retrieval import BANK_FILE, DOCUMENTS_FILE, QUERIES_FILE, save_vectors

    root, params = tmp_path / "root", _params(tmp_path)
    expected = f"{root / 'models' / 'base'}: model not found (for the base model run: dvc repro prepare_model)"
    proc = _run_isolated("pipelines.build_bank", root, "--params", str(params))
    assert _error(proc) == f"error: build_bank: {expected}" and not (root / "code" / "bank").exists()
    proc = _run_isolated("pipelines.train", root, "--params", str(params), "--method", "grpo")
    assert _error(proc) == f"error: {expected}"
    bank = root / "code" / "bank"  # an (empty) bank, so that cold_start gets as far as the model
    write_bank(bank / BANK_FILE, [], {})
    for name in (DOCUMENTS_FILE, QUERIES_FILE):
        save_vectors(bank / name, [], np.zeros((0, 4)))
    proc = _run_isolated("pipelines.cold_start", root, "--params", str(params))
    assert _error(proc) == f"error: cold_start: {expected}"
    # vanilla's checkpoint is the base model itself: evaluating it must say so before loading anything
    assert _run_isolated("pipelines.train", root, "--params", str(params), "--method", "vanilla").returncode == 0
    proc = _run_isolated("pipelines.evaluate", root, "--params", str(params), "--method", "vanilla")
    assert _error(proc) == f"error: {expected}"


@pytest.mark.parametrize("module, args, checkpoint, stage", [
    ("pipelines.evaluate", [], "code/checkpoints/grpo", "train@grpo"),
    ("pipelines.evaluate_agentic", [], "agentic/checkpoints/grpo", "train_agentic@grpo"),
])
def test_a_missing_checkpoint_is_a_one_line_error_naming_it_and_its_stage(tmp_path, module, args, checkpoint, stage):
    root, params = tmp_path / "root", _params(tmp_path)
    proc = _run_isolated(module, root, "--params", str(params), "--method", "grpo", *args)
    assert _error(proc) == f"error: {root / checkpoint}: no checkpoint here (run: dvc repro {stage})"
    assert not root.exists()


def test_a_bank_with_a_non_object_header_stops_build_pool_before_it_writes(tmp_path):
    root, params = tmp_path / "root", _params(tmp_path)
    (root / "code" / "bank").mkdir(parents=True)
    (root / "code" / "bank" / "experience.jsonl").write_text("[1, 2]\n")
    proc = _run_isolated("pipelines.build_pool", root, "--params", str(params))
    assert _error(proc) == (f"error: build_pool: {root / 'code' / 'bank' / 'experience.jsonl'}: "
                            "line 1 is a JSON array, not an object")
    assert not (root / "code" / "pool").exists()


def test_a_corrupt_pool_stops_training_without_leaving_a_checkpoint_folder(tmp_path, tiny_model_dir):
    root, params = tmp_path / "root", _params(tmp_path)
    (root / "models").mkdir(parents=True)
    (root / "models" / "base").symlink_to(tiny_model_dir)
    (root / "code" / "pool").mkdir(parents=True)
    (root / "code" / "pool" / "oracle.jsonl").write_text('{"task_id": "t0", "solu')  # cut off mid-write
    proc = _run_isolated("pipelines.train", root, "--params", str(params), "--method", "sdft")
    assert _error(proc).startswith(f"error: sdft: {root / 'code' / 'pool' / 'oracle.jsonl'}")
    assert list((root / "code" / "checkpoints").iterdir()) == []


def test_livecodebench_without_a_release_is_n_a_naming_the_path_and_with_one_it_is_scored(tmp_path, tiny_model_dir):
    import json

    from test_livecodebench import CALL, STDIN, _write

    root = tmp_path / "root"
    params = _params(tmp_path, "data.livecodebench_path=nowhere/lcb", "benchmarks=[lcb_v5,lcb_v6]")
    # no base model either: an evaluation with no benchmark's data loads nothing
    proc = _run_isolated("pipelines.evaluate", root, "--params", str(params), "--method", "vanilla")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((root / "code" / "results" / "eval" / "vanilla" / "lcb_v5.json").read_text())["summary"]
    assert summary["n_tasks"] == 0 and summary["note"].startswith("n/a: no LiveCodeBench release at nowhere/lcb")
    metrics = json.loads((root / "code" / "metrics" / "eval" / "vanilla.json").read_text())
    assert metrics == {"eval@vanilla": {"lcb_v5": {"n_tasks": 0}, "lcb_v6": {"n_tasks": 0}}}

    release = _write(tmp_path / "test6.jsonl", [STDIN, CALL])
    params = _params(tmp_path, f"data.livecodebench_path={release}", "benchmarks=[lcb_v6]")
    (root / "models").mkdir(parents=True)
    (root / "models" / "base").symlink_to(tiny_model_dir)
    assert _run_isolated("pipelines.train", root, "--params", str(params), "--method", "vanilla").returncode == 0
    proc = _run_isolated("pipelines.evaluate", root, "--params", str(params), "--method", "vanilla")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((root / "code" / "results" / "eval" / "vanilla" / "lcb_v6.json").read_text())
    assert list(result["per_task"]) == ["leet-1"] and result["summary"]["n_tasks"] == 1  # only v6's window
    assert result["per_task"]["leet-1"]["plus"] == [False]  # a random model does not solve it
    assert result["summary"]["protocol"].startswith("livecodebench-chat")


def test_a_read_only_plots_folder_stops_training_before_it_replaces_anything(tmp_path, tiny_model_dir, read_only):
    root, params = tmp_path / "root", _params(tmp_path)
    (root / "models").mkdir(parents=True)
    (root / "models" / "base").symlink_to(tiny_model_dir)
    for name, text in (("checkpoints/grpo/manifest.json", "{}"), ("metrics/train/grpo.json", "{}"),
                       ("plots/train/grpo.json", "[]"), ("plots/validation/grpo.json", "[]")):
        (root / "code" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "code" / name).write_text(text)
    read_only(root / "code" / "plots" / "validation")
    before = _files(root / "code")
    proc = _run_isolated("pipelines.train", root, "--params", str(params), "--method", "grpo")
    assert _error(proc).startswith(f"error: {root / 'code' / 'plots' / 'validation'}: cannot write here")
    assert _files(root / "code") == before
