import pytest
import yaml

from lopd.core.config import PROFILES, Config, ConfigError, load_config, resolve


def test_repo_params_load_and_default_profile_is_cpu():
    cfg = load_config()
    assert cfg.profile == "cpu"
    assert cfg.model.name == "smollm2-135m"
    assert cfg.train.steps == PROFILES["cpu"]["train.steps"]


def test_paper_values_are_the_defaults():
    cfg = Config()
    assert (cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.top_k) == (0.7, 0.95, 20)
    assert (cfg.train.lr, cfg.train.grad_clip, cfg.train.rollouts_per_step) == (1e-5, 1.0, 32)
    assert (cfg.grpo.group_size, cfg.grpo.clip_low, cfg.grpo.clip_high) == (4, 0.2, 0.2)
    assert (cfg.margin, cfg.latent_tokens, cfg.n_ret) == (0.05, 32, 3)
    assert (cfg.lopd.top_m, cfg.lopd.anchor_weight, cfg.lopd.dual_lr, cfg.lopd.beta_init) == (20, 0.2, 0.5, 0.0)
    assert (cfg.lopd.composer_lr, cfg.cold_start.lr, cfg.cold_start.batch_size, cfg.cold_start.grad_clip) == (
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
    ({"profile": "huge"}, "profile: 'huge' is not one of"),
    ({"methods": ["vanilla", "dpo"]}, "unknown method 'dpo'"),
    ({"grpo": {"group_size": 1}}, "grpo.group_size"),
    ({"train": {"rollouts_per_step": 30}}, "multiple of grpo.group_size"),
    ({"eval": "fast"}, "eval: expected a mapping"),
    ({"model": {"dtype": "int4"}}, "model.dtype"),
    ({"margin": -0.1}, "margin: must be >= 0"),
    ({"margin": "big"}, "margin: expected a number"),
    ({"latent_tokens": 0}, "latent_tokens: must be >= 1"),
    ({"n_ret": 2.5}, "n_ret: expected int"),
    ({"baselines": ["vanilla", "lopd"]}, "baselines: unknown baseline 'lopd'"),
    ({"baselines": ["vanilla"], "methods": ["vanilla", "grpo"]}, "methods: 'grpo' is evaluated but not trained"),
    ({"lopd": {"top_m": 0}}, "lopd.top_m"),
    ({"lopd": {"steps": -1}}, "lopd.steps"),
    ({"bank": {"success_threshold": 2}}, "bank.success_threshold"),
    ({"composer": {"lora_rank": 0}}, "composer.lora_rank"),
    ({"cold_start": {"grad_clip": 0}}, "cold_start.grad_clip"),
])
def test_bad_params_give_one_line_error_naming_the_key(raw, message):
    with pytest.raises(ConfigError) as err:
        resolve(raw)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_profile_overrides_only_keys_left_at_paper_default():
    cfg = resolve({"profile": "smoke", "train": {"steps": 7}})
    assert cfg.model.name == "tiny-random"       # profile applied
    assert cfg.train.steps == 7                  # the user's value wins
    assert cfg.eval.task_limit == PROFILES["smoke"]["eval.task_limit"]


def test_float_fields_accept_ints_and_yaml_file_errors(tmp_path):
    assert resolve({"train": {"lr": 1}}).train.lr == 1.0
    bad = tmp_path / "p.yaml"
    bad.write_text("train: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_every_profile_resolves():
    for name in PROFILES:
        assert resolve({"profile": name}).profile == name


def test_params_yaml_lists_every_field():
    """params.yaml documents every knob: its keys are exactly the dataclass fields."""
    raw = yaml.safe_load(open(__import__("lopd.core.config").config.REPO_ROOT / "params.yaml"))
    assert set(raw) == set(Config().to_dict())
    for section, values in Config().to_dict().items():
        if isinstance(values, dict):
            assert set(raw[section]) == set(values), section
