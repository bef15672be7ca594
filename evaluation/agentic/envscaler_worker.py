"""Worker process for EnvScaler environments: runs dataset-provided code away from the host.

The host (`evaluation.agentic.envscaler`) starts this file's source with `python -I -S -B -c`, so it
must import nothing but the standard library (startup stays a few tens of milliseconds; no torch).
It speaks JSON lines: one request on stdin, one response on stdout, strictly in turn. After the
`{"ready": true, ...}` greeting it serves:

    {"op": "create", "id": N, "code": SRC, "class": NAME, "init": {...}}   build instance N
    {"op": "call",   "id": N, "name": TOOL, "args": {...}, "max_chars": M}  call a method of it
    {"op": "check",  "id": N, "code": SRC}                                  run one check function
    {"op": "drop",   "id": N}                                                forget instance N

and answers `{"ok": true, ...}` or `{"ok": false, "error": "<one line>", "timeout": bool}`.

Defences, in the order they bite: dataset code sees restricted builtins (no open/exec/eval/compile/
input/breakpoint) and an import hook that only admits `ALLOWED_MODULES`; each request runs under a
SIGALRM timer (the "soft" time limit: the worker survives it) and a per-request RLIMIT_CPU budget;
RLIMIT_AS/FSIZE/NPROC bound memory, files and forks. The host adds a wall-clock kill. The builtins
filter and import hook are a speed bump against accidents, not a security boundary, and cannot be made
one in-process: allowed modules hold `os` (`random._os`, `uuid.os`), and any Python function's
`__globals__` or `object.__subclasses__()` reaches every loaded module whatever proxy the import hook
returns. The boundary is the separate process, which the host runs under a throwaway uid when it is
root and in an empty network namespace where it can. The worker exits on stdin EOF, so it dies with its
host.
"""

import builtins
import copy
import json
import math
import os
import resource
import signal
import sys
import types

ALLOWED_MODULES = frozenset({
    "__future__", "abc", "bisect", "calendar", "collections", "copy", "dataclasses", "datetime",
    "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "itertools", "json", "math",
    "numbers", "operator", "random", "re", "statistics", "string", "textwrap", "time", "typing",
    "uuid",
})
_REMOVED_BUILTINS = ("open", "exec", "eval", "compile", "input", "breakpoint", "help", "exit", "quit",
                     "__loader__", "__spec__")
_ERROR_CHARS = 300
# Bound now, before any dataset code runs: dataset code may import these modules and replace their
# functions, and the protocol of every environment in this worker must not depend on that.
_dumps, _loads, _deepcopy = json.dumps, json.loads, copy.deepcopy


class _Timeout(BaseException):
    """Raised by SIGALRM; a BaseException so that `except Exception` in dataset code cannot swallow it."""


def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level != 0 or name.partition(".")[0] not in ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} is not allowed in EnvScaler environments")
    return __import__(name, globals, locals, fromlist, level)


_SAFE_BUILTINS = {k: v for k, v in vars(builtins).items() if k not in _REMOVED_BUILTINS}
_SAFE_BUILTINS["__import__"] = _guarded_import


def _fresh_globals(name: str) -> dict:
    """Each piece of dataset code gets its own builtins table, so none can tamper with another's."""
    return {"__builtins__": dict(_SAFE_BUILTINS), "__name__": name}


class _Sink:
    """Stands in for sys.stdout/stderr: prints in dataset code must not corrupt the protocol."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


def _one_line(err: BaseException) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= _ERROR_CHARS else text[:_ERROR_CHARS] + "..."


def _state(instance) -> dict:
    """The state check functions judge: the instance's attributes minus dunders, as a deep copy."""
    return _deepcopy({k: v for k, v in vars(instance).items() if not (k.startswith("__") and k.endswith("__"))})


