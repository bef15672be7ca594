"""How much privilege the latent context carries (paper §3.2): the frozen teacher's mean NLL per action token of
held-out successful trajectories (bank entries whose tasks the cold start never trains on), read

- with no context (the student's own prompt),
- with the latent context the composer builds from the trajectory's retrieved experiences (retrieved as in training),
- with the same experiences as text in the same framing, under the cold start's retrieval and under self-retrieval
  (the task's own entries, its solution among them); the better of the two is the text reference.

The share of the text gap the latents close, (none - latent) / (none - text), says whether the composer carries what
the experiences hold: 0 is no better than no context, 1 as good as reading them. It has no value where text does not
lower the NLL (nothing to carry).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from accelerate import Accelerator

from lopd.core.losses import sequence_means, token_logprobs
from lopd.core.rollout import Task
from lopd.core.trajectory import collate, with_prompt
from lopd.latent.bank import BankEntry
from lopd.latent.composer import Composer, compose, teacher_prompt_ids, text_context_prompt_ids
from lopd.latent.retrieval import Retriever


def held_out_task_ids(entries: Sequence[BankEntry], n_tasks: int, seed: int) -> set[str]:
    """A seeded sample of `n_tasks` of the bank's tasks (pure), or none where the bank has no more tasks than that
    (holding them all out would leave the cold start nothing to train on)."""
    tasks = sorted({e.task_id for e in entries})
    return set(random.Random(seed).sample(tasks, n_tasks)) if len(tasks) > n_tasks else set()


@dataclass(frozen=True)
class HeldOut:
    """The held-out trajectories and what each one's teacher reads."""

    entries: list[BankEntry]
    tasks: list[Task]
    retrieved: list[list[int]]
    """Bank indices as training retrieves them (the entry's own task excluded unless self-retrieval is on)."""
    own: list[list[int]]
    """Bank indices under self-retrieval."""

    @classmethod
    def of(cls, bank: list[BankEntry], task_ids: set[str], tasks_by_id: dict[str, Task], retriever: Retriever,
           self_retriever: Retriever, n_ret: int) -> HeldOut:
        entries = [e for e in bank if e.task_id in task_ids]
        return cls(entries, [tasks_by_id[e.task_id] for e in entries],
                   [retriever.retrieve(e.task_id, n_ret) for e in entries],
                   [self_retriever.retrieve(e.task_id, n_ret) for e in entries])


def action_nlls(composer: Composer, tokenizer, entries: list[BankEntry], prompts: list[tuple[list[int], int]],
                latents: list[torch.Tensor], accelerator: Accelerator) -> torch.Tensor:
    """[N] each entry's mean NLL per action token (its episode as sampled after the prompt `prompts[i]` = (ids, first
    latent slot), the environment's tokens read, not scored) under the frozen backbone with `latents[i]` in the
    prompt's latent span (empty: a prompt without one)."""
    batch = collate([with_prompt(e.episode(), ids) for e, (ids, _) in zip(entries, prompts)], tokenizer.pad_token_id,
                    composer.device)
    with accelerator.autocast():
        hidden_B_L_D = composer.teacher_hidden(batch, latents, [start for _, start in prompts])
    where_B_T = batch.action_mask_B_T > 0
    logp_N = token_logprobs(hidden_B_L_D[:, :-1][where_B_T], composer.backbone.get_output_embeddings().weight,
                            batch.target_ids_B_T[where_B_T])
    return -sequence_means(logp_N, where_B_T.nonzero()[:, 0], len(entries))


def latent_nlls(composer: Composer, tokenizer, entries: list[BankEntry], retrieved: list[list[int]],
                bank: list[BankEntry], tasks: list[Task], framing: tuple[str, str],
                accelerator: Accelerator) -> torch.Tensor:
    """[N] `action_nlls` with the latent context composed from each entry's retrieved entries (the cold start's
    objective)."""
    with accelerator.autocast():
        latents = compose(composer, [e.task for e in entries], [[bank[i].trace for i in idx] for idx in retrieved])
    prompts = [teacher_prompt_ids(tokenizer, t.messages, framing, lat.shape[0], t.tools)
               for t, lat in zip(tasks, latents)]
    return action_nlls(composer, tokenizer, entries, prompts, latents, accelerator)


