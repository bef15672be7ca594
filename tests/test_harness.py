"""The programs run inside the sandbox are real, import-safe files, and the host runs exactly their text."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation import evalplus_bench, sandbox
from evaluation.coding import taco
from evaluation.harness import evalplus_check, sandbox_supervisor, taco_check

REPO_ROOT = Path(__file__).resolve().parents[1]
HARNESSES = {  # module -> the text its host module hands to the sandbox
    "evaluation.harness.sandbox_supervisor": (sandbox_supervisor, lambda: sandbox._SUPERVISOR),
    "evaluation.harness.taco_check": (taco_check, lambda: taco._HARNESS),
    "evaluation.harness.evalplus_check": (evalplus_check, lambda: evalplus_bench._HARNESS),
}

# Imported in a fresh interpreter whose stdin, exit and argv all fail loudly: a harness that does its work
# on import (reads the job, exits, parses argv, sets the environment) fails this probe.
PROBE = r"""
import importlib, json, os, sys

class NoStdin:
    def __getattr__(self, name):
        raise AssertionError("the harness touched stdin on import")

def no_exit(*args):
    raise AssertionError("the harness exited on import")

before = dict(os.environ)
sys.stdin, sys.argv = NoStdin(), []
sys.exit, os._exit = no_exit, no_exit
module = importlib.import_module(sys.orig_argv[-1])
print(json.dumps({"env_changed": dict(os.environ) != before, "has_main": callable(getattr(module, "main", None))}))
"""


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_harness_is_a_real_import_safe_file(name):
    module, host_text = HARNESSES[name]
    path = Path(module.__file__)
    assert path.is_file() and path.suffix == ".py" and path.resolve().is_relative_to(REPO_ROOT / "evaluation")
    text = path.read_text(encoding="utf-8")
    assert host_text() == text  # the host runs the file's text, unchanged
    compile(text, str(path), "exec")
    assert 'if __name__ == "__main__":' in text
    done = subprocess.run([sys.executable, "-c", PROBE, name], cwd=REPO_ROOT, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"env_changed": False, "has_main": True}
