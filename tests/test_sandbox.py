"""The sandbox for model-written code: normal runs, and hostile programs that must stay contained."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from evaluation import sandbox
from evaluation.sandbox import SandboxLimits, SandboxUnavailable, run_python

MODE = sandbox.isolation_mode()
NAMESPACES = MODE == "namespaces"
# Hostile programs are only run where a throwaway uid contains them: in "plain" mode a fork bomb
# or kill(-1) would hit the calling user's own processes.
CONTAINED = MODE in ("namespaces", "uid")
hostile = pytest.mark.skipif(not CONTAINED, reason=f"isolation mode {MODE!r} cannot contain it")
PROJECT_ROOT = Path(sandbox.__file__).resolve().parents[1]
FAST = SandboxLimits(wall_seconds=2.0, cpu_seconds=2)


def processes_with(marker: str) -> list[int]:
    """PIDs whose command line contains `marker` (sandbox processes carry their workdir path)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(name))
            except OSError:
                continue
    return pids


def assert_host_fine():
    """The test process is unaffected: it can still fork, and the sandbox still works."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0) == (pid, 0)
    assert run_python("print('alive')").stdout == "alive\n"


# -------------------------------------------------------------------- normal programs

def test_stdin_to_stdout():
    r = run_python("import sys\nprint(sum(int(t) for t in sys.stdin.read().split()))", stdin="1 2\n3\n")
    assert (r.status, r.returncode, r.stdout, r.stderr) == ("ok", 0, "6\n", "")
    assert r.ok and r.wall_seconds < 10


def test_files_args_env_and_private_workdir():
    code = ("import os, sys, helper\n"
            "print(helper.X + 1, sys.argv[1:])\n"
            "print(os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])\n"
            "open('scratch.txt', 'w').write('ok')\n"
            "print(open(os.path.join(os.environ['TMPDIR'], 'scratch.txt')).read())\n"
            "print(os.getcwd())\n")
    r = run_python(code, files={"helper.py": "X = 41\n"}, args=["a", 2])
    lines = r.stdout.splitlines()
    assert r.ok, r
    assert lines[:3] == ["42 ['a', '2']", "True", "ok"]
    assert not os.path.exists(lines[3])  # the temp dir is deleted afterwards


def test_large_stdin_and_exit_builtin():
    r = run_python("import sys\nprint(len(sys.stdin.read()))\nexit(0)", stdin="x" * (3 << 20))
    assert r.ok and r.stdout == f"{3 << 20}\n"


@pytest.mark.parametrize("name", ["/etc/passwd", "../x.py", "main.py", ""])
def test_bad_file_names_are_caller_errors(name):
    with pytest.raises(ValueError):
        run_python("pass", files={name: "x"})


# -------------------------------------------------------------------- failing programs

def test_exception_is_error():
    r = run_python("def f():\n    raise ValueError('boom')\nf()")
    assert r.status == "error" and r.returncode == 1
    assert "ValueError: boom" in r.stderr and "main.py" in r.stderr
    assert '"<string>"' not in r.stderr  # the sandbox's own frames are not shown


@pytest.mark.parametrize("source", ["def f(:\n", "x = '\x00'"])
def test_uncompilable_source_is_error(source):
    assert run_python(source).status == "error"


def test_exit_codes_and_signals():
    assert run_python("import sys; sys.exit(3)").returncode == 3
    assert run_python("import sys; sys.exit(3)").status == "error"
    r = run_python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert (r.status, r.returncode) == ("killed", -9)


# -------------------------------------------------------------------- hostile programs

def test_infinite_loop_is_killed_at_the_wall_limit():
    start = time.monotonic()
    r = run_python("while True:\n    pass", limits=SandboxLimits(wall_seconds=1.0))
    elapsed = time.monotonic() - start
    assert r.status == "timeout" and not r.ok
    assert 0.9 <= elapsed < 2.5
    assert_host_fine()


def test_cpu_limit():
    r = run_python("while True:\n    pass", limits=SandboxLimits(wall_seconds=20, cpu_seconds=1))
    assert r.status == "timeout" and "CPU" in r.detail
    assert r.wall_seconds < 10


def test_sleeping_process_is_killed():
    r = run_python("import time\ntime.sleep(60)", limits=SandboxLimits(wall_seconds=0.5))
    assert r.status == "timeout" and r.wall_seconds < 2


@pytest.mark.parametrize("source", [
    "x = bytearray(8 << 30)",
    "blocks = []\nwhile True:\n    blocks.append(bytearray(1 << 20))",
])
def test_memory_bomb_is_contained(source):
    r = run_python(source, limits=SandboxLimits(wall_seconds=10, memory_mb=256))
    assert r.status in ("memory", "error") and "MemoryError" in r.stderr
    assert_host_fine()


@hostile
@pytest.mark.parametrize("bomb", [
    "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "os.system(\"bash -c ':(){ :|:& };:'\")\nimport time\ntime.sleep(5)",
])
def test_fork_bomb_is_contained(bomb):
    r = run_python("import os\nprint(os.getcwd(), flush=True)\n" + bomb, limits=FAST)
    assert r.status != "ok"
    workdir = r.stdout.splitlines()[0]
    assert "lopd-sandbox-" in workdir
    assert processes_with(workdir) == []  # nothing of this sandbox is left running
    assert_host_fine()


@hostile
def test_kill_everything_only_reaches_the_sandbox():
    sentinel = os.fork()
    if sentinel == 0:  # a process of the test's own user that must survive
        time.sleep(30)
        os._exit(0)
    try:
        r = run_python("import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n"
                       "    pass\nprint('done')")
        assert r.stdout == "done\n"
        assert os.waitpid(sentinel, os.WNOHANG) == (0, 0)  # still running
    finally:
        os.kill(sentinel, 9)
        os.waitpid(sentinel, 0)
    assert_host_fine()


def test_background_processes_do_not_outlive_the_run():
    marker = f"{uuid.uuid4().int % 10**6}.5"
    r = run_python(f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\n"
                   f"import os\nos.system('sleep {marker} &')\nprint('spawned')")
    assert r.ok and r.stdout == "spawned\n"
    time.sleep(0.05)
    assert processes_with(f"sleep\0{marker}") == []


@hostile
def test_setsid_escape_is_killed():
    marker = f"{uuid.uuid4().int % 10**6}.25"
    r = run_python("import os, subprocess\n"
                   f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n", limits=FAST)
    assert r.ok
    time.sleep(0.05)
    assert processes_with(f"sleep\0{marker}") == []


@hostile
def test_writing_outside_the_workdir_fails():
    name = f"lopd-sandbox-escape-{uuid.uuid4().hex}"
    targets = [PROJECT_ROOT / name] + ([Path("/tmp") / name, Path("/var/tmp") / name] if NAMESPACES else [])
    for target in targets:
        r = run_python(f"open({str(target)!r}, 'w').write('pwned')")
        assert r.status == "error" and ("PermissionError" in r.stderr or "Read-only" in r.stderr), r
        assert not target.exists()
    assert_host_fine()


@hostile
def test_os_system_is_contained():
    name = f"lopd-sandbox-escape-{uuid.uuid4().hex}"
    inside_tmp = f"touch /tmp/{name}; " if NAMESPACES else ""
    r = run_python(f"import os\nprint(os.system('{inside_tmp}echo x > {PROJECT_ROOT}/{name}; echo hi'))")
    assert "hi" in r.stdout
    assert not (PROJECT_ROOT / name).exists() and not Path(f"/tmp/{name}").exists()


def test_network_is_unreachable():
    with socket.socket() as server:  # a real listener on the host, so only isolation stops it
        server.bind(("127.0.0.1", 0))
        server.listen(5)
        server.settimeout(0.2)
        port = server.getsockname()[1]
        r = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
        assert r.status == "error" and ("PermissionError" in r.stderr or "OSError" in r.stderr)
        if NAMESPACES:  # even the raw C socket type, past the Python-level guard
            r = run_python("import _socket\ns = _socket.socket()\n"
                           f"type(s).__mro__[1].connect(s, ('127.0.0.1', {port}))")
            assert r.status == "error" and "unreachable" in r.stderr.lower()
        with pytest.raises(socket.timeout):
            server.accept()  # nobody got through
    r = run_python("import socket\nsocket.getaddrinfo('example.com', 80)")
    assert r.status == "error"


def test_print_bomb_is_truncated():
    start = time.monotonic()
    r = run_python("while True:\n    print('x' * 1000)")
    assert r.status == "killed" and "output limit" in r.detail
    assert len(r.stdout.encode()) <= SandboxLimits().output_bytes
    assert time.monotonic() - start < 5
    r = run_python("import sys\nwhile True:\n    sys.stderr.write('y' * 1000)", limits=SandboxLimits(output_bytes=4096))
    assert r.status == "killed" and len(r.stderr) <= 4096


def test_file_size_limit():
    r = run_python("open('big', 'wb').write(b'x' * (8 << 20))", limits=SandboxLimits(file_size_mb=1))
    assert r.status == "error" and "File too large" in r.stderr


@pytest.mark.skipif(not NAMESPACES, reason="needs the namespaces mode")
def test_namespaces_hide_host_state():
    r = run_python("import os\nprint(os.getuid() != 0, sorted(os.listdir('/root')), len(os.listdir('/proc')) < 200)\n"
                   f"print(os.listdir({str(PROJECT_ROOT)!r}))")
    assert r.ok, r
    first, second = r.stdout.splitlines()
    assert first.startswith("True") and first.endswith("True")
    assert "tests" not in second and "evaluation" not in second  # project files are hidden


# -------------------------------------------------------------------- scoring as the stages run it

SCORE_AS_A_STAGE = """
from evaluation.agentic import envscaler
from evaluation.coding import taco
task = next(t for t in taco.load_builtin_tasks() if t.solutions)
taco.check_sandbox()
envscaler.check_sandbox()
print("REWARD", taco.reward("```python\\n" + task.solutions[0] + "\\n```", task), taco.reward("print(1)", task))
"""


def test_scoring_works_from_a_checkout_under_tmp_with_a_relative_interpreter():
    """A checkout under /tmp (which the sandbox covers) run by `.venv/bin/python` found on a relative PATH: the
    known-correct solution scores 1 and a wrong one 0 (it scored 0 with exit 0: the project root hidden under an
    already-covered /tmp, and the interpreter not found from the sandbox's folder)."""
    checkout = Path(tempfile.mkdtemp(prefix="lopd-checkout-", dir="/tmp"))
    try:
        for package in ("evaluation", "lopd"):
            shutil.copytree(PROJECT_ROOT / package, checkout / package,
                            ignore=shutil.ignore_patterns("__pycache__"))
        (checkout / ".venv").symlink_to(Path(sys.prefix))
        env = {**os.environ, "PATH": f".venv/bin:{os.environ['PATH']}", "PYTHONPATH": str(checkout)}
        run = subprocess.run(["python", "-c", SCORE_AS_A_STAGE], cwd=checkout, env=env, capture_output=True,
                             text=True, timeout=300)
    finally:
        shutil.rmtree(checkout)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["REWARD", "1.0", "0.0"], run.stdout + run.stderr


def test_the_sandbox_hides_the_outermost_dirs_and_mounts_the_kept_ones_back(tmp_path):
    tmp = tmp_path / "tmp"
    for d in ("tmp/a/project/.venv", "tmp/b", "root/.pyenv", "home"):
        (tmp_path / d).mkdir(parents=True)
    tops = [tmp, tmp / "a" / "project", tmp_path / "root", tmp_path / "home", tmp_path / "missing"]
    keep = [str(tmp / "a" / "project" / ".venv"), str(tmp_path / "root" / ".pyenv"), str(tmp_path / "home")]
    # nested tops go (their parent's cover hides them), missing ones and those a kept dir holds are left alone
    assert sandbox._hidden_dirs([str(t) for t in tops], keep) == sorted([str(tmp), str(tmp_path / "root")])


def test_a_sandbox_that_cannot_run_code_raises_and_never_scores(monkeypatch):
    from evaluation.coding import taco

    monkeypatch.setattr(sandbox, "_mode", "refuse")
    monkeypatch.setattr(sandbox, "_refusal", "refusing to run model code as root: no mode works")
    with pytest.raises(SandboxUnavailable, match="no mode works"):
        run_python("print(1)")
    task = next(t for t in taco.load_builtin_tasks() if t.solutions)
    with pytest.raises(SandboxUnavailable):  # was 0.0: a failed test
        taco.reward("```python\n" + task.solutions[0] + "\n```", task)


def test_a_failed_sandbox_setup_raises(monkeypatch):
    if not NAMESPACES:
        pytest.skip(f"isolation mode {MODE!r} has no filesystem setup")
    monkeypatch.setattr(sandbox, "_hidden_dirs", lambda tops, keep: ["/no/such/dir"])
    with pytest.raises(SandboxUnavailable, match="sandbox setup failed"):
        run_python("print(1)")


@pytest.mark.parametrize("domain", ["code", "agentic"])
def test_a_stage_stops_with_one_line_when_no_sandbox_runs(monkeypatch, domain):
    from evaluation.agentic import envscaler
    from pipelines.common import check_sandbox, run_stage

    monkeypatch.setattr(sandbox, "_mode", "refuse")
    monkeypatch.setattr(sandbox, "_refusal", "refusing to run model code as root: no mode works")
    monkeypatch.setattr(envscaler, "_sandbox_prefix", lambda: ([], os.getuid() + 1))  # its greeting is refused
    monkeypatch.setattr(envscaler, "_START_ATTEMPTS", (5.0,))
    with pytest.raises(SystemExit) as stop:
        run_stage(lambda: check_sandbox(domain))
    assert str(stop.value) == ("error: sandbox: refusing to run model code as root: no mode works" if domain == "code"
                               else "error: sandbox: the EnvScaler worker process did not start (1 tries, 5 s; "
                               f"interpreter {sandbox.INTERPRETER})")


def test_a_sandbox_that_scores_everything_wrong_stops_the_stage(monkeypatch):
    from evaluation.coding import taco
    from pipelines.common import check_sandbox

    monkeypatch.setattr(taco, "run_python", lambda *args, **kwargs: sandbox.SandboxResult("ok", 0, "", "", 0.1))
    with pytest.raises(SandboxUnavailable, match="a known-correct program fails in the sandbox"):
        check_sandbox("code")
