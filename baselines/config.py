"""The baselines' params sections (each method's own: `grpo`, `sdpo`, ...), beside the methods that read them.

The registry names each class (`lopd.core.registry`); the config validates every section with it. Kept apart from the
methods' code: every stage reads every section, so only this small file, not each method's, is part of every stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from lopd.core.config import MethodConfig, require


@dataclass
class VanillaConfig:
    """The unadapted base model has no parameters (the section exists so every method has one)."""


@dataclass
class GRPOConfig(MethodConfig):
    group_size: int = 4
    """Rollouts per task (G); advantages are normalised within each group."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (epsilon_lo)."""
    clip_high: float = 0.2
    """PPO ratio clip above 1 (epsilon_hi)."""

    def __post_init__(self) -> None:
        self._check_steps("grpo")
        require(self.group_size >= 2, "grpo.group_size: must be >= 2 (advantages are group-normalised)")
        require(0 < self.clip_low < 1, "grpo.clip_low: must be in (0, 1)")
        require(self.clip_high > 0, "grpo.clip_high: must be > 0")


@dataclass
class SDFTConfig(MethodConfig):
    """SDFT (Shenfeld et al., 2026): an EMA teacher reads a pool demonstration appended to the user message;
    forward KL over the full vocabulary."""

    ema_rate: float = 0.01
    """alpha_EMA: after every step the teacher moves this fraction of the way to the student."""

    def __post_init__(self) -> None:
        self._check_steps("sdft")
        require(0 < self.ema_rate <= 1, "sdft.ema_rate: must be in (0, 1]")


@dataclass
class OPSDConfig(MethodConfig):
    """OPSD (Zhao et al., 2026): the frozen initial model reads the pool's oracle trajectory in the system
    message; forward KL over the full vocabulary."""

    def __post_init__(self) -> None:
        self._check_steps("opsd")


@dataclass
class SDPOConfig(MethodConfig):
    """SDPO (Huebotter et al., 2026): an EMA teacher reads a successful sibling from the same step's group;
    reverse KL on a top-K support plus a tail bucket."""

    group_size: int = 4
    """Rollouts per task (G); a rollout's teacher sees a successful sibling from its own group."""
    ema_rate: float = 0.05
    """Teacher EMA update rate per step."""
    top_k: int = 100
    """Size of the top-K support of the reverse KL (the SDPO reference: 100)."""
    support: str = "student"
    """Whose top-K tokens form the support: student (the SDPO reference) | teacher."""
    success_threshold: float = 1.0
    """A sibling counts as successful when its reward is >= this (coding: all tests pass)."""

    def __post_init__(self) -> None:
        self._check_steps("sdpo")
        require(self.group_size >= 2, "sdpo.group_size: must be >= 2 (a rollout's teacher context is a sibling)")
        require(0 < self.ema_rate <= 1, "sdpo.ema_rate: must be in (0, 1]")
        require(self.top_k >= 1, "sdpo.top_k: must be >= 1")
        require(self.support in ("student", "teacher"), f"sdpo.support: {self.support!r} is not student or teacher")
        require(0 <= self.success_threshold <= 1, "sdpo.success_threshold: must be in [0, 1]")


@dataclass
class SkillSDConfig(MethodConfig):
    """Skill-SD (Wang et al., 2026): a skill summary chosen by UCB1 goes into the live teacher's user message;
    PPO-clip plus importance-weighted sampled-token reverse KL."""

    group_size: int = 4
    """Rollouts per task (G) for the group-normalised PPO advantages."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (epsilon_lo)."""
    clip_high: float = 0.28
    """PPO ratio clip above 1 (epsilon_hi)."""
    sdl_weight: float = 0.001
    """lambda_sdl: weight of the sampled-token reverse KL added to the PPO loss."""
    is_clip: float | None = 2.0
    """Cap on the importance weight pi_theta / pi_old of the distillation term (null: uncapped)."""
    ucb_c: float = 1.4142135623730951
    """UCB1 exploration constant c (paper: sqrt 2)."""
    candidates: int = 4
    """Skills from the most similar past tasks that UCB1 chooses among for each task."""
    summariser: str | None = None
    """Model that writes the skill summaries: a Hugging Face id or local path; null = the base model."""
    summary_tokens: int = 128
    """Token budget of each summary section (What works / What to avoid / Suggested workflow)."""
    success_threshold: float = 1.0
    """A rollout counts as successful in the summariser's prompt when its reward is >= this."""

    def __post_init__(self) -> None:
        self._check_steps("skill_sd")
        require(self.group_size >= 1, "skill_sd.group_size: must be >= 1")
        require(0 < self.clip_low < 1, "skill_sd.clip_low: must be in (0, 1)")
        require(self.clip_high > 0, "skill_sd.clip_high: must be > 0")
        require(self.sdl_weight >= 0, "skill_sd.sdl_weight: must be >= 0")
        require(self.is_clip is None or self.is_clip > 0, "skill_sd.is_clip: must be > 0 or null")
        require(self.ucb_c >= 0, "skill_sd.ucb_c: must be >= 0")
        require(self.candidates >= 1, "skill_sd.candidates: must be >= 1")
        require(self.summariser is None or bool(self.summariser), "skill_sd.summariser: must not be empty")
        require(self.summary_tokens >= 1, "skill_sd.summary_tokens: must be >= 1")
        require(0 <= self.success_threshold <= 1, "skill_sd.success_threshold: must be in [0, 1]")
