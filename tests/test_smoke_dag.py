"""End to end on a copy of the repository: a fresh clone dry-runs; `dvc exp run -S profile=smoke` produces the tables,
metrics DVC can show and plots; a Fig. 3 point queued as scripts/sweep.py queues it re-runs exactly its stage, logs one
MLflow parent run and is drawn; a DVC remote restores the results in a new clone; a code change marks the right
stages; `-S launch.processes=2` runs the evaluations on two processes (training on two: tests/test_multiprocess.py)
and the report adds the stages DVC did not re-run to its MLflow parent. Which stages a param re-runs is DVC's own
view of both dvc.yaml files (tests/test_dag.py)."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
from pyfork import python, stage_python

from lopd.core.config import REPO_ROOT

SHARED = Path(os.environ.get("LOPD_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
IGNORE = shutil.ignore_patterns(".venv", ".git", "models", "checkpoints", "bank", "pool", "bank_agentic",
                                "pool_agentic", "results", "metrics", "plots", "cache", "tmp",
                                "__pycache__", ".pytest_cache", ".hypothesis")


# One baseline and one code benchmark keep the suite inside its time budget (each DVC stage costs seconds of start-up
# here): SDPO, a trained baseline with a teacher, on HumanEval+. Every stage kind and both domains are still covered;
# each baseline trains in tests/test_baselines.py, vanilla's base-model checkpoint is evaluated in
# tests/test_pipelines_cli.py, MBPP+ is scored in tests/test_evalplus_bench.py. `dvc exp run -S profile=smoke` itself
# runs all seven methods on both benchmarks.
BASELINES = ["sdpo"]
ROWS = ["SDPO", "LOPD"]
BASE_COMPOSER = {"eval_base_composer", "eval_agentic_base_composer"}
"""Table 3's Base + Composer: the base model with LOPD's composer, so on the LOPD branch."""
AGENTIC_SUITES = ("envscaler", "bfcl_base", "bfcl_miss_func", "bfcl_miss_param", "bfcl_long_context",
                  "acebench_multi_step", "acebench_multi_turn")
MARGIN_EXP = "fig3-m_0.02"  # named as scripts/sweep.py names Fig. 3's m = 0.02 point, so the figure collects it
SWEEP = {MARGIN_EXP: (["train_lopd", "-S", "margin=0.02"], {"train_lopd"})}
"""The queued experiments, each with the stages it must re-run exactly: Fig. 3's m = 0.02 point in the code domain,
its target stage and override as `scripts/sweep.py queue fig3` gives them (the branch a plain `dvc exp run -S
margin=0.02` re-runs: tests/test_dag.py)."""


def _run(cmd, cwd, env):
    """`cmd`'s stdout; a script of the copy's (`[sys.executable, "scripts/..."]`) runs as tests/pyfork.py runs it."""
    if cmd[0] == sys.executable:
        proc = python(cmd[1:], cwd=cwd, env=env, timeout=1500)
    else:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _smoke_overrides(repo: Path) -> list[str]:
    """The `-S` overrides of the DAG test's `dvc exp run` in the copy `repo`."""
    # a relative data path, as in conf/: it must resolve against the repository, also in a queued run's temp copy;
    # float32 rollouts and training: a CPU without bf16 units emulates bf16 matmuls, which doubled the rollout time
    # of the stages here (the unit tests run the smoke profile's bf16 paths)
    return ["profile=smoke", f"data.shared_dir={os.path.relpath(SHARED, repo)}", f"baseline_methods={BASELINES}",
            f"methods={[*BASELINES, 'lopd']}", "benchmarks=[humaneval_plus]", "sampling.dtype=float32",
            "train.mixed_precision=no"]


# This file's two quick tests run after the DAG test (the slow one goes first): under `make test`, xdist hands a worker
# another file once at most two of its tests are pending, so with three here the next file is handed out when the DAG
# test ends instead of queueing behind it from the start (it was test_vllm_multiprocess's 53 s).


def test_the_queued_ablation_is_the_point_fig3_collects():
    """The DAG test queues Fig. 3's m = 0.02 point under the name `scripts/sweep.py` gives it, with its override."""
    from evaluation import sweeps

    points = {sweeps.experiment_name("fig3", label): point for label, point in sweeps.SWEEPS["fig3"].points.items()}
    (args, _), = SWEEP.values()
    assert args == [sweeps.TARGET_STAGE["code"], *sweeps.overrides(points[MARGIN_EXP], "fig3", "smoke")]


