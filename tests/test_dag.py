"""The DAG tracks exactly the code each stage runs: every DVC stage's code deps equal its import closure.

A stage's code is the static import closure (lopd.core.provenance) of its CLI module, the training domain's task
module and the method's file (both imported by name; pipelines.dag.stage_code). DVC cannot vary a matrix stage's
deps per member, so a code dep of `train@<name>` may be one that another member of the same matrix imports; the
learning race's `learn@<run>` lists exactly its own method's (its foreach is generated per run: pipelines.dag).
"""

import functools
import json
from collections import defaultdict

import pytest
from pyfork import python

from lopd.core.config import REPO_ROOT
from pipelines.common import stage_name
from pipelines.dag import files_under, is_code, race_methods, stage_code, sync


def _stages() -> list[tuple[str, str, list[str]]]:
    """(name, command, deps) of every stage as DVC resolves dvc.yaml with params.yaml (matrices expanded)."""
    from dvc.repo import Repo

    with Repo(str(REPO_ROOT)) as repo:
        return [(stage.addressing, stage.cmd, [dep.def_path for dep in stage.deps]) for stage in repo.index.stages]


STAGES = _stages()


RACE = "pipelines/learn/dvc.yaml:learn@"
TOOL_RACE = "pipelines/learn/dvc.yaml:learn_tool@"
"""The learning races' runs (code, tool use): each lists its own method's code, data and params."""
RACE_RUNS = (RACE, TOOL_RACE)


def test_every_stage_depends_on_exactly_the_code_it_imports():
    closures = {name: stage_code(cmd) for name, cmd, _ in STAGES}
    groups: dict[str, set[str]] = defaultdict(set)  # a matrix's members share one deps template; a race run has its own
    for name in closures:
        groups[name if name.startswith(RACE_RUNS) else name.split("@")[0]] |= closures[name]
    problems = []
    for name, _, deps in STAGES:
        code = [d for d in deps if is_code(d)]
        covered = set().union(*(files_under(d) for d in code))
        if missing := sorted(closures[name] - covered):
            problems.append(f"{name}: imports but does not depend on {missing}")
        group = groups[name if name.startswith(RACE_RUNS) else name.split("@")[0]]
        for dep in code:
            files = files_under(dep)
            if not files & group:
                problems.append(f"{name}: depends on {dep}, which it does not import")
            elif (REPO_ROOT / dep).is_dir() and not files <= group:
                problems.append(f"{name}: depends on all of {dep}/ but imports only part of it")
    assert not problems, "\n".join(problems) + "\n(run `python -m pipelines.dag --write`)"


RUNS = {name for name, _, _ in STAGES if name.startswith(RACE_RUNS)}


@pytest.mark.parametrize("touched, marked", [
    # an LOPD-only file marks only the LOPD branch (and LOPD's runs in both races)
    ("lopd/latent/composer.py", {"cold_start", "train_lopd", "cold_start_agentic", "train_lopd_agentic",
                                 "latent_decode", "eval_base_composer", "eval_agentic_base_composer",
                                 f"{RACE}lopd", f"{RACE}lopd_seed1", f"{TOOL_RACE}lopd", f"{TOOL_RACE}lopd_seed1"}),
    # one baseline's file marks only that baseline's training (and its race runs)
    ("baselines/sdpo.py", {"train@sdpo", "train_agentic@sdpo", f"{RACE}sdpo", f"{TOOL_RACE}sdpo"}),
    # the loop marks every training stage, and nothing that does not train but the measurements of step 0
    ("lopd/core/loop.py", {name for name, _, _ in STAGES if name.split("@")[0] in ("train", "train_agentic")}
     | {"train_lopd", "train_lopd_agentic", "validate_base", "pipelines/learn/dvc.yaml:learn_select",
        "pipelines/learn/dvc.yaml:learn_tool_select"} | RUNS),

    # the BFCL harness marks only the agentic evaluations and the harness check, which plays every benchmark
    ("evaluation/agentic/bfcl.py", {name for name, _, _ in STAGES if name.startswith("eval_agentic")}
     | {"pipelines/check/dvc.yaml:check_harness"}),
])
def test_touching_a_file_marks_only_the_stages_that_run_it(touched: str, marked: set[str]):
    hit = {name for name, _, deps in STAGES if any(touched in files_under(d) for d in deps if is_code(d))}
    assert hit == marked


@pytest.mark.parametrize("stage", ["train@skill_sd", "train_lopd_agentic", "eval_agentic@lopd",
                                   "pipelines/learn/dvc.yaml:learn_tool_select"])
