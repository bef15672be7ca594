"""Runtime for the EnvScaler data format: load environments and tasks, run them in worker processes.

Public API:

    EnvItem(env_id, env_class_name, env_class_code, tools)                      frozen dataclass
    TaskItem(env_id, task_id, init_config, task, checklist, ground_truth, split_group, tier)   frozen dataclass
    load_envscaler(env_path, task_path) -> tuple[dict[str, EnvItem], list[TaskItem]]
    items_from_dicts(env_dicts, task_dicts) -> tuple[dict[str, EnvItem], list[TaskItem]]
    split_tasks(tasks, test_fraction=0.2) -> tuple[list[TaskItem], list[TaskItem]]
    EnvScalerWorker(call_timeout=5.0, memory_mb=1024)    one isolated worker process, many env instances:
        .create(code, class_name, init_config) -> (handle | None, Reply); .call(handle, name, arguments,
        max_chars) -> Reply; .check(handle, source) -> Reply; .drop(handle); .close(); .restarts
    EnvScalerEnvironment(env, task, worker, max_observation_chars=4000)
                                                         the lopd.core.multiturn.ToolEnvironment protocol
    EnvScalerSuite(envs, tasks, workers=1, call_timeout=5.0, ...)
                                                         .make(task) -> EnvScalerEnvironment, .close()
    replay(env, calls) -> dict                           reset, run [{"name", "arguments"}, ...], score()

The format (EnvScaler, RUC-NLPIR/EnvScaler). An environment item carries `env_id`, `env_class_name`,
`env_class_code` (Python source of a stateful class) and `tools` (JSON schemas of its public methods,
OpenAI function format or bare `{"name", "description", "parameters"}`; we hand out the OpenAI form).
A task item carries `env_id`, `task_id`, `init_config` (a dict, or a JSON string of one, as in the
published data sets), `task` (the instruction) and `checklist_with_func` (a non-empty list of
`{"check_item": text, "check_func": source}`), plus our optional `ground_truth` (a list of
`{"name", "arguments"}` calls that solves the task). Files are a JSON list, a JSON object mapping
env_id to item, or JSONL; an item without `env_id` in a list takes its position (EnvScaler's RL
data indexes environments that way); ids are normalised to strings. `env_class_name` may sit on the
task items instead of the environment item (EnvScaler reads it from the task).

Conventions taken from EnvScaler's reference runtime:
- instance: `cls(init_config)` (`cls({})` when the config is empty), falling back to `cls()` when
  that raises TypeError; then every key of init_config is also set as an attribute.
- a tool call `{"name": n, "arguments": a}` is `instance.n(**a)`.
- state = a deep copy of the instance's attributes without dunder names; the initial state is taken
  right after construction, the final state when each check runs.
- a check source defines `check_func(final_state) -> bool` and sees the initial state as the global
  `initial_state`; a check that raises, times out or returns a non-bool counts as failed.
- reward = passed checks / all checks (continuous in [0, 1]).
- the episode ends when the agent replies with 'Task Completed' (lopd.core.multiturn.TASK_COMPLETED).
Deviations, all deliberate: observations are `json.dumps(value, default=str)` (EnvScaler uses
`str(value)`), capped at `max_observation_chars` with a note; a failing call is an `Error: ...`
observation and the episode goes on (EnvScaler ends it); only methods listed in `tools` can be called
(EnvScaler accepts any attribute); the reward is not rounded (EnvScaler rounds to 4 places); an
empty checklist is rejected at load time (EnvScaler would divide by zero).

Isolation: dataset code runs only in `envscaler_worker.py`, a `python -I -S -B` child speaking JSON
lines (see its docstring for the import allowlist, builtins and rlimits). When the host is root the
child runs under a fresh throwaway uid (util-linux `setpriv`), which its greeting must report; if that
is impossible (no `setpriv`) or the child does not start (two tries, 20 s then 60 s) the worker raises
SandboxUnavailable rather than run dataset code as root: the stage stops, since every episode would
score 0. Stages that play EnvScaler tasks call `check_sandbox()` before any work. A non-root host runs it
under its own uid, with a warning. Where `unshare --net` works (with `--user` when not root) the child
also gets a fresh network namespace, i.e. no network; elsewhere a warning says so. Every request has two
time limits: the worker's own timer at `call_timeout` (the call fails, the worker and all states survive) and the
host's wall-clock kill a little later (dataset code that swallows the timer). After a kill, a crash or
a response that is not one (garbled or oversized) the host starts a fresh worker and rebuilds every
environment it hosted by re-running its construction and its recorded calls (minus the one that hung,
whose partial effects are lost), so other episodes sharing the worker keep their state. A rebuild in
which a replayed call succeeds where it had failed or vice versa, or that hangs, marks that environment
lost: its later calls are `Error: ...` observations and its checks fail. Only success is compared, not
returned values: a class that draws uuids or reads the clock is rebuilt with fresh values. Workers die
on `close()`, at interpreter exit, and on their own when the host dies (stdin EOF; the per-request CPU
budget ends one that is stuck in a loop).
"""