class Worker:
    def __init__(self, cpu_seconds: int) -> None:
        self.cpu_seconds = cpu_seconds
        self.compiled: dict[str, types.CodeType] = {}
        self.instances: dict[int, tuple[object, dict]] = {}  # id -> (instance, initial state)

    def _compile(self, code: str):
        if code not in self.compiled:
            self.compiled[code] = compile(code, "<envscaler env>", "exec")
        return self.compiled[code]

    def create(self, req: dict) -> dict:
        """Instantiate the class the way EnvScaler does: cls(config) (cls({}) for an empty config),
        cls() if that raises TypeError, then every init_config key is also set as an attribute."""
        module = types.ModuleType("envscaler_env")
        module.__dict__.update(_fresh_globals("envscaler_env"))
        exec(self._compile(req["code"]), module.__dict__)
        cls = module.__dict__.get(req["class"])
        if not isinstance(cls, type):
            return {"ok": False, "error": f"class {req['class']!r} is not defined by env_class_code"}
        config = _deepcopy(req["init"])
        try:
            instance = cls(config or {})
        except TypeError:
            instance = cls()
        for key, value in config.items():
            setattr(instance, key, value)
        self.instances[req["id"]] = (instance, _state(instance))
        return {"ok": True}

    def call(self, req: dict) -> dict:
        instance, _ = self._entry(req["id"])
        name, args = req["name"], req["args"]
        method = getattr(instance, name, None) if not name.startswith("_") else None
        if not callable(method):
            return {"ok": False, "error": f"the environment has no method {name!r}"}
        import inspect  # lazily: only calls need it, startup stays fast

        try:
            inspect.signature(method).bind(**args)
        except TypeError as err:
            return {"ok": False, "error": f"invalid arguments for {name!r}: {err}"}
        except ValueError:  # no signature available (a builtin): let the call itself decide
            pass
        text = _dumps(method(**args), default=str, ensure_ascii=False)
        return {"ok": True, "value": text[:req["max_chars"]], "chars": len(text)}

    def check(self, req: dict) -> dict:
        """EnvScaler's convention: the source defines `check_func(final_state) -> bool` and sees the
        initial state as the global `initial_state`; anything but a real bool is a failure."""
        instance, initial = self._entry(req["id"])
        scope = {**_fresh_globals("envscaler_check"), "initial_state": _deepcopy(initial)}
        exec(compile(req["code"], "<envscaler check>", "exec"), scope)
        func = scope.get("check_func")
        if not callable(func):
            return {"ok": False, "error": "the check source does not define check_func"}
        result = func(_state(instance))
        if not isinstance(result, bool):
            return {"ok": False, "error": f"check_func returned {type(result).__name__}, not bool"}
        return {"ok": True, "value": result}

    def drop(self, req: dict) -> dict:
        self.instances.pop(req["id"], None)
        return {"ok": True}

    def _entry(self, handle: int) -> tuple[object, dict]:
        if handle not in self.instances:
            raise LookupError(f"no environment instance {handle}")
        return self.instances[handle]

    def serve(self, request: dict) -> dict:
        """Run one request under the soft time limit and a fresh CPU budget; never raises."""
        ops = {"create": self.create, "call": self.call, "check": self.check, "drop": self.drop}
        op = ops.get(request.get("op"))
        if op is None:
            return {"ok": False, "error": f"unknown op {request.get('op')!r}"}
        used = resource.getrusage(resource.RUSAGE_SELF)
        budget = math.ceil(used.ru_utime + used.ru_stime) + self.cpu_seconds
        resource.setrlimit(resource.RLIMIT_CPU, (budget, resource.RLIM_INFINITY))
        try:
            try:
                _arm_timer(request.get("timeout", 0))
                return op(request)
            except _Timeout:
                return _timed_out()
            except BaseException as err:  # dataset code may raise anything, SystemExit included
                return {"ok": False, "error": _one_line(err)}  # str(err) may be dataset code: still timed
            finally:
                _disarm_timer()
        except _Timeout:  # the timer fired after op ended (or in the handler above) but before the disarm
            _disarm_timer()
            return _timed_out()


_timer_armed = False
"""Whether a SIGALRM may still interrupt the request: cleared before the timer is stopped, so that a signal
delivered late, once serve() has its answer, is ignored instead of escaping into the protocol loop."""


def _arm_timer(seconds: float) -> None:
    global _timer_armed
    _timer_armed = True
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _disarm_timer() -> None:
    global _timer_armed
    _timer_armed = False
    signal.setitimer(signal.ITIMER_REAL, 0)


def _on_alarm(signum, frame):
    if _timer_armed:
        raise _Timeout()


def _timed_out() -> dict:
    return {"ok": False, "error": "timed out", "timeout": True}


def _limit_resources(memory_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))


def main() -> None:
    memory_mb, cpu_seconds = int(sys.argv[1]), int(sys.argv[2])
    out, requests = sys.stdout, sys.stdin.buffer
    sys.stdout = sys.stderr = _Sink()
    signal.signal(signal.SIGALRM, _on_alarm)
    _limit_resources(memory_mb)
    worker = Worker(cpu_seconds)
    out.write(_dumps({"ready": True, "uid": os.getuid()}) + "\n")
    out.flush()
    for line in requests:
        try:
            request = _loads(line)
        except ValueError as err:
            response = {"ok": False, "error": _one_line(err)}
        else:
            response = worker.serve(request)
        try:
            out.write(_dumps(response, default=str) + "\n")
        except (TypeError, ValueError) as err:  # e.g. a surrogate in an error message
            out.write(_dumps({"ok": False, "error": _one_line(err)}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
