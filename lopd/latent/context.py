"""Latent context at inference: the paper's "Base + Composer" (Table 3), the unadapted backbone reading each task with
the latent privileged context that LOPD's trained composer builds from the task's retrieved bank entries, exactly as
the teacher reads it in training. (The trained student never sees latent context: LOPD is evaluated without it.)

`LatentContextBackend` wraps a rollout backend, so every rollout path (single-turn evaluation, multi-turn episodes)
runs unchanged: a registered task's prompt is replaced by the teacher's framed prompt with the latent span (anything
after it, e.g. later turns of an episode, is kept), and it reaches the engine as input embeddings, the latent tokens
spliced in. Retrieval is training's: the task's query embedding against the bank, `n_ret` entries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import torch

from lopd.core import checkpoint
from lopd.core.config import Config, repo_relative
from lopd.core.device import device
from lopd.core.models import load_tensors
from lopd.core.rollout import Task, encode_prompt
from lopd.core.sampling import Completion, RolloutBackend, SamplingParams
from lopd.latent.bank import BankEntry, task_text
from lopd.latent.cold_start import COMPOSER_FILE, build_composer
from lopd.latent.composer import Composer, compose, teacher_prompt_ids
from lopd.latent.retrieval import Retriever, TextEmbedder, load_bank, query_text

BASE_COMPOSER = "base_composer"
"""The evaluation's name for the base model with latent context (results/…/base_composer/, eval_base_composer)."""


def trained_composer(cfg: Config, base_dir: str | Path, composer_dir: str | Path,
                     lopd_checkpoint: str | Path) -> tuple[Composer, object, str]:
    """The composer as LOPD left it (its checkpoint's method state), else phi_0 from the cold start; with the
    tokenizer and which of the two it is."""
    composer, tokenizer = build_composer(cfg, base_dir)
    trained = checkpoint.load(lopd_checkpoint) if Path(lopd_checkpoint).exists() else None
    if trained is not None:
        composer.load_trainable_state(trained.state["method"]["composer"])
        source = f"LOPD after {trained.state['step']} steps ({repo_relative(lopd_checkpoint)})"
        return composer.eval(), tokenizer, source
    path = Path(composer_dir) / COMPOSER_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found (run the cold_start stage)")
    composer.load_trainable_state(load_tensors(path, map_location=device()))
    return composer.eval(), tokenizer, f"phi_0, the cold start's ({repo_relative(path)}): no LOPD checkpoint"


