"""Paper-style result tables built from the per-stage JSON metrics files (the source of truth).

Table 2 (code): rows are methods in the paper's order, columns LiveCodeBench v5/v6/Avg and
HumanEval+/MBPP+/Avg (pass@1 %, EvalPlus+ i.e. base and plus tests). Averages weight each benchmark
by its number of evaluated tasks, as the paper's EvalPlus average does. The best and second-best
value of each column are marked; a cell without data is "n/a" and a footnote says why.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

PAPER_METHOD_ORDER = ("vanilla", "grpo", "skill_sd", "opsd", "sdpo", "sdft", "lopd")
METHOD_LABELS = {"vanilla": "Vanilla", "grpo": "GRPO", "skill_sd": "Skill-SD", "opsd": "OPSD", "sdpo": "SDPO",
                 "sdft": "SDFT", "lopd": "LOPD"}
CODE_COLUMNS = (("lcb_v5", "LCB v5"), ("lcb_v6", "LCB v6"), ("lcb_avg", "LCB Avg"),
                ("humaneval_plus", "HumanEval+"), ("mbpp_plus", "MBPP+"), ("evalplus_avg", "EvalPlus Avg"))
CODE_GROUPS = {"lcb_avg": ("lcb_v5", "lcb_v6"), "evalplus_avg": ("humaneval_plus", "mbpp_plus")}
MISSING_REASONS = {
    "lcb_v5": "LiveCodeBench is not available offline (no release under the shared data directory) and is not yet wired in",
    "lcb_v6": "LiveCodeBench is not available offline (no release under the shared data directory) and is not yet wired in",
}


@dataclass(frozen=True)
class Table:
    columns: tuple[tuple[str, str], ...]
    rows: list[tuple[str, dict[str, float | None]]]
    """(method label, column key -> value or None)."""
    notes: list[str]


def code_table(metrics: dict[str, dict[str, dict]], methods: list[str]) -> Table:
    """metrics[method][benchmark] is an eval summary with `pass@1_plus` and `n_tasks`."""
    rows = []
    for method in [m for m in PAPER_METHOD_ORDER if m in methods] + [m for m in methods if m not in PAPER_METHOD_ORDER]:
        got = metrics.get(method, {})
        values: dict[str, float | None] = {key: got[key]["pass@1_plus"] if key in got else None
                                           for key, _ in CODE_COLUMNS if key not in CODE_GROUPS}
        for avg, parts in CODE_GROUPS.items():
            if all(p in got for p in parts):
                weight = sum(got[p]["n_tasks"] for p in parts)
                values[avg] = sum(got[p]["pass@1_plus"] * got[p]["n_tasks"] for p in parts) / weight
            else:
                values[avg] = None
        rows.append((METHOD_LABELS.get(method, method), values))
    notes = []
    for key, label in CODE_COLUMNS:
        if all(v[key] is None for _, v in rows):
            reason = MISSING_REASONS.get(key) or (
                f"needs {' and '.join(dict(CODE_COLUMNS)[p] for p in CODE_GROUPS[key])}" if key in CODE_GROUPS
                else "no evaluation stage has produced it (not in `benchmarks`)")
            notes.append(f"{label}: n/a: {reason}.")
    return Table(CODE_COLUMNS, rows, notes)


def ranks(table: Table) -> dict[str, dict[str, int]]:
    """Column key -> {method label: 1 (best) or 2 (second best)}; ties share a rank."""
    out: dict[str, dict[str, int]] = {}
    for key, _ in table.columns:
        distinct = sorted({round(v[key], 2) for _, v in table.rows if v[key] is not None}, reverse=True)
        out[key] = {label: distinct.index(round(v[key], 2)) + 1 for label, v in table.rows
                    if v[key] is not None and round(v[key], 2) in distinct[:2]}
    return out


def _cell(value: float | None, rank: int | None, best: str, second: str) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.2f}"
    return best.format(text) if rank == 1 else second.format(text) if rank == 2 else text


def to_markdown(table: Table, title: str) -> str:
    r = ranks(table)
    lines = [f"### {title}", "", "| Method | " + " | ".join(label for _, label in table.columns) + " |",
             "|---|" + "---:|" * len(table.columns)]
    for label, values in table.rows:
        cells = [_cell(values[k], r[k].get(label), "**{}**", "_{}_") for k, _ in table.columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Best in **bold**, second best in _italics_. pass@1 (%)."] + [f"- {n}" for n in table.notes]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["method", *[k for k, _ in table.columns]])
    for label, values in table.rows:
        writer.writerow([label, *["n/a" if values[k] is None else f"{values[k]:.2f}" for k, _ in table.columns]])
    return buf.getvalue()


def to_latex(table: Table, caption: str) -> str:
    r = ranks(table)
    header = " & ".join(["Method", *[label.replace("+", "$^{+}$") for _, label in table.columns]])
    body = [" & ".join([label, *[_cell(values[k], r[k].get(label), r"\textbf{{{}}}", r"\underline{{{}}}")
                                 for k, _ in table.columns]]) + r" \\" for label, values in table.rows]
    notes = "".join(f"\n\\item {n}" for n in table.notes)
    return "\n".join([
        r"\begin{table}[t]", r"\centering", r"\small",
        rf"\caption{{{caption}}}",
        r"\begin{tabular}{l" + "c" * len(table.columns) + "}", r"\toprule", header + r" \\", r"\midrule",
        *body, r"\bottomrule", r"\end{tabular}",
        *([r"\begin{itemize}\footnotesize" + notes, r"\end{itemize}"] if notes else []),
        r"\end{table}", ""])
