"""Run untrusted (model-written) Python in a locked-down child process.

Every call starts a fresh `python -I -S -B` interpreter (this venv's, so harness code can import
installed packages) under a small supervisor that forks the user process and reports how it ended.
How strongly it is isolated is decided once per host process by a probe run (`isolation_mode()`):

  "namespaces"  root + util-linux `unshare`: fresh network, PID and mount namespaces. The code runs
                as a throwaway uid with no_new_privs; every mount is read-only and nosuid, except a
                private size-capped tmpfs that is its cwd/HOME/TMPDIR; /tmp, /var/tmp, /dev/shm, /run,
                /root, /home and the project directory are replaced by empty read-only tmpfs (only
                the interpreter's own directories are mounted back). When the supervisor (PID 1)
                exits, the kernel kills every process left in the namespace.
  "uid"         root, no namespaces: throwaway uid + rlimits + socket guards; files are protected by
                permissions only, so world-writable dirs such as /tmp stay writable.
  "plain"       not root: rlimits + socket guards + process-group kill. Weakest: the code runs as
                the calling user and can signal or write whatever that user can. Use a container.
  "refuse"      root, but neither of the above works: nothing runs, because code running as root could
                kill every process on the machine.

When the sandbox cannot run code at all (mode "refuse", or its own setup fails), `run_python` raises
`SandboxUnavailable` instead of returning a result: a scorer must never count that as the code's failure. Stages
that score code call `check_sandbox()` first, which also runs a known-correct and a known-wrong program.

In every mode: RLIMIT_CPU / AS / FSIZE / NPROC (NPROC only bites for a non-root uid, hence the
throwaway uid), a wall-clock SIGKILL of the whole process tree, stdout and stderr each capped at
`output_bytes` (the run is killed when it prints more), and the temp dir is deleted afterwards.
"""

from __future__ import annotations

import os
import random
import select
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evaluation.harness import sandbox_supervisor
from lopd.core.domain import SandboxUnavailable


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0     # wall-clock kill
    cpu_seconds: int = 10          # RLIMIT_CPU
    memory_mb: int = 1024          # RLIMIT_AS
    file_size_mb: int = 16         # RLIMIT_FSIZE
    max_processes: int = 8         # process-count limit (RLIMIT_NPROC of the throwaway uid)
    output_bytes: int = 1 << 20    # cap per stream (stdout, stderr); printing more kills the run
    workdir_mb: int = 64           # size of the private tmpfs workdir ("namespaces" mode)


@dataclass(frozen=True)
class SandboxResult:
    status: str          # "ok" | "error" (nonzero exit/exception) | "timeout" | "memory" | "killed"
    returncode: int | None   # the user process's exit code, or -signal; None when unknown
    stdout: str
    stderr: str
    wall_seconds: float
    detail: str = ""     # the sandbox's own note: why it stopped the run ("" for a normal exit)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# -----------------------------------------------------------------------------
# The supervisor: source of the child interpreter (`python -c`), kept in evaluation/harness/sandbox_supervisor.py.
# It starts as root (in fresh namespaces when available), sets up the filesystem, forks the user process,
# waits for it as PID 1 and writes one status line to a pipe that only it holds.

_SUPERVISOR = Path(sandbox_supervisor.__file__).read_text(encoding="utf-8")

# -----------------------------------------------------------------------------
# Host side

