"""Keep dvc.yaml's code deps equal to the code each stage runs (a maintenance tool, not a DVC stage).

A stage's code is the import closure (lopd.core.provenance) of the modules its command runs (pipelines.common.
stage_modules). `python -m pipelines.dag` lists the stages whose code deps differ from it; `--write` rewrites them in
dvc.yaml and pipelines/learn/dvc.yaml (data deps and comments stay). tests/test_dag.py fails when they differ, so run
this after adding an import.
"""

from __future__ import annotations

import argparse
import shlex

from lopd.core import registry
from lopd.core.config import REPO_ROOT, trained_methods
from lopd.core.provenance import PACKAGES, source_files
from pipelines.common import ANY_METHOD_STAGES, DOMAIN_STAGES, LAUNCHER, METHOD_STAGES, stage_module, stage_modules

DVC_YAML = REPO_ROOT / "dvc.yaml"
DVC_FILES = (DVC_YAML, REPO_ROOT / "pipelines" / "learn" / "dvc.yaml")
"""The paper's pipeline (`dvc repro`) and the learning race (`make learn`), which `dvc repro` alone does not run."""
METHOD_FILE = "baselines/${item.method}.py"
"""How a `train@<name>` matrix names its member's own method file (DVC cannot vary a matrix's deps otherwise)."""


def stage_code(cmd: str) -> set[str]:
    """Repo-relative files that a stage command (`python -m pipelines[.launch ]X [--method M] [--domain D]`) runs:
    the launcher's too when it goes through it."""
    argv = shlex.split(cmd)
    module = stage_module(argv)
    option = lambda name: argv[argv.index(name) + 1] if name in argv else None  # noqa: E731
    domain = (option("--domain") or "code") if module in DOMAIN_STAGES else None
    method = option("--method") if module in METHOD_STAGES else None
    launcher = [LAUNCHER] if argv[argv.index("-m") + 1] == LAUNCHER else []
    methods = trained_methods() if module in ANY_METHOD_STAGES else [method]
    return {f.relative_to(REPO_ROOT).as_posix() for m in methods
            for f in source_files([*launcher, *stage_modules(module, m, domain)])}


def files_under(dep: str) -> set[str]:
    """The files a dep path stands for (itself, or everything under a folder)."""
    path = REPO_ROOT / dep
    if path.is_file():
        return {dep}
    return {p.relative_to(REPO_ROOT).as_posix() for p in path.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def is_code(dep: str) -> bool:
    return dep.split("/")[0] in PACKAGES


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite dvc.yaml's code deps")
    args = parser.parse_args()
    from ruamel.yaml import YAML  # DVC's own YAML library: keeps comments and layout

    yaml = YAML()
    yaml.width = 120
    stale = []
    for path in DVC_FILES:
        doc = yaml.load(path)
        changed = []
        for name, stage in doc["stages"].items():
            stage = stage.get("do", stage)  # a foreach stage: its definition is under `do`
            want = expected_code_deps(stage)
            have = [d for d in stage["deps"] if is_code(d)]
            if have != want:
                changed.append(name)
                data = [d for d in stage["deps"] if not is_code(d)]
                stage["deps"].clear()
                stage["deps"].extend([*data, *want])
        if args.write and changed:
            yaml.dump(doc, path)
        stale += changed
    print(("rewrote" if args.write else "stale:") + f" {', '.join(stale)}" if stale
          else "dvc.yaml code deps are up to date")


if __name__ == "__main__":
    main()
