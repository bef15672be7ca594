"""Latent decoding (paper §4.4, Fig. 6): the composer's latent tokens read through the frozen LM head.

For a task and its rank-2 retrieved bank entry, the composer encodes the entry with the task, as the teacher's
context is built in training, and without it (the trace alone). Each of the K latent tokens is projected by the
backbone's LM head, its output embedding matrix applied to the latent vector as it is, without the final norm:
latents live in the input-embedding space the teacher reads them from, and with tied embeddings (Qwen 0.5B,
SmolLM2) the projection ranks vocabulary tokens by their dot product with the latent. Two numbers summarise what
the paper reads off its examples: how many latent positions change their top token when the task is added, and
how many top tokens occur in the retrieved trace (a latent that copied the trace would score near 1).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch

from lopd.core.rollout import Task
from lopd.latent.bank import BankEntry, task_text
from lopd.latent.composer import Composer, encoder_text, trace_text
from lopd.latent.retrieval import Retriever

RANK = 2
"""Which retrieval each example pairs with (the paper's figure: a structurally related rank-2 retrieval)."""


@dataclass
class DecodedExample:
    task_id: str
    task: str
    retrieved_task_id: str
    retrieved_trace: str
    with_task: list[list[str]]
    """Per latent token, its top tokens (best first, each decoded on its own) when the composer reads task and
    trace."""
    without_task: list[list[str]]
    """The same for the trace alone."""
    changed_by_task: float
    """Fraction of latent positions whose top token differs between the two."""
    top_in_trace: float
    """Fraction of the with-task top tokens that are among the retrieved trace's tokens."""


def top_tokens(latents_K_D: torch.Tensor, lm_head_V_D: torch.Tensor, k: int) -> torch.Tensor:
    """Ids of the k vocabulary tokens with the largest LM-head logit for each latent token: [K, k], best first."""
    return (latents_K_D.float() @ lm_head_V_D.float().T).topk(k, dim=-1).indices


def pick_examples(tasks: Sequence[Task], retriever: Retriever, n: int, seed: int) -> list[tuple[Task, int]]:
    """`n` tasks (a seeded sample of those with a rank-2 retrieval) and the bank index of that retrieval."""
    ranked = [(t, hits[RANK - 1]) for t in tasks if len(hits := retriever.retrieve(t.task_id, RANK)) >= RANK]
    return random.Random(seed).sample(ranked, min(n, len(ranked)))


@torch.no_grad()
def decode_examples(composer: Composer, tokenizer, examples: Sequence[tuple[Task, int]], bank: list[BankEntry],
                    top_k: int) -> list[DecodedExample]:
    """Every example's latent tokens, with and without the task, as their top LM-head tokens."""
    lm_head_V_D = composer.backbone.get_output_embeddings().weight
    out = []
    for task, index in examples:
        entry, text = bank[index], task_text(task.messages)
        latents_2_K_D = composer.encode([[encoder_text(text, entry.trace), trace_text(entry.trace)]])[0]
        with_ids, without_ids = (top_tokens(lat, lm_head_V_D, top_k) for lat in latents_2_K_D)
        trace_ids = set(tokenizer(entry.trace, add_special_tokens=False)["input_ids"])
        out.append(DecodedExample(
            task.task_id, text, entry.task_id, entry.trace,
            [[tokenizer.decode([i]) for i in row.tolist()] for row in with_ids],
            [[tokenizer.decode([i]) for i in row.tolist()] for row in without_ids],
            (with_ids[:, 0] != without_ids[:, 0]).float().mean().item(),
            sum(i in trace_ids for i in with_ids[:, 0].tolist()) / with_ids.shape[0]))
    return out


def _cell(text: str, limit: int) -> str:
    """Text for one markdown table cell: whitespace made visible, pipes escaped, cut at `limit` characters."""
    flat = text.replace("\n", "⏎").replace("\t", "⇥").replace("|", "\\|")
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def _tokens(rows: list[list[str]]) -> str:
    return " · ".join(f"`{_cell(row[0], 20).replace('`', 'ˋ') or '∅'}`" for row in rows)


def markdown(sections: Sequence[tuple[str, str, list[DecodedExample]]], latent_tokens: int) -> str:
    """The case study as markdown: per domain (name, which composer, examples) a summary line, then each example's
    task, its rank-2 retrieval and the top-1 LM-head token of every latent token, with and without the task."""
    lines = ["# Latent decoding (paper §4.4, Fig. 6)", "",
             f"Each example pairs a training task with its rank-{RANK} retrieved bank entry; the composer encodes the "
             f"entry with the task and without it, and each of its {latent_tokens} latent tokens is projected by the "
             "frozen LM head (output embeddings, no final norm). Shown: every latent token's top-1 token, in order; "
             "`latent_decode.csv` has the top tokens of each. *changed by task*: share of latent positions whose top "
             "token differs when the task is added; *in trace*: share of the with-task top tokens that occur in the "
             "retrieved trace.", ""]
    for domain, source, examples in sections:
        lines += [f"## {domain}", "", f"Composer: {source}.", ""]
        if not examples:
            lines += ["n/a: no training task has a rank-2 retrieval in this bank.", ""]
            continue
        changed = sum(e.changed_by_task for e in examples) / len(examples)
        in_trace = sum(e.top_in_trace for e in examples) / len(examples)
        lines += [f"{len(examples)} examples; mean changed by task {changed:.2f}, mean in trace {in_trace:.2f}.", ""]
        for e in examples:
            lines += [f"### {e.task_id} ← {e.retrieved_task_id}", "",
                      f"Task: {_cell(e.task, 300)}", "", f"Retrieved trace: {_cell(e.retrieved_trace, 300)}", "",
                      "| | top-1 token of each latent token | changed by task | in trace |", "|---|---|---:|---:|",
                      f"| with task | {_tokens(e.with_task)} | {e.changed_by_task:.2f} | {e.top_in_trace:.2f} |",
                      f"| without task | {_tokens(e.without_task)} | | |", ""]
    return "\n".join(lines)


def csv_rows(domain: str, examples: Sequence[DecodedExample]) -> list[dict[str, object]]:
    """One row per (example, condition, latent token, rank): the long form of the case study."""
    return [{"domain": domain, "task_id": e.task_id, "retrieved_task_id": e.retrieved_task_id, "condition": condition,
             "latent": latent, "rank": rank + 1, "token": token}
            for e in examples for condition, rows in (("with_task", e.with_task), ("without_task", e.without_task))
            for latent, row in enumerate(rows) for rank, token in enumerate(row)]
