"""Stage CLIs turn bad input into a one-line error instead of a traceback."""

import subprocess
import sys

from lopd.core.config import REPO_ROOT


def _run_stage(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)


def test_unknown_param_is_a_one_line_error(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text("profile: smoke\ntrain:\n  stpes: 3\n")
    proc = _run_stage("pipelines.train", "--params", str(params), "--method", "grpo")
    assert proc.returncode != 0
    assert proc.stderr.strip() == "error: params.yaml: unknown key 'train.stpes'"


def test_missing_training_data_file_is_a_one_line_error(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text(f"profile: smoke\ndata:\n  taco_path: {tmp_path / 'nope.jsonl'}\n")
    proc = _run_stage("pipelines.train", "--params", str(params), "--method", "grpo")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()
    assert len(last) == 1 and last[0].startswith("error: training tasks:") and "nope.jsonl" in last[0]
