import re

import pytest
import torch
from transformers import AutoModelForCausalLM

from lopd.core.models import (SMOLLM2_GGUF, _smollm2_dir, check_model_dir, load_model, load_tokenizer,
                              prepare_base_model)


def test_tiny_random_is_seeded_and_has_the_smollm2_chat_template(tiny_model_dir, tmp_path):
    again = prepare_base_model("tiny-random", tmp_path / "again", seed=0)
    a, b = load_model(tiny_model_dir), load_model(again)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert a.config.hidden_size <= 128
    tok = load_tokenizer(tiny_model_dir)
    assert "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert tok.padding_side == "left"


def test_smollm2_conversion_matches_the_gguf_model(tmp_path):
    """The safetensors folder built from the embedded GGUF gives the GGUF-loaded model's logits."""
    out = prepare_base_model("smollm2-135m", tmp_path / "smol", seed=0)
    converted = load_model(out).eval()
    reference = AutoModelForCausalLM.from_pretrained(_smollm2_dir(), gguf_file=SMOLLM2_GGUF, dtype=torch.float32).eval()
    ids = load_tokenizer(out)("def add(a, b):", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(converted(ids).logits, reference(ids).logits, atol=1e-5)
    assert "quantization_config" not in converted.config.to_dict()


def test_a_missing_model_folder_is_a_one_line_error_before_anything_loads(tmp_path):
    missing = tmp_path / "models" / "base"
    for load in (load_tokenizer, load_model):
        with pytest.raises(FileNotFoundError, match="^" + re.escape(f"{missing}: model not found (for the base "
                                                                     "model run: dvc repro prepare_model)") + "$"):
            load(missing)
        with pytest.raises(FileNotFoundError, match=f"^{re.escape(str(tmp_path))}: model has no config.json"):
            load(str(tmp_path))
    check_model_dir("HuggingFaceTB/SmolLM2-135M-Instruct")  # a hub id is the hub's business
