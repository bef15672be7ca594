"""End to end: `dvc exp run -S profile=smoke` on a copy of the repository produces the tool-use and code tables."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lopd.core.config import REPO_ROOT

SHARED = Path(os.environ.get("LOPD_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
IGNORE = shutil.ignore_patterns(".venv", ".git", "models", "checkpoints", "bank", "pool", "bank_agentic", "pool_agentic",
                                "results", "metrics", "cache", "tmp",
                                "__pycache__", ".pytest_cache", ".hypothesis")


# Three of the six baselines keep the suite inside its time budget (each DVC stage costs ~10 s of start-up here);
# every stage kind, both domains and both ablation paths are still covered, and each baseline trains in
# tests/test_baselines.py. `dvc exp run -S profile=smoke` itself runs all seven methods.
BASELINES = ["vanilla", "grpo", "sdpo"]
ROWS = ["Vanilla", "GRPO", "SDPO", "LOPD"]
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
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
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
    summary = json.loads((repo / "metrics" / "eval" / "grpo" / "humaneval_plus.json").read_text())
    assert summary["n_tasks"] == 4 and summary["profile"] == "smoke"
    train = json.loads((repo / "metrics" / "train" / "grpo.json").read_text())
    assert len(train["history"]) == 2
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
        assert result["n_tasks"] == 2 and 0 <= result["score"] <= 100 and result["steps"] >= 1, name
    agentic_train = json.loads((repo / "metrics" / "agentic" / "train" / "lopd.json").read_text())
    assert len(agentic_train["history"]) == 2 and "tool_calls_per_step" in agentic_train["history"][0]
    assert (repo / "reports" / "tables" / "behavior.md").read_text().count("| ") >= 8

    # the margin ablation re-runs only the LOPD branch: the bank, the cold start and the baselines stay cached
    out = _run(["dvc", "exp", "run", *SMOKE, "-S", "margin=0.02"], repo, env)
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert ran == {"train_lopd", "eval@lopd-humaneval_plus", "eval@lopd-mbpp_plus", "train_lopd_agentic",
                   "eval_agentic@lopd", "report"}, ran

    # so does a baseline's own ablation: only that baseline, its evaluations and the report
    out = _run(["dvc", "exp", "run", *SMOKE, "-S", "sdpo.ema_rate=0.1"], repo, env)
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert ran == {"train@sdpo", "eval@sdpo-humaneval_plus", "eval@sdpo-mbpp_plus", "train_agentic@sdpo",
                   "eval_agentic@sdpo", "report"}, ran
    pool = json.loads((repo / "metrics" / "pool.json").read_text())
    assert pool["coverage"] == 1.0 and pool["eval_overlap_check"] == "passed"
    for name in ("sdpo",):
        history = json.loads((repo / "metrics" / "train" / f"{name}.json").read_text())["history"]
        assert len(history) == 2 and all("privileged_fraction" in h for h in history), name

    # the same seed gives the same smoke metrics
    first = [(h["reward_mean"], round(h["loss"], 6)) for h in train["history"]]
    shutil.rmtree(repo / "checkpoints" / "grpo")  # otherwise the persisted checkpoint would just be resumed
    _run(["dvc", "exp", "run", "-f", "-s", *SMOKE, "train@grpo"], repo, env)
    again = json.loads((repo / "metrics" / "train" / "grpo.json").read_text())
    assert [(h["reward_mean"], round(h["loss"], 6)) for h in again["history"]] == first
