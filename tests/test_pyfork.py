"""tests/pyfork.py: a forked call ends as `python` itself would, in the cwd and environment it was given, with the
repository's modules imported afresh."""

import os
import subprocess
import sys

import pytest
from pyfork import python

SNIPPETS = ["import os, sys; print(os.getcwd(), os.environ['PROBE'], sys.argv[1:]); print('err', file=sys.stderr)",
            "import sys; sys.exit(3)",
            "import sys; sys.exit('error: one line')",
            "raise ValueError('boom')",
            "import sys; print(sys.stdin.read() == '')"]


@pytest.mark.parametrize("code", SNIPPETS)
def test_a_forked_call_ends_as_the_interpreter_does(code, tmp_path):
    env = {**os.environ, "PROBE": "x"}
    forked = python(["-c", code, "a", "b"], cwd=tmp_path, env=env)
    real = subprocess.run([sys.executable, "-c", code, "a", "b"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_the_repositorys_modules_are_imported_afresh_in_each_call(tmp_path):
    code = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('lopd', 'pipelines')))"
    assert python(["-c", code], cwd=tmp_path).stdout.strip() == "[]"
    script = tmp_path / "script.py"
    script.write_text("import sys, pipelines.common; print(sys.argv[1:], sys.path[:2])\n")
    (tmp_path / "lib").mkdir()
    env = {**os.environ, "PYTHONPATH": "lib"}
    done = python([script, "--flag"], cwd=tmp_path, env=env)
    real = subprocess.run([sys.executable, script, "--flag"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.stdout == real.stdout == f"['--flag'] {[str(tmp_path), str(tmp_path / 'lib')]}\n", done.stderr
