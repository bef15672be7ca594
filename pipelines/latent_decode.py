"""Stage `latent_decode` (paper §4.4, Fig. 6): LM-head projections of the composer's latent tokens for 10 coding and
10 tool-use training tasks, each paired with its rank-2 retrieval, with and without task conditioning. Reads LOPD's
trained composer per domain (phi_0 when LOPD has not trained); writes reports/figures/latent_decode.{md,csv,png,pdf}
and metrics/latent_decode.json."""

from __future__ import annotations

import csv
import sys
import textwrap

from evaluation.paper_figures import draw_table, escape_undrawable, monospace_code_points
from lopd.core.config import REPO_ROOT
from lopd.core.tracking import Tracker
from lopd.latent.context import trained_composer
from lopd.latent.decode import csv_rows, decode_examples, markdown, pick_examples
from lopd.latent.retrieval import load_bank
from pipelines.common import BASE_MODEL_DIR, DOMAINS, for_domain, parse_args, record_metrics, run_stage
from pipelines.domains import agentic, code

EXAMPLES, TOP_K = 10, 5
"""Examples per domain (the paper's ten) and the top tokens kept per latent token (the CSV's)."""
OUT = REPO_ROOT / "reports" / "figures" / "latent_decode"
TASK_MODULES = {"code": code, "agentic": agentic}


def main() -> None:
    _, cfg = parse_args(__doc__)
    sections, metrics, rows = [], {}, []
    with Tracker(cfg, "latent_decode") as tracker:
        for name, module in TASK_MODULES.items():
            domain_cfg, domain = for_domain(cfg, name), DOMAINS[name]
            try:
                bank, retriever = load_bank(domain.bank, domain_cfg.bank.self_retrieval)
                composer, tokenizer, source = trained_composer(domain_cfg, BASE_MODEL_DIR, domain.composer,
                                                               domain.checkpoints / "lopd")
            except (OSError, ValueError) as err:
                sys.exit(f"error: latent_decode: {err}")
            with module.training_tasks(domain_cfg) as split:
                examples = decode_examples(composer, tokenizer, pick_examples(split.tasks, retriever, EXAMPLES,
                                                                              cfg.seed), bank, TOP_K)
            del composer
            sections.append((name, source, examples))
            rows += csv_rows(name, examples)
            if examples:
                metrics[name] = {"examples": len(examples),
                                 "changed_by_task": sum(e.changed_by_task for e in examples) / len(examples),
                                 "top_in_trace": sum(e.top_in_trace for e in examples) / len(examples)}
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.with_suffix(".md").write_text(markdown(sections, cfg.latent_tokens) + "\n")
        with OUT.with_suffix(".csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, ["domain", "task_id", "retrieved_task_id", "condition", "latent", "rank",
                                        "token"])
            writer.writeheader()
            writer.writerows(rows)
        table = [[f"{name}\n{e.task_id}", _wrap(e.task, 34), f"{e.retrieved_task_id}\n{_wrap(e.retrieved_trace, 34)}",
                  _wrap(" · ".join(r[0] for r in e.with_task), 44, 6),
                  _wrap(" · ".join(r[0] for r in e.without_task), 44, 6)]
                 for name, _, examples in sections for e in examples]
        figures = draw_table(["domain / task", "task", "rank-2 retrieval", "latent top-1 tokens, with task",
                              "without task"], table, [1.3, 2.6, 2.6, 3.3, 3.3], OUT.with_suffix(".png"),
                             f"Latent decoding ({cfg.profile} profile, {cfg.model.name}, K={cfg.latent_tokens})")
        for path in [OUT.with_suffix(".md"), OUT.with_suffix(".csv"), *figures]:
            tracker.log_artifact(path)
        record_metrics(tracker, REPO_ROOT / "metrics" / "latent_decode.json", "latent_decode", metrics)
    for name, source, examples in sections:
        summary = metrics.get(name)
        print(f"latent_decode {name}: {len(examples)} examples ({source})" + (
            f", changed by task {summary['changed_by_task']:.2f}, in trace {summary['top_in_trace']:.2f}"
            if summary else ""))


def _wrap(text: str, width: int, lines: int = 3) -> str:
    """At most `lines` lines of `width` characters (whitespace made visible and characters the table's font lacks
    escaped first), the last cut with …"""
    flat = escape_undrawable(text.replace("\n", "⏎ "), monospace_code_points()).replace("$", r"\$")
    wrapped = textwrap.wrap(flat, width, max_lines=lines, placeholder=" …") or [""]
    return "\n".join(wrapped)


if __name__ == "__main__":
    run_stage(main)