def test_the_static_scan_finds_everything_a_stage_imports(stage: str):
    """What a stage really loads when it starts (sys.modules after importing its modules) is within its closure."""
    cmd = next(cmd for name, cmd, _ in STAGES if name == stage)
    code = ("import importlib, json, shlex, sys\n"
            # in every closure
            "from pipelines.common import DOMAIN_STAGES, METHOD_STAGES, RACE_STAGES, RACES\n"
            "from pipelines.common import stage_module, stage_modules\n"
            "argv = shlex.split(sys.argv[1]); module = stage_module(argv)\n"
            "opt = lambda n: argv[argv.index(n) + 1] if n in argv else None\n"
            "domain = RACES[opt('--race') or 'learn'].domain if module in RACE_STAGES else opt('--domain') or 'code'\n"
            "mods = stage_modules(module, opt('--method') if module in METHOD_STAGES else None,\n"
            "                     domain if module in DOMAIN_STAGES else None)\n"
            "for m in ['pipelines.launch', *mods]: importlib.import_module(m)\n"
            "root = sys.argv[2]\n"
            "print(json.dumps(sorted({m.__file__[len(root) + 1:] for m in list(sys.modules.values())\n"
            "                        if getattr(m, '__file__', None) and m.__file__.startswith(root + '/')\n"
            "                        and '/.venv/' not in m.__file__})))\n")
    proc = python(["-c", code, cmd, str(REPO_ROOT)], cwd=REPO_ROOT)  # a fresh process: only what the stage loads
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(json.loads(proc.stdout.splitlines()[-1]))
    assert loaded and loaded <= stage_code(cmd), sorted(loaded - stage_code(cmd))


def test_the_tool_use_tasks_mark_the_tool_use_race_only():
    """Of the races' stages, an edit of envscaler-mini's tasks re-runs the tool-use race's selection and runs (they
    play them), not the code race nor a report (which plays nothing)."""
    touched = "evaluation/agentic/envscaler_mini/tasks/banking.py"
    races = [(name, deps) for name, _, deps in STAGES if name.startswith("pipelines/learn/dvc.yaml:")]
    hit = {name for name, deps in races if any(touched in files_under(d) for d in deps if is_code(d))}
    assert hit == {name for name in RUNS if name.startswith(TOOL_RACE)} | {"pipelines/learn/dvc.yaml:learn_tool_select"}


def test_every_stage_names_itself_as_dvc_does():
    """A stage's MLflow run name and metrics namespace (pipelines.common.stage_name) are its DVC stage name."""
    import shlex

    from pipelines.common import stage_module, stage_name

    for name, cmd, _ in STAGES:
        argv = shlex.split(cmd)
        module = stage_module(argv).removeprefix("pipelines.")
        if name.startswith("pipelines/learn/dvc.yaml:"):  # the races' CLIs name their stages after their race
            run = argv[argv.index("--run") + 1] if "--run" in argv else None
            race = argv[argv.index("--race") + 1] if "--race" in argv else "learn"
            assert name.split(":")[1] == (f"{race}@{run}" if run else f"{race}_{module.removeprefix('learn_')}")
            continue
        name = name.split(":")[-1]  # a stage of another DVC file (pipelines/check/dvc.yaml): its name after the path
        option = lambda flag: argv[argv.index(flag) + 1] if flag in argv else None  # noqa: E731
        domain = "agentic" if module.startswith("evaluate_agentic") else option("--domain") or "code"
        method = "base_composer" if module.endswith("_base_composer") else option("--method")
        kind = "eval" if module.startswith("evaluate") else module
        assert stage_name(kind, domain, method) == name