class LatentContextBackend:
    """A rollout backend whose registered tasks are read with latent context (module docstring)."""

    def __init__(self, inner: RolloutBackend, tokenizer, composer: Composer, bank: list[BankEntry],
                 retriever: Retriever, embedder: TextEmbedder, cfg: Config, framing: tuple[str, str], *,
                 continue_final: bool = False, batch_size: int = 8):
        self.inner, self.tokenizer, self.composer, self.bank = inner, tokenizer, composer, bank
        self.retriever, self.embedder, self.cfg, self.framing = retriever, embedder, cfg, framing
        self.continue_final, self.batch_size = continue_final, batch_size
        self.contexts: dict[tuple[int, ...], tuple[list[int], int, torch.Tensor]] = {}
        """Student prompt -> (teacher prompt with latent slots, first slot, latent tokens [J*K, D])."""
        self.retrieved: dict[str, list[int]] = {}
        """Task id -> the bank entries its context was composed from (recorded in the results)."""
        self._lengths: list[int] = []  # of the registered prompts, longest first (a prompt may extend one)

    @property
    def stats(self) -> dict[str, float]:
        return self.inner.stats

    @torch.no_grad()
    def add_tasks(self, tasks: Sequence[Task]) -> None:
        """Retrieve and compose each task's latent context and register its prompt (batched encoder passes); a
        prompt already registered is kept."""
        prompts = [tuple(encode_prompt(self.tokenizer, t.messages, t.tools, continue_final=self.continue_final))
                   for t in tasks]
        new = [(task, prompt) for prompt, task in dict(zip(prompts, tasks)).items() if prompt not in self.contexts]
        queries = self.embedder.embed([query_text(task_text(t.messages), self.cfg.bank.query_instruction)
                                       for t, _ in new]) if new else []
        for i in range(0, len(new), self.batch_size):
            chunk = new[i:i + self.batch_size]
            retrieved = [self.retriever.search(q, self.cfg.n_ret, t.task_id)
                         for (t, _), q in zip(chunk, queries[i:i + self.batch_size])]
            latents = compose(self.composer, [task_text(t.messages) for t, _ in chunk],
                              [[self.bank[j].trace for j in idx] for idx in retrieved])
            for (task, student), idx, lat in zip(chunk, retrieved, latents):
                teacher, start = teacher_prompt_ids(self.tokenizer, task.messages, self.framing, lat.shape[0],
                                                    task.tools, continue_final=self.continue_final)
                self.contexts[student] = (teacher, start, lat.float().cpu())
                self.retrieved[task.task_id] = idx
        self._lengths = sorted({len(s) for s in self.contexts}, reverse=True)

    def _with_context(self, prompt: Sequence[int]) -> tuple[list[int], torch.Tensor]:
        """The prompt as the teacher reads it (ids, and input embeddings with the latent span spliced in)."""
        for length in self._lengths:
            if (found := self.contexts.get(tuple(prompt[:length]))) is not None:
                teacher, start, latents = found
                ids = [*teacher, *prompt[length:]]
                # the table, not the embedding module: checkpointing's hook on it would make the output need grads
                table_V_D = self.composer.backbone.get_input_embeddings().weight
                with torch.no_grad():
                    embeds = table_V_D[torch.tensor(ids, device=table_V_D.device)].float().cpu()
                embeds[start:start + latents.shape[0]] = latents
                return ids, embeds
        raise KeyError("LatentContextBackend: a prompt of no registered task (add_tasks first)")

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int) -> list[Completion]:
        ids, embeds = zip(*map(self._with_context, prompts)) if prompts else ((), ())
        return self.inner.generate(list(ids), params, seed, embeds=list(embeds))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        raise RuntimeError("LatentContextBackend serves the frozen base model: nothing trains it")

    def sleep(self) -> None:
        self.inner.sleep()

    def wake_up(self) -> None:
        self.inner.wake_up()


class RegisteringEnvironment:
    """A tool environment whose `reset` also registers its task with a `LatentContextBackend` (a multi-turn
    episode's first prompt is built from what `reset` returns); everything else is the environment's own."""

    def __init__(self, env, task_id: str, backend: LatentContextBackend):
        self._env, self._task_id, self._backend = env, task_id, backend

    def reset(self):
        messages, tools = self._env.reset()
        self._backend.add_tasks([Task(self._task_id, messages, tuple(tools))])
        return messages, tools

    def __getattr__(self, name: str):
        return getattr(self._env, name)


def latent_context_backend(cfg: Config, inner: RolloutBackend, tokenizer, base_dir: str | Path, bank_dir: str | Path,
                           composer_dir: str | Path, lopd_checkpoint: str | Path, framing: tuple[str, str], *,
                           continue_final: bool = False) -> tuple[LatentContextBackend, str]:
    """`inner` (serving the base model, built with prompt embeddings on) wrapped with LOPD's trained composer, the
    domain's bank and the training retriever; and which composer it is."""
    bank, retriever = load_bank(bank_dir, cfg.bank.self_retrieval)
    composer, _, source = trained_composer(cfg, base_dir, composer_dir, lopd_checkpoint)
    return LatentContextBackend(inner, tokenizer, composer, bank, retriever, TextEmbedder(cfg.bank.embedder), cfg,
                                framing, continue_final=continue_final), source
