"""A method is its file, one registry entry and its params section: a toy method added through the registry alone
is validated, trained by the shared loop, gets a DVC train stage and a table row."""

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from evaluation.tables import Scores, code_table
from lopd.core import registry
from lopd.core.config import REPO_ROOT, ConfigError, MethodConfig, build_config, compose
from lopd.core.loop import train
from lopd.core.methods import Method, PolicyOutputs
from lopd.core.rollout import Task, single_turn
from pipelines.common import build_method


@dataclass
class ToyConfig(MethodConfig):
    """The toy method's params section."""

    weight: float = 1.0
    """Scale of the toy loss."""


class Toy(Method):
    """Maximise the log-likelihood of every sampled token (a made-up method: only the plumbing matters)."""

    name = "toy"
    rollouts_per_task = 1

    def loss(self, student: PolicyOutputs, batch, trajectories):
        logp = student.logp_B_T()
        loss = -self.cfg.section(ToyConfig).weight * logp.sum() / max(batch.action_mask_B_T.sum().item(), 1)
        return loss, {"toy_logp": logp.sum().item()}


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(registry.METHODS, "toy", registry.MethodSpec("toy", "Toy", ToyConfig, "test_registry:Toy"))
    raw = compose("smoke")
    raw["toy"] = {"steps": 1, "lr": None, "weight": 0.5}
    raw["baseline_methods"] = [*raw["baseline_methods"], "toy"]
    raw["methods"] = [*raw["methods"], "toy"]
    return raw


def test_the_registry_alone_adds_a_method(toy, tiny_model_dir, tmp_path):
    cfg = build_config(toy)
    assert cfg.section(ToyConfig).weight == 0.5
    method = build_method("toy", cfg, "code")
    assert isinstance(method, Toy)
    result = train(cfg, method, [Task("t0", [{"role": "user", "content": "Count to three."}])],
                   single_turn(lambda tasks, completions: [0.0] * len(completions)), tiny_model_dir, tmp_path / "toy")
    assert len(result["history"]) == 1 and "toy_logp" in result["history"][0]
    table = code_table({"toy": {"humaneval_plus": Scores({"HumanEval/0": 0.05})}}, cfg.methods)
    assert [label for label, _ in table.rows][-1] == "Toy"
    with pytest.raises(ConfigError, match="toy.weight: expected a number"):
        build_config({**toy, "toy": {"steps": 1, "lr": None, "weight": "heavy"}})
    with pytest.raises(ConfigError, match="missing key 'toy'"):
        build_config({k: v for k, v in toy.items() if k != "toy"})


def test_the_dvc_matrix_reads_the_registered_names(toy, tmp_path):
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(toy, sort_keys=False))
    dvc = Path(sys.executable).with_name("dvc")
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    listed = subprocess.run([dvc, "stage", "list", "--name-only"], cwd=tmp_path, check=True, capture_output=True,
                            text=True).stdout.split()
    assert {"train@toy", "train_agentic@toy", "eval@toy", "eval_agentic@toy"} <= set(listed)


def test_unregistered_names_are_refused():
    raw = compose("smoke")
    with pytest.raises(ConfigError, match="baseline_methods: unknown baseline 'toy'"):
        build_config({**raw, "baseline_methods": [*raw["baseline_methods"], "toy"]})
    with pytest.raises(ConfigError, match="unknown key 'toy'"):
        build_config({**raw, "toy": {"steps": 1, "lr": None}})


def test_the_readme_method_table_lists_the_registry():
    import re

    readme = (REPO_ROOT / "README.md").read_text()
    table = readme[readme.index("| registry name | table label | file |"):].split("\n\n")[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| `([^`]+)` \|", table, re.M)
    assert [(name, label.strip()) for name, label, _ in rows] == [(s.name, s.label) for s in registry.METHODS.values()]
    for name, _, path in rows:
        assert path == registry.METHODS[name].factory.split(":")[0].replace(".", "/") + ".py"


def test_a_config_named_by_string_is_part_of_every_stages_code(monkeypatch):
    """The config reads a method's section class by its registry name, an import no statement shows: provenance
    (the stages' DVC deps, the resume fingerprint) counts that module wherever the config is read."""
    from lopd.core import provenance

    monkeypatch.setitem(registry.METHODS, "toy", registry.MethodSpec("toy", "Toy", "evaluation.tables:Scores",
                                                                     "test_registry:Toy"))
    files = {p.relative_to(REPO_ROOT).as_posix() for p in provenance.source_files(["lopd.core.config"])}
    assert {"lopd/core/config.py", "lopd/core/registry.py", "evaluation/tables.py"} <= files