from __future__ import annotations

import atexit
import copy
import functools
import hashlib
import json
import math
import os
import select
import shutil
import signal
import subprocess
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.sandbox import INTERPRETER, SandboxUnavailable
from lopd.core.jsonl import read_text
from lopd.core.multiturn import AGENT_SYSTEM_PROMPT, TASK_COMPLETED

NUDGE = (f"No tool call found. Call one of the tools to continue the task, or reply exactly "
         f"'{TASK_COMPLETED}' if it is done.")
"""The user turn that answers a reply without a tool call and without 'Task Completed'."""


# -----------------------------------------------------------------------------
# Data items and loading


@dataclass(frozen=True)
class EnvItem:
    env_id: str
    env_class_name: str
    env_class_code: str
    tools: tuple[dict[str, Any], ...]
    """OpenAI function format: {"type": "function", "function": {"name", "description", "parameters"}}."""

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool["function"]["name"] for tool in self.tools)


@dataclass(frozen=True)
class TaskItem:
    env_id: str
    task_id: str
    init_config: dict[str, Any]
    task: str
    checklist: tuple[tuple[str, str], ...]
    """(check_item text, check_func source) pairs."""
    ground_truth: list[dict[str, Any]] | None = None
    """Ours, optional: tool calls [{"name", "arguments"}, ...] that solve the task."""
    split_group: str | None = None
    """Ours, optional: tasks of one group fall on one side of `split_tasks` (a hinted twin's is its base task's id)."""
    tier: str | None = None
    """Ours, optional: the task's difficulty tier (envscaler-mini's "hinted" twins; None: the data's own tasks)."""


def load_envscaler(env_path: str | Path, task_path: str | Path) -> tuple[dict[str, EnvItem], list[TaskItem]]:
    """Read an EnvScaler environment file and task file (each JSON or JSONL)."""
    env_raw, task_raw = _read_container(Path(env_path), "environment"), _read_container(Path(task_path), "task")
    task_dicts = [task_raw] if _is_item(task_raw) else task_raw
    try:
        envs = _parse_envs(env_raw, _class_names(task_dicts))
    except ValueError as err:
        raise ValueError(f"{env_path}: {err}") from None
    try:
        return envs, _parse_tasks(task_dicts, envs)
    except ValueError as err:
        raise ValueError(f"{task_path}: {err}") from None


def items_from_dicts(env_dicts: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
                     task_dicts: Iterable[Mapping[str, Any]]) -> tuple[dict[str, EnvItem], list[TaskItem]]:
    """The same parsing and checks as `load_envscaler`, for items already in memory."""
    task_dicts = list(task_dicts)
    envs = _parse_envs(env_dicts if isinstance(env_dicts, Mapping) else list(env_dicts), _class_names(task_dicts))
    return envs, _parse_tasks(task_dicts, envs)


def split_tasks(tasks: Sequence[TaskItem], test_fraction: float = 0.2) -> tuple[list[TaskItem], list[TaskItem]]:
    """Deterministic task-disjoint (train, test) split: a task is in test when the SHA-256 of its id (its
    `split_group` where it has one), read as a number in [0, 1), is below `test_fraction`. Independent of RNG state,
    of the order and of which other tasks are present, so a task never changes sides as a data set grows."""
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    train, test = [], []
    for task in tasks:
        (test if _unit_hash(task.split_group or task.task_id) < test_fraction else train).append(task)
    return train, test


