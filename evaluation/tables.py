"""Paper-style result tables built from the per-task scores in the results files the evaluation stages write.

Table 1 (tool use): EnvScaler | BFCL-v3 Base/Miss Func/Miss Param/Long Ctx/Avg | ACEBench M-Step/M-Turn/Avg,
scores on a 0-100 scale. Table 2 (code): LiveCodeBench v5/v6/Avg and HumanEval+/MBPP+/Avg (pass@1 %,
EvalPlus+ i.e. base and plus tests). Table 3 (behaviour on the EnvScaler test split, plain means).

A result cell is the mean over tasks with its 95% CI (evaluation.stats.score_ci). Averages pool the tasks of their
benchmarks, so they weight each benchmark by its number of tasks, as the paper's averages do, and their CIs and
differences come from the pooled tasks. Below each result table, every method's paired difference to GRPO and to
Vanilla (same tasks, resampled together). Best and second best are marked only where the paired differences tell
them apart; otherwise a footnote names the tie. A cell without data is "n/a" and a footnote says why.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache, singledispatch
from typing import Callable

import numpy as np

from evaluation.stats import paired_bootstrap_diff, score_ci
from lopd.core import registry

CODE_COLUMNS = (("lcb_v5", "LCB v5"), ("lcb_v6", "LCB v6"), ("lcb_avg", "LCB Avg"),
                ("humaneval_plus", "HumanEval+"), ("mbpp_plus", "MBPP+"), ("evalplus_avg", "EvalPlus Avg"))
CODE_GROUPS = {"lcb_avg": ("lcb_v5", "lcb_v6"), "evalplus_avg": ("humaneval_plus", "mbpp_plus")}


TOOL_USE_COLUMNS = (("envscaler", "EnvScaler"), ("bfcl_base", "BFCL Base"), ("bfcl_miss_func", "Miss Func"),
                    ("bfcl_miss_param", "Miss Param"), ("bfcl_long_context", "Long Ctx"), ("bfcl_avg", "BFCL Avg"),
                    ("acebench_multi_step", "ACE M-Step"), ("acebench_multi_turn", "ACE M-Turn"),
                    ("acebench_avg", "ACE Avg"))
TOOL_USE_GROUPS = {"bfcl_avg": ("bfcl_base", "bfcl_miss_func", "bfcl_miss_param", "bfcl_long_context"),
                   "acebench_avg": ("acebench_multi_step", "acebench_multi_turn")}
BEHAVIOUR_COLUMNS = (("reward_mean", "Reward"), ("steps", "Interaction steps"),
                     ("tool_calls_per_step", "Tool calls / step"),
                     ("first_step_tokens", "First-step length"), ("reward_per_tool_call", "Reward / tool call"),
                     ("repeated_calls", "Repeated tool calls"))
BEHAVIOUR_NOTES = ["Tool calls count every well-formed call a step issues (the environment runs the first of "
                   "each step); Reward / tool call divides each episode's reward by its calls, counting an "
                   "episode without calls as one."]


REFERENCES = ("grpo", "vanilla")
"""The methods every other is compared with, paired by task (the paper's RL baseline and the untrained model)."""
RESAMPLES = 10_000
"""Bootstrap resamples per CI: a bound's Monte Carlo error is then about 0.1 point (HumanEval+, 164 pass/fail tasks
at 40%: sd 0.13 over seeds, for a CI 14.6 points wide); the seed is fixed, so tables are reproducible."""
LEVEL = 0.95


@dataclass(frozen=True)
class Scores:
    """One method's results on one benchmark: each task's score in [0, 1] (its pass rate over its samples, or its
    episodes' mean reward), by task id, and the samples per task. No tasks: `note` says why."""

    per_task: dict[str, float]
    samples: int = 1
    note: str | None = None


@dataclass(frozen=True)
class Estimate:
    """A score or a paired difference, on the table's 0-100 scale, with its 95% CI, over n tasks."""

    value: float
    low: float
    high: float
    n: int

    @property
    def separated(self) -> bool:
        """The CI excludes 0: for a difference, the two methods are told apart."""
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class Table:
    """Plain values (the behaviour table)."""

    columns: tuple[tuple[str, str], ...]
    rows: list[tuple[str, dict[str, float | None]]]
    """(method label, column key -> value or None)."""
    notes: list[str]
    digits: int = 2


@dataclass(frozen=True)
class ResultTable:
    """Scores with their CIs, the paired differences to the reference methods and the marks they allow."""

    columns: tuple[tuple[str, str], ...]
    groups: dict[str, tuple[str, ...]]
    """Average column -> the benchmarks whose tasks it pools."""
    rows: list[tuple[str, dict[str, Estimate | None]]]
    """(method label, column key -> score or None)."""
    diffs: dict[str, dict[str, dict[str, Estimate | None]]]
    """Reference label -> method label -> column key -> method minus reference (references with data only)."""
    marks: dict[str, dict[str, int]]
    """Column key -> {method label: 1 (best, bold) or 2 (second best, italics)}, only where told apart."""
    notes: list[str]
    samples: tuple[int, ...]
    """The distinct numbers of samples per task behind the cells."""
    resamples: int


def _ordered(methods: list[str]) -> list[str]:
    """Rows in the registry's order (the paper's)."""
    return [m for m in registry.METHODS if m in methods] + [m for m in methods if m not in registry.METHODS]


def _column_tasks(got: dict[str, Scores], parts: tuple[str, ...]) -> dict[str, float] | None:
    """The per-task scores behind one cell, by `<benchmark>/<task id>`: one benchmark's, or an average's parts
    pooled (so it weights each by its tasks); None unless every part has tasks. Sorted by id, so the bootstrap
    draws do not depend on the order of the results files."""
    if not all(p in got and got[p].per_task for p in parts):
        return None
    return dict(sorted((f"{p}/{tid}", score) for p in parts for tid, score in got[p].per_task.items()))


def _estimate(tasks: dict[str, float], resamples: int, seed: int) -> Estimate:
    """A score cell: the mean task score with its CI, x 100."""
    scores_N = np.fromiter(tasks.values(), dtype=float, count=len(tasks))
    low, high = score_ci(scores_N, resamples, seed, LEVEL)
    return Estimate(100 * float(scores_N.mean()), 100 * low, 100 * high, len(scores_N))


def _paired(a: dict[str, float], b: dict[str, float], resamples: int, seed: int) -> Estimate | None:
    """a minus b with its CI, x 100, over the tasks both evaluated, aligned by task id (sorted); None if they share
    no task."""
    common = sorted(a.keys() & b.keys())
    if not common:
        return None
    mean, low, high = paired_bootstrap_diff(np.array([a[t] for t in common]), np.array([b[t] for t in common]),
                                            resamples, seed, LEVEL)
    return Estimate(100 * mean, 100 * low, 100 * high, len(common))


def _ahead(difference: Estimate | None) -> bool:
    """A difference above 0 with 95% confidence (None: the methods share no task, so nothing is known)."""
    return difference is not None and difference.low > 0


def rank_column(means: dict[str, float],
                diff: Callable[[str, str], Estimate | None]) -> tuple[dict[str, int], list[str]]:
    """One column's marks: the best (1) only if its paired difference to every other method is above 0 with 95%
    confidence, then the second (2) only if its difference to every method below it is. `diff(a, b)` is a minus b.
    Returns the marks and, where a place could not be marked, the methods tied for it (its holder first)."""
    order = sorted(means, key=means.__getitem__, reverse=True)  # stable: the paper's order among equal means
    if len(order) < 2:
        return {}, []
    marks: dict[str, int] = {}
    for place, (top, below) in enumerate(((order[0], order[1:]), (order[1], order[2:])), start=1):
        tied = [label for label in below if not _ahead(diff(top, label))]
        if tied:
            return marks, [top, *tied]
        marks[top] = place
    return marks, []


def _tie_note(column: str, tied: list[str], marks: dict[str, int]) -> str:
    place = " for second place" if marks else ""
    return (f"{column}: tie{place} between {', '.join(tied)} (95% CIs of the paired differences to {tied[0]} "
            f"include 0).")


def _result_table(columns: tuple[tuple[str, str], ...], groups: dict[str, tuple[str, ...]],
                  scores: dict[str, dict[str, Scores]], methods: list[str], notes: list[str], resamples: int,
                  seed: int) -> ResultTable:
    """Cells, paired differences to the references, marks and tie notes (after `notes`) from per-task scores."""
    ordered = _ordered(methods)
    tasks = {registry.label(m): {key: _column_tasks(scores.get(m, {}), groups.get(key, (key,))) for key, _ in columns}
             for m in ordered}
    rows = [(label, {key: None if t is None else _estimate(t, resamples, seed) for key, t in cells.items()})
            for label, cells in tasks.items()]

    @cache
    def diff(a: str, b: str, key: str) -> Estimate | None:
        if tasks[a][key] is None or tasks[b][key] is None:
            return None
        return _paired(tasks[a][key], tasks[b][key], resamples, seed)

    marks, ties = {}, []
    for key, name in columns:
        means = {label: cells[key].value for label, cells in rows if cells[key] is not None}
        marks[key], tied = rank_column(means, lambda a, b, key=key: diff(a, b, key))
        if tied:
            ties.append(_tie_note(name, tied, marks[key]))
    references = [registry.label(r) for r in REFERENCES if r in ordered]
    diffs = {ref: {label: {key: diff(label, ref, key) for key, _ in columns} for label in tasks if label != ref}
             for ref in references if any(t is not None for t in tasks[ref].values())}
    samples = tuple(sorted({s.samples for m in ordered for s in scores.get(m, {}).values() if s.per_task}))
    return ResultTable(columns, groups, rows, diffs, marks, [*notes, *ties], samples, resamples)


def tool_use_table(scores: dict[str, dict[str, Scores]], methods: list[str], resamples: int = RESAMPLES,
                   seed: int = 0) -> ResultTable:
    """scores[method][benchmark]: the per-task scores of eval_agentic's results files (no tasks: a `note` why)."""
    notes = []
    missing = [m for m in _ordered(methods) if not scores.get(m)]
    if missing:
        notes.append(f"{', '.join(map(registry.label, missing))}: n/a: no agentic evaluation has been run for "
                     f"{'this method' if len(missing) == 1 else 'these methods'} (stage eval_agentic@<method>).")
    evaluated = [scores[m] for m in _ordered(methods) if m not in missing]
    for key, label in TOOL_USE_COLUMNS:
        if key in TOOL_USE_GROUPS or all(key in got and got[key].per_task for got in evaluated):
            continue
        reasons = sorted({got[key].note.removeprefix("n/a: ") for got in evaluated if key in got and got[key].note})
        reason = '; '.join(reasons) or 'no evaluation stage has produced it (not in agentic.benchmarks)'
        notes.append(f"{label}: n/a: {reason}.")
    return _result_table(TOOL_USE_COLUMNS, TOOL_USE_GROUPS, scores, methods, notes, resamples, seed)


def behaviour_table(metrics: dict[str, dict[str, dict]], methods: list[str], benchmark: str = "envscaler") -> Table:
    """The paper's Table 3: interaction behaviour of each method's policy on one benchmark (means per episode)."""
    def mean(method: str, key: str) -> float | None:  # a mean of counts can come back as an int: still a mean
        value = metrics.get(method, {}).get(benchmark, {}).get(key)
        return None if value is None else float(value)

    rows = [(registry.label(m), {k: mean(m, k) for k, _ in BEHAVIOUR_COLUMNS}) for m in _ordered(methods)]
    return Table(BEHAVIOUR_COLUMNS, rows, BEHAVIOUR_NOTES, digits=3)


def code_table(scores: dict[str, dict[str, Scores]], methods: list[str], resamples: int = RESAMPLES,
               seed: int = 0) -> ResultTable:
    """scores[method][benchmark]: the per-task pass@1 (EvalPlus+ tests) of the eval stages' results files."""
    notes = []
    for key, label in CODE_COLUMNS:
        if all(_column_tasks(scores.get(m, {}), CODE_GROUPS.get(key, (key,))) is None for m in methods):
            said = sorted({s[key].note.removeprefix("n/a: ") for s in scores.values() if key in s and s[key].note})
            reason = "; ".join(said) or (
                f"needs {' and '.join(dict(CODE_COLUMNS)[p] for p in CODE_GROUPS[key])}" if key in CODE_GROUPS
                else "no evaluation stage has produced it (not in `benchmarks`)")
            notes.append(f"{label}: n/a: {reason}.")
    return _result_table(CODE_COLUMNS, CODE_GROUPS, scores, methods, notes, resamples, seed)


def _span(values: list[int] | tuple[int, ...]) -> str:
    return str(values[0]) if values[0] == values[-1] else f"{values[0]}–{values[-1]}"


def describe(table: ResultTable) -> str:
    """The title's account of what is behind the cells: tasks per benchmark, samples per task, how CIs are made."""
    counts = []
    for key, name in table.columns:
        ns = sorted({cells[key].n for _, cells in table.rows if cells[key] is not None})
        if ns and key not in table.groups:
            counts.append(f"{_span(ns)} {name}")
    if not counts:
        return "no tasks evaluated"
    plural = "s" if table.samples[-1] > 1 else ""
    return (f"n = {' / '.join(counts)} tasks, {_span(table.samples)} sample{plural} per task, 95% CIs: Wilson "
            f"(single proportions) or bootstrap over tasks ({table.resamples:,} resamples)")


LEGEND = ("Cells: mean [95% CI]. Best {best}, second best {second}, only where the 95% CIs of the paired "
          "differences to every method below exclude 0; otherwise a note names the tie.")


def _diff_heading(reference: str) -> str:
    return (f"Difference to {reference} (points; paired bootstrap over the tasks both evaluated; * where the 95% CI "
            f"excludes 0)")


def _score_text(e: Estimate | None) -> str:
    return "n/a" if e is None else f"{e.value:.1f} [{e.low:.1f}, {e.high:.1f}]"


def _diff_text(e: Estimate | None) -> str:
    return "n/a" if e is None else f"{e.value:+.1f} [{e.low:.1f}, {e.high:.1f}]" + ("*" if e.separated else "")


def _marked(text: str, mark: int | None, best: str, second: str) -> str:
    return best.format(text) if mark == 1 else second.format(text) if mark == 2 else text


def _plain(value: float | str | None, digits: int) -> str:
    """A plain cell: counts (ints) and text as they are, other numbers to the table's digits."""
    return "n/a" if value is None else str(value) if isinstance(value, (int, str)) else f"{value:.{digits}f}"


def _md_table(columns: tuple[tuple[str, str], ...], rows: list[tuple[str, list[str]]],
              corner: str = "Method") -> list[str]:
    return [f"| {corner} | " + " | ".join(label for _, label in columns) + " |", "|---|" + "---:|" * len(columns),
            *[f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]]


@singledispatch
def to_markdown(table: Table, title: str) -> str:
    rows = [(label, [_plain(values[k], table.digits) for k, _ in table.columns]) for label, values in table.rows]
    lines = [f"### {title}", "", *_md_table(table.columns, rows), "", *[f"- {n}" for n in table.notes]]
    return "\n".join(lines) + "\n"


@to_markdown.register(ResultTable)
def _(table: ResultTable, title: str) -> str:
    rows = [(label, [_marked(_score_text(values[k]), table.marks[k].get(label), "**{}**", "_{}_")
                     for k, _ in table.columns]) for label, values in table.rows]
    lines = [f"### {title}", "", *_md_table(table.columns, rows), "",
             LEGEND.format(best="in **bold**", second="in _italics_"), *[f"- {n}" for n in table.notes]]
    for ref, diffs in table.diffs.items():
        rows = [(label, [_diff_text(values[k]) for k, _ in table.columns]) for label, values in diffs.items()]
        lines += ["", f"#### {_diff_heading(ref)}", "", *_md_table(table.columns, rows, f"Method − {ref}")]
    return "\n".join(lines) + "\n"


@singledispatch
def to_csv(table: Table) -> str:
    """One row per method, one column per table column."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["method", *[k for k, _ in table.columns]])
    for label, values in table.rows:
        writer.writerow([label, *[_plain(values[k], table.digits) for k, _ in table.columns]])
    return buf.getvalue()


def _numbers(e: Estimate | None) -> list[str]:
    return ["n/a"] * 4 if e is None else [f"{e.value:.4f}", f"{e.low:.4f}", f"{e.high:.4f}", str(e.n)]


@to_csv.register(ResultTable)
def _(table: ResultTable) -> str:
    """One row per method and column (long format, every number in its own column): the score with its CI and n,
    the mark, and the paired difference to each reference with its CI and n ("n/a" where there is none)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    stats = ("", "_ci_low", "_ci_high", "_n")
    writer.writerow(["method", "column", "value", "ci_low", "ci_high", "n", "mark",
                     *[f"diff_{r}{s}" for r in REFERENCES for s in stats]])
    for label, values in table.rows:
        for key, _ in table.columns:
            diffs = [table.diffs.get(registry.label(r), {}).get(label, {}).get(key) for r in REFERENCES]
            mark = {1: "best", 2: "second"}.get(table.marks[key].get(label), "")
            writer.writerow([label, key, *_numbers(values[key]), mark, *[x for d in diffs for x in _numbers(d)]])
    return buf.getvalue()


def _tex(text: str) -> str:
    """Escape LaTeX's special characters in running text (titles, notes, labels)."""
    return "".join("\\" + c if c in "%&#_" else c for c in text)


def _latex(columns: tuple[tuple[str, str], ...], body: list[str], caption: str, notes: list[str]) -> str:
    header = " & ".join(["Method", *[label.replace("+", "$^{+}$") for _, label in columns]])
    items = "".join(f"\n\\item {_tex(n)}" for n in notes)
    return "\n".join([
        r"\begin{table}[t]", r"\centering", r"\small",
        rf"\caption{{{_tex(caption)}}}",
        r"\begin{tabular}{l" + "c" * len(columns) + "}", r"\toprule", header + r" \\", r"\midrule",
        *body, r"\bottomrule", r"\end{tabular}",
        *([r"\begin{itemize}\footnotesize" + items, r"\end{itemize}"] if items else []),
        r"\end{table}", ""])


def _tex_row(label: str, cells: list[str]) -> str:
    return " & ".join([_tex(label), *cells]) + r" \\"


@singledispatch
def to_latex(table: Table, caption: str) -> str:
    body = [_tex_row(label, [_plain(values[k], table.digits) for k, _ in table.columns])
            for label, values in table.rows]
    return _latex(table.columns, body, caption, table.notes)


@to_latex.register(ResultTable)
def _(table: ResultTable, caption: str) -> str:
    """The scores, then per reference a section of differences in the same tabular."""
    body = [_tex_row(label, [_marked(_score_text(values[k]), table.marks[k].get(label), r"\textbf{{{}}}",
                                     r"\underline{{{}}}") for k, _ in table.columns]) for label, values in table.rows]
    for ref, diffs in table.diffs.items():
        heading = rf"\multicolumn{{{len(table.columns) + 1}}}{{l}}{{\textit{{{_tex(_diff_heading(ref))}}}}} \\"
        body += [r"\midrule", heading, *[_tex_row(label, [_diff_text(values[k]) for k, _ in table.columns])
                                         for label, values in diffs.items()]]
    return _latex(table.columns, body, caption, [LEGEND.format(best="in bold", second="underlined"), *table.notes])