def context_free_nlls(composer: Composer, tokenizer, entries: list[BankEntry], tasks: list[Task],
                      texts: list[list[str]] | None, framing: tuple[str, str],
                      accelerator: Accelerator) -> torch.Tensor:
    """[N] `action_nlls` reading no context (`texts` None) or each entry's `texts[i]` traces as text."""
    empty = torch.zeros(0, composer.backbone.config.hidden_size, device=composer.device)
    prompts = [teacher_prompt_ids(tokenizer, t.messages, framing, 0, t.tools) if texts is None else
               (text_context_prompt_ids(tokenizer, t.messages, framing, texts[i], t.tools), 0)
               for i, t in enumerate(tasks)]
    return action_nlls(composer, tokenizer, entries, prompts, [empty] * len(entries), accelerator)


Mean = Callable[[list[int], Callable[[list[int]], torch.Tensor]], float]
"""mean(indices, nlls_of): the mean over `indices` of `nlls_of(batch of indices)` ([len(batch)]), taken in batches
and shared over the processes (the cold start's)."""


def reference_nlls(composer: Composer, tokenizer, held: HeldOut, bank: list[BankEntry], framing: tuple[str, str],
                   accelerator: Accelerator, mean: Mean) -> dict:
    """The composer-free numbers: no context, and the experiences as text under both retrievals."""
    every = list(range(len(held.entries)))

    def free(indices: list[list[int]] | None) -> Callable[[list[int]], torch.Tensor]:
        return lambda batch: context_free_nlls(
            composer, tokenizer, [held.entries[i] for i in batch], [held.tasks[i] for i in batch],
            None if indices is None else [[bank[j].trace for j in indices[i]] for i in batch], framing, accelerator)

    none, retrieved, own = (mean(every, free(indices)) for indices in (None, held.retrieved, held.own))
    text, text_retrieval = min((retrieved, "retrieved"), (own, "self"))
    return {"n_trajectories": len(every), "nll_none": none, "nll_text": text, "text_retrieval": text_retrieval,
            "nll_text_retrieved": retrieved, "nll_text_self": own}


def held_out_latent_nll(composer: Composer, tokenizer, held: HeldOut, bank: list[BankEntry], framing: tuple[str, str],
                        accelerator: Accelerator, mean: Mean) -> float:
    return mean(list(range(len(held.entries))), lambda batch: latent_nlls(
        composer, tokenizer, [held.entries[i] for i in batch], [held.retrieved[i] for i in batch], bank,
        [held.tasks[i] for i in batch], framing, accelerator))


def latent_geometry(latents: list[torch.Tensor], k: int, embed_rms: float) -> dict[str, float]:
    """How the latent tokens ([J*K, D] per task, K a retrieved item) sit among token embeddings: their RMS per
    coordinate against the embedding table's (`latent_rms_ratio`, 1 at the table's scale) and the mean cosine between
    two latents of one item (`latent_cosine`, 1 when an item's K latents collapse to one direction)."""
    items_N_K_D = torch.cat([lat.float().reshape(-1, k, lat.shape[-1]) for lat in latents if lat.numel()])
    unit_N_K_D = torch.nn.functional.normalize(items_N_K_D, dim=-1)
    cosines_N_K_K = unit_N_K_D @ unit_N_K_D.transpose(1, 2)
    off_diagonal = ~torch.eye(k, dtype=torch.bool, device=cosines_N_K_K.device)
    return {"latent_rms_ratio": float(items_N_K_D.pow(2).mean().sqrt()) / embed_rms,
            "latent_cosine": float(cosines_N_K_K[:, off_diagonal].mean())}


@torch.no_grad()
def held_out_latent_geometry(composer: Composer, held: HeldOut, bank: list[BankEntry],
                             accelerator: Accelerator) -> dict[str, float]:
    """`latent_geometry` of the held-out tasks' latent context (each task once)."""
    groups = {(e.task, tuple(idx)): None for e, idx in zip(held.entries, held.retrieved) if idx}
    if not groups:
        return {}
    with accelerator.autocast():
        latents = compose(composer, [task for task, _ in groups], [[bank[i].trace for i in idx] for _, idx in groups])
    embed_rms = float(composer.backbone.get_input_embeddings().weight.detach().float().pow(2).mean().sqrt())
    return latent_geometry(latents, composer.qformer.queries_K_D.shape[0], embed_rms)


def share_note(share: float | None) -> str:
    """`share_closed` in words."""
    return ("n/a: text does not lower the NLL, no gap to close" if share is None else
            f"the latents close {share:.1%} of the text gap")


def share_closed(nll_none: float, nll_latent: float, nll_text: float) -> float | None:
    """The share of the text gap the latents close (module docstring); None where text is no better than nothing."""
    gap = nll_none - nll_text
    return (nll_none - nll_latent) / gap if gap > 0 else None
