"""Keep the DAG's deps equal to what each stage runs and reads (a maintenance tool, not a DVC stage).

A stage's code is the import closure (lopd.core.provenance) of the modules its command runs (pipelines.common.
stage_modules). `python -m pipelines.dag` lists the stages whose generated deps differ from it; `--write` rewrites them
in every DVC file (`DVC_FILES`; hand-written deps and comments stay). tests/test_dag.py fails when they
differ, so run this after adding an import, a run to learn.runs or a dep to a training stage.

The learning races' runs (`learn@<run>`, `learn_tool@<run>`) read what their method reads, each its own: a run reads
the upstream outputs and params of the stage that trains its method in the race's domain (dvc.yaml's `train@<method>`
or `train_lopd`; `train_agentic@<method>` or `train_lopd_agentic`: `training_reads`) and the code its method imports.
DVC gives a foreach stage one deps list and interpolates no list into it, so each race's `foreach` is generated from
its runs (learn.runs, learn_tool.runs): each run with its own deps and params, which the template names slot by slot
(`SLOT`).
"""

from __future__ import annotations

import argparse
import functools
import shlex
from typing import Any

from lopd.core import registry
from lopd.core.config import REPO_ROOT, load_config
from lopd.core.provenance import PACKAGES, source_files
from pipelines.common import (
    DOMAIN_STAGES,
    LAUNCHER,
    METHOD_STAGES,
    RACE_STAGES,
    RACES,
    RUN_STAGES,
    Race,
    base_validation_file,
    stage_module,
    stage_modules,
    stage_name,
)

DVC_YAML = REPO_ROOT / "dvc.yaml"
RACE_YAML = REPO_ROOT / "pipelines" / "learn" / "dvc.yaml"
CHECK_YAML = REPO_ROOT / "pipelines" / "check" / "dvc.yaml"
DVC_FILES = (DVC_YAML, RACE_YAML, CHECK_YAML)
"""The paper's pipeline (`dvc repro`), the learning races (`make learn`) and the harness check (`make check-harness`),
which `dvc repro` alone does not run."""
PARAMS_YAML = REPO_ROOT / "params.yaml"
METHOD_FILE = "baselines/${item.method}.py"
"""How a `train@<name>` matrix names its member's own method file (DVC cannot vary a matrix's deps otherwise)."""
NOT_READ_BY_RACE = {"code": (base_validation_file().relative_to(REPO_ROOT).as_posix(), "seed"),
                    "agentic": ("seed", "agentic.steps", "agentic.rollouts_per_step", "agentic.max_step_tokens")}
"""Per domain, what a race run does not read of its method's training stage: its seed (a run has its own, in
<race>.runs.<run>), the code pipeline's step 0 (a run's is its select stage's), and the tool-use step budgets the
race sets itself (<race>.steps, .rollouts_per_step, .max_new_tokens)."""
SLOT = "${{item.{kind}[{i}]}}"
"""The template's i-th entry of a run's own `deps` or `params` (a run with fewer repeats its last)."""


@functools.cache
def race_methods(section: str = "learn") -> dict[str, str]:
    """Each run of a learning race (`<section>.runs` in params.yaml) and the method it trains."""
    return {run: spec.method for run, spec in getattr(load_config(PARAMS_YAML), section).runs.items()}


def stage_code(cmd: str) -> set[str]:
    """Repo-relative files that a stage command (`python -m pipelines[.launch ]X [--method M] [--race L] [--run R]
    [--domain D]`) runs: the launcher's too when it goes through it."""
    argv = shlex.split(cmd)
    module = stage_module(argv)
    option = lambda name: argv[argv.index(name) + 1] if name in argv else None  # noqa: E731
    race = RACES[option("--race") or "learn"]  # a race stage's (the CLIs' default race)
    domain = (race.domain if module in RACE_STAGES else option("--domain") or "code") if module in DOMAIN_STAGES \
        else None
    method = (option("--method") if module in METHOD_STAGES
              else race_methods(race.section)[option("--run")] if module in RUN_STAGES else None)
    launcher = [LAUNCHER] if argv[argv.index("-m") + 1] == LAUNCHER else []
    modules = [*launcher, *stage_modules(module, method, domain)]
    return {f.relative_to(REPO_ROOT).as_posix() for f in source_files(modules)}


