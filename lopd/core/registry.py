"""The method registry: the one place that says which methods exist.

A method is its file (a `Method` subclass, built as `Method(cfg, domain)`), one entry here, and its params section in
conf/config.yaml. Config validation, the DVC matrices (through the `baseline_methods` and `methods` params, which must
name registered methods), the result tables and the README's method table all read this.
The method and its config dataclass are named as "module:Class": a stage imports a method only when it builds it
(`method_class`), so a stage imports (and DVC tracks) the code of its own method only. The registry
imports nothing of the project, so the config and the methods can both read it without an import circle.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class MethodSpec:
    name: str
    """Registry name: the params section, the `--method` argument and the DVC stage suffix (`train@grpo`)."""
    label: str
    """Row label in the result tables."""
    config: str | type
    """Dataclass of the method's params section, or its `module:Class`."""
    factory: str
    """`module:Class` of the Method subclass; `Class(cfg, domain)` builds the method."""
    baseline: bool = True
    """Trained by the `train@<name>` matrix; False for LOPD, which has its own DVC branch."""

    def config_class(self) -> type:
        return named_class(self.config) if isinstance(self.config, str) else self.config

    def method_class(self) -> type:
        return named_class(self.factory)


def named_class(qualified: str) -> type:
    """The class a "module:Class" string names (importing its module)."""
    module, attribute = qualified.split(":")
    return getattr(importlib.import_module(module), attribute)


METHODS: dict[str, MethodSpec] = {spec.name: spec for spec in (  # the paper's table order
    MethodSpec("vanilla", "Vanilla", "baselines.config:VanillaConfig", "baselines.vanilla:Vanilla"),
    MethodSpec("grpo", "GRPO", "baselines.config:GRPOConfig", "baselines.grpo:GRPO"),
    MethodSpec("skill_sd", "Skill-SD", "baselines.config:SkillSDConfig", "baselines.skill_sd:SkillSD"),
    MethodSpec("opsd", "OPSD", "baselines.config:OPSDConfig", "baselines.opsd:OPSD"),
    MethodSpec("sdpo", "SDPO", "baselines.config:SDPOConfig", "baselines.sdpo:SDPO"),
    MethodSpec("sdft", "SDFT", "baselines.config:SDFTConfig", "baselines.sdft:SDFT"),
    MethodSpec("lopd", "LOPD", "lopd.latent.config:LOPDConfig", "lopd.latent.method:LOPD", baseline=False),
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


def config_modules() -> list[str]:
    """The modules that hold the registered methods' config dataclasses named by string: every stage that reads
    params.yaml imports them."""
    return sorted({spec.config.split(":")[0] for spec in METHODS.values() if isinstance(spec.config, str)})


def label(name: str) -> str:
    return METHODS[name].label if name in METHODS else EVALUATION_ROWS.get(name, name)
