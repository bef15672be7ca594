"""How each pool teacher expects a response to open: the probability that its first token opens a code fence, under
the student (the task alone) and under SDFT's and OPSD's teachers (the task with the demonstration in the method's
template), at step 0, on the learning race's held-in tasks -> reports/tables/teacher_openings.md.

Why SDFT's completions run to the length cap (docs/results.md, "The learning race"): its template asks for "a
response of your own, including the thinking process", so its teacher opens with prose where the student opens with
code, and distilling towards it lengthens every completion.

Run: python scripts/teacher_openings.py [--model-dir models/base]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from baselines.opsd import OPSD  # noqa: E402
from baselines.pool import POOL_FILE, load_pool  # noqa: E402
from baselines.sdft import SDFT  # noqa: E402
from lopd.core.config import load_config  # noqa: E402
from lopd.core.jsonl import read_json  # noqa: E402
from lopd.core.models import load_model, load_tokenizer  # noqa: E402
from lopd.core.rollout import encode_prompt  # noqa: E402
from pipelines.common import BASE_MODEL_DIR, DOMAINS, LEARN_SELECTION, run_stage, training_domain  # noqa: E402

OUT = REPO / "reports" / "tables" / "teacher_openings.md"


def fence_ids(tokenizer) -> list[int]:
    """The vocabulary's tokens that open a Markdown code fence (```, ```python, ...)."""
    return [i for token, i in tokenizer.get_vocab().items() if tokenizer.convert_tokens_to_string([token])
            .lstrip().startswith("```")]


@torch.no_grad()
def opening_mass(model, prompt_ids: list[int], token_ids: list[int]) -> float:
    """The probability, at temperature 1, that the response to `prompt_ids` starts with one of `token_ids`."""
    logits_V = model(torch.tensor([prompt_ids])).logits[0, -1].float()
    return logits_V.softmax(-1)[token_ids].sum().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=BASE_MODEL_DIR, help="the student at step 0")
    args = parser.parse_args()
    cfg = load_config()
    tokenizer, model = load_tokenizer(args.model_dir), load_model(args.model_dir).eval()
    pool = load_pool(DOMAINS["code"].pool / POOL_FILE)
    held_in = read_json(LEARN_SELECTION)["held_in"]
    fences = fence_ids(tokenizer)
    teachers = {"SDFT": SDFT(cfg, DOMAINS["code"]), "OPSD": OPSD(cfg, DOMAINS["code"])}
    rows = []
    with training_domain(cfg, "code") as split:
        by_id = {t.task_id: t for t in split.tasks}
        for task_id in held_in:
            task = by_id[task_id]
            views = {"student": task.messages, **{name: method.with_demonstration(task.messages, pool[task_id].text)
                                                  for name, method in teachers.items()}}
            rows.append({name: opening_mass(model, encode_prompt(tokenizer, messages, task.tools), fences)
                         for name, messages in views.items()})
    names = list(rows[0])
    lines = [f"### P(the response opens with a code fence), step 0, {len(rows)} held-in tasks ({cfg.model.name})",
             "", "| Task | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {task} | " + " | ".join(f"{row[n]:.3f}" for n in names) + " |" for task, row in zip(held_in, rows)]
    lines.append("| **mean** | " + " | ".join(f"**{sum(r[n] for r in rows) / len(rows):.3f}**" for n in names) + " |")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-1:]), f"\nwrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    run_stage(main)