@functools.cache  # read-only: one resolution for every test
def _graph() -> dict[str, tuple[set[str], set[str], set[str]]]:
    """Stage -> (params.yaml keys it reads, paths it reads, paths it writes), as DVC resolves both dvc.yaml files."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    with Repo(str(REPO_ROOT)) as repo:
        return {stage.addressing: ({key for d in stage.deps if isinstance(d, ParamsDependency) for key in d.params},
                                   {d.def_path for d in stage.deps if not isinstance(d, ParamsDependency)},
                                   {o.def_path for o in stage.outs}) for stage in repo.index.stages}


@pytest.mark.parametrize("param, branch", [
    # a baseline's knob re-runs that baseline only, in both domains and in both races, and the reports over them
    ("sdpo.ema_rate", {"train@sdpo", "eval@sdpo", "train_agentic@sdpo", "eval_agentic@sdpo", "report",
                       f"{RACE}sdpo", "pipelines/learn/dvc.yaml:learn_report", f"{TOOL_RACE}sdpo",
                       "pipelines/learn/dvc.yaml:learn_tool_report"}),
    # an LOPD knob (`dvc exp run -S margin=0.02`) re-runs LOPD in both domains, what reads its composer, the report,
    # and LOPD's runs in both races
    ("margin", {"train_lopd", "eval@lopd", "eval_base_composer", "latent_decode", "train_lopd_agentic",
                "eval_agentic@lopd", "eval_agentic_base_composer", "report", "pipelines/learn/dvc.yaml:learn_report",
                f"{RACE}lopd", f"{RACE}lopd_seed1", "pipelines/learn/dvc.yaml:learn_tool_report", f"{TOOL_RACE}lopd",
                f"{TOOL_RACE}lopd_seed1"}),
    # a composer cold-started anew re-runs what reads it: LOPD's stages, LOPD's race runs and the reports
    ("cold_start.steps", {"cold_start", "train_lopd", "eval@lopd", "eval_base_composer", "latent_decode",
                          "cold_start_agentic", "train_lopd_agentic", "eval_agentic@lopd", "eval_agentic_base_composer",
                          "report", "pipelines/learn/dvc.yaml:learn_report", f"{RACE}lopd", f"{RACE}lopd_seed1",
                          "pipelines/learn/dvc.yaml:learn_tool_report", f"{TOOL_RACE}lopd", f"{TOOL_RACE}lopd_seed1"}),
])
def test_changing_a_param_re_runs_exactly_its_branch(param: str, branch: set[str]):
    graph = _graph()
    reads = lambda key: key == param or param.startswith(f"{key}.")  # noqa: E731  a key, or a section above it
    hit = {name for name, (params, _, _) in graph.items() if any(map(reads, params))}
    while True:  # and everything downstream of what they write
        written = {path for name in hit for path in graph[name][2]}
        below = {name for name, (_, deps, _) in graph.items()
                 if any(d == w or d.startswith(f"{w}/") or w.startswith(f"{d}/") for d in deps for w in written)}
        if below <= hit:
            break
        hit |= below
    assert hit == branch


@pytest.mark.parametrize("race, prefix, domain, not_read", [
    ("learn", RACE, "code", {"seed", "results/validation/base.json"}),
    ("learn_tool", TOOL_RACE, "agentic", {"seed", "agentic.steps", "agentic.rollouts_per_step",
                                          "agentic.max_step_tokens"}),
])
def test_a_race_run_reads_what_its_methods_training_stage_reads(race, prefix, domain, not_read):
    """Of the paper pipeline's outputs and params, `<race>@<run>` reads what the stage training its method in the
    race's domain reads, but that stage's seed (the run has its own), the code domain's step 0 (the race's is its
    select stage's) and the tool-use step budgets (the race's own): GRPO's runs neither the composer nor `margin`,
    LOPD's both (the tool-use race's the tool-use bank and composer)."""
    graph = _graph()
    composer = "checkpoints/composer" if domain == "code" else "checkpoints/agentic/composer"
    for run, method in race_methods(race).items():
        params, deps, _ = graph[f"{prefix}{run}"]
        train_params, train_deps, _ = graph[stage_name("train", domain, method)]
        assert {key for key in params if not key.startswith(f"{race}.")} == train_params - not_read, run
        data, train_data = ({d for d in paths if not is_code(d)} for paths in (deps, train_deps))
        assert data - {f"results/{race}/selection.json"} == train_data - not_read, run
    assert "margin" not in graph[f"{prefix}grpo_negated"][0] and composer not in graph[f"{prefix}grpo"][1]
    assert "margin" in graph[f"{prefix}lopd_seed1"][0] and composer in graph[f"{prefix}lopd"][1]


def test_the_committed_dag_is_what_pipelines_dag_generates():
    """Both DVC files' generated deps (code deps, the race's runs) are up to date: `python -m pipelines.dag --write`
    after adding an import or a run to learn.runs."""
    assert sync(write=False) == []


def test_a_training_stage_that_fails_leaves_every_output_as_it_was():
    """DVC deletes a stage's outputs before running it unless they persist: a training stage (or a race run) that
    stops on bad input would lose its previous metrics and curves. Each writes them all at its end (`replacing`)."""
    from dvc.repo import Repo

    with Repo(str(REPO_ROOT)) as repo:
        training = [stage for stage in repo.index.stages if "pipelines.launch train" in stage.cmd
                    or "pipelines.launch learn_race" in stage.cmd]
        assert len(training) >= 20  # every method in both domains, and every race run
        assert {f"{stage.addressing}: {out.def_path}" for stage in training for out in stage.outs
                if not out.persist} == set()
