"""Config: params.yaml is DVC's Hydra composition of conf/ and is read as it is, so what is recorded is what ran."""

import re
from pathlib import Path

import pytest

from baselines.config import GRPOConfig
from lopd.core import registry
from lopd.core.config import (
    CONF_DIR,
    PROFILES_NAMES,
    REPO_ROOT,
    Config,
    ConfigError,
    build_config,
    compose,
    load_config,
    mlflow_uri,
    read_yaml,
    resolve,
    resolve_model,
    resolve_path,
    resolve_recorded,
)
from lopd.latent.config import LOPDConfig


def test_repo_params_are_the_default_composition():
    """The committed params.yaml is what `dvc exp run` composes from conf/ with no overrides (DVC's own composer)."""
    import tempfile
    from pathlib import Path

    from dvc.utils.hydra import compose_and_dump

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "params.yaml"
        compose_and_dump(out, str(CONF_DIR), None, "config", tmp, [])
        assert read_yaml(out) == read_yaml(REPO_ROOT / "params.yaml")
    cfg = load_config()
    assert cfg.profile == "cpu" and cfg.model.name == "qwen2.5-coder-0.5b" and cfg.train.steps == 16


def test_paper_values_are_the_defaults():
    cfg = Config()
    assert cfg.to_dict() == {**compose("paper"), "profile": "paper",
                             "model": {"name": "smollm2-135m", "cpu_matmul": "auto"},
                             "bank": {**compose("paper")["bank"], "embedder": "all-minilm-l6-v2"},
                             "launch": {**compose("paper")["launch"], "processes": 1}}  # paper: every GPU
    assert compose("paper")["launch"]["processes"] == "auto"
    assert (cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.top_k) == (0.7, 0.95, 20)
    assert (cfg.train.lr, cfg.train.grad_clip, cfg.train.rollouts_per_step) == (1e-5, 1.0, 32)
    grpo, lopd = cfg.section(GRPOConfig), cfg.section(LOPDConfig)
    assert (grpo.group_size, grpo.clip_low, grpo.clip_high) == (4, 0.2, 0.2)
    assert (cfg.margin, cfg.latent_tokens, cfg.n_ret) == (0.05, 32, 3)
    assert (lopd.top_m, lopd.anchor_weight, lopd.dual_lr, lopd.beta_init) == (20, 0.2, 0.5, 0.0)
    assert (lopd.composer_lr, cfg.cold_start.lr, cfg.cold_start.batch_size, cfg.cold_start.grad_clip) == (
        1e-5, 1e-5, 8, 3.0)
    assert (cfg.composer.lora_rank, cfg.composer.lora_alpha, cfg.composer.lora_dropout) == (8, 16.0, 0.0)
    assert (cfg.composer.qformer_layers, cfg.composer.ff_mult) == (8, 4)
    assert cfg.eval.max_new_tokens == 16384


