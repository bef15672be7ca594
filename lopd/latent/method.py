"""LOPD as a method of the shared loop (paper §3.3, Algorithm 1).

One on-policy rollout per task; the teacher is the frozen base checkpoint reading the task with the
latent context c_phi composed from retrieved bank entries, and its activations stay in the graph so
the loss reaches the composer. The objective per step is

    L_distill(theta, phi) + beta (m - Delta(phi)) + lambda ||c_phi - sg[c_phi0]||^2,

then beta <- [beta + eta_beta (m - Delta)]_+. The deployed student needs no bank, retriever or composer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState

from lopd.core.adapters import is_lora
from lopd.core.config import Config
from lopd.core.device import device
from lopd.core.losses import TopkTailReverseKL, chunked_distillation
from lopd.core.methods import Domain, Method, MethodContext, PolicyOutputs
from lopd.core.models import load_model, load_tensors
from lopd.core.trajectory import TokenBatch, Trajectory
from lopd.latent.bank import BankEntry, episode_turns, task_text
from lopd.latent.cold_start import COMPOSER_FILE
from lopd.latent.composer import FRAMINGS, Composer, compose, teacher_batch
from lopd.latent.config import LOPDConfig
from lopd.latent.losses import anchor_penalty, dual_update, lopd_loss
from lopd.latent.retrieval import TextEmbedder, document_text, load_bank


class LOPD(Method):
    name = "lopd"
    teacher = "frozen"
    rollouts_per_task = 1

    def __init__(self, cfg: Config, domain: Domain):
        super().__init__(cfg, domain)
        self.bank_dir, self.composer_dir = domain.bank, domain.composer
        self.framing, self.trace_of = FRAMINGS[domain.name], domain.bank_trace
        self.config = cfg.section(LOPDConfig)
        self.beta = self.config.beta_init
        self.grown: list[BankEntry] = []

    def setup(self, ctx: MethodContext) -> None:
        cfg = self.cfg
        self.accelerator, self.tokenizer = ctx.accelerator, ctx.tokenizer
        # the frozen teacher is the base model: a LoRA student's own base (its adapter off), else a copy
        backbone = ctx.student if is_lora(ctx.student) else load_model(ctx.base_dir)
        self.composer = Composer(backbone, ctx.tokenizer, cfg.composer, cfg.latent_tokens).to(device())
        if not (self.composer_dir / COMPOSER_FILE).exists():
            raise FileNotFoundError(f"{self.composer_dir / COMPOSER_FILE}: not found (run the cold_start stage)")
        self.phi0 = load_tensors(self.composer_dir / COMPOSER_FILE, map_location="cpu")
        self.composer.load_trainable_state(self.phi0)
        for _, p in self.composer.own_parameters():  # phi: the encoder adapter and the QFormer
            p.requires_grad_(self.config.train_composer)
        self.anchors: dict[str, dict] = {}
        """c_phi0 of each task trained on so far: {task_id: {"entries": retrieved bank indices, "latents":
        [J*K, D]}}, composed by phi_0 when the task first comes up (`_anchors`)."""
        self.bank, self.retriever = load_bank(self.bank_dir, cfg.bank.self_retrieval)
        if not self.bank and PartialState().is_main_process:  # e.g. a base model that solved no training task
            grows = " until it grows (bank.grow_during_training)" if cfg.bank.grow_during_training else ""
            print(f"warning: {self.bank_dir}: the bank is empty, so the teacher reads no privileged context{grows}: "
                  "this trains as self-distillation, not LOPD")
        self.messages = {t.task_id: t.messages for t in ctx.tasks}
        self.tools = {t.task_id: t.tools for t in ctx.tasks}
        self.embedder = TextEmbedder(cfg.bank.embedder) if cfg.bank.grow_during_training else None

    def inputs(self) -> list[Path]:
        return [self.bank_dir, self.composer_dir]

    def param_groups(self) -> list[dict[str, Any]]:
        params = [p for _, p in self.composer.own_parameters() if p.requires_grad]
        return [{"params": params, "lr": self.config.composer_lr}] if params else []

    def prepare(self, trajectories: list[Trajectory]) -> None:
        for traj in trajectories:  # the verification signal A = 2r - 1
            traj.advantage = 2.0 * traj.reward - 1.0

    def _latents(self, trajectories: list[Trajectory]) -> tuple[list[torch.Tensor], list[tuple[torch.Tensor, ...]]]:
        """c_phi per trajectory, and the (c_phi, c_phi0) pairs its anchor compares. A frozen composer reuses
        c_phi0; entries the bank gained after a task's c_phi0 was composed have none and are not anchored."""
        retrieved = [self.retriever.retrieve(t.task_id, self.cfg.n_ret) for t in trajectories]
        cached = self._anchors([t.task_id for t in trajectories])
        if not self.config.train_composer and all(c["entries"] == r for c, r in zip(cached, retrieved)):
            return [c["latents"] for c in cached], []
        latents = compose(self.composer, [task_text(self.messages[t.task_id]) for t in trajectories],
                          [[self.bank[i].trace for i in idx] for idx in retrieved])
        k = self.cfg.latent_tokens
        pairs = []
        for lat, idx, c in zip(latents, retrieved, cached):
            rows = [(j, c["entries"].index(i)) for j, i in enumerate(idx) if i in c["entries"]]
            pairs.append((torch.cat([lat[j * k:(j + 1) * k] for j, _ in rows]) if rows else lat[:0],
                          torch.cat([c["latents"][m * k:(m + 1) * k] for _, m in rows]) if rows else lat[:0]))
        return latents, pairs

    def _anchors(self, task_ids: list[str]) -> list[dict]:
        """c_phi0 of each task: phi_0's latent context of the entries retrieved for it when it first comes up, composed
        one task at a time (the same numbers whichever tasks share its step, so a resumed run equals an uninterrupted
        one) with phi_0's weights swapped in for the moment, outside any graph."""
        new = [t for t in dict.fromkeys(task_ids) if t not in self.anchors]
        if new:
            trained = self.composer.trainable_state() if self.config.train_composer else None
            if trained is not None:
                self.composer.load_trainable_state(self.phi0)
            with torch.no_grad(), self.accelerator.autocast():
                for task_id in new:
                    entries = self.retriever.retrieve(task_id, self.cfg.n_ret)
                    (latents,) = compose(self.composer, [task_text(self.messages[task_id])],
                                         [[self.bank[i].trace for i in entries]])
                    self.anchors[task_id] = {"entries": entries, "latents": latents.float()}
            if trained is not None:
                self.composer.load_trainable_state(trained)
        return [self.anchors[t] for t in task_ids]

    def loss(self, student: PolicyOutputs, batch: TokenBatch,
             trajectories: list[Trajectory]) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.cfg
        # A frozen composer gives the teacher nothing to learn: its pass needs no graph.
        grad = torch.enable_grad() if self.config.train_composer else torch.no_grad()
        with grad, self.accelerator.autocast():
            latents, anchored = self._latents(trajectories)
            teacher, starts = teacher_batch(self.tokenizer, trajectories,
                                            [self.messages[t.task_id] for t in trajectories], self.framing,
                                            [lat.shape[0] for lat in latents], self.tokenizer.pad_token_id,
                                            [self.tools[t.task_id] for t in trajectories], self.composer.device)
            hidden_B_L_D = self.composer.teacher_hidden(teacher, latents, starts)
        where_B_T = teacher.action_mask_B_T > 0
        hidden_t_N_D = hidden_B_L_D[:, :-1][where_B_T]
        assert hidden_t_N_D.shape == student.hidden_N_D.shape, "teacher and student action positions differ"
        kl_N, logp_s_N, logp_t_N = chunked_distillation(
            student.hidden_N_D, student.weight_V_D, hidden_t_N_D, self.composer.backbone.get_output_embeddings().weight,
            student.targets_N, TopkTailReverseKL(self.config.top_m, support="teacher"),
            student.temperature, student.chunk_size)
        student.logp_N = logp_s_N
        w_N = student.token_weights_N()  # train.tis_cap: weights the KL only; None when off
        anchor = (anchor_penalty([c for c, _ in anchored], [c0 for _, c0 in anchored]) if anchored
                  else kl_N.new_zeros(()))
        # The privilege margin Delta stays unweighted: it is the paper's constraint (eq. 11) as defined, which the
        # dual update compares with the margin m.
        loss, metrics = lopd_loss(kl_N, logp_t_N, logp_s_N, student.sequence_N, batch.advantages_B, self.beta,
                                  cfg.margin, anchor, self.config.anchor_weight, w_N)
        metrics.update(student.tis_metrics(w_N))
        metrics["beta"] = self.beta
        metrics["latent_tokens_mean"] = sum(lat.shape[0] for lat in latents) / len(latents)
        return loss, metrics

    def after_step(self, metrics: dict[str, float], trajectories: list[Trajectory]) -> dict[str, float]:
        if self.config.margin_constraint:
            self.beta = dual_update(self.beta, self.cfg.margin, metrics["privilege_margin"], self.config.dual_lr)
        if self.embedder is not None:
            self._grow([t for t in trajectories if t.reward >= self.cfg.bank.success_threshold])
        return {"beta_next": self.beta, "bank_size": len(self.bank)}

    def _grow(self, successes: list[Trajectory]) -> None:
        new = []
        for traj in successes:
            response = traj.response
            new.append(BankEntry(traj.task_id, task_text(self.messages[traj.task_id]), self.trace_of(response),
                                 response, traj.reward, episode_turns(traj)))
        if new:
            self.retriever.add(self.embedder.embed([document_text(e) for e in new]), [e.task_id for e in new])
            self.bank.extend(new)
            self.grown.extend(new)

    def state_dict(self) -> dict[str, Any]:
        return {"beta": self.beta, "composer": self.composer.trainable_state(),
                "grown": [vars(e) for e in self.grown]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.beta = state["beta"]
        self.composer.load_trainable_state(state["composer"])
        grown = [BankEntry(**e) for e in state["grown"]]
        if grown:
            self.retriever.add(self.embedder.embed([document_text(e) for e in grown]), [e.task_id for e in grown])
            self.bank.extend(grown)
            self.grown = grown
