"""The TACO test harness: runs inside the sandbox as main.py (`evaluation.coding.taco.run_tests`).

Read as text by the host; never imported for its effects (importing it only defines names). Reads the job
(code, test inputs, nonce) from stdin, runs every test with fresh stdin/stdout/stderr (memfds) and a fresh
namespace, and writes one report line per test, "<nonce> <json>", to a private duplicate of the original
stdout. It never sees the expected outputs.
"""
import builtins
import json
import os
import signal
import sys


class TestTimeout(BaseException):
    """Raised into the user code by SIGALRM; a BaseException, so `except Exception` won't eat it."""


def on_alarm(signum, frame):
    raise TestTimeout()


def to_plain(value, depth=0):
    """A return value as JSON data; anything else becomes a marker that matches nothing."""
    if depth > 100:
        raise ValueError("return value nested too deeply")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (list, tuple)):
        return [to_plain(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v, depth + 1) for k, v in value.items()}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return to_plain(value.tolist(), depth + 1)
    return {"__unsupported__": type(value).__name__}


def read_fd(fd, limit):
    chunks, size = [], 0
    while size < limit:
        chunk = os.pread(fd, min(1 << 20, limit - size), size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def join_threads():
    threading = sys.modules.get("threading")
    if threading:  # solutions that run main() in a big-stack thread print from there
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join()


def run_one(action, stdin_text, seconds, devnull, real_stderr):
    """Run action() with fresh stdio and a timer; returns (status, value, stdout, stderr, error)."""
    saved_builtins = dict(builtins.__dict__)
    fds = []
    for target, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        fd = os.memfd_create(name)
        if target == 0:
            os.write(fd, stdin_text.encode())
            os.lseek(fd, 0, os.SEEK_SET)
        os.dup2(fd, target)
        fds.append(fd)
    sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
    status, value, error = "ok", None, ""
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)  # re-fires if the code swallows it
            value = action()
            join_threads()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except SystemExit:
        pass
    except TestTimeout:
        status = "timeout"
    except MemoryError:
        status, error = "memory", "MemoryError"
    except BaseException as e:
        status, error = "error", f"{type(e).__name__}: {e}"[:300]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(real_stderr, 2)
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
    builtins.__dict__.clear()
    builtins.__dict__.update(saved_builtins)
    out = read_fd(fds[1], 1 << 30)
    err = read_fd(fds[2], 1 << 30)[-300:]
    for fd in fds:
        os.close(fd)
    return status, value, out, err.decode(errors="replace"), error


def find_function(namespace, fn_name, method):
    solution = namespace.get("Solution")
    if method and isinstance(solution, type) and hasattr(solution, fn_name):
        return getattr(solution(), fn_name)  # a fresh instance per test
    fn = namespace.get(fn_name)
    if callable(fn) and not isinstance(fn, type):
        return fn
    for obj in list(namespace.values()):
        if isinstance(obj, type) and hasattr(obj, fn_name):
            return getattr(obj(), fn_name)
    raise NameError(f"{fn_name!r} is not defined")


def main():
    job = json.loads(sys.stdin.buffer.read())
    nonce = job["nonce"]
    report = os.fdopen(os.dup(1), "w", encoding="utf-8")  # user code's own prints never land here
    devnull = os.open(os.devnull, os.O_RDWR)
    real_stderr = os.dup(2)
    sys.set_int_max_str_digits(0)
    signal.signal(signal.SIGALRM, on_alarm)

    def emit(**fields):
        report.write(nonce + " " + json.dumps(fields) + "\n")
        report.flush()

    try:
        code = compile(job["code"], "solution.py", "exec")
    except (SyntaxError, ValueError) as e:
        return emit(i=-1, status="error", error=f"{type(e).__name__}: {e}"[:300])
    fn_name, seconds = job["fn_name"], job["seconds"]
    if fn_name is not None:  # call-based: define everything once, then call per test
        namespace = {"__name__": "solution", "__builtins__": builtins}
        status, _, _, err, error = run_one(lambda: exec(code, namespace), "", seconds, devnull, real_stderr)
        if status != "ok":
            return emit(i=-1, status=status, error=error, stderr=err)
    for i, test_input in enumerate(job["inputs"]):
        if fn_name is None:
            namespace = {"__name__": "__main__", "__builtins__": builtins}

            def action():
                exec(code, namespace)

            status, _, out, err, error = run_one(action, test_input, seconds, devnull, real_stderr)
            if len(out) > job["caps"][i]:
                emit(i=i, status=status, error=error, truncated=True)
            else:
                emit(i=i, status=status, error=error, stderr=err, output=out.decode("utf-8", "replace"))
        else:
            def action():
                return to_plain(find_function(namespace, fn_name, job["method"])(*test_input))

            status, value, _, err, error = run_one(action, "", seconds, devnull, real_stderr)
            text = json.dumps(value)
            if len(text) > job["caps"][i]:
                emit(i=i, status=status, error=error, truncated=True)
            else:
                emit(i=i, status=status, error=error, stderr=err, output=value)
        if status == "timeout" or (status != "ok" and job["stop_at_first_failure"]):
            break  # a timeout already fails the task; later tests would only burn time


if __name__ == "__main__":
    main()
    os._exit(0)  # reports are flushed; don't wait for threads a timed-out test left running
