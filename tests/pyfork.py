"""`python(argv)`: `subprocess.run([sys.executable, *argv])` for the suite's CLI tests, without the ~4 s each such
process spends importing torch, transformers and accelerate. One server per test process imports those once and
forks a child per call; the child is the new process: it sets the call's cwd, environment and argv, imports the
repository's modules afresh (the server never imports them), runs `-m module`, `-c code` or a script as the
interpreter would, and exits with the interpreter's status (a string `sys.exit` printed to stderr and 1; an uncaught
exception's traceback and 1). What a real process does differently is only that these modules were loaded before its
environment was set; a test that needs the interpreter itself (signals, launchers, import-time settings) uses
subprocess.

`stage_python(folder)`: a `python` executable for a DVC pipeline's stages (put first on PATH). Each call is a forked
child of a server of its own: the child has the caller's own stdin, stdout and stderr, ends as the interpreter would
(of a signal too), gets the SIGINT and SIGTERM the caller gets, and runs an exec of the interpreter itself
(`pipelines.launch` starting its stage) in place. Its ancestors are the server's, not DVC's, so `lopd.core.tracking`
cannot find its invocation: only for runs with MLflow off."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_SERVER = r"""
import atexit, io, json, os, runpy, socket, sys, traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as importing lopd sets it, before transformers reads it
# what the stages import from outside the repository (measured: 0.4 s of a stage's import is left, its own modules)
import accelerate.accelerator, matplotlib, omegaconf, psutil, scipy.optimize, scipy.stats, torch, transformers
import transformers.cache_utils, transformers.integrations.hub_kernels, transformers.masking_utils
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
matplotlib.use("Agg")  # as evaluation.figures selects it
import matplotlib.pyplot

SERVER_PATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]

def run(request):
    argv = request["argv"]
    # the call's PYTHONPATH, where the interpreter puts it: after the script's folder (or the cwd), before the rest
    sys.path[1:] = [os.path.abspath(p) for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p] + [
        p for p in sys.path[1:] if p not in SERVER_PATH]
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")

def exec_here(path, args, execv=os.execv):
    # os.execv in a stage's child: this interpreter's `-m module` runs on in this process (a new interpreter would
    # import torch again); anything else is exec'd
    if os.path.realpath(path) != os.path.realpath(sys.executable) or list(args[1:2]) != ["-m"]:
        execv(path, args)
    run({"argv": list(args[1:]), "env": os.environ})
    raise SystemExit(0)

def child(request, fds):
    # the forked child: its stdio (`fds`, else /dev/null and the request's files), cwd and environment, then the
    # call; it never returns
    code = 1
    try:
        if fds:
            for fd, held in enumerate(fds):
                os.dup2(held, fd)
                os.close(held)
            os.execv = exec_here
        else:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.stdin = open(0)
        sys.stdout, sys.stderr = (io.TextIOWrapper(open(fd, "wb", buffering=0, closefd=False), line_buffering=True,
                                                   write_through=True) for fd in (1, 2))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        try:
            run(request)
            code = 0
        except SystemExit as stop:  # as the interpreter ends a process on it
            code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
            if stop.code is not None and not isinstance(stop.code, int):
                print(stop.code, file=sys.stderr)
        except BaseException as err:  # its traceback from the code run on, as the interpreter prints it
            frames = err.__traceback__.tb_next
            traceback.print_exception(type(err), err, frames.tb_next or frames)
        atexit._run_exitfuncs()
    finally:
        os._exit(code)

def serve_stages(path):
    # one connection per `python` call: its stdio arrive with its request; a supervisor forks the child, sends its
    # pid, then its exit status, so the server itself never waits
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(16)
    while True:
        conn, _ = server.accept()
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        request = json.loads(conn.makefile("rb").readline())
        if os.fork() == 0:
            server.close()
            pid = os.fork()
            if pid == 0:
                conn.close()
                child(request, fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            os._exit(0)
        conn.close()
        for fd in fds:
            os.close(fd)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # the supervisors that have ended
                pass
        except ChildProcessError:
            pass

if sys.argv[1:2] == ["--socket"]:
    serve_stages(sys.argv[2])
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request, None)
    _, status = os.waitpid(pid, 0)
    print(json.dumps(os.waitstatus_to_exitcode(status)), flush=True)
"""

_SHIM = """#!{python} -S
import json, os, signal, socket, sys

sock = socket.socket(socket.AF_UNIX)
sock.connect({socket!r})
socket.send_fds(sock, [b"."], [0, 1, 2])
sock.sendall(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode() + b"\\n")
replies = sock.makefile("rb")
child = int(replies.readline())
for number in (signal.SIGINT, signal.SIGTERM):
    signal.signal(number, lambda received, _: os.kill(child, received))
code = int(replies.readline())
if code < 0:  # killed: end as the child did
    if -code in (signal.SIGINT, signal.SIGTERM):
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""

_server: subprocess.Popen | None = None


def _started() -> subprocess.Popen:
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, start_new_session=True)
    return _server


def python(argv: list[str], *, cwd: str | Path, env: dict[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    """What `subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
    timeout=timeout)` returns, from a forked child of the server (see the module's docstring)."""
    server = _started()
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        request = {"argv": [str(a) for a in argv], "cwd": str(cwd), "env": dict(os.environ if env is None else env),
                   "stdout": str(out), "stderr": str(err)}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        if not select.select([server.stdout], [], [], timeout)[0]:
            os.killpg(server.pid, signal.SIGKILL)  # the server and its child: the next call starts a fresh one
            server.wait()
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout)
        line = server.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server died (status {server.wait()})")
        return subprocess.CompletedProcess([sys.executable, *argv], json.loads(line), out.read_text(),
                                           err.read_text())


_stage_servers: list[subprocess.Popen] = []


def stage_python(folder: Path, timeout: float = 120) -> Path:
    """`folder`, now holding a `python` whose calls are forked children of a new server (the module's docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    address = Path(tempfile.mkdtemp(prefix="pyfork-")) / "socket"  # short: a socket path has ~100 characters
    server = subprocess.Popen([sys.executable, "-c", _SERVER, "--socket", str(address)], stdin=subprocess.DEVNULL,
                              start_new_session=True)
    _stage_servers.append(server)
    deadline = time.monotonic() + timeout
    while not address.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the stage server did not start (status {server.poll()})")
        time.sleep(0.1)
    shim = folder / "python"
    shim.write_text(_SHIM.format(python=sys.executable, socket=str(address)))
    shim.chmod(0o755)
    return folder


def stop() -> None:
    """End the servers (the session's end; the call server also ends when this process does, its stdin closed)."""
    global _server
    if _server is not None and _server.poll() is None:
        _server.stdin.close()
        _server.wait(timeout=60)
    _server = None
    while _stage_servers:
        server = _stage_servers.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