@pytest.mark.parametrize("raw, message", [
    ({"trian": {}}, "unknown key 'trian'"),
    ({"train": {"stpes": 3}}, "unknown key 'train.stpes'"),
    ({"train": {"steps": "ten"}}, "train.steps: expected int"),
    ({"train": {"steps": True}}, "train.steps: expected int"),
    ({"sampling": {"temperature": -1}}, "sampling.temperature"),
    ({"sampling": {"top_p": 1.5}}, "sampling.top_p"),
    ({"methods": ["vanilla", "dpo"]}, "unknown method 'dpo'"),
    ({"grpo": {"group_size": 1}}, "grpo.group_size"),
    ({"train": {"rollouts_per_step": 30}}, "multiple of grpo.group_size"),
    ({"train": {"sharding": "fsdp"}}, "train.sharding: 'fsdp' is not ddp or fsdp2"),
    ({"eval": "fast"}, "eval: expected a mapping"),
    ({"eval": {"max_new_tokens": 0}}, "eval.max_new_tokens: must be >= 1 or null"),
    ({"model": {"dtype": "bfloat16"}}, "unknown key 'model.dtype'"),  # master weights are always float32
    ({"margin": -0.1}, "margin: must be >= 0"),
    ({"margin": "big"}, "margin: expected a number"),
    ({"latent_tokens": 0}, "latent_tokens: must be >= 1"),
    ({"n_ret": 2.5}, "n_ret: expected int"),
    ({"baseline_methods": ["vanilla", "lopd"]}, "baseline_methods: unknown baseline 'lopd'"),
    ({"baseline_methods": ["vanilla"], "methods": ["vanilla", "grpo"]}, "methods: 'grpo' is evaluated but not trained"),
    ({"lopd": {"top_m": 0}}, "lopd.top_m"),
    ({"lopd": {"steps": -1}}, "lopd.steps"),
    ({"sdpo": {"lr": -1e-6}}, "sdpo.lr: must be >= 0 or null"),
    ({"learn": {"runs": {"grpo": {"method": "vanilla"}}}}, "learn.runs.grpo.method: 'vanilla' is not a trained method"),
    ({"learn": {"runs": {"extra": {"method": "grpo", "seed": 0, "lr": None, "steps": None}}}},
     "missing key 'learn.runs.extra.negate_advantages'"),
    ({"learn": {"runs": {"grpo": {"seed": 1000}}}}, "learn.runs.grpo.seed: must differ from learn.eval_seed"),
    ({"learn": {"rollouts_per_step": 6}}, "learn.rollouts_per_step: must be a multiple of grpo.group_size"),
    ({"learn": {"selection_samples": 1}}, "learn.selection_samples: must be >= 2"),
    ({"sdpo": {"lr": "fast"}}, "sdpo.lr: expected a number"),
    ({"bank": {"success_threshold": 2}}, "bank.success_threshold"),
    ({"bank": {"task_limit": 0}}, "bank.task_limit"),
    ({"composer": {"lora_rank": 0}}, "composer.lora_rank"),
    ({"cold_start": {"grad_clip": 0}}, "cold_start.grad_clip"),
    ({"agentic": {"tool_call_format": "json"}}, "agentic.tool_call_format: 'json' is not strict or lenient"),
    ({"agentic": {"envscaler_task_limit": 0}}, "agentic.envscaler_task_limit: must be >= 1 or null"),
    ({"agentic": {"cold_start_steps": -1}}, "agentic.cold_start_steps: must be >= 0 or null"),
])
def test_bad_params_give_one_line_error_naming_the_key(raw, message):
    with pytest.raises(ConfigError) as err:
        resolve(raw)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_explicit_values_win_over_the_profile_even_at_the_paper_default():
    """The bugs of the old in-code profiles: a value equal to the paper default was silently replaced."""
    raw = compose("cpu", ["train.steps=200", "eval.task_limit=null", "train.save_every=50"])
    cfg = build_config(raw)
    assert (cfg.train.steps, cfg.eval.task_limit, cfg.train.save_every) == (200, None, 50)
    smoke = build_config(compose("smoke", ["train.steps=200"]))
    assert smoke.train.steps == 200 and smoke.model.name == "tiny-random"
    assert resolve({"profile": "smoke", "train": {"steps": 7}}).train.steps == 7


def test_tool_call_format_is_strict_in_the_paper_and_lenient_for_small_models():
    from lopd.core.multiturn import TOOL_CALL_FORMATS

    assert Config().agentic.tool_call_format == "strict"  # the paper's parser: <tool_call> blocks only
    formats = {name: resolve({"profile": name}).agentic.tool_call_format for name in ("paper", "smoke")}
    assert formats == {"paper": "strict", "smoke": "lenient"}
    assert resolve({"profile": "smoke", "agentic": {"tool_call_format": "strict"}}).agentic.tool_call_format == "strict"
    assert set(TOOL_CALL_FORMATS) == {"strict", "lenient"}  # what the config validates is what the parser reads


def test_profile_switch_changes_what_params_yaml_holds():
    cpu, smoke = compose("cpu"), compose("smoke")
    assert (cpu["profile"], smoke["profile"]) == ("cpu", "smoke")
    assert (cpu["model"]["name"], smoke["model"]["name"]) == ("qwen2.5-coder-0.5b", "tiny-random")
    assert {name for name in PROFILES_NAMES} == {"smoke", "cpu", "paper"}
    for name in PROFILES_NAMES:
        assert build_config(compose(name)).to_dict() == compose(name)  # every key present, nothing added


def test_recorded_params_equal_the_params_that_ran(tmp_path, monkeypatch):
    """MLflow's run params are params.yaml flattened: the values DVC records are the values the stage used."""
    import mlflow

    from lopd.core.tracking import Tracker, flatten

    params = tmp_path / "params.yaml"
    from dvc.utils.hydra import compose_and_dump

    compose_and_dump(params, str(CONF_DIR), None, "config", str(tmp_path), ["profile=smoke", "train.lr=3e-6"])
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("LOPD_MLFLOW_URI", uri)
    cfg = load_config(params)
    assert cfg.train.lr == 3e-6
    with Tracker(cfg, "unit"):
        pass
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["lopd-suite-smoke"]).iloc[0]
    logged = {k.removeprefix("params."): v for k, v in run.items() if k.startswith("params.")}
    assert logged == {k: str(v) for k, v in flatten(read_yaml(params)).items()}