INTERPRETER = os.path.abspath(sys.executable)
"""This venv's interpreter, absolute: a relative one (`PATH=.venv/bin:…`) would not resolve from the sandbox's cwd."""
_UNSHARE = shutil.which("unshare")
_SETPRIV = shutil.which("setpriv")
_PROJECT_ROOT = Path(__file__).resolve().parents[1]
# real paths, as the kept interpreter dirs are: a venv reached through a symlink inside the project (hidden) stays found
_SITE_DIRS = sorted({os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")})
_COVERED = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/root", "/home", str(_PROJECT_ROOT), tempfile.gettempdir())
"""What "namespaces" mode hides: temp dirs (other runs' files), homes (keys, caches) and this checkout."""
_mode: str | None = None       # chosen once by isolation_mode(); tests may override it
_refusal = ""                  # why no mode works, when _mode is "refuse"
_mode_lock = threading.Lock()
_uids = random.Random()        # private generator: user code seeding `random` must not matter


def isolation_mode() -> str:
    """The strongest mode that works on this host (probed on first use, then cached):
    "namespaces", "uid", "plain", or "refuse" (root, but no way to drop root: nothing runs)."""
    global _mode, _refusal
    with _mode_lock:
        if _mode is None:
            # Model code never runs as root: root without a uid drop could kill every process on
            # the machine (kill(-1)) or write anywhere. A non-root user has nothing to drop to.
            candidates = ["plain"] if os.geteuid() != 0 else (["namespaces"] if _UNSHARE else []) + ["uid"]
            _mode, failed = "refuse", []
            for mode in candidates:
                # json: the stdlib must be readable by the throwaway uid, not just already loaded
                probe = "import json; print(json.dumps(6 * 7))"
                try:
                    result = _run_in(mode, probe, "", SandboxLimits(wall_seconds=30), {}, ())
                except SandboxUnavailable as err:
                    failed.append(f"{mode}: {err}")
                    continue
                if result.status == "ok" and result.stdout == "42\n":
                    _mode = mode
                    break
                why = result.detail or (result.stderr.strip().splitlines() or [result.stdout.strip()])[-1]
                failed.append(f"{mode}: {result.status}{': ' + why[:200] if why else ''}")
            causes = "; ".join(failed) or "no unshare binary, or not root"
            if _mode == "refuse":
                _refusal = (f"refusing to run model code as root: neither namespaces nor a throwaway uid work here "
                            f"({causes}; interpreter {INTERPRETER})")
            elif _mode != "namespaces":  # say why, so a host that should have them can be fixed
                warnings.warn(f"sandbox: namespaces unavailable, isolation mode is {_mode!r} ({causes})")
        return _mode


def run_python(source: str, *, stdin: str = "", limits: SandboxLimits = SandboxLimits(),
               files: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> SandboxResult:
    """Run `source` as __main__ in a fresh sandboxed interpreter; never raises for bad user code, raises
    `SandboxUnavailable` when the sandbox itself cannot run it."""
    files = dict(files or {})
    for name in files:  # a bad name is the caller's bug, not the user's, so it raises
        parts = Path(name).parts
        if not parts or Path(name).is_absolute() or ".." in parts or name == "main.py":
            raise ValueError(f"sandbox file name must be relative, without '..', and not main.py: {name!r}")
    mode = isolation_mode()
    if mode == "refuse":
        raise SandboxUnavailable(_refusal)
    return _run_in(mode, source, stdin, limits, files, [str(a) for a in args])


def _run_in(mode, source, stdin, limits, files, args) -> SandboxResult:
    start = time.monotonic()
    workdir = None
    try:
        workdir = tempfile.mkdtemp(prefix="lopd-sandbox-")
        uid = 200_000 + _uids.randrange(1 << 20) if mode != "plain" else os.getuid()
        for name, text in {"main.py": source, **files}.items():
            path = os.path.join(workdir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8", errors="replace") as f:
                f.write(text)
        if mode == "uid":  # no private tmpfs: hand the real directory to the throwaway uid
            for root, dirs, names in os.walk(workdir):
                for name in [root, *(os.path.join(root, n) for n in dirs + names)]:
                    os.chown(name, uid, uid)
        return _execute(mode, workdir, uid, stdin, limits, args, start)
    except SandboxUnavailable:
        raise
    except Exception as e:  # the machinery failed (no fork, disk full, ...): not the code's fault
        raise SandboxUnavailable(f"the sandbox failed to start ({type(e).__name__}: {e})") from e
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def _command(mode, workdir, uid, status_fd, limits, args) -> list[str]:
    keep = _interpreter_dirs()
    hidden = _hidden_dirs(_COVERED, keep) if mode == "namespaces" else []
    cmd = [INTERPRETER, "-I", "-S", "-B", "-X", "utf8", "-X", "frozen_modules=on", "-c", _SUPERVISOR,
           mode, workdir, str(uid), str(status_fd), str(limits.memory_mb), str(int(limits.cpu_seconds)),
           str(limits.file_size_mb), str(limits.max_processes), str(limits.workdir_mb),
           os.pathsep.join(hidden), os.pathsep.join(keep), os.pathsep.join(_SITE_DIRS), *args]
    if mode == "namespaces":
        cmd = [_UNSHARE, "--net", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", *cmd]
    if _SETPRIV:  # if this host process dies, so does the sandbox (fires on the spawning thread's exit)
        cmd = [_SETPRIV, "--pdeathsig", "KILL", *cmd]
    return cmd


def _hidden_dirs(tops: Sequence[str], keep: Sequence[str]) -> list[str]:
    """The real paths of `tops` that "namespaces" mode covers with an empty tmpfs (mounting the `keep` dirs back
    inside): the outermost of those that exist, minus any that a kept dir lies in."""
    real = {os.path.realpath(top) for top in tops}
    real = {top for top in real if os.path.isdir(top) and not any(_under(top, k) for k in keep)}
    return sorted(top for top in real if not any(top != other and _under(top, other) for other in real))


def _interpreter_dirs() -> list[str]:
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return sorted(d for d in dirs if not any(d != o and _under(d, o) for o in dirs))


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _child_env(workdir: str) -> dict[str, str]:
    threads = "1"  # BLAS/OpenMP thread pools would trip the process limit
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "USER": "sandbox", "LOGNAME": "sandbox",
            "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}


def _execute(mode, workdir, uid, stdin, limits, args, start) -> SandboxResult:
    status_r, status_w = os.pipe()
    stdin_fd = os.memfd_create("sandbox-stdin")  # a file, not a pipe: no deadlock on big inputs
    try:
        data = stdin.encode("utf-8", "replace")
        while data:
            data = data[os.write(stdin_fd, data):]
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        proc = subprocess.Popen(_command(mode, workdir, uid, status_w, limits, args), stdin=stdin_fd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(status_w,),
                                cwd=workdir, env=_child_env(workdir), start_new_session=True)
    except BaseException:
        os.close(status_r)
        raise
    finally:
        os.close(status_w)
        os.close(stdin_fd)
    straggler_uid = uid if mode == "uid" else None  # no PID namespace to take them down
    try:
        out, err, stop = _collect(proc, start + limits.wall_seconds, limits.output_bytes, straggler_uid)
    finally:
        _kill_tree(proc.pid, straggler_uid)  # before reaping: the group id must not be recycled yet
        proc.stdout.close()
        proc.stderr.close()
        proc.returncode = _reap(proc.pid)
        status_line = _read_available(status_r).decode(errors="replace").splitlines()
        os.close(status_r)
    elapsed = time.monotonic() - start
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    return _classify(status_line, stop, stdout, stderr, elapsed, limits)


def _collect(proc, deadline, cap, straggler_uid):
    """Read both pipes until they close and the process has exited, or a limit is hit."""
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for f in bufs:
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_READ)
    try:
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):  # old kernel: poll for the exit instead
        pidfd = None
    open_streams, exited, stop = 2, False, ""
    try:
        while open_streams or not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stop = "timeout"
                break
            events = sel.select(remaining if pidfd is not None else min(remaining, 0.02))
            if pidfd is None and not exited and _has_exited(proc.pid):
                events.append((None, 0))
            for key, _ in events:
                if key is None or key.fileobj is pidfd:
                    exited = True
                    if pidfd is not None:
                        sel.unregister(pidfd)
                    _kill_tree(proc.pid, straggler_uid)  # stragglers may still hold the pipes open
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                buf = bufs[key.fileobj]
                room = cap - len(buf)
                buf += chunk[:room]
                if len(chunk) > room:
                    stop = "output"
            if stop:
                break
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
    return bytes(bufs[proc.stdout]), bytes(bufs[proc.stderr]), stop


def _read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)  # never wait on a writer that might still be alive
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


def _has_exited(pid: int) -> bool:
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_tree(pid: int, uid: int | None) -> None:
    init = _pidfd_of_init(pid)  # opened before any kill, so its PID cannot be recycled under us
    try:
        os.killpg(pid, signal.SIGKILL)  # our child leads its own session/process group
    except ProcessLookupError:
        pass
    if init is not None:
        # The sandbox's PID 1 only finishes exiting once the kernel has killed and reaped every
        # other process of its namespace: waiting for it means nothing is left behind.
        try:
            signal.pidfd_send_signal(init, signal.SIGKILL)
            select.select([init], [], [], 5.0)
        except OSError:
            pass
        finally:
            os.close(init)
    if uid is not None:
        _kill_uid(uid)


def _pidfd_of_init(pid: int) -> int | None:
    """A pidfd for the child of `unshare --fork` (the sandbox's PID 1), if it is running."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
        return os.pidfd_open(int(children[0])) if children else None
    except (OSError, AttributeError):
        return None


def _kill_uid(uid: int) -> None:
    """Kill every process of a throwaway uid (those that left the process group)."""
    for _ in range(20):  # a fork loop may race us; NPROC bounds how many there can be
        victims = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/status") as f:
                        uid_line = next(line for line in f if line.startswith("Uid:"))
                except (OSError, StopIteration):
                    continue
                if int(uid_line.split()[1]) == uid:
                    victims.append(int(name))
        if not victims:
            return
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)


def _reap(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _classify(status_line, stop, stdout, stderr, elapsed, limits) -> SandboxResult:
    def result(status, returncode=None, detail=""):
        return SandboxResult(status, returncode, stdout, stderr, elapsed, detail)

    setup = [line for line in status_line if line.startswith("setup ")]
    if setup:
        raise SandboxUnavailable(f"sandbox setup failed ({setup[0][6:]})")
    if stop == "timeout":
        return result("timeout", None, f"wall-clock limit of {limits.wall_seconds:g}s")
    if stop == "output":
        return result("killed", None, f"output limit of {limits.output_bytes} bytes")
    ended = [line.split() for line in status_line if line.startswith(("exit ", "signal "))]
    if not ended:
        return result("killed", None, "supervisor ended without a report")
    kind, number, cpu = ended[0][0], int(ended[0][1]), float(ended[0][2])
    if kind == "signal":
        if number == signal.SIGXCPU or (number == signal.SIGKILL and cpu >= limits.cpu_seconds - 0.05):
            return result("timeout", -number, f"CPU limit of {limits.cpu_seconds}s")
        return result("killed", -number, f"killed by {signal.Signals(number).name}"
                      if number in signal.Signals._value2member_map_ else f"killed by signal {number}")
    if number == 0:
        return result("ok", 0)
    tail = stderr.rstrip().rsplit("\n", 1)[-1]
    if tail.startswith("MemoryError"):
        return result("memory", number, f"memory limit of {limits.memory_mb} MB")
    return result("error", number)
