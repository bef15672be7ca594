"""Paper-style result tables built from the evaluation summaries (the results files the evaluation stages write).

Table 1 (tool use): EnvScaler | BFCL-v3 Base/Miss Func/Miss Param/Long Ctx/Avg | ACEBench M-Step/M-Turn/Avg,
scores on a 0-100 scale. Table 2 (code): LiveCodeBench v5/v6/Avg and HumanEval+/MBPP+/Avg (pass@1 %,
EvalPlus+ i.e. base and plus tests). Table 3 (behaviour on the EnvScaler test split). Averages weight
each benchmark by its number of evaluated tasks, as the paper's averages do. The best and second-best
value of each result column are marked; a cell without data is "n/a" and a footnote says why.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from lopd.core import registry

CODE_COLUMNS = (("lcb_v5", "LCB v5"), ("lcb_v6", "LCB v6"), ("lcb_avg", "LCB Avg"),
                ("humaneval_plus", "HumanEval+"), ("mbpp_plus", "MBPP+"), ("evalplus_avg", "EvalPlus Avg"))
CODE_GROUPS = {"lcb_avg": ("lcb_v5", "lcb_v6"), "evalplus_avg": ("humaneval_plus", "mbpp_plus")}
MISSING_REASONS = {
    "lcb_v5": "LiveCodeBench is not available offline (no release under the shared data directory) and is not yet wired in",
    "lcb_v6": "LiveCodeBench is not available offline (no release under the shared data directory) and is not yet wired in",
}


TOOL_USE_COLUMNS = (("envscaler", "EnvScaler"), ("bfcl_base", "BFCL Base"), ("bfcl_miss_func", "Miss Func"),
                    ("bfcl_miss_param", "Miss Param"), ("bfcl_long_context", "Long Ctx"), ("bfcl_avg", "BFCL Avg"),
                    ("acebench_multi_step", "ACE M-Step"), ("acebench_multi_turn", "ACE M-Turn"),
                    ("acebench_avg", "ACE Avg"))
TOOL_USE_GROUPS = {"bfcl_avg": ("bfcl_base", "bfcl_miss_func", "bfcl_miss_param", "bfcl_long_context"),
                   "acebench_avg": ("acebench_multi_step", "acebench_multi_turn")}
BEHAVIOUR_COLUMNS = (("reward_mean", "Reward"), ("steps", "Interaction steps"), ("tool_calls_per_step", "Tool calls / step"),
                     ("first_step_tokens", "First-step length"), ("reward_per_tool_call", "Reward / tool call"),
                     ("repeated_calls", "Repeated tool calls"))
BEHAVIOUR_NOTES = ["Tool calls count every well-formed call a step issues (the environment runs the first of "
                   "each step); Reward / tool call divides each episode's reward by its calls, counting an "
                   "episode without calls as one."]


@dataclass(frozen=True)
class Table:
    columns: tuple[tuple[str, str], ...]
    rows: list[tuple[str, dict[str, float | None]]]
    """(method label, column key -> value or None)."""
    notes: list[str]
    ranked: bool = True
    """Mark the best and second best of each column (result tables; not the behaviour table)."""
    digits: int = 2


def _ordered(methods: list[str]) -> list[str]:
    """Rows in the registry's order (the paper's)."""
    return [m for m in registry.METHODS if m in methods] + [m for m in methods if m not in registry.METHODS]


def _weighted(got: dict[str, dict], parts: tuple[str, ...], key: str) -> float | None:
    """Task-weighted average of `key` over the benchmarks `parts` (None unless all are there)."""
    if not all(p in got and key in got[p] for p in parts):
        return None
    weight = sum(got[p]["n_tasks"] for p in parts)
    return sum(got[p][key] * got[p]["n_tasks"] for p in parts) / weight


def tool_use_table(metrics: dict[str, dict[str, dict]], methods: list[str]) -> Table:
    """metrics[method][benchmark] is an eval_agentic summary with `score` and `n_tasks`, or a `note` saying why
    there is none."""
    rows, notes = [], []
    for method in _ordered(methods):
        got = {b: s for b, s in metrics.get(method, {}).items() if "score" in s}
        values: dict[str, float | None] = {key: got[key]["score"] if key in got else None
                                           for key, _ in TOOL_USE_COLUMNS if key not in TOOL_USE_GROUPS}
        values.update({avg: _weighted(got, parts, "score") for avg, parts in TOOL_USE_GROUPS.items()})
        rows.append((registry.label(method), values))
    missing = [registry.label(m) for m in _ordered(methods) if not metrics.get(m)]
    if missing:
        notes.append(f"{', '.join(missing)}: n/a: no agentic evaluation has been run for "
                     f"{'this method' if len(missing) == 1 else 'these methods'} (stage eval_agentic@<method>).")
    evaluated = [v for label, v in rows if label not in missing]
    for key, label in TOOL_USE_COLUMNS:
        if key in TOOL_USE_GROUPS or all(v[key] is not None for v in evaluated):
            continue
        reasons = sorted({s["note"].removeprefix("n/a: ") for m in methods for b, s in metrics.get(m, {}).items()
                          if b == key and "note" in s})
        notes.append(f"{label}: n/a: {'; '.join(reasons) or 'no evaluation stage has produced it (not in agentic.benchmarks)'}.")
    return Table(TOOL_USE_COLUMNS, rows, notes)


def behaviour_table(metrics: dict[str, dict[str, dict]], methods: list[str], benchmark: str = "envscaler") -> Table:
    """The paper's Table 3: interaction behaviour of each method's policy on one benchmark (means per episode)."""
    rows = [(registry.label(m), {k: metrics.get(m, {}).get(benchmark, {}).get(k) for k, _ in BEHAVIOUR_COLUMNS})
            for m in _ordered(methods)]
    return Table(BEHAVIOUR_COLUMNS, rows, BEHAVIOUR_NOTES, ranked=False, digits=3)


def code_table(metrics: dict[str, dict[str, dict]], methods: list[str]) -> Table:
    """metrics[method][benchmark] is an eval summary with `pass@1_plus` and `n_tasks`."""
    rows = []
    for method in _ordered(methods):
        got = metrics.get(method, {})
        values: dict[str, float | None] = {key: got[key]["pass@1_plus"] if key in got else None
                                           for key, _ in CODE_COLUMNS if key not in CODE_GROUPS}
        values.update({avg: _weighted(got, parts, "pass@1_plus") for avg, parts in CODE_GROUPS.items()})
        rows.append((registry.label(method), values))
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
    out: dict[str, dict[str, int]] = {key: {} for key, _ in table.columns}
    if not table.ranked:
        return out
    for key, _ in table.columns:
        distinct = sorted({round(v[key], 2) for _, v in table.rows if v[key] is not None}, reverse=True)
        out[key] = {label: distinct.index(round(v[key], 2)) + 1 for label, v in table.rows
                    if v[key] is not None and round(v[key], 2) in distinct[:2]}
    return out


def _cell(value: float | None, rank: int | None, best: str, second: str, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.{digits}f}"
    return best.format(text) if rank == 1 else second.format(text) if rank == 2 else text


def to_markdown(table: Table, title: str) -> str:
    r = ranks(table)
    lines = [f"### {title}", "", "| Method | " + " | ".join(label for _, label in table.columns) + " |",
             "|---|" + "---:|" * len(table.columns)]
    for label, values in table.rows:
        cells = [_cell(values[k], r[k].get(label), "**{}**", "_{}_", table.digits) for k, _ in table.columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", *(["Best in **bold**, second best in _italics_."] if table.ranked else []),
              *[f"- {n}" for n in table.notes]]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["method", *[k for k, _ in table.columns]])
    for label, values in table.rows:
        writer.writerow([label, *["n/a" if values[k] is None else f"{values[k]:.{table.digits}f}"
                                  for k, _ in table.columns]])
    return buf.getvalue()


def to_latex(table: Table, caption: str) -> str:
    r = ranks(table)
    header = " & ".join(["Method", *[label.replace("+", "$^{+}$") for _, label in table.columns]])
    body = [" & ".join([label, *[_cell(values[k], r[k].get(label), r"\textbf{{{}}}", r"\underline{{{}}}", table.digits)
                                 for k, _ in table.columns]]) + r" \\" for label, values in table.rows]
    notes = "".join(f"\n\\item {n}" for n in table.notes)
    return "\n".join([
        r"\begin{table}[t]", r"\centering", r"\small",
        rf"\caption{{{caption}}}",
        r"\begin{tabular}{l" + "c" * len(table.columns) + "}", r"\toprule", header + r" \\", r"\midrule",
        *body, r"\bottomrule", r"\end{tabular}",
        *([r"\begin{itemize}\footnotesize" + notes, r"\end{itemize}"] if notes else []),
        r"\end{table}", ""])
