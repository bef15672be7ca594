"""The paper's analysis sweeps (§4.3, Figs. 3 and 5) as DVC experiments, and how their results are read back.

A sweep is a list of points, each a set of `-S key=value` overrides of params.yaml; `scripts/sweep.py` queues one
DVC experiment per point, named `<sweep>-<point>`, that runs only the stage its metric needs (so everything it
does not change comes from the cache), then collects every point from `dvc exp show --json`. Each figure shows a
student metric, never teacher-side numbers: the held-out validation reward of LOPD's student in the code domain
(greedy, on `data.validation_tasks` training-distribution tasks), the EnvScaler and ACEBench scores of its
evaluation in the agentic domain (the paper's).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from evaluation.stats import wilson_interval


@dataclass(frozen=True)
class Metric:
    """One student metric of a sweep point, as DVC shows it: `metrics_file` -> `stage` -> `key` (with the keys of
    its 95% CI and n beside it). `scale` turns it into the plotted unit."""

    label: str
    metrics_file: str
    stage: str
    key: str
    low: str
    high: str
    n: str
    scale: float = 1.0


@dataclass(frozen=True)
class Sweep:
    name: str
    title: str
    x_label: str
    points: dict[str, dict[str, Any]]
    """Point label -> its params.yaml overrides, in plotting order."""
    default: str
    """The label of the point that equals the default configuration (drawn dashed / highlighted)."""
    x: dict[str, float] | None = None
    """Numeric x per point (a line plot), or None (categorical bars)."""


def _ace(suite: str, label: str) -> Metric:
    return Metric(label, "metrics/agentic/eval/lopd.json", "eval_agentic@lopd", f"{suite}.score",
                  f"{suite}.score_ci_low", f"{suite}.score_ci_high", f"{suite}.n_tasks", 0.01)


VALIDATION = Metric("Validation reward (LOPD student, greedy, held out)", "metrics/train/lopd.json", "train_lopd",
                    "val_reward_final", "val_reward_final_ci_low", "val_reward_final_ci_high", "val_n")
ENVSCALER = _ace("envscaler", "EnvScaler reward (LOPD student)")
METRICS = {"code": [VALIDATION],
           "agentic": [ENVSCALER, _ace("acebench_multi_step", "ACEBench multi-step"),
                       _ace("acebench_multi_turn", "ACEBench multi-turn")]}
"""What each domain's sweep point is scored by; the ACEBench aggregate is derived from its two suites."""
TARGET_STAGE = {"code": "train_lopd", "agentic": "eval_agentic@lopd"}
"""The stage a point runs (with whatever upstream stages its overrides change): the one that writes its metric."""
TRAINED_STAGE = {"code": "train_lopd", "agentic": "train_lopd_agentic"}
"""The stage whose output, the trained student (2.5 GB at 0.5B), `sweep.py run --drop-checkpoints` drops."""

K_VALUES, N_RET_VALUES = (8, 16, 32, 64, 128), (1, 2, 3, 5, 10)
SWEEPS = {
    "fig3": Sweep("fig3", "Effect of joint optimisation (paper Fig. 3)", "composer training",
                  {"frozen φ0": {"lopd.train_composer": False},
                   "m=0 (no constraint)": {"margin": 0, "lopd.margin_constraint": False},
                   **{f"m={m}": {"margin": m} for m in (0.01, 0.02, 0.05, 0.1)}},
                  default="m=0.05"),
    "fig5a": Sweep("fig5a", "Sensitivity to latent tokens K (paper Fig. 5a)", "latent tokens K",
                   {f"K={k}": {"latent_tokens": k} for k in K_VALUES}, default="K=32",
                   x={f"K={k}": k for k in K_VALUES}),
    "fig5b": Sweep("fig5b", "Sensitivity to retrievals n_ret (paper Fig. 5b-e)", "retrieved trajectories n_ret",
                   {f"n_ret={n}": {"n_ret": n} for n in N_RET_VALUES}, default="n_ret=3",
                   x={f"n_ret={n}": n for n in N_RET_VALUES}),
}
FIGURES = {"fig3": ["fig3"], "fig5": ["fig5a", "fig5b"]}
"""Figure -> the sweeps it draws (Fig. 4 needs none: the `report` stage draws it from the default run's curves)."""

SWEEP_BUDGET = {"cpu": {"fig3": {"lopd.steps": 4},
                        "fig5": {"lopd.steps": 2, "cold_start.steps": 4}}}
