"""The benchmark scripts (scripts/bench_*.py, tool_call_rate.py) stop as the stages do when an input is missing."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_benchmark_without_its_model_is_a_one_line_error(tmp_path):
    """The perf scripts stop as the stages do: one line naming the missing folder and the stage that builds it."""
    missing = tmp_path / "no-model"
    for script in ("bench_rollout.py", "tool_call_rate.py"):
        done = subprocess.run([sys.executable, str(REPO / "scripts" / script), "--model-dir", str(missing)],
                              capture_output=True, text=True, timeout=300, cwd=REPO)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.stderr.strip().splitlines()[-1] == (
            f"error: {missing}: model not found (for the base model run: dvc repro prepare_model)")