def files_under(dep: str) -> set[str]:
    """The files a dep path stands for (itself, or everything under a folder)."""
    path = REPO_ROOT / dep
    if path.is_file():
        return {dep}
    return {p.relative_to(REPO_ROOT).as_posix() for p in path.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def is_code(dep: str) -> bool:
    return dep.split("/")[0] in PACKAGES


def is_generated(entry: str) -> bool:
    """A deps or params entry this tool writes: a code dep, or a slot of a race run's own entries."""
    return is_code(entry) or entry.startswith("${item.")


def minimal_cover(files: set[str]) -> list[str]:
    """The shortest dep list naming exactly `files`: a folder wherever all of its files are among them."""
    cover = set()
    for file in files:
        parts, best = file.split("/"), file
        for i in range(len(parts) - 1, 0, -1):
            folder = "/".join(parts[:i])
            if files_under(folder) <= files:
                best = folder
        cover.add(best)
    return sorted(cover)


def expected_code_deps(stage: dict) -> list[str]:
    """The code deps a dvc.yaml stage definition should list (a matrix over methods: one template for all members)."""
    cmd = stage["cmd"]
    if "--method ${item.method}" not in cmd or stage_module(shlex.split(cmd)) not in METHOD_STAGES:
        return minimal_cover(stage_code(cmd))
    members = registry.baseline_names()
    own = {f"baselines/{m}.py" for m in members}
    union = set().union(*(stage_code(cmd.replace("${item.method}", m)) for m in members))
    return [*minimal_cover(union - own), METHOD_FILE]


def training_reads(default: dict, method: str, domain: str) -> tuple[list[str], list[str]]:
    """The data deps and params of the default DAG's stage that trains `method` in `domain`, as DVC resolves them for
    it (`train@<method>`, `train_agentic@<method>`: the matrix's, `${item.method}` filled in; `train_lopd`,
    `train_lopd_agentic`)."""
    stage = default["stages"][stage_name("train", domain, method).split("@")[0]]
    fill = lambda entry: str(entry).replace("${item.method}", method)  # noqa: E731
    return [fill(d) for d in stage["deps"] if not is_code(d)], [fill(p) for p in stage["params"]]


def race_reads(default: dict, template: dict, race: Race) -> tuple[list[str], dict[str, dict[str, list[str]]]]:
    """What the race's runs read beyond the template's hand-written deps and params: the code deps every run has (its
    import closure's minimal cover), and each run's own deps (its method's upstream outputs in the race's domain, then
    the rest of its code) and params (its method's: `training_reads`, but `NOT_READ_BY_RACE`)."""
    written = {entry for entry in [*template["deps"], *template["params"]] if not is_generated(entry)}
    runs = race_methods(race.section)
    covers = {run: minimal_cover(stage_code(template["cmd"].replace("${key}", run))) for run in runs}
    common = [dep for dep in next(iter(covers.values())) if all(dep in cover for cover in covers.values())]
    own = {}
    for run, method in runs.items():
        data, params = training_reads(default, method, race.domain)
        keep = lambda entry: entry not in written and entry not in NOT_READ_BY_RACE[race.domain]  # noqa: E731
        own[run] = {"deps": [*filter(keep, data), *(dep for dep in covers[run] if dep not in common)],
                    "params": list(filter(keep, params))}
    return common, own


def race_params(run: str, section: str = "learn") -> list[str]:
    """The params stage `<section>@<run>` reads, as pipelines/learn/dvc.yaml lists them; a ValueError for a run it has
    no stage for (one added to the race's runs since the file was generated)."""
    from ruamel.yaml import YAML

    stage = YAML(typ="safe").load(RACE_YAML)["stages"][section]
    if run not in stage["foreach"]:
        raise ValueError(f"{RACE_YAML.relative_to(REPO_ROOT)}: no stage {section}@{run} (run: python -m "
                         "pipelines.dag --write)")
    written = [p.replace("${key}", run) for p in stage["do"]["params"] if not is_generated(p)]
    return [*written, *dict.fromkeys(stage["foreach"][run]["params"])]


def flow(entries: list[str]) -> Any:
    """A YAML list written on one line (wrapped at the file's width)."""
    from ruamel.yaml.comments import CommentedSeq

    seq = CommentedSeq(entries)
    seq.fa.set_flow_style()
    return seq


def update_race_stage(stage: dict, default: dict, race: Race) -> bool:
    """Rewrite a race's foreach stage from its runs (`race_reads`) where it differs; True where it did. Runs of one
    method share one entry (a YAML anchor named after the method; the tool-use race's `agentic_<method>`: one file's
    anchors are unique)."""
    from ruamel.yaml.comments import CommentedMap

    template = stage["do"]
    common, own = race_reads(default, template, race)
    width = {kind: max(len(reads[kind]) for reads in own.values()) for kind in ("deps", "params")}
    slots = {kind: [SLOT.format(kind=kind, i=i) for i in range(n)] for kind, n in width.items()}
    deps = [*(d for d in template["deps"] if not is_generated(d)), *common, *slots["deps"]]
    params = [*(p for p in template["params"] if not is_generated(p)), *slots["params"]]
    padded = {run: {kind: reads[kind] + reads[kind][-1:] * (width[kind] - len(reads[kind])) for kind in reads}
              for run, reads in own.items()}
    have = stage["foreach"] if isinstance(stage["foreach"], dict) else {}  # e.g. `${learn.runs}` before a first write
    if ([*template["deps"]], [*template["params"]], {run: {k: [*v] for k, v in reads.items()} for run, reads in
                                                     have.items()}) == (deps, params, padded):
        return False
    template["deps"].clear()
    template["deps"].extend(deps)
    template["params"].clear()
    template["params"].extend(params)
    entries: dict[str, CommentedMap] = {}
    foreach = CommentedMap()
    runs = race_methods(race.section)
    for run, method in runs.items():
        if method not in entries:
            entries[method] = CommentedMap((kind, flow(values)) for kind, values in padded[run].items())
            if [*runs.values()].count(method) > 1:
                anchor = method if race.domain == "code" else f"{race.domain}_{method}"
                entries[method].yaml_set_anchor(anchor, always_dump=True)
        foreach[run] = entries[method]
    stage["foreach"] = foreach
    return True


def sync(write: bool) -> list[str]:
    """The stages whose generated deps differ from what they should be (rewritten where `write`)."""
    from ruamel.yaml import YAML  # DVC's own YAML library: keeps comments and layout

    yaml = YAML()
    yaml.width = 120
    stale, default = [], None
    for path in DVC_FILES:
        doc = yaml.load(path)
        default = default or doc  # dvc.yaml, read first: the race's runs read its training stages
        changed = []
        for name, stage in doc["stages"].items():
            if path == RACE_YAML and name in RACES:
                if update_race_stage(stage, default, RACES[name]):
                    changed.append(name)
                continue
            stage = stage.get("do", stage)  # a foreach stage: its definition is under `do`
            want = expected_code_deps(stage)
            have = [d for d in stage["deps"] if is_code(d)]
            if have != want:
                changed.append(name)
                data = [d for d in stage["deps"] if not is_code(d)]
                stage["deps"].clear()
                stage["deps"].extend([*data, *want])
        if write and changed:  # a flow list wrapped at the width ends its lines in a space
            yaml.dump(doc, path, transform=lambda text: "\n".join(line.rstrip() for line in text.split("\n")))
        stale += [f"{path.relative_to(REPO_ROOT)}:{name}" for name in changed]
    return stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the stale deps")
    args = parser.parse_args()
    stale = sync(args.write)
    print(("rewrote" if args.write else "stale:") + f" {', '.join(stale)}" if stale
          else "the DVC files' generated deps are up to date")


if __name__ == "__main__":
    main()