def _unit_hash(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2.0 ** 64


def _read_container(path: Path, kind: str) -> Any:
    """A JSON document, or a list of JSONL lines when the whole file is not one JSON document."""
    if not path.is_file():
        raise FileNotFoundError(f"EnvScaler {kind} file not found: {path}")
    text = read_text(path)
    try:
        return json.loads(text)
    except ValueError:
        pass
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except ValueError as err:
                raise ValueError(f"{path}: line {number} is not valid JSON ({err})") from None
    return items


def _is_item(raw: Any) -> bool:
    """A lone item (a one-line JSONL file) rather than a list or an id -> item mapping."""
    return isinstance(raw, dict) and ("env_class_code" in raw or "task_id" in raw)


def _class_names(task_dicts: Any) -> dict[str, str]:
    if not isinstance(task_dicts, list):
        return {}
    return {str(t["env_id"]): t["env_class_name"] for t in task_dicts
            if isinstance(t, Mapping) and "env_id" in t and isinstance(t.get("env_class_name"), str)}


def _parse_envs(raw: Any, class_names: Mapping[str, str]) -> dict[str, EnvItem]:
    if _is_item(raw):
        raw = [raw]
    if isinstance(raw, Mapping):
        entries = [(str(key), item) for key, item in raw.items()]
    elif isinstance(raw, list):
        entries = [(str(index), item) for index, item in enumerate(raw)]
    else:
        raise ValueError(f"expected a list or an object of environment items, got {type(raw).__name__}")
    envs: dict[str, EnvItem] = {}
    for default_id, item in entries:
        where = f"environment item {default_id}"
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}: expected an object, got {type(item).__name__}")
        env_id = str(item.get("env_id", default_id))
        where = f"environment item {default_id} (env_id {env_id!r})"
        if env_id in envs:
            raise ValueError(f"{where}: duplicate env_id")
        class_name = item.get("env_class_name", class_names.get(env_id))
        if not isinstance(class_name, str) or not class_name:
            raise ValueError(f"{where}: missing env_class_name (on the item or its tasks)")
        tools = _maybe_json(item.get("tools"), where, "tools")
        if not isinstance(tools, list):
            raise ValueError(f"{where}: 'tools' must be a list of tool schemas")
        envs[env_id] = EnvItem(env_id, class_name, _text(item, "env_class_code", where),
                               tuple(_openai_tool(tool, where) for tool in tools))
    return envs


def _parse_tasks(raw: Any, envs: Mapping[str, EnvItem]) -> list[TaskItem]:
    if not isinstance(raw, list):
        raise ValueError(f"expected a list of task items, got {type(raw).__name__}")
    tasks, seen = [], set()
    for index, item in enumerate(raw):
        where = f"task item {index}"
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}: expected an object, got {type(item).__name__}")
        where = f"task item {index} (task_id {item.get('task_id')!r})"
        if "task_id" not in item or "env_id" not in item:
            raise ValueError(f"{where}: missing 'task_id' or 'env_id'")
        task_id, env_id = str(item["task_id"]), str(item["env_id"])
        if task_id in seen:
            raise ValueError(f"{where}: duplicate task_id")
        if env_id not in envs:
            raise ValueError(f"{where}: unknown env_id {env_id!r}")
        seen.add(task_id)
        init_config = _maybe_json(item.get("init_config"), where, "init_config")
        if not isinstance(init_config, dict):
            raise ValueError(f"{where}: 'init_config' must be an object (or a JSON string of one)")
        tasks.append(TaskItem(env_id, task_id, init_config, _text(item, "task", where),
                              _checklist(item.get("checklist_with_func"), where),
                              _ground_truth(item.get("ground_truth"), where),
                              _optional_text(item, "split_group", where), _optional_text(item, "tier", where)))
    return tasks


