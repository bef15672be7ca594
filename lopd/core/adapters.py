"""LoRA students (`train.lora_rank`): the frozen base model plus a trained adapter, and teachers that share the
student's base weights instead of holding a copy.

The student is the base model wrapped by peft with the adapter `STUDENT`; only the adapter trains. The rollout
engine and a checkpoint's model folder get the merged student, W + (alpha / r) B A in every adapted layer, computed
out of place (`merged_parameters`): peft's merge and unmerge would add the delta to the base weights and subtract it
again, and the rounding of that round trip would move the base weights a little every step (a resumed run would no
longer equal an uninterrupted one). A checkpoint also keeps the adapter (`adapter_state`), which a resume loads onto
models/base.

Teachers: a frozen one is the student with its adapters off (`adapters_off`): the base model. An EMA one is a second
adapter `EMA_TEACHER` on the same base whose A and B follow the student's (`ema_update_adapter_`), alone on while it
scores (`only_adapter`). A live one is the student. Switching sets the attribute each LoRA layer's forward reads, as
the composer does (lopd/latent/composer.py), without peft's requires_grad bookkeeping.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from lopd.core.config import TrainConfig

if TYPE_CHECKING:
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

STUDENT, EMA_TEACHER = "student", "ema_teacher"


@contextlib.contextmanager
def attribute_set(objects: Sequence[Any], name: str, value: Any) -> Iterator[None]:
    """Set attribute `name` to `value` on every object for the duration, restoring each one's own value after."""
    before = [getattr(obj, name) for obj in objects]
    for obj in objects:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, old in zip(objects, before):
            setattr(obj, name, old)


@contextlib.contextmanager
def peft_wrapping() -> Iterator[None]:
    """Silence the FutureWarning peft triggers as it adds an adapter (it reads transformers' deprecated
    `is_gradient_checkpointing` alias): nothing a user can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        yield


def add_student_adapter(model: torch.nn.Module, train: TrainConfig) -> PeftModel:
    """`model` (the base, wrapped in place) as a LoRA student: a `train.lora_rank` adapter on `train.lora_targets`
    whose B starts at zero, so that the student starts as the base model; the base weights frozen."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=train.lora_rank, lora_alpha=train.lora_alpha, lora_dropout=0.0,
                      target_modules=list(train.lora_targets), bias="none")
    with peft_wrapping():
        return get_peft_model(model, lora, adapter_name=STUDENT)


def _peft_loaded() -> bool:
    """Whether this process has imported peft. Only then can a model be peft's; the checks below import it no sooner,
    as that import adds ~0.5 s of CPU to the start of every stage, and most stages never build a LoRA model."""
    return "peft" in sys.modules


def is_lora(model: torch.nn.Module) -> bool:
    """Whether `model` (possibly DDP-wrapped) is a LoRA student."""
    if not _peft_loaded():
        return False
    from peft import PeftModel

    return isinstance(getattr(model, "module", model), PeftModel)


def lora_layers(model: torch.nn.Module) -> list[LoraLayer]:
    if not _peft_loaded():
        return []
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def base_module(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under the wrappers (DDP, peft): what a checkpoint's config comes from."""
    model = getattr(model, "module", model)
    return model.get_base_model() if is_lora(model) else model


def merged_parameters(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The merged student's weights as (name in the base model's own state dict, tensor), one at a time: an adapted
    layer's weight is computed as W + its student delta (a new tensor), every other tensor is the model's own
    (detached, no copy). Adapters are left out, the base weights untouched."""
    base = base_module(model)
    layers = set(lora_layers(base))
    adapted = {name: module for name, module in base.named_modules() if module in layers}
    for name, tensor in base.state_dict(keep_vars=True).items():
        if ".lora_" in name:
            continue
        module, _, leaf = name.rpartition(".base_layer.")
        tensor = tensor.detach()
        if leaf == "weight" and module in adapted:
            with torch.no_grad():
                tensor = tensor + adapted[module].get_delta_weight(STUDENT).to(tensor.dtype)
        yield name.replace(".base_layer.", "."), tensor


def adapter_parameters(model: torch.nn.Module, adapter: str = STUDENT) -> dict[str, torch.nn.Parameter]:
    """The weights of adapter `adapter`, by parameter name."""
    return {n: p for n, p in getattr(model, "module", model).named_parameters() if f".{adapter}." in n}


def adapter_state(model: torch.nn.Module, adapter: str = STUDENT) -> dict[str, torch.Tensor]:
    """Adapter `adapter`'s weights as CPU copies (what a checkpoint keeps)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in adapter_parameters(model, adapter).items()}


def load_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor], adapter: str = STUDENT) -> None:
    """Copy `adapter_state`'s tensors back into adapter `adapter`."""
    params = adapter_parameters(model, adapter)
    if set(state) != set(params):
        raise ValueError(f"the checkpoint's {adapter} adapter does not match this model's "
                         f"({len(set(state) ^ set(params))} parameter names differ: train.lora_* changed?)")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


def adapters_off(model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
    """The base model: every LoRA layer passes its input to its base layer only."""
    return attribute_set(lora_layers(model), "_disable_adapters", True)


def only_adapter(model: torch.nn.Module, adapter: str) -> contextlib.AbstractContextManager[None]:
    """The base model with adapter `adapter` alone (the student's off)."""
    return attribute_set(lora_layers(model), "_active_adapter", [adapter])


def add_ema_adapter(model: torch.nn.Module) -> None:
    """The EMA teacher's adapter on the student's base: the student adapter's configuration and current weights,
    frozen (an EMA teacher starts from the initial student, as a full fine-tune's does)."""
    peft = getattr(model, "module", model)
    with peft_wrapping():
        peft.add_adapter(EMA_TEACHER, peft.peft_config[STUDENT])
    for p in adapter_parameters(peft, EMA_TEACHER).values():
        p.requires_grad_(False)
    ema_update_adapter_(peft, 1.0)


@torch.no_grad()
def ema_update_adapter_(model: torch.nn.Module, rate: float) -> None:
    """A_T <- (1 - rate) A_T + rate A_S and the same for B, in every adapted layer, in place."""
    for layer in lora_layers(model):
        for factors in (layer.lora_A, layer.lora_B):
            factors[EMA_TEACHER].weight.lerp_(factors[STUDENT].weight, rate)
