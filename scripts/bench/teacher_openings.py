"""How each pool teacher expects a response to open: the probability that its first token opens a code fence, under
the student (the task alone) and under SDFT's and OPSD's teachers (the task with the demonstration in the method's
template), at step 0, on the learning race's held-in tasks -> reports/tables/teacher_openings.md. With `--samples N`,
also what each view writes: N sampled responses per task (at the race's temperature, up to
`--max-new-tokens`), their length and pass rate, and the pass rate had they been cut at 256 and 512 tokens.

Why SDFT's completions run to the length cap (docs/results.md, "The learning race"): its template asks for "a
response of your own, including the thinking process", so its teacher opens with prose where the student opens with
code, and distilling towards it lengthens every completion.

Run: python scripts/bench/teacher_openings.py [--model-dir models/base] [--samples 4 --max-new-tokens 1024]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from baselines.opsd import OPSD  # noqa: E402
from baselines.pool import POOL_FILE, load_pool  # noqa: E402
from baselines.sdft import SDFT  # noqa: E402
from lopd.core.config import load_config  # noqa: E402
from lopd.core.jsonl import read_json  # noqa: E402
from lopd.core.models import load_model, load_tokenizer  # noqa: E402
from lopd.core.rollout import encode_prompt, make_backend, sampling_params  # noqa: E402
from pipelines.common import BASE_MODEL_DIR, DOMAINS, RACES, run_stage, training_domain  # noqa: E402

OUT = REPO / "reports" / "tables" / "teacher_openings.md"
CUTS = (256, 512)
"""Response budgets a sampled response is scored at as if cut there: the race's and twice it."""


def fence_ids(tokenizer) -> list[int]:
    """The vocabulary's tokens that open a Markdown code fence (```, ```python, ...)."""
    return [i for token, i in tokenizer.get_vocab().items() if tokenizer.convert_tokens_to_string([token])
            .lstrip().startswith("```")]


@torch.no_grad()
def opening_mass(model, prompt_ids: list[int], token_ids: list[int]) -> float:
    """The probability, at temperature 1, that the response to `prompt_ids` starts with one of `token_ids`."""
    logits_V = model(torch.tensor([prompt_ids])).logits[0, -1].float()
    return logits_V.softmax(-1)[token_ids].sum().item()


def response_stats(lengths: list[int], stopped: list[bool], rewards: list[float], cap: int) -> dict[str, float]:
    """Sampled responses' mean length and pass rate, whole and as if cut at each of `CUTS`: a response passes within
    a cut only where it ended on its own within it (sampling draws the same tokens up to any cap)."""
    n = len(lengths)
    stats = {"mean tokens": sum(lengths) / n, f"ended by {cap}": sum(stopped) / n, f"pass ({cap})": sum(rewards) / n}
    for cut in CUTS:
        stats[f"pass ({cut})"] = sum(r for r, k, s in zip(rewards, lengths, stopped) if s and k <= cut) / n
    return stats


def table(title: str, rows: dict[str, dict[str, float]]) -> list[str]:
    columns = list(next(iter(rows.values())))
    return [title, "", "| | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns),
            *(f"| {name} | " + " | ".join(f"{row[c]:.3f}" for c in columns) + " |" for name, row in rows.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=BASE_MODEL_DIR, help="the student at step 0")
    parser.add_argument("--samples", type=int, default=0, help="sampled responses per task and view (0: none)")
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="the sampled responses' budget")
    args = parser.parse_args()
    cfg = load_config()
    tokenizer, model = load_tokenizer(args.model_dir), load_model(args.model_dir).eval()
    pool = load_pool(DOMAINS["code"].pool / POOL_FILE)
    held_in = read_json(RACES["learn"].selection)["held_in"]
    fences = fence_ids(tokenizer)
    teachers = {"SDFT": SDFT(cfg, DOMAINS["code"]), "OPSD": OPSD(cfg, DOMAINS["code"])}
    rows, sampled = [], {}
    with training_domain(cfg, "code") as split:
        by_id = {t.task_id: t for t in split.tasks}
        views = [{"student": by_id[task_id].messages,
                  **{name: method.with_demonstration(by_id[task_id].messages, pool[task_id].text)
                     for name, method in teachers.items()}} for task_id in held_in]
        for task_id, task_views in zip(held_in, views):
            rows.append({name: opening_mass(model, encode_prompt(tokenizer, messages, by_id[task_id].tools), fences)
                         for name, messages in task_views.items()})
        if args.samples:
            backend = make_backend(args.model_dir, tokenizer, cfg, cfg.sampling.batch_size)
            params = sampling_params(cfg, args.max_new_tokens)
            for name in views[0]:
                tasks = [dataclasses.replace(by_id[t], messages=v[name]) for t, v in zip(held_in, views)]
                out = split.collect(backend, tokenizer, tasks, params, cfg.learn.eval_seed, args.samples)
                sampled[name] = response_stats([len(t.turns[0].action_ids) for t in out], [t.stopped for t in out],
                                               [t.reward for t in out], args.max_new_tokens)
    names = list(rows[0])
    lines = [f"### P(the response opens with a code fence), step 0, {len(rows)} held-in tasks ({cfg.model.name})",
             "", "| Task | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {task} | " + " | ".join(f"{row[n]:.3f}" for n in names) + " |" for task, row in zip(held_in, rows)]
    lines.append("| **mean** | " + " | ".join(f"**{sum(r[n] for r in rows) / len(rows):.3f}**" for n in names) + " |")
    if sampled:
        lines += ["", *table(f"### Sampled responses, step 0, {len(rows)} held-in tasks x {args.samples} samples "
                             f"(temperature {cfg.sampling.temperature}, up to {args.max_new_tokens} tokens)", sampled)]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines), f"\nwrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    run_stage(main)
