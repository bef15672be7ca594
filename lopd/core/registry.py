"""The method registry: the one place that says which methods exist.

A method is its file (a `Method` subclass, built as `Method(cfg, domain)`), one entry here, and its
params section in conf/config.yaml. Config validation, the DVC matrices (through the `baseline_methods` and `methods`
params, which must name registered methods), the result tables and the README's method table all read this.
The factory is named as "module:Class" and imported only when a stage builds that method, so a stage imports
(and DVC tracks) the code of its own method only.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lopd.core.config import GRPOConfig, LOPDConfig, OPSDConfig, SDFTConfig, SDPOConfig, SkillSDConfig, VanillaConfig

if TYPE_CHECKING:
    from lopd.core.config import Config
    from lopd.core.methods import Domain, Method


@dataclass(frozen=True)
class MethodSpec:
    name: str
    """Registry name: the params section, the `--method` argument and the DVC stage suffix (`train@grpo`)."""
    label: str
    """Row label in the result tables."""
    config: type
    """Dataclass of the method's params section."""
    factory: str
    """`module:Class` of the Method subclass; `Class(cfg, domain)` builds the method."""
    baseline: bool = True
    """Trained by the `train@<name>` matrix; False for LOPD, which has its own DVC branch."""


METHODS: dict[str, MethodSpec] = {spec.name: spec for spec in (  # the paper's table order
    MethodSpec("vanilla", "Vanilla", VanillaConfig, "baselines.vanilla:Vanilla"),
    MethodSpec("grpo", "GRPO", GRPOConfig, "baselines.grpo:GRPO"),
    MethodSpec("skill_sd", "Skill-SD", SkillSDConfig, "baselines.skill_sd:SkillSD"),
    MethodSpec("opsd", "OPSD", OPSDConfig, "baselines.opsd:OPSD"),
    MethodSpec("sdpo", "SDPO", SDPOConfig, "baselines.sdpo:SDPO"),
    MethodSpec("sdft", "SDFT", SDFTConfig, "baselines.sdft:SDFT"),
    MethodSpec("lopd", "LOPD", LOPDConfig, "lopd.latent.method:LOPD", baseline=False),
)}


EVALUATION_ROWS = {"base_composer": "Base + Composer"}
"""Evaluated configurations that are no trained method, with their row labels: the base model read with LOPD's
latent context at inference (paper Table 3; `lopd.latent.context`, stages eval_base_composer and
eval_agentic_base_composer)."""


def register(spec: MethodSpec) -> None:
    """Add a method (e.g. from an extension or a test); its params section must then be in params.yaml."""
    METHODS[spec.name] = spec


def baseline_names() -> list[str]:
    return [name for name, spec in METHODS.items() if spec.baseline]


def label(name: str) -> str:
    return METHODS[name].label if name in METHODS else EVALUATION_ROWS.get(name, name)


def method_class(name: str) -> type[Method]:
    module, attribute = METHODS[name].factory.split(":")
    return getattr(importlib.import_module(module), attribute)


def build_method(name: str, cfg: Config, domain: Domain) -> Method:
    """The registered method `name`, built for a training domain."""
    return method_class(name)(cfg, domain)
