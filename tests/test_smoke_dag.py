"""End to end: `dvc exp run -S profile=smoke` on a copy of the repository produces the tool-use and code tables."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lopd.core.config import REPO_ROOT

SHARED = Path(os.environ.get("LOPD_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
IGNORE = shutil.ignore_patterns(".venv", ".git", "models", "checkpoints", "bank", "pool", "bank_agentic", "pool_agentic",
                                "results", "metrics", "cache", "tmp",
                                "__pycache__", ".pytest_cache", ".hypothesis")


# One baseline keeps the suite inside its time budget (each DVC stage costs ~7 s of start-up here): SDPO, a trained
# baseline with a teacher. Every stage kind, both domains and both ablation paths are still covered; each baseline
# trains in tests/test_baselines.py and vanilla's base-model checkpoint is evaluated in tests/test_pipelines_cli.py.
# `dvc exp run -S profile=smoke` itself runs all seven methods.
BASELINES = ["sdpo"]
ROWS = ["SDPO", "LOPD"]
SMOKE = ["-S", "profile=smoke", "-S", f"data.shared_dir={SHARED}", "-S", f"baselines={BASELINES}",
         "-S", f"methods={[*BASELINES, 'lopd']}"]


def _run(cmd, cwd, env):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "evalplus").is_dir(), reason=f"EvalPlus data not found at {SHARED}/evalplus")
def test_smoke_profile_runs_the_whole_dag(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(REPO_ROOT, repo, ignore=IGNORE)
    (repo / "dvc.lock").unlink(missing_ok=True)
    # MLflow off (~3 s per stage): the tracker is tested on real stores in test_tracking.py and test_config.py
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "LOPD_MLFLOW_URI": "off",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    _run(["git", "init", "-q"], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "copy"], repo, env)
    _run(["dvc", "exp", "run", *SMOKE], repo, env)

    table = (repo / "reports" / "tables" / "code_results.md").read_text()
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ROWS, rows
    assert "LCB v5: n/a" in table
    for name in ("code_results.csv", "code_results.tex"):
        assert (repo / "reports" / "tables" / name).stat().st_size > 0
    summary = json.loads((repo / "metrics" / "eval" / "sdpo" / "humaneval_plus.json").read_text())
    assert summary["n_tasks"] == 4 and summary["profile"] == "smoke"
    bank = json.loads((repo / "metrics" / "bank.json").read_text())
    assert bank["n_entries"] > 0 and bank["eval_overlap_check"] == "passed"
    lopd = json.loads((repo / "metrics" / "train" / "lopd.json").read_text())
    assert len(lopd["history"]) == 2 and "beta_next" in lopd["history"][0]

    # the agentic domain: every method trained on EnvScaler-format tasks, evaluated on all three suites
    tool_use = (repo / "reports" / "tables" / "tool_use_results.md").read_text()
    rows = [line.split("|")[1].strip() for line in tool_use.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ROWS, rows
    assert "envscaler-mini" in tool_use and "n/a |" not in tool_use, tool_use
    for name in ("envscaler", "bfcl_base", "bfcl_miss_func", "bfcl_miss_param", "bfcl_long_context",
                 "acebench_multi_step", "acebench_multi_turn"):
        result = json.loads((repo / "metrics" / "agentic" / "eval" / "lopd" / f"{name}.json").read_text())
        assert result["n_tasks"] == 1 and 0 <= result["score"] <= 100 and result["steps"] >= 1, name
    agentic_train = json.loads((repo / "metrics" / "agentic" / "train" / "lopd.json").read_text())
    assert len(agentic_train["history"]) == 2 and "tool_calls_per_step" in agentic_train["history"][0]
    assert (repo / "reports" / "tables" / "behavior.md").read_text().count("| ") >= 8

    # one experiment with an LOPD ablation and a baseline ablation re-runs exactly those two branches: the bank,
    # the pool, the cold starts and every other method stay cached
    out = _run(["dvc", "exp", "run", *SMOKE, "-S", "margin=0.02", "-S", "sdpo.ema_rate=0.1"], repo, env)
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert ran == {"train_lopd", "eval@lopd-humaneval_plus", "eval@lopd-mbpp_plus", "train_lopd_agentic",
                   "eval_agentic@lopd", "train@sdpo", "eval@sdpo-humaneval_plus", "eval@sdpo-mbpp_plus",
                   "train_agentic@sdpo", "eval_agentic@sdpo", "report"}, ran
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert (params["margin"], params["sdpo"]["ema_rate"], params["profile"]) == (0.02, 0.1, "smoke")
    pool = json.loads((repo / "metrics" / "pool.json").read_text())
    assert pool["coverage"] == 1.0 and pool["eval_overlap_check"] == "passed"
    train = json.loads((repo / "metrics" / "train" / "sdpo.json").read_text())
    assert len(train["history"]) == 2 and all("privileged_fraction" in h for h in train["history"])

    # editing code marks exactly the stages that run it (`dvc status` lists the stages whose deps changed)
    for touched, marked in [("lopd/latent/composer.py", {"cold_start", "train_lopd", "cold_start_agentic",
                                                         "train_lopd_agentic"}),
                            ("baselines/sdpo.py", {"train@sdpo", "train_agentic@sdpo"})]:
        source = repo / touched
        original = source.read_text()
        source.write_text(original + "# touched\n")
        status = json.loads(_run(["dvc", "status", "--json"], repo, env))
        source.write_text(original)
        assert {name.split(":")[-1] for name in status} == marked, (touched, status)
    # a code change re-trains instead of resuming the persisted checkpoint, and the same seed gives the same metrics
    source = repo / "baselines" / "sdpo.py"
    source.write_text(source.read_text() + "# changed\n")
    out = _run([sys.executable, "-m", "pipelines.train", "--method", "sdpo"], repo, env)
    assert "code or inputs changed since the checkpoint; starting fresh" in out and "resuming" not in out, out
    again = json.loads((repo / "metrics" / "train" / "sdpo.json").read_text())
    assert ([(h["reward_mean"], round(h["loss"], 6)) for h in again["history"]]
            == [(h["reward_mean"], round(h["loss"], 6)) for h in train["history"]])