"""Per figure, the step budgets of its points where the profile's own would not fit (2 cores). Fig. 3: LOPD 4 steps x
16 rollouts (half the default run's; β acts from step 2) from the default run's cold start, which is φ0 and comes
from the cache (a shorter cold start would re-run in every point: DVC's run cache skips stages with persistent
outputs, and the cold start persists its progress to resume). Fig. 5: every K and n_ret needs its own cold start
(4 steps, a third of the default's), so LOPD gets 2 steps (32 rollouts). The points of a figure share its budget, so
they compare with each other (not with the default run or the other figure); other profiles run their own steps.
docs/experiments.md gives the cost."""


def figure_domain(profile: str) -> str:
    """The domain the analysis figures (3-5) are drawn in by default: the paper's, agentic, on the paper profile;
    else code, where the cpu profile's model has a learning signal."""
    return "agentic" if profile == "paper" else "code"


def experiment_name(sweep: str, point: str) -> str:
    """A DVC experiment name for a point (ASCII letters, digits, '.', '-', '_'): `fig3-m_0.05`, `fig3-frozen_phi0`."""
    return f"{sweep}-" + re.sub(r"[^0-9A-Za-z.\-]+", "_", point.replace("φ", "phi")).strip("_")


def budget(figure: str, profile: str) -> dict[str, Any]:
    """The figure's step budget on the profile (empty: the profile's own steps)."""
    return SWEEP_BUDGET.get(profile, {}).get(figure, {})


def point_params(point: dict[str, Any], figure: str, profile: str) -> dict[str, Any]:
    """Every params.yaml override a point of a figure runs with: its own, then the figure's budget where the point
    does not set that key."""
    return {**point, **{k: v for k, v in budget(figure, profile).items() if k not in point}}


def overrides(point: dict[str, Any], figure: str, profile: str) -> list[str]:
    """`dvc exp run` arguments for a point of a figure."""
    values = point_params(point, figure, profile)
    return [arg for key, value in values.items() for arg in ("-S", f"{key}={_yaml(value)}")]


def experiment_names(figure: str, defaults: dict[str, Any], profile: str) -> dict[tuple[str, str], str]:
    """(sweep, point) -> the DVC experiment that scores it: one per distinct configuration of the figure, named after
    its first point. Fig. 5a's K=32 and Fig. 5b's n_ret=3 are both the default configuration, so it runs once.
    `defaults` is the profile's resolved params (flat `a.b` keys looked up in it) to tell which overrides change
    nothing."""
    names, first = {}, {}
    for sweep in (SWEEPS[s] for s in FIGURES[figure]):
        for point, values in sweep.points.items():
            changed = frozenset((k, v) for k, v in point_params(values, figure, profile).items()
                                if _dig(defaults, k) != v)
            names[sweep.name, point] = first.setdefault(changed, experiment_name(sweep.name, point))
    return names


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def experiments(exp_show: Sequence[dict]) -> list[dict]:
    """Every finished experiment in `dvc exp show --json`'s rows (of all the baselines it was asked about), as
    {"name", "rev", "baseline", "params": flat params.yaml values, "metrics": {file: data}}, in DVC's order."""
    out = []
    for row in exp_show:
        baseline = str(row.get("rev") or "")
        for exp in row.get("experiments") or []:
            rev = (exp.get("revs") or [{}])[0]
            data = rev.get("data") or {}
            if exp.get("name") and data.get("metrics"):
                params = ((data.get("params") or {}).get("params.yaml") or {}).get("data") or {}
                out.append({"name": exp["name"], "rev": rev.get("rev"), "baseline": baseline, "params": params,
                            "metrics": {f: (m or {}).get("data") or {} for f, m in data["metrics"].items()}})
    return out


_MISSING = object()


def stale_reason(point_lock: dict, workspace_lock: dict, stage: str, overrides: dict[str, Any]) -> str | None:
    """Why a finished sweep point no longer scores the workspace's code and data (None: it still does), from its
    dvc.lock and the workspace's. `stage` (the point's metric) must have run with the workspace's command, code and
    data files, and the workspace's params except `overrides` (flat `a.b` keys), which must hold the point's values.
    An input that a stage upstream produced must be the workspace's, unless the point re-ran that stage (its params
    or inputs differ from the workspace's record), which is then checked in the same way. So a point run on an
    older commit still counts after commits that changed nothing it ran (README, tests, other stages)."""
    point, now = point_lock.get("stages") or {}, workspace_lock.get("stages") or {}
    producer = {out["path"]: name for name, s in point.items() for out in s.get("outs") or []}
    todo, seen = [stage], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        mine, theirs = point.get(name), now.get(name)
        if mine is None:
            return f"{name} did not run in it"
        if theirs is None:
            return f"{name} is not in the workspace's dvc.lock"
        if mine.get("cmd") != theirs.get("cmd"):
            return f"{name}'s command changed"
        ran, ran_now = _deps(mine), _deps(theirs)
        if set(ran) != set(ran_now):
            return f"{name}'s dependencies changed: {', '.join(sorted(set(ran) ^ set(ran_now)))}"
        for path, md5 in ran.items():
            upstream = producer.get(path, name)
            if md5 == ran_now[path]:
                continue
            if upstream == name or _same_record(point[upstream], now.get(upstream) or {}):
                return f"{name}: {path} changed" + (f" ({upstream} was recorded again)" if upstream != name else "")
            todo.append(upstream)
        expected = _flat({f: _overridden(v, overrides) if f == "params.yaml" else v
                          for f, v in (theirs.get("params") or {}).items()})
        ran_params = _flat(mine.get("params") or {})
        for key in sorted(set(expected) | set(ran_params)):
            if expected.get(key, _MISSING) != ran_params.get(key, _MISSING):
                return f"{name}: {key} was {ran_params.get(key)!r}, expected {expected.get(key)!r}"
    return None