def _text(item: Mapping[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return value


def _optional_text(item: Mapping[str, Any], key: str, where: str) -> str | None:
    return None if item.get(key) is None else _text(item, key, where)


def _maybe_json(value: Any, where: str, key: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise ValueError(f"{where}: {key!r} is a string but not valid JSON") from None


def _openai_tool(tool: Any, where: str) -> dict[str, Any]:
    function = tool.get("function", tool) if isinstance(tool, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ValueError(f"{where}: every tool must be an object with a string 'name' (or 'function.name')")
    return {"type": "function", "function": dict(function)}


def _checklist(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: 'checklist_with_func' must be a non-empty list")
    checks = []
    for number, check in enumerate(raw):
        if not (isinstance(check, Mapping) and isinstance(check.get("check_item"), str)
                and isinstance(check.get("check_func"), str)):
            raise ValueError(f"{where}: checklist_with_func[{number}] needs string 'check_item' and 'check_func'")
        checks.append((check["check_item"], check["check_func"]))
    return tuple(checks)


def _ground_truth(raw: Any, where: str) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(
            isinstance(c, Mapping) and isinstance(c.get("name"), str) and isinstance(c.get("arguments", {}), dict)
            for c in raw):
        raise ValueError(f"{where}: 'ground_truth' must be a list of {{'name': str, 'arguments': object}}")
    return [{"name": c["name"], "arguments": dict(c.get("arguments", {}))} for c in raw]


# -----------------------------------------------------------------------------
# The worker process


class WorkerError(RuntimeError):
    """The worker was used after close(). (A worker that cannot start raises SandboxUnavailable.)"""


@dataclass(frozen=True)
class Reply:
    ok: bool
    value: Any = None
    error: str = ""
    timeout: bool = False
    restarted: bool = False
    """The worker was killed (hang or crash) during this request and restarted."""
    chars: int = 0
    """For a call: the length of the whole JSON observation (value may hold only a prefix)."""


@dataclass
class _Instance:
    """What the host needs to rebuild one environment in a fresh worker."""

    create: dict[str, Any]
    calls: list[tuple[dict[str, Any], bool]] = field(default_factory=list)
    """Completed call requests and whether each succeeded (what a rebuild compares); calls that timed out
    or crashed the worker are not recorded, so a rebuild does not repeat them."""
    lost: str = ""


_WORKER_FILE = Path(__file__).with_name("envscaler_worker.py")
_SETPRIV = shutil.which("setpriv")
_UNSHARE = shutil.which("unshare")
_MAX_RESPONSE_BYTES = 8 << 20
_START_ATTEMPTS = (20.0, 60.0)       # seconds per try: a machine busy with training may start slowly, which is
                                     # a reason to wait longer, never to weaken the isolation
_live_workers: weakref.WeakSet[EnvScalerWorker] = weakref.WeakSet()


class _NoResponse(Exception):
    """A request got no usable response; `reply` is what its caller is told once the worker is restarted."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.error)
        self.reply = reply


_TIMED_OUT = Reply(False, error="timed out", timeout=True, restarted=True)
_CRASHED = Reply(False, error="the environment worker crashed (memory or CPU limit?) and was restarted",
                 restarted=True)
_INVALID = Reply(False, error="the environment worker sent an invalid response and was restarted", restarted=True)
_LOST = "the environment's state was lost when its worker was restarted after another call timed out or crashed"


class EnvScalerWorker:
    """One worker process hosting many environment instances, addressed by integer handles.

    Thread-safe: requests are serialised, so N workers give N-way parallelism. The process starts
    on first use and is restarted (with every instance rebuilt) after a wall-clock kill or a crash.
    """

    def __init__(self, call_timeout: float = 5.0, memory_mb: int = 1024) -> None:
        if call_timeout <= 0:
            raise ValueError("call_timeout must be positive")
        self.call_timeout = call_timeout
        self.kill_after = call_timeout + max(1.0, call_timeout / 2)
        self.memory_mb = memory_mb
        self.restarts = 0
        self._instances: dict[int, _Instance] = {}
        self._next_handle = 0
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._closed = False
        _live_workers.add(self)

    # -- public -------------------------------------------------------------

    def create(self, code: str, class_name: str, init_config: dict[str, Any]) -> tuple[int | None, Reply]:
        """Build an instance; returns its handle (None when construction failed) and the reply."""
        with self._lock:
            handle = self._next_handle
            self._next_handle += 1
            request = {"op": "create", "id": handle, "code": code, "class": class_name, "init": init_config}
            reply = self._request(request)
            if not reply.ok:
                return None, reply
            self._instances[handle] = _Instance(request)
            return handle, reply

    def call(self, handle: int, name: str, arguments: dict[str, Any], max_chars: int) -> Reply:
        with self._lock:
            instance = self._instances.get(handle)
            if instance is None or instance.lost:
                return Reply(False, error=instance.lost if instance else f"no environment instance {handle}")
            request = {"op": "call", "id": handle, "name": name, "args": arguments, "max_chars": max_chars}
            reply = self._request(request)
            if not (reply.timeout or reply.restarted):
                instance.calls.append((request, reply.ok))
            return reply

    def check(self, handle: int, source: str) -> Reply:
        with self._lock:
            instance = self._instances.get(handle)
            if instance is None or instance.lost:
                return Reply(False, error=instance.lost if instance else f"no environment instance {handle}")
            return self._request({"op": "check", "id": handle, "code": source})

    def drop(self, handle: int) -> None:
        with self._lock:
            if self._instances.pop(handle, None) is not None and self._proc is not None:
                self._request({"op": "drop", "id": handle})

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._instances.clear()
            self._kill()

    # -- internals ----------------------------------------------------------

    def _request(self, request: dict[str, Any]) -> Reply:
        """Send one request; after a wall-clock kill, a crash or a garbled answer, restart and rebuild,
        then report it."""
        if self._closed:
            raise WorkerError("the EnvScaler worker is closed")
        if self._proc is None:
            self._spawn()
        try:
            return self._exchange(request)
        except _NoResponse as failure:
            self._recover()
            return failure.reply

    def _exchange(self, request: dict[str, Any]) -> Reply:
        """One request/response round trip; raises _NoResponse when the worker died, missed the kill
        deadline or answered something that is not a response."""
        payload = (json.dumps({**request, "timeout": self.call_timeout}) + "\n").encode("utf-8")
        try:
            self._proc.stdin.write(payload)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _NoResponse(_CRASHED) from None
        line = self._read_line(time.monotonic() + self.kill_after)
        try:
            response = json.loads(line)
            return Reply(bool(response.get("ok")), response.get("value"), str(response.get("error", "")),
                         timeout=bool(response.get("timeout")), chars=int(response.get("chars", 0)))
        except (ValueError, TypeError, AttributeError):  # e.g. dataset code writing to the protocol's fd
            raise _NoResponse(_INVALID) from None

    def _read_line(self, deadline: float) -> bytes:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise _NoResponse(_CRASHED if self._proc.poll() is not None else _TIMED_OUT)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _NoResponse(_CRASHED)
            if len(self._buffer) + len(chunk) > _MAX_RESPONSE_BYTES:
                raise _NoResponse(_INVALID)
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _recover(self) -> None:
        """Kill the worker, start a fresh one and rebuild every live instance by replaying its history;
        each pass that loses the worker marks the instance being rebuilt lost, so this ends."""
        self.restarts += 1
        while not self._rebuild_all():  # no fresh worker at all raises SandboxUnavailable: the stage stops
            pass

    def _rebuild_all(self) -> bool:
        """Start a fresh worker and rebuild the live instances; False when the worker died on the way."""
        self._spawn()
        for handle, instance in self._instances.items():
            if instance.lost:
                continue
            try:
                if self._replays_faithfully(instance):
                    continue
                instance.lost = _LOST
                self._exchange({"op": "drop", "id": handle})
            except _NoResponse:
                instance.lost = _LOST
                return False
        return True

    def _replays_faithfully(self, instance: _Instance) -> bool:
        """Replay the construction and the recorded calls; False when one's success differs from the record
        (only ok/failed is compared, not the values). Raises _NoResponse when the worker dies or hangs."""
        if not self._exchange(instance.create).ok:
            return False
        return all(self._exchange(request).ok == succeeded for request, succeeded in instance.calls)

    def _spawn(self) -> None:
        """Start a fresh worker, waiting longer on each try; SandboxUnavailable when none starts."""
        self._kill()
        for seconds in _START_ATTEMPTS:
            if self._try_start(seconds):
                return
        raise SandboxUnavailable(f"the EnvScaler worker process did not start ({len(_START_ATTEMPTS)} tries, "
                                 f"{sum(_START_ATTEMPTS):g} s; interpreter {INTERPRETER})")

    def _try_start(self, seconds: float) -> bool:
        """Start the process and wait for its greeting, which must report the uid it was given; False (and
        nothing left running) if it does not come in time or is wrong."""
        prefix, uid = _sandbox_prefix()
        command = [*prefix, INTERPRETER, "-I", "-S", "-B", "-c", _WORKER_FILE.read_text(encoding="utf-8"),
                   str(self.memory_mb), str(math.ceil(self.kill_after) + 1)]
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, cwd="/", start_new_session=True,
                                      env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        try:
            greeting = json.loads(self._read_line(time.monotonic() + seconds))
            ready = greeting.get("ready") is True and (uid is None or greeting.get("uid") == uid)
        except (_NoResponse, ValueError, AttributeError):
            ready = False
        if not ready:
            self._kill()
        return ready

    def _kill(self) -> None:
        proc, self._proc, self._buffer = self._proc, None, b""
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: nothing it started survives it
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


def _sandbox_prefix() -> tuple[list[str], int | None]:
    """The command prefix that isolates a worker, and the uid its greeting must report (None: not checked).
    A root host runs it under a fresh throwaway uid, or not at all: dataset code never runs as root."""
    network = list(_network_namespace())
    if os.geteuid() != 0:
        _warn_once("EnvScaler worker: the host is not root, so dataset code runs under the host's own uid")
        return network, None
    if _SETPRIV is None:
        raise SandboxUnavailable("EnvScaler worker: the host is root but util-linux `setpriv` is missing; install "
                                 "it (dataset code must not run as root)")
    uid = 200_000 + int.from_bytes(os.urandom(3), "big")
    return [*network, _SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs"], uid


@functools.cache
def _network_namespace() -> tuple[str, ...]:
    """`unshare --net` when this host can do it: the worker then has no network (only a loopback that is
    down). Without root it needs a user namespace too. Where neither works: nothing, with a warning."""
    prefix = (_UNSHARE, "--net") if os.geteuid() == 0 else (_UNSHARE, "--user", "--net")
    try:
        usable = _UNSHARE is not None and subprocess.run(
            [*prefix, "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=_START_ATTEMPTS[0]).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        usable = False
    if not usable:
        _warn_once("EnvScaler worker: cannot create a network namespace (unshare --net); dataset code keeps "
                   "the host's network access")
        return ()
    return prefix


@functools.cache
def _warn_once(message: str) -> None:
    warnings.warn(message, stacklevel=3)


@atexit.register
def _close_all_workers() -> None:
    for worker in list(_live_workers):
        worker.close()


# -----------------------------------------------------------------------------
# The ToolEnvironment


class EnvScalerEnvironment:
    """One EnvScaler task as a lopd.core.multiturn.ToolEnvironment; the worker is shared, not owned."""

    def __init__(self, env: EnvItem, task: TaskItem, worker: EnvScalerWorker,
                 max_observation_chars: int = 4000) -> None:
        if task.env_id != env.env_id:
            raise ValueError(f"task {task.task_id!r} belongs to env {task.env_id!r}, not {env.env_id!r}")
        self.env, self.task, self.worker = env, task, worker
        self.max_observation_chars = max_observation_chars
        self._handle: int | None = None
        self._start_error = "the environment was not reset"

    def reset(self) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        self._drop()
        try:
            self._handle, reply = self.worker.create(self.env.env_class_code, self.env.env_class_name,
                                                     self.task.init_config)
            self._start_error = "" if reply.ok else f"the environment failed to start ({reply.error})"
        except WorkerError as err:
            self._start_error = str(err)
        messages = [{"role": "system", "content": AGENT_SYSTEM_PROMPT}, {"role": "user", "content": self.task.task}]
        return messages, copy.deepcopy(list(self.env.tools))

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if name not in self.env.tool_names:
            return f"Error: unknown tool {name!r}; available tools: {', '.join(self.env.tool_names)}"
        if not isinstance(arguments, dict) or not _is_json(arguments):
            return "Error: tool arguments must be a JSON object"
        if self._handle is None:
            return f"Error: {self._start_error}"
        try:
            reply = self.worker.call(self._handle, name, arguments, self.max_observation_chars)
        except WorkerError as err:
            return f"Error: {err}"
        if reply.timeout:
            return f"Error: tool {name!r} timed out after {self.worker.call_timeout:g} s"
        if not reply.ok:
            return f"Error: {reply.error}"
        if reply.chars > self.max_observation_chars:
            return (f"{reply.value}\n[observation truncated: showing the first {self.max_observation_chars} "
                    f"of {reply.chars} characters]")
        return reply.value

    def reply(self, text: str) -> list[dict[str, str]] | None:
        if TASK_COMPLETED in text:
            return None
        return [{"role": "user", "content": NUDGE}]

    def score(self) -> dict[str, float]:
        """Mean of the check functions over the current state; a check that fails to run counts 0."""
        passed = 0
        for _, source in self.task.checklist:
            if self._handle is None:
                break
            try:
                reply = self.worker.check(self._handle, source)
            except WorkerError:
                break
            passed += reply.ok and reply.value is True
        total = len(self.task.checklist)
        return {"reward": passed / total, "checks_passed": passed, "checks_total": total}

    def close(self) -> None:
        self._drop()

    def _drop(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                self.worker.drop(handle)
            except WorkerError:
                pass


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


class EnvScalerSuite:
    """Makes environments for a set of tasks, spreading them round-robin over `workers` processes."""

    def __init__(self, envs: Mapping[str, EnvItem], tasks: Sequence[TaskItem], workers: int = 1,
                 call_timeout: float = 5.0, max_observation_chars: int = 4000, memory_mb: int = 1024) -> None:
        missing = sorted({t.env_id for t in tasks} - set(envs))
        if missing:
            raise ValueError(f"tasks refer to unknown env_ids: {', '.join(missing)}")
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.envs, self.tasks = dict(envs), list(tasks)
        self.max_observation_chars = max_observation_chars
        self.workers = [EnvScalerWorker(call_timeout, memory_mb) for _ in range(workers)]
        self._made = 0

    def make(self, task: TaskItem) -> EnvScalerEnvironment:
        if task.env_id not in self.envs:
            raise ValueError(f"task {task.task_id!r} refers to unknown env_id {task.env_id!r}")
        worker = self.workers[self._made % len(self.workers)]
        self._made += 1
        return EnvScalerEnvironment(self.envs[task.env_id], task, worker, self.max_observation_chars)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    def __enter__(self) -> EnvScalerSuite:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_CHECK_CLASS = "class Counter:\n    def __init__(self, config):\n        self.count = config['count']\n\n" \
               "    def add(self, n):\n        self.count += n\n        return self.count\n"
_CHECK_TRUE = "def check_func(final_state):\n    return final_state['count'] == 5"
_CHECK_FALSE = "def check_func(final_state):\n    return final_state['count'] == 2"


def check_sandbox() -> None:
    """Raise SandboxUnavailable (one line) unless a worker starts and runs a known environment as it must: a call
    returns its value, a true state check passes and a false one fails. Stages that play EnvScaler tasks call it
    before any work: a worker that cannot run dataset code must stop them, never score every episode 0."""
    worker = EnvScalerWorker()
    try:
        handle, created = worker.create(_CHECK_CLASS, "Counter", {"count": 2})
        seen = [created.ok, handle is not None and worker.call(handle, "add", {"n": 3}, 100).value == "5",
                handle is not None and worker.check(handle, _CHECK_TRUE).value is True,
                handle is not None and worker.check(handle, _CHECK_FALSE).value is False]
    finally:
        worker.close()
    if not all(seen):
        step = ("create", "call", "true check", "false check")[seen.index(False)]
        raise SandboxUnavailable(f"the EnvScaler worker runs a known environment wrongly (its {step} failed"
                                 f"{': ' + created.error if not created.ok else ''})")


def replay(env: EnvScalerEnvironment, calls: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Reset `env`, execute `calls` ([{"name", "arguments"}, ...]) through call_tool, return score()."""
    env.reset()
    for call in calls:
        env.call_tool(call["name"], dict(call.get("arguments", {})))
    return env.score()
