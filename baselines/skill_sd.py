"""Skill-SD (Wang et al., 2026), as set up in the paper's Appendix B.

G rollouts per task with group-normalised advantages for a PPO-clip loss (eps_lo 0.2, eps_hi 0.28), plus
lambda_sdl = 0.001 times an importance-weighted sampled-token reverse KL to a teacher that is the live
student (kept in sync) reading a skill summary in its first user message (template below).

Skills: after every step the summariser (default: the base model) writes one skill per rollout group, from
the group's first passing and first failing attempt. Before a step, each task's candidates are the skills of
its most similar past tasks, and UCB1 (c = sqrt 2) picks one; the skill is then credited with the mean
reward of that task's group. The student never sees the skill, so this reward reflects what distilling the
skill has done for the task so far. Until the bank has a candidate for a task, its rollouts get PPO only.
With one optimizer step per batch, the importance weight pi_theta / pi_old is 1 (capped at is_clip).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from baselines.config import SkillSDConfig
from baselines.self_distill import TEACHER_MESSAGES, Messages, SelfDistillation, append_to_user
from baselines.skills import Skill, SkillBank, write_skills
from lopd.core.config import Config
from lopd.core.losses import (
    distillation_loss,
    group_advantages,
    importance_weights,
    ppo_clip_loss,
    sampled_token_reverse_kl,
    token_logprobs,
)
from lopd.core.methods import Domain, MethodContext, PolicyOutputs
from lopd.core.models import load_tokenizer
from lopd.core.rollout import make_backend, step_seed
from lopd.core.trajectory import TokenBatch, Trajectory
from lopd.latent.bank import task_text
from lopd.latent.retrieval import QUERIES_FILE, TextEmbedder, load_vectors

TEMPLATE = ("Here is a skill summary from a similar past task that may help guide your approach:\n\n"
            "**What works:** {what_works}\n**What to avoid:** {what_to_avoid}\n**Suggested workflow:** {workflow}\n\n"
            "Now solve the current task using your own reasoning.")
SKILL = "skill"  # trajectory.metadata key: the bank index of the skill its teacher read
SUMMARY_SEED_RANK = 2_000  # the summariser's own seed stream


def render_skill(messages: Messages, skill: Skill) -> Messages:
    return append_to_user(messages, TEMPLATE.format(what_works=skill.what_works, what_to_avoid=skill.what_to_avoid,
                                                    workflow=skill.workflow))


class SkillSD(SelfDistillation):
    name = "skill_sd"
    teacher = "live"
    uses_advantages = True

    def __init__(self, cfg: Config, domain: Domain):
        super().__init__(cfg, domain)
        self.config = cfg.section(SkillSDConfig)
        self.bank_dir = domain.bank
        self.steps_done = 0

    @property
    def rollouts_per_task(self) -> int:
        return self.config.group_size

    def setup(self, ctx: MethodContext) -> None:
        super().setup(ctx)
        cfg = self.cfg
        query_ids, query_vectors = load_vectors(self.bank_dir / QUERIES_FILE)
        self.skills = SkillBank(TextEmbedder(cfg.bank.embedder), dict(zip(query_ids, query_vectors)),
                                cfg.bank.self_retrieval)
        summariser = self.config.summariser or ctx.base_dir
        self.summariser_tokenizer = load_tokenizer(summariser)
        # the HF sampler: a few short summaries a step do not repay a second vLLM engine, which took ~4.5 GB more
        # (measured on Qwen 0.5B on the CPU: with it, Skill-SD's first update went past 24 GB)
        hf = dataclasses.replace(cfg, sampling=dataclasses.replace(cfg.sampling, backend="hf"))
        self.summariser = make_backend(summariser, self.summariser_tokenizer, hf, cfg.sampling.batch_size)

    def inputs(self) -> list[Path]:
        own = self.config.summariser  # a local model folder, else a hub id (named in the config only)
        return [self.bank_dir / QUERIES_FILE, *([Path(own)] if own and Path(own).exists() else [])]

    def privileged_messages(self, trajectories: list[Trajectory]) -> list[Messages | None]:
        chosen: dict[int, int | None] = {}
        for traj in trajectories:  # one skill per task (group), chosen once
            if traj.group not in chosen:
                chosen[traj.group] = self.skills.select(traj.task_id, self.config.candidates,
                                                        self.config.ucb_c)
            traj.metadata[SKILL] = chosen[traj.group]
        return [None if t.metadata[SKILL] is None else render_skill(self.messages[t.task_id],
                                                                    self.skills.skills[t.metadata[SKILL]])
                for t in trajectories]

    def prepare(self, trajectories: list[Trajectory]) -> None:
        super().prepare(trajectories)
        advantages_B = group_advantages(torch.tensor([t.reward for t in trajectories], device="cpu"),
                                        torch.tensor([t.group for t in trajectories], device="cpu"))
        for traj, adv in zip(trajectories, advantages_B.tolist()):
            traj.advantage = adv

    def contributes(self, trajectory: Trajectory) -> bool:
        return trajectory.advantage != 0.0 or trajectory.metadata[TEACHER_MESSAGES] is not None

    def loss(self, student: PolicyOutputs, batch: TokenBatch,
             trajectories: list[Trajectory]) -> tuple[torch.Tensor, dict[str, float]]:
        c = self.config
        logp_B_T = student.logp_B_T()
        w_N = student.token_weights_N()  # train.tis_cap: weights both the PPO surrogate and the SDL term
        ppo, metrics = ppo_clip_loss(logp_B_T, logp_B_T.detach(), batch.advantages_B, batch.action_mask_B_T,
                                     c.clip_low, c.clip_high, None if w_N is None else student.scatter_B_T(w_N))
        hidden_t_N_D, weights_B, teacher_metrics = self.teacher_view(trajectories)
        logp_t_N = token_logprobs(hidden_t_N_D, self.teacher_model.weight_V_D, student.targets_N,
                                  student.temperature, student.chunk_size)
        logp_s_N = student.logp_N
        sdl_N = sampled_token_reverse_kl(logp_s_N, logp_t_N, importance_weights(logp_s_N, logp_s_N, c.is_clip))
        sdl, sdl_metrics = distillation_loss(sdl_N, student.sequence_N, weights_B, w_N)
        active = weights_B[student.sequence_N] > 0
        log_ratio = (logp_s_N - logp_t_N).detach()[active]
        return ppo + c.sdl_weight * sdl, {
            **metrics, **teacher_metrics, "ppo_loss": ppo.item(), "sdl_loss": sdl.item(),
            "kl_mean": log_ratio.mean().item() if log_ratio.numel() else 0.0, **student.tis_metrics(w_N)}

    def after_step(self, metrics: dict[str, float], trajectories: list[Trajectory]) -> dict[str, float]:
        out = super().after_step(metrics, trajectories)
        groups: dict[int, list[Trajectory]] = {}
        for traj in trajectories:
            groups.setdefault(traj.group, []).append(traj)
        for members in groups.values():
            if members[0].metadata[SKILL] is not None:
                self.skills.record(members[0].metadata[SKILL], sum(t.reward for t in members) / len(members))
        new = write_skills(self.summariser, self.summariser_tokenizer,
                           [self._summary_input(members) for members in groups.values()],
                           self.config.summary_tokens, self.cfg.sampling.temperature,
                           step_seed(self.cfg.seed, self.steps_done, SUMMARY_SEED_RANK))
        self.skills.add(new)
        self.steps_done += 1
        used = [i for i in {t.metadata[SKILL] for t in trajectories} if i is not None]
        return {**out, "skill_bank_size": len(self.skills.skills), "skills_used": len(used),
                "ucb_selections": sum(self.skills.counts),
                "ucb_mean_reward_used": (sum(self.skills.reward_sums[i] / self.skills.counts[i] for i in used)
                                         / len(used)) if used else 0.0}

    def _summary_input(self, members: list[Trajectory]) -> tuple[str, str, list[tuple[str, bool]]]:
        """The group's first passing and first failing attempt, for the summariser."""
        threshold = self.config.success_threshold
        attempts = []
        for passed in (True, False):
            traj = next((t for t in members if (t.reward >= threshold) == passed), None)
            if traj is not None:
                attempts.append((traj.response, passed))
        task_id = members[0].task_id
        return task_id, task_text(self.messages[task_id]), attempts

    def state_dict(self) -> dict[str, Any]:
        return {"skills": self.skills.state_dict(), "steps_done": self.steps_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skills.load_state_dict(state["skills"])
        self.steps_done = state["steps_done"]
