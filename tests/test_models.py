import json
import re

import pytest
import torch

from lopd.core import models
from lopd.core.models import CONVERSION_CHECK_FILE, check_model_dir, load_model, load_tokenizer, prepare_base_model


def test_tiny_random_is_seeded_and_has_the_smollm2_chat_template(tiny_model_dir, tmp_path, monkeypatch):
    # built again with an empty tokenizer cache, so converted from the GGUF; the session's model may have come from
    # the cache: the files are the same, byte for byte
    monkeypatch.setattr(models, "GGUF_CACHE", tmp_path / "cache")
    again = prepare_base_model("tiny-random", tmp_path / "again", seed=0)
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 1
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    a, b = load_model(tiny_model_dir), load_model(again)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert a.config.hidden_size <= 128
    tok = load_tokenizer(tiny_model_dir)
    assert "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert tok.padding_side == "left"


def test_a_gguf_conversion_is_checked_against_the_gguf_models_logits(tiny_model_dir, tmp_path, monkeypatch):
    """The safetensors folder built from the embedded GGUF gives the GGUF-loaded model's logits, as the build checks
    and records; a conversion that changes them stops the build and leaves nothing (so the check compares the
    converted folder with the GGUF model, and the Qwen build's recorded difference means what it says)."""
    out = prepare_base_model("smollm2-135m", tmp_path / "smol", seed=0)
    check = json.loads((out / CONVERSION_CHECK_FILE).read_text())
    assert check["max_abs_logit_diff"] <= 1e-5 and check["origin"].startswith("HuggingFaceTB/SmolLM2-135M-Instruct")
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and "_model_name_or_path" not in config  # no GGUF label in the config

    def off_by_a_little(*args):  # a conversion bug (the final norm's scale slightly wrong), on the tiny model
        model, gguf_model = load_model(tiny_model_dir), load_model(tiny_model_dir)
        with torch.no_grad():
            model.model.norm.weight.mul_(1.01)
        return model, gguf_model

    monkeypatch.setattr(models, "_dequantised", off_by_a_little)
    with pytest.raises(ValueError, match=r"logits differ from the GGUF model's by up to [0-9.e-]+ on a probe prompt"):
        prepare_base_model("smollm2-135m", tmp_path / "broken", seed=0)
    assert not any(tmp_path.glob("*broken*"))


def test_a_missing_model_folder_is_a_one_line_error_before_anything_loads(tmp_path):
    missing = tmp_path / "models" / "base"
    for load in (load_tokenizer, load_model):
        with pytest.raises(FileNotFoundError, match="^" + re.escape(f"{missing}: model not found (for the base "
                                                                     "model run: dvc repro prepare_model)") + "$"):
            load(missing)
        with pytest.raises(FileNotFoundError, match=f"^{re.escape(str(tmp_path))}: model has no config.json"):
            load(str(tmp_path))
    check_model_dir("HuggingFaceTB/SmolLM2-135M-Instruct")  # a hub id is the hub's business


def _one_adamw_step(model: torch.nn.Module, trainer: bool) -> dict[str, torch.Tensor]:
    """The weight change of one AdamW step at the paper's lr 1e-5 on a fixed next-token loss: as the trainer runs it
    (accelerate with the config's bf16 autocast) or, for the reference, in plain full precision."""
    from accelerate import Accelerator

    from lopd.core.config import Config

    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
    input_ids = torch.randint(0, 1000, (2, 24), generator=torch.Generator().manual_seed(0))
    if trainer:
        accelerator = Accelerator(cpu=True, mixed_precision=Config().train.mixed_precision)
        model, optimizer = accelerator.prepare(model, optimizer)
        accelerator.backward(model(input_ids=input_ids, labels=input_ids).loss)
    else:
        model(input_ids=input_ids, labels=input_ids).loss.backward()
    optimizer.step()
    return {name: p.detach().float() - before[name].float() for name, p in model.named_parameters()}


def test_master_weights_take_every_small_update_as_an_fp32_reference_does(tiny_model_dir):
    """The trainer's weights are float32 and compute runs in bf16 autocast: one AdamW step at lr 1e-5 moves the
    weights as the all-fp32 step does. A bf16 copy of the weights (the old paper profile) rounds most moves away."""
    from lopd.core.config import Config

    assert Config().train.mixed_precision == "bf16" and not hasattr(Config().model, "dtype")
    assert all(p.dtype == torch.float32 for p in load_model(tiny_model_dir).parameters())
    trained = _one_adamw_step(load_model(tiny_model_dir), trainer=True)
    reference = _one_adamw_step(load_model(tiny_model_dir), trainer=False)
    moved = torch.cat([(d != 0).flatten() for d in reference.values()])
    assert moved.float().mean() > 0.9  # Adam's first step moves every weight with a gradient by ~lr
    same = torch.cat([((trained[n] - reference[n]).abs() < 2e-6).flatten() for n in reference])
    assert same.float().mean() > 0.95  # bf16 compute flips only the moves of near-zero gradients
    bf16 = _one_adamw_step(load_model(tiny_model_dir, "bfloat16"), trainer=False)
    kept = torch.cat([(d != 0).flatten() for d in bf16.values()])[moved]
    assert kept.float().mean() < 0.5, kept.float().mean()  # what fp32 master weights prevent
