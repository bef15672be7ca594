"""lopd.core.experiments: a run's overrides against its profile, and the experiment name made of them."""

import random
import subprocess

import pytest

from lopd.core.config import compose
from lopd.core.experiments import (
    MAX_NAME_CHARS,
    experiment_name,
    flatten,
    is_dvc_generated,
    param_overrides,
    profile_overrides,
)
from pipelines.common import uniform_rows


def test_flatten():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def _leaves(tree, path=()):
    """Brute force: every (path, value) leaf of a nested dict."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*path, key))
        else:
            yield (*path, key), value


def _random_tree(rng, depth=0):
    return {f"k{i}": _random_tree(rng, depth + 1) if depth < 2 and rng.random() < 0.3
            else rng.choice([0, 1, 0.5, "x", None, [1, 2], True]) for i in range(rng.randint(1, 4))}


@pytest.mark.parametrize("seed", range(20))
def test_param_overrides_match_a_leaf_by_leaf_comparison(seed):
    rng = random.Random(seed)
    defaults, params = _random_tree(rng), _random_tree(rng)
    ran, default = dict(_leaves(params)), dict(_leaves(defaults))
    expected = {".".join(path): ran.get(path) for path in ran.keys() | default.keys()
                if ran.get(path) != default.get(path)}
    assert param_overrides(params, defaults) == expected


def test_the_profile_is_not_an_override():
    assert param_overrides({"profile": "smoke", "margin": 0.02}, {"profile": "cpu", "margin": 0.05}) == {"margin": 0.02}


def test_profile_overrides_give_back_the_s_flags():
    params = compose("smoke", ["margin=0.02", "sdpo.ema_rate=0.1"])
    assert profile_overrides(params) == {"margin": 0.02, "sdpo.ema_rate": 0.1}
    assert profile_overrides(compose("smoke")) == {}


@pytest.mark.parametrize(("overrides", "profile", "name"), [
    ({"margin": 0.02}, None, "margin-0.02"),
    ({"margin": 0.02}, "smoke", "smoke_margin-0.02"),
    ({"sdpo.ema_rate": 0.1, "train.lr": 3e-06}, None, "sdpo.ema_rate-0.1_train.lr-3e-06"),
    ({"benchmarks": ["humaneval_plus", "mbpp_plus"]}, None, "benchmarks-humaneval_plus+mbpp_plus"),
    ({"lopd.margin_constraint": False, "train.tis_cap": None}, None, "lopd.margin_constraint-false_train.tis_cap-null"),
    ({"data.shared_dir": "../shared/data"}, None, "data.shared_dir-._shared_data"),  # git refs hold no ".."
    ({"agentic.user_model": "a b: c?"}, None, "agentic.user_model-a_b_c"),
    ({}, "smoke", "smoke"),
    ({}, None, ""),
])
def test_experiment_name(overrides, profile, name):
    assert experiment_name(overrides, profile) == name


def test_a_long_name_counts_the_overrides_it_leaves_out():
    overrides = {f"section.parameter_{i}": 0.001 * i for i in range(8)}
    name = experiment_name(overrides)
    assert len(name) <= MAX_NAME_CHARS and name.startswith("section.parameter_0-0.0_")
    shown = name.count("section.parameter_")
    assert name.endswith(f"_+{8 - shown}")


def test_a_long_value_is_cut():
    name = experiment_name({"agentic.query_instruction": "Retrieve " * 20})
    assert len(name) <= MAX_NAME_CHARS and name.startswith("agentic.query_instruction-Retrieve_Retrieve")


@pytest.mark.parametrize("seed", range(30))
def test_every_name_is_a_valid_git_ref(seed, tmp_path):
    rng = random.Random(seed)
    alphabet = "ab.-_/ ~^:?*[\\@{}lock0"
    overrides = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))):
                 "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 3))}
    name = experiment_name(overrides, rng.choice([None, "smoke"]))
    if name:  # DVC keeps experiments under refs/exps/<baseline>/<name>
        check = subprocess.run(["git", "check-ref-format", f"refs/exps/ab/cdef/{name}"], capture_output=True)
        assert check.returncode == 0, name
        assert "/" not in name


def test_dvc_generated_names_are_recognised():
    from dvc.repo.experiments.utils import gen_random_name

    assert all(is_dvc_generated(gen_random_name()) for _ in range(50))
    for name in ("margin-0.02", "fig3-m_0.02", "smoke", "exp-a", "mated", "cony-mated"):
        assert not is_dvc_generated(name), name


def _uniform_brute_force(rows):
    keys = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    return [{k: (row[k] if k in row else None) for k in keys} for row in rows]


@pytest.mark.parametrize("seed", range(10))
def test_uniform_rows_give_every_row_every_key(seed):
    rng = random.Random(seed)
    rows = [{rng.choice("abcdef"): rng.random() for _ in range(rng.randint(0, 4))} for _ in range(rng.randint(0, 6))]
    uniform = uniform_rows(rows)
    assert uniform == _uniform_brute_force(rows)
    assert len({tuple(r) for r in uniform}) <= 1  # one key order for every row