@pytest.mark.parametrize("spelling, value", [("3e-06", 3e-6), ("1e-5", 1e-5), ("1.0e-05", 1e-5), ("2", 2.0),
                                             ("+1E-3", 1e-3), (".5", 0.5)])
def test_numbers_parse_in_every_yaml_spelling(tmp_path, spelling, value):
    path = tmp_path / "params.yaml"
    text = (REPO_ROOT / "params.yaml").read_text()
    path.write_text(re.sub(r"(?m)^(train:\n(?:  .*\n)*?)  lr: .*$", rf"\g<1>  lr: {spelling}", text, count=1))
    assert load_config(path).train.lr == value


@pytest.mark.parametrize("key, text, message", [
    ("lr", "  lr: .inf", "train.lr: must be a finite number"),
    ("temperature", "  temperature: .nan", "sampling.temperature: must be a finite number"),
    ("temperature", "  temperature: -.inf", "sampling.temperature: must be a finite number"),
])
def test_non_finite_numbers_are_refused(tmp_path, key, text, message):
    path = tmp_path / "params.yaml"
    lines = (REPO_ROOT / "params.yaml").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
    lines[first] = text
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_file_errors_name_the_file_and_line(tmp_path):
    assert resolve({"train": {"lr": 1}}).train.lr == 1.0
    bad = tmp_path / "p.yaml"
    bad.write_text("seed: 0\ntrain: [unclosed\n")
    with pytest.raises(ConfigError, match=r"p.yaml:3: not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty.yaml: empty"):
        load_config(empty)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("seed: 0 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="latin.yaml: not UTF-8"):
        load_config(latin)
    partial = tmp_path / "partial.yaml"
    partial.write_text("seed: 0\n")
    with pytest.raises(ConfigError, match="missing key"):
        load_config(partial)


def test_override_of_an_unknown_key_is_refused_by_the_composition():
    with pytest.raises(ConfigError, match="conf/"):
        compose("cpu", ["train.stpes=3"])


def test_every_registered_method_has_a_params_section():
    raw = compose("cpu")
    assert set(registry.METHODS) <= set(raw)
    assert raw["baseline_methods"] == registry.baseline_names() and raw["methods"] == list(registry.METHODS)


def test_every_override_the_readme_documents_composes_and_validates():
    """Each `-S key=value` in the README and docs/, composed as `dvc exp run` would (cpu profile), gives a valid
    config."""
    import re

    documents = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    text = "\n".join(document.read_text() for document in documents)
    overrides = sorted({o for o in re.findall(r"-S (\S+?=[^\s`]+)", text) if "…" not in o and o != "key=value"})
    assert len(overrides) >= 15, overrides
    envscaler = [o for o in overrides if o.startswith("agentic.envscaler_")]  # documented as a pair
    for override in overrides:
        key, value = override.split("=", 1)
        if key == "profile":
            cfg = build_config(compose(value))
        else:
            cfg = build_config(compose("cpu", envscaler if override in envscaler else [override]))
        assert cfg.profile in PROFILES_NAMES, override
    assert build_config(compose("cpu", ["train.lr=3e-6"])).train.lr == 3e-6


def test_relative_paths_in_params_resolve_against_the_repository_dvc_runs_in(monkeypatch, tmp_path):
    """A queued experiment runs in a temporary copy (.dvc/tmp/exps/...), with DVC_ROOT pointing at the repository it
    was queued from: relative params paths must mean the same folders there as in the workspace."""
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert resolve_path("../shared/data") == REPO_ROOT / "../shared/data"
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "repo"))
    cfg = resolve({"data": {"shared_dir": "../shared/data"}})
    assert cfg.data.shared_path("evalplus") == tmp_path / "repo" / "../shared/data" / "evalplus"
    assert resolve_path("/abs/file.json") == Path("/abs/file.json")
    assert resolve_path("~/x") == Path.home() / "x"
    assert resolve_model("./models/mine") == str(tmp_path / "repo" / "models" / "mine")
    assert resolve_model("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B" and resolve_model("smollm2-135m") == "smollm2-135m"
    monkeypatch.setenv("LOPD_MLFLOW_URI", "sqlite:///mlruns/mlflow.db")
    assert mlflow_uri(cfg) == f"sqlite:///{tmp_path / 'repo' / 'mlruns' / 'mlflow.db'}"


def test_paths_are_recorded_relative_to_the_repository():
    """Outputs name a path inside the repository relatively (they read the same on every machine); any other path
    and a registry name stay as they are."""
    from lopd.core.config import repo_relative

    assert repo_relative(REPO_ROOT / "checkpoints" / "lopd") == "checkpoints/lopd"
    assert repo_relative(REPO_ROOT / ".." / "shared" / "data") == "../shared/data"
    assert repo_relative("/elsewhere/model") == "/elsewhere/model" and repo_relative("smollm2-135m") == "smollm2-135m"


def test_conf_config_yaml_is_generated_from_the_dataclasses():
    """One source of defaults: conf/config.yaml is what `python -m pipelines.defaults --write` writes from the config
    dataclasses (their values and first docstring sentences), so a default is edited in one place."""
    from pipelines.defaults import CONFIG_YAML, config_yaml

    assert CONFIG_YAML.read_text() == config_yaml(), "run `python -m pipelines.defaults --write`"
    assert {k for k in read_yaml(CONFIG_YAML) if k != "defaults"} == set(Config().to_dict()) - {"profile"}


@pytest.mark.parametrize("raw, message", [
    ({"train": {"steps": 0}}, "train.steps: must be >= 1 (a trained method with 0 steps would replace"),
    ({"train": {"steps": -3}}, "train.steps: must be >= 1 (a trained method"),
    ({"sdpo": {"steps": 0}}, "sdpo.steps: must be >= 1 or null (a trained method with 0 steps would replace"),
    ({"lopd": {"steps": 0}}, "lopd.steps: must be >= 1 or null"),
    ({"agentic": {"steps": 0}}, "agentic.steps: must be >= 1 or null"),
])
def test_a_trained_method_with_zero_steps_is_refused(raw, message):
    """0 steps would finish the stage with the base weights as the method's checkpoint and `rollouts: 0` metrics,
    exit 0: a typo that silently replaces a trained model. Vanilla is the row that trains nothing."""
    with pytest.raises(ConfigError) as err:
        resolve(raw)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_envscaler_has_its_own_evaluation_size():
    """agentic.envscaler_task_limit sizes EnvScaler alone; null leaves it to agentic.task_limit."""
    cfg = resolve({"profile": "cpu", "agentic": {"task_limit": 5, "envscaler_task_limit": 48}})
    assert [cfg.agentic.benchmark_limit(b) for b in ("envscaler", "bfcl_base", "acebench_multi_turn")] == [48, 5, 5]
    cfg = resolve({"profile": "cpu", "agentic": {"task_limit": 5, "envscaler_task_limit": None}})
    assert cfg.agentic.benchmark_limit("envscaler") == 5


def test_params_recorded_before_a_key_existed_resolve_it_to_its_default_not_the_profiles():
    """A params.yaml written before agentic.envscaler_task_limit ran EnvScaler at agentic.task_limit: recorded runs
    are estimated as they ran, though the cpu profile now sets 48; the recorded values themselves all win."""
    recorded = compose("cpu")
    del recorded["agentic"]["envscaler_task_limit"]
    recorded["agentic"]["task_limit"] = 7
    cfg = resolve_recorded(recorded)
    assert (cfg.agentic.benchmark_limit("envscaler"), cfg.agentic.task_limit, cfg.profile) == (7, 7, "cpu")
    assert resolve({"profile": "cpu"}).agentic.benchmark_limit("envscaler") == 48


def test_the_agentic_domain_takes_its_own_cold_start_steps():
    """agentic.cold_start_steps sets cold_start_agentic's steps (`for_domain`); null keeps cold_start.steps, and the
    code domain always runs cold_start.steps."""
    from pipelines.common import for_domain

    cfg = resolve({"profile": "cpu", "cold_start": {"steps": 12}, "agentic": {"cold_start_steps": 3}})
    assert (for_domain(cfg, "agentic").cold_start.steps, for_domain(cfg, "code").cold_start.steps) == (3, 12)
    cfg = resolve({"profile": "cpu", "cold_start": {"steps": 12}, "agentic": {"cold_start_steps": None}})
    assert for_domain(cfg, "agentic").cold_start.steps == 12