def test_the_smoke_overrides_compose_into_the_config_the_dag_test_expects(tmp_path):
    """The DAG test's overrides make the config its assertions assume (checked here in a second, not after minutes)."""
    from dvc.utils.hydra import compose_and_dump

    from lopd.core.config import CONF_DIR, load_config

    path = tmp_path / "params.yaml"
    compose_and_dump(path, str(CONF_DIR), None, "config", str(tmp_path), _smoke_overrides(REPO_ROOT))
    cfg = load_config(path)
    assert (cfg.profile, cfg.methods, cfg.benchmarks) == ("smoke", [*BASELINES, "lopd"], ["humaneval_plus"])
    assert cfg.data.shared_dir == os.path.relpath(SHARED, REPO_ROOT) and cfg.train.mixed_precision == "no"


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "evalplus").is_dir(), reason=f"EvalPlus data not found at {SHARED}/evalplus")
def test_smoke_profile_runs_the_whole_dag(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(REPO_ROOT, repo, ignore=IGNORE)
    (repo / "dvc.lock").unlink(missing_ok=True)
    # MLflow off (~3 s per stage) except for the queued sweep, which checks the run hierarchy on a real store
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "LOPD_MLFLOW_URI": "off",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    smoke = [arg for override in _smoke_overrides(repo) for arg in ("-S", override)]
    _run(["git", "init", "-q"], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "copy"], repo, env)

    # a fresh clone has no outputs: the dry run lists every stage of dvc.yaml and runs nothing (docs/experiments.md:
    # Dry runs), and none of the learning race's (pipelines/learn/dvc.yaml: `make learn`)
    stages = set(_run(["dvc", "stage", "list", "--name-only", "dvc.yaml"], repo, env).split())
    race = set(_run(["dvc", "stage", "list", "--name-only", "pipelines/learn/dvc.yaml"], repo, env).split())
    dry = _run(["dvc", "repro", "--dry", "--force-downstream"], repo, env)
    assert set(re.findall(r"Running stage '([^']+)'", dry)) == stages and not (repo / "models").exists()

    # its stages (MLflow off) are forked children of a server that imported torch once (tests/pyfork.py: ~4 s a
    # stage); the later runs' stages are processes of their own, whose MLflow runs find DVC among their ancestors
    forked = {**env, "PATH": f"{stage_python(tmp_path / 'bin')}:{env['PATH']}"}
    ran = set(re.findall(r"Running stage '([^']+)'", _run(["dvc", "exp", "run", *smoke], repo, forked)))
    # nor does `dvc exp run` run the race (on the smoke profile's random model its selection would find no task)
    assert race and "train_lopd" in ran and not ran & race

    table = (repo / "reports" / "tables" / "code_results.md").read_text()
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [*ROWS, "Base + Composer"], rows
    assert "LCB v5: n/a" in table
    for name in ("code_results.csv", "code_results.tex"):
        assert (repo / "reports" / "tables" / name).stat().st_size > 0
    summary = json.loads((repo / "results" / "eval" / "sdpo" / "humaneval_plus.json").read_text())["summary"]
    assert summary["n_tasks"] == 4 and summary["profile"] == "smoke"
    with_context = json.loads((repo / "results" / "eval" / "base_composer" / "humaneval_plus.json").read_text())
    assert with_context["summary"]["composer"].startswith("LOPD after 2 steps"), with_context["summary"]
    assert all(len(task["retrieved_entries"]) == 2 for task in with_context["per_task"].values())
    bank = json.loads((repo / "metrics" / "bank.json").read_text())["build_bank"]
    assert bank["n_entries"] > 0 and bank["eval_tasks_checked"] > 0
    assert bank["n_tasks_sampled"] == 16 < bank["n_train_tasks"]  # the smoke profile's bank.task_limit
    lopd = json.loads((repo / "plots" / "train" / "lopd.json").read_text())
    assert len(lopd) == 2 and "beta_next" in lopd[0] and "reward" in lopd[0]
    # the code training runs took their step 0 from validate_base, measured once, and validated after it themselves
    base = json.loads((repo / "results" / "validation" / "base.json").read_text())
    for method in ("sdpo", "lopd"):
        points = json.loads((repo / "plots" / "validation" / f"{method}.json").read_text())
        assert points[0] == {"step": 0, "cumulative_rollouts": 0, **base["step0"]} and len(points) > 1, method

    # the agentic domain: every method trained on EnvScaler-format tasks, evaluated on all three suites
    tool_use = (repo / "reports" / "tables" / "tool_use_results.md").read_text()
    rows = [line.split("|")[1].strip() for line in tool_use.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [*ROWS, "Base + Composer"], rows
    assert "envscaler-mini" in tool_use and "n/a |" not in tool_use, tool_use
    scores = json.loads((repo / "metrics" / "agentic" / "eval" / "lopd.json").read_text())["eval_agentic@lopd"]
    for name in AGENTIC_SUITES:
        s = scores[name]
        assert s["n_tasks"] == 1 and 0 <= s["score_ci_low"] <= s["score"] <= s["score_ci_high"] <= 100, name
        episode = json.loads((repo / "results" / "agentic" / "eval" / "lopd" / f"{name}.json").read_text())
        assert episode["summary"]["steps"] >= 1, name
    agentic_train = json.loads((repo / "plots" / "agentic" / "train" / "lopd.json").read_text())
    assert len(agentic_train) == 2 and "tool_calls_per_step" in agentic_train[0]
    assert (repo / "reports" / "tables" / "behavior.md").read_text().count("| ") >= 8
    decoded = (repo / "reports" / "figures" / "latent_decode.md").read_text()
    assert decoded.count("| with task |") == decoded.count("| without task |") > 0, decoded[:2000]
    for figure in ("plots/train/lopd.png", "reports/figures/training_curves_agentic.png",
                   "reports/figures/latent_decode.png", "reports/figures/fig4.png"):
        assert (repo / figure).read_bytes()[:4] == b"\x89PNG", figure
    fig4 = list(csv.DictReader((repo / "reports" / "figures" / "fig4.csv").open()))  # drawn by the report stage
    assert {(r["method"], r["curve"]) for r in fig4} == {(m, c) for m in ("lopd", "sdpo")
                                                         for c in ("train", "validation")}

    # every metric DVC reads is a number; the histories are DVC plots
    shown = json.loads(_run(["dvc", "metrics", "show", "--json"], repo, env))
    # the races' metrics files (results/learn/, results/learn_tool/: `make learn`) are listed too: those of runs not
    # run yet without data
    files = {path: data.get("data") for path, data in shown[""]["data"].items()
             if not path.startswith(("results/learn/", "results/learn_tool/"))}
    assert len(files) == 21 and all(data and "error" not in data for data in files.values()), files
    leaves = [v for data in files.values() for section in data.values() for v in _leaves(section)]
    assert leaves and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in leaves)
    plots = json.loads(_run(["dvc", "plots", "show", "--json"], repo, env))["data"]
    assert {"plots/train/lopd.json", "plots/agentic/train/sdpo.json", "plots/train/lopd.png"} <= set(plots), plots
    # no column name is both a param and a path (it crashed `--drop/--keep`)
    kept = _run(["dvc", "exp", "show", "--drop", ".*", "--keep", "margin", "--csv"], repo, env).splitlines()
    assert kept[0].split(",")[-1] == "margin", kept[0]

    # a queued Fig. 3 point, started from committed results as a user would: it re-runs exactly its stage, in a
    # temporary copy, and is one MLflow parent run whose child is named as its stage
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "smoke results"], repo, env)
    for name, (point, _) in SWEEP.items():
        _run(["dvc", "exp", "run", "--queue", "-n", name, *smoke, *point], repo, env)
    store = tmp_path / "mlflow.db"
    _run(["dvc", "queue", "start"], repo, {**env, "LOPD_MLFLOW_URI": f"sqlite:///{store}"})
    deadline = time.monotonic() + 1200
    while re.search(r"\b(Queued|Running)\b", status := _run(["dvc", "queue", "status"], repo, env)):
        assert time.monotonic() < deadline, status
        time.sleep(5)
    assert status.count("Success") == len(SWEEP), status
    for name, (_, branch) in SWEEP.items():
        log = _run(["dvc", "queue", "logs", name], repo, env)
        assert set(re.findall(r"Running stage '([^']+)'", log)) == branch, (name, log[-3000:])
    baseline = next(row for row in json.loads(_run(["dvc", "exp", "show", "--json"], repo, env)) if row["experiments"])
    ran = {e["name"]: e["revs"][0]["data"] for e in baseline["experiments"]}
    assert ran[MARGIN_EXP]["params"]["params.yaml"]["data"]["margin"] == 0.02
    beta = {name: ran[name]["metrics"]["metrics/train/lopd.json"]["data"]["train_lopd"]["beta_final"] for name in SWEEP}
    committed = json.loads((repo / "metrics" / "train" / "lopd.json").read_text())["train_lopd"]["beta_final"]
    assert beta[MARGIN_EXP] != committed, beta  # the margin changes the dual variable's path (the workspace: 0.05)
    # MLflow: the experiment is one parent run with the params it changed and its stage's summary; its child carries
    # the experiment's name and the exact stage
    client = mlflow.MlflowClient(f"sqlite:///{store}")
    runs = client.search_runs([client.get_experiment_by_name("lopd-suite-smoke").experiment_id])
    parents = {r.info.run_name: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    assert set(parents) == set(SWEEP) and all(r.info.status == "FINISHED" for r in parents.values()), parents
    assert parents[MARGIN_EXP].data.params["margin"] == "0.02" and parents[MARGIN_EXP].data.params["profile"] == "smoke"
    for name, (_, branch) in SWEEP.items():
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[name].info.run_id]
        assert {r.data.tags["dvc.stage"] for r in children} == branch
        assert all(r.data.tags["dvc.experiment"] == name and r.info.run_name == f"{r.data.tags['dvc.stage']} · {name}"
                   for r in children)
    margin_parent = parents[MARGIN_EXP].data.metrics
    assert margin_parent["train_lopd.beta_final"] == beta[MARGIN_EXP], margin_parent

    # a DVC remote holds the results: a new clone pulls them and is up to date without running anything
    _run(["dvc", "remote", "add", "-d", "store", str(tmp_path / "remote")], repo, env)
    _run(["dvc", "push"], repo, env)
    clone = tmp_path / "clone"
    _run(["git", "clone", "-q", str(repo), str(clone)], tmp_path, env)
    _run(["dvc", "remote", "add", "-d", "store", str(tmp_path / "remote")], clone, env)
    _run(["dvc", "pull"], clone, env)
    assert "Running stage" not in _run(["dvc", "repro", "--dry"], clone, env)
    assert (clone / "checkpoints" / "lopd" / "manifest.json").is_file()

    # editing code marks exactly the stages that run it (`dvc status` lists the stages whose deps changed; each
    # file's stages are checked statically in tests/test_dag.py, this is DVC agreeing on the LOPD branch)
    source = repo / "lopd" / "latent" / "composer.py"
    original = source.read_text()
    source.write_text(original + "# touched\n")
    status = json.loads(_run(["dvc", "status", "--json", "dvc.yaml"], repo, env))  # the race (not run here) aside
    source.write_text(original)
    marked = {"cold_start", "train_lopd", "cold_start_agentic", "train_lopd_agentic", "latent_decode", *BASE_COMPOSER}
    assert {name.split(":")[-1] for name in status} == marked, status
    # two processes a stage: `-S launch.processes=2` runs a code and an agentic evaluation (each alone, `-s`, upon
    # the outputs above) under torchrun; each gathers both processes' shares and writes its metrics and its one MLflow
    # run once (two agentic tasks a step: the smoke profile's one cannot be shared). Training on two processes (every
    # method, DDP and FSDP2, its metrics and MLflow run once) and the bank's and cold start's splits run in
    # tests/test_multiprocess.py, a one-process stage's note in tests/test_launch.py: each stage costs ~20 s here.
    # The report runs after them (one process): it adds the summaries of the stages DVC did not re-run to the
    # experiment's MLflow parent, so the parent of every experiment holds every stage's numbers (MLflow Compare).
    split = ["eval@lopd", "eval_agentic@sdpo"]
    proc = subprocess.run(["dvc", "exp", "run", "-s", *smoke, "-S", "agentic.rollouts_per_step=8",
                           "-S", "launch.processes=2", *split, "report"], cwd=repo,
                          env={**env, "LOPD_MLFLOW_URI": f"sqlite:///{store}"}, capture_output=True, text=True,
                          timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert re.findall(r"Running stage '([^']+)'", log) == [*split, "report"], log[-3000:]
    evaluated = json.loads((repo / "results" / "eval" / "lopd" / "humaneval_plus.json").read_text())
    assert evaluated["summary"]["n_tasks"] == len(evaluated["per_task"]) == 4  # both processes' shares gathered
    agentic = json.loads((repo / "metrics" / "agentic" / "eval" / "sdpo.json").read_text())["eval_agentic@sdpo"]
    assert all(agentic[name]["n_tasks"] == 1 for name in AGENTIC_SUITES), agentic  # each suite's task, played once
    runs = client.search_runs([client.get_experiment_by_name("lopd-suite-smoke").experiment_id])
    # run unnamed, it is named after what it changed: in MLflow at once, and in DVC by `make exps`, which compares
    # the two experiments with the committed run of their profile, what differs only, in a 200-column terminal
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags and r.info.run_name not in SWEEP]
    readable = "agentic.rollouts_per_step-8_launch.processes-2"
    assert parent.info.run_name == readable and parent.data.params["launch.processes"] == "2", parent.info.run_name
    children = {r.data.tags["dvc.stage"]: r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == sorted([*split, "report"])  # one run a stage, not one a process
    assert all(children[name].data.params["launch.processes"] == "2" for name in split)
    assert {children[name].data.tags["lopd.processes"] for name in split} == {"2"}
    stages = set(_run(["dvc", "stage", "list", "--name-only"], repo, env).split())
    summarised = {key.split(".")[0].replace("_at_", "@") for key in parent.data.metrics}
    assert summarised == stages, stages ^ summarised
    assert set(parent.data.tags["lopd.cached_stages"].split(", ")) == stages - {*split, "report"}
    # the figures script collects the queued experiment as Fig. 3's m = 0.02 point, names the points not run yet, and
    # adds the files to the newest `report` run, which has Fig. 4 already
    drawn = _run([sys.executable, "scripts/sweep.py", "draw", "fig3"], repo,
                 {**env, "LOPD_MLFLOW_URI": f"sqlite:///{store}"})
    assert "fig3: not run yet: fig3-frozen_phi0" in drawn, drawn
    fig3 = list(csv.DictReader((repo / "reports" / "figures" / "fig3.csv").open()))
    assert {r["point"]: r["status"] for r in fig3}["m=0.02"] == "ok" and sum(r["status"] == "ok" for r in fig3) == 1
    point = next(r for r in fig3 if r["point"] == "m=0.02")
    lopd_metrics = ran[MARGIN_EXP]["metrics"]["metrics/train/lopd.json"]["data"]["train_lopd"]
    assert float(point["value"]) == lopd_metrics["val_reward_final"] and int(point["n"]) == lopd_metrics["val_n"]
    for name in ("fig3.png", "fig3.pdf"):
        assert (repo / "reports" / "figures" / name).stat().st_size > 0, name
    report = children["report"]
    assert "fig3.png" in {a.path for a in client.list_artifacts(report.info.run_id)}
    assert {"reports/figures/fig4.png", "reports/figures/fig4.csv"} <= {  # a stage's files under their own paths
        a.path for a in client.list_artifacts(report.info.run_id, "reports/figures")}
    view = _run([sys.executable, "scripts/compare.py", "--dvc"], repo, {**env, "COLUMNS": "200"})
    assert re.search(rf"renamed experiment [a-z]{{5}}-[a-z]{{4}} -> {readable}", view), view
    lines = {line.split()[0]: line.split()[1:] for line in view.splitlines() if line.strip()}
    assert max(len(line) for line in view.splitlines()) <= 200 and "profile smoke: against" in view, view
    column = {name: i for i, name in enumerate(lines["run"])}
    assert set(column) - {lines["run"][0]} == {*SWEEP, readable}, view  # the committed run leads
    names = (lines["run"][0], *SWEEP, readable)
    assert [lines["margin"][column[n]] for n in names] == ["0.05", "0.02", "0.05"], view
    assert [lines["launch.processes"][column[n]] for n in names] == ["1", "1", "2"], view
    assert "train_lopd.beta_final" in lines and not any(key.endswith("wall_s") for key in lines), view


def _leaves(section):
    if isinstance(section, dict):
        for value in section.values():
            yield from _leaves(value)
    else:
        yield section
