"""Skill-SD's skill bank: structured summaries written from rollout groups, chosen per task by UCB1.

A skill is what a summariser model wrote about one task's rollout group: "What works", "What to avoid"
and a "Suggested workflow" (one short generation each, so a small model can never produce a malformed
skill). For a task, the skills of the most similar past tasks are the candidates (dense retrieval, the
task's own skills excluded unless self-retrieval is on) and UCB1 picks one on the rewards it has yielded.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from transformers import PreTrainedTokenizerBase

from lopd.core.rollout import encode_prompt
from lopd.core.sampling import SamplingParams
from lopd.latent.retrieval import Retriever, TextEmbedder

SECTIONS = ("what_works", "what_to_avoid", "workflow")
QUESTIONS = {
    "what_works": "In two or three sentences: what approach works for this task, and why?",
    "what_to_avoid": "In two or three sentences: which mistakes should be avoided on this task?",
    "workflow": "In three to five short numbered steps: what workflow solves this kind of task?",
}
SUMMARISER_SYSTEM = "You review attempts at a task and write short, reusable advice for similar tasks."


@dataclass(frozen=True)
class Skill:
    task_id: str
    task: str
    what_works: str
    what_to_avoid: str
    workflow: str


def ucb1_choice(means: list[float], counts: list[int], total: int, c: float) -> int:
    """UCB1: the arm maximising mean + c sqrt(ln total / count); an untried arm first; ties: the first."""
    best, best_score = 0, -math.inf
    for i, (mean, n) in enumerate(zip(means, counts)):
        score = math.inf if n == 0 else mean + c * math.sqrt(math.log(max(total, 1)) / n)
        if score > best_score:
            best, best_score = i, score
    return best


def summary_prompts(task: str, attempts: list[tuple[str, bool]]) -> list[list[dict[str, str]]]:
    """The summariser's three chat prompts (one per section) for a task and its attempts (text, succeeded)."""
    shown = "\n\n".join(f"Attempt {i + 1} ({'passed' if ok else 'failed'}):\n{text.strip()}"
                        for i, (text, ok) in enumerate(attempts))
    return [[{"role": "system", "content": SUMMARISER_SYSTEM},
             {"role": "user", "content": f"Task:\n{task.strip()}\n\n{shown}\n\n{QUESTIONS[s]}"}] for s in SECTIONS]


def skill_document(skill: Skill) -> str:
    """What the retriever embeds for a skill: the task it came from and its advice."""
    return f"{skill.task}\n{skill.what_works}\n{skill.what_to_avoid}\n{skill.workflow}"


class SkillBank:
    def __init__(self, embedder: TextEmbedder, query_vectors: dict[str, np.ndarray], self_retrieval: bool):
        self.embedder = embedder
        self.retriever = Retriever(np.zeros((0, 1), dtype=np.float32), [], query_vectors, self_retrieval)
        self.skills: list[Skill] = []
        self.counts: list[int] = []
        self.reward_sums: list[float] = []

    def add(self, skills: list[Skill]) -> None:
        if skills:
            self.retriever.add(self.embedder.embed([skill_document(s) for s in skills]), [s.task_id for s in skills])
            self.skills += skills
            self.counts += [0] * len(skills)
            self.reward_sums += [0.0] * len(skills)

    def select(self, task_id: str, candidates: int, c: float) -> int | None:
        """UCB1 over the skills of the `candidates` most similar past tasks; None while there are none."""
        pool = self.retriever.retrieve(task_id, candidates)
        if not pool:
            return None
        means = [self.reward_sums[i] / self.counts[i] if self.counts[i] else 0.0 for i in pool]
        return pool[ucb1_choice(means, [self.counts[i] for i in pool], sum(self.counts), c)]

    def record(self, index: int, reward: float) -> None:
        self.counts[index] += 1
        self.reward_sums[index] += reward

    def state_dict(self) -> dict:
        return {"skills": [asdict(s) for s in self.skills], "counts": self.counts, "reward_sums": self.reward_sums}

    def load_state_dict(self, state: dict) -> None:
        self.add([Skill(**s) for s in state["skills"]])
        self.counts, self.reward_sums = list(state["counts"]), list(state["reward_sums"])


def write_skills(backend, tokenizer: PreTrainedTokenizerBase, groups: list[tuple[str, str, list[tuple[str, bool]]]],
                 max_tokens: int, temperature: float, seed: int) -> list[Skill]:
    """One skill per (task_id, task text, attempts) group, written by the summariser behind `backend`."""
    prompts = [encode_prompt(tokenizer, p) for _, task, attempts in groups for p in summary_prompts(task, attempts)]
    if not prompts:
        return []
    params = SamplingParams(temperature=temperature, top_p=0.95, top_k=20, max_new_tokens=max_tokens)
    texts = [tokenizer.decode(c.token_ids, skip_special_tokens=True).strip() or "(none)"
             for c in backend.generate(prompts, params, seed)]
    n = len(SECTIONS)
    return [Skill(task_id, task, *texts[g * n:(g + 1) * n]) for g, (task_id, task, _) in enumerate(groups)]
