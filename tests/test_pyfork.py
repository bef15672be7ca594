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


def test_a_stage_python_call_ends_as_the_interpreter_does_on_the_callers_own_stdio(tmp_path):
    from pyfork import stage_python

    shim = stage_python(tmp_path / "bin") / "python"
    script = tmp_path / "stage.py"  # an exec of the interpreter (as pipelines.launch starts its stage) reads stdin
    script.write_text("import os, sys\nprint(os.getcwd(), os.environ['PROBE'], sys.argv[1:])\n"
                      "print('err', file=sys.stderr, flush=True)\n"
                      "os.execv(sys.executable, [sys.executable, '-m', 'json.tool', '--indent', '1'])\n")
    env = {**os.environ, "PROBE": "x"}
    done, real = (subprocess.run([python, script, "a"], cwd=tmp_path, env=env, input="[1]", capture_output=True,
                                 text=True) for python in (shim, sys.executable))
    assert (done.returncode, done.stdout, done.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.stdout == f"{tmp_path} x ['a']\n[\n 1\n]\n" and real.stderr == "err\n"
    outcomes = {}
    for code in ("import sys; sys.exit(3)", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
                 "import time; print('started', flush=True); time.sleep(60)"):
        outcomes[code] = []
        for command in ([shim, "-c", code], [sys.executable, "-c", code]):
            proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
            if "sleep" in code:  # SIGTERM reaches the child, which dies of it
                assert proc.stdout.readline() == "started\n"
                proc.terminate()
            proc.wait(timeout=30)
            outcomes[code].append(proc.returncode)
    assert list(outcomes.values()) == [[3, 3], [-9, -9], [-15, -15]], outcomes