def _deps(record: dict) -> dict[str, str | None]:
    return {d["path"]: d.get("md5") for d in record.get("deps") or []}


def _same_record(a: dict, b: dict) -> bool:
    """Whether two dvc.lock records of a stage ran the same command on the same inputs and params."""
    return all(a.get(k) == b.get(k) for k in ("cmd", "deps", "params"))


def _overridden(params: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A stage's recorded params.yaml values (flat `a.b` keys or whole sections) with `overrides` applied where the
    stage reads them."""
    out = copy.deepcopy(params)
    for key, value in overrides.items():
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            head = ".".join(parts[:i])
            if head not in out:
                continue
            if i == len(parts):
                out[head] = value
            else:
                section = out[head]
                for part in parts[i:-1]:
                    section = section.get(part) if isinstance(section, dict) else None
                if isinstance(section, dict):
                    section[parts[-1]] = value
            break
    return out


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def droppable_objects(point_lock: dict, workspace_lock: dict, stage: str,
                      dir_files: Callable[[str], list[str]]) -> set[str]:
    """The DVC cache objects (md5s) of `stage`'s outputs in a sweep point's dvc.lock that the workspace's dvc.lock
    does not use: what dropping the point's trained checkpoint from the cache frees, never a file the workspace
    needs (a tokenizer file the default run's checkpoint shares, say). `dir_files(md5)` lists a directory object's
    file md5s ([] when it is not in the cache)."""
    def objects(outs: list[dict]) -> set[str]:
        found = set()
        for out in outs:
            md5 = out.get("md5")
            if md5:
                found |= {md5, *(dir_files(md5) if md5.endswith(".dir") else [])}
        return found

    used = objects([o for s in (workspace_lock.get("stages") or {}).values() for o in s.get("outs") or []])
    return objects(((point_lock.get("stages") or {}).get(stage) or {}).get("outs") or []) - used


def _dig(data: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def read_metric(metrics: dict[str, dict], metric: Metric) -> dict[str, float] | None:
    """The metric's value, CI and n from one experiment's metrics, in plotted units; None when it has none."""
    section = (metrics.get(metric.metrics_file) or {}).get(metric.stage) or {}
    value, low, high, n = (_dig(section, k) for k in (metric.key, metric.low, metric.high, metric.n))
    if value is None:
        return None
    return {"value": value * metric.scale, "low": None if low is None else low * metric.scale,
            "high": None if high is None else high * metric.scale, "n": n}


def pooled(a: dict[str, float] | None, b: dict[str, float] | None) -> dict[str, float] | None:
    """The n-weighted mean of two suites' scores (the ACEBench aggregate) with a Wilson interval on the pooled n
    (exact for 0/1 scores, conservative for fractional ones)."""
    if not a or not b or not a["n"] or not b["n"]:
        return None
    n = a["n"] + b["n"]
    mean = (a["value"] * a["n"] + b["value"] * b["n"]) / n
    low, high = wilson_interval(min(max(mean, 0.0), 1.0), int(n))
    return {"value": mean, "low": low, "high": high, "n": n}


def collect(sweep: Sweep, domain: str, runs: dict[str, dict],
            names: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """One row per (point, metric): its value and CI, or status "missing" when the point's experiment (`names`, from
    `experiment_names`) has not run."""
    rows = []
    for point in sweep.points:
        name = names[sweep.name, point]
        metrics = runs.get(name, {}).get("metrics", {})
        values = {m.label: read_metric(metrics, m) for m in METRICS[domain]}
        if domain == "agentic":
            values["ACEBench aggregate"] = pooled(*(values[m.label] for m in METRICS[domain][1:]))
        for label, value in values.items():
            rows.append({"figure": sweep.name, "point": point, "x": (sweep.x or {}).get(point), "metric": label,
                         "experiment": name, "status": "ok" if value else "missing", **(value or {})})
    return rows
