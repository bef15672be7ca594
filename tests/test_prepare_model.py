"""prepare_base_model swaps a new model in only once it loads: a failed build keeps the existing folder."""

import os

import pytest
import yaml
from pyfork import python

from lopd.core import models
from lopd.core.config import REPO_ROOT


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def existing(tiny_model_dir, tmp_path):
    """models/base as a previous prepare_model left it."""
    import shutil

    out = tmp_path / "models" / "base"
    shutil.copytree(tiny_model_dir, out)
    return out


def _broken_build(name, out_dir, seed):
    """A build that writes files but no usable model (e.g. killed mid-save, or a bad conversion)."""
    out_dir.mkdir(parents=True)
    (out_dir / "config.json").write_text('{"model_type": "llama", ')


@pytest.mark.parametrize("name, breaks", [("./no-such-model-folder", None), ("tiny-random", _broken_build)])
def test_a_failed_build_leaves_the_existing_model_untouched(name, breaks, existing, monkeypatch):
    before = _snapshot(existing)
    if breaks:
        monkeypatch.setattr(models, "_write_model", breaks)
    with pytest.raises((OSError, ValueError)):
        models.prepare_base_model(name, existing, seed=0)
    assert _snapshot(existing) == before
    assert sorted(p.name for p in existing.parent.iterdir()) == ["base"]  # no temporary folder left behind


def test_a_good_build_replaces_the_model(existing):
    (existing / "stale.txt").write_text("from the previous model")
    models.prepare_base_model("tiny-random", existing, seed=1)
    assert not (existing / "stale.txt").exists()
    assert models.load_model(existing).config.hidden_size == models.TINY_RANDOM["hidden_size"]
    assert sorted(p.name for p in existing.parent.iterdir()) == ["base"]


_PREPARE_UNDER_LIMIT = """
import resource, sys
from pathlib import Path

import pipelines.prepare_model as stage

stage.BASE_MODEL_DIR = Path(sys.argv[1])
sys.argv = ["prepare_model", "--params", sys.argv[2]]
# `ulimit -f 5120`: the tokenizer's files (3.4 MiB) fit, the tiny model's weights (12.3 MiB) do not
resource.setrlimit(resource.RLIMIT_FSIZE, (5 << 20, 5 << 20))
stage.run_stage(stage.main)
"""


def test_a_save_past_the_file_size_limit_is_one_line_and_keeps_the_model(existing, tmp_path):
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["model"]["name"] = "tiny-random"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    before = _snapshot(existing)
    proc = python(["-c", _PREPARE_UNDER_LIMIT, existing, tmp_path / "params.yaml"], cwd=REPO_ROOT,
                  env={**os.environ, "LOPD_MLFLOW_URI": "off"})
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr == (f"error: {existing}: cannot save model 'tiny-random' (SafetensorError: Error while "
                           "serializing: I/O error: File too large (os error 27)); the previous model, if any, is "
                           "kept\n")
    assert _snapshot(existing) == before
    assert sorted(p.name for p in existing.parent.iterdir()) == ["base"]  # no temporary folder left behind
