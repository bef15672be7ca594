"""The DAG tracks exactly the code each stage runs: every DVC stage's code deps equal its import closure.

A stage's code is the static import closure (lopd.core.provenance) of its CLI module, the training domain's task
module and the method's file (both imported by name). DVC cannot vary a matrix stage's deps per member, so a code dep
of `train@<name>` may be one that another member of the same matrix imports; nothing else may be extra.
"""

import shlex
from collections import defaultdict

import pytest

from lopd.core.config import REPO_ROOT
from lopd.core.provenance import PACKAGES, source_files
from pipelines.common import DOMAIN_STAGES, stage_modules


def _stages() -> list[tuple[str, str, list[str]]]:
    from dvc.repo import Repo

    with Repo(str(REPO_ROOT)) as repo:
        return [(stage.addressing, stage.cmd, [dep.def_path for dep in stage.deps]) for stage in repo.index.stages]


def _closure(cmd: str) -> set[str]:
    argv = shlex.split(cmd)
    module = argv[argv.index("-m") + 1]
    option = lambda name: argv[argv.index(name) + 1] if name in argv else None  # noqa: E731
    domain = (option("--domain") or "code") if module in DOMAIN_STAGES else None
    return {f.relative_to(REPO_ROOT).as_posix() for f in source_files(stage_modules(module, option("--method"), domain))}


def _files_under(dep: str) -> set[str]:
    path = REPO_ROOT / dep
    if path.is_file():
        return {dep}
    return {p.relative_to(REPO_ROOT).as_posix() for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


STAGES = _stages()


def test_every_stage_depends_on_exactly_the_code_it_imports():
    groups: dict[str, set[str]] = defaultdict(set)  # a matrix's members share one deps template
    closures = {name: _closure(cmd) for name, cmd, _ in STAGES}
    for name, _, _ in STAGES:
        groups[name.split("@")[0]] |= closures[name]
    problems = []
    for name, _, deps in STAGES:
        code = [d for d in deps if d.split("/")[0] in PACKAGES]
        covered = set().union(*(_files_under(d) for d in code)) if code else set()
        missing = sorted(closures[name] - covered)
        if missing:
            problems.append(f"{name}: imports but does not depend on {missing}")
        group = groups[name.split("@")[0]]
        for dep in code:
            files = _files_under(dep)
            if not files & group:
                problems.append(f"{name}: depends on {dep}, which it does not import")
            elif (REPO_ROOT / dep).is_dir() and not files <= group:
                problems.append(f"{name}: depends on all of {dep}/ but imports only part of it "
                                f"(not {sorted(files - group)[:3]}...)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("touched, marked", [
    # an LOPD-only file marks only the LOPD branch
    ("lopd/latent/composer.py", {"cold_start", "train_lopd", "cold_start_agentic", "train_lopd_agentic"}),
    # one baseline's file marks only that baseline's training
    ("baselines/sdpo.py", {"train@sdpo", "train_agentic@sdpo"}),
    # the loop marks every training stage, and nothing that does not train
    ("lopd/core/loop.py", {name for name, _, _ in STAGES if name.split("@")[0] in ("train", "train_agentic")}
     | {"train_lopd", "train_lopd_agentic"}),
])
def test_touching_a_file_marks_only_the_stages_that_run_it(touched: str, marked: set[str]):
    hit = {name for name, _, deps in STAGES
           if any(touched == d or touched.startswith(d.rstrip("/") + "/") for d in deps)}
    assert hit == marked

