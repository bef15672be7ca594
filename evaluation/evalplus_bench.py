"""HumanEval+ and MBPP+ with the official EvalPlus 0.3.1 harness, run inside the project sandbox.

What comes from ``evalplus`` (called, not re-implemented):

* data: ``evalplus.data.get_human_eval_plus`` / ``get_mbpp_plus`` (MBPP+ inputs are
  deserialised by evalplus), pointed at the released ``.jsonl.gz`` files through evalplus'
  own override hooks (``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH``; evalplus reads
  ``.gz`` directly); the dataset hash is evalplus' ``get_*_plus_hash``;
* prompt: the instruction / response prefixes of ``evalplus.codegen`` laid out as
  ``evalplus.provider.utility.make_raw_chat_prompt`` does for chat models: the assistant turn
  starts with the response prefix and an opened python fence;
* generation: ends at evalplus' stop strings (``STOP_STRINGS``, the closing fence among them),
  and the output is cut there as evalplus' HF / vLLM providers cut it (``chat_solution``);
* post-processing: ``evalplus.sanitize`` (its ``code_extract`` + ``sanitize``) against the
  task's entry point;
* expected outputs: ``evalplus.evaluate.get_groundtruth`` (runs the canonical solutions,
  records their times), cached per task under the evalplus cache dir;
* checking: ``evalplus.eval.untrusted_check`` with evalplus' default per-test time limits
  (``max(1 s, 4 x ground-truth time)``), called *inside* ``evaluation.sandbox.run_python``
  — one sandbox process per (task, sample); evalplus forks one child there for each of
  the base and plus stages (2 processes at most). The sandbox hides the host's cache dirs,
  so the expected outputs travel in its workdir;
* pass@1: ``evalplus.eval.estimate_pass_at_k``;
* response budget: ``MAX_NEW_TOKENS``, the default of evalplus' providers (``evalplus.provider.base.DecoderBase``),
  which ``evalplus.codegen`` never overrides.

A sample whose check fails only by a time limit is checked once more and the second verdict counts (``rechecked``):
a loaded machine can push a correct solution past evalplus' per-test limits.

EvalPlus+ ("plus") correctness of a sample is base AND plus, as in ``evalplus.evaluate``.

Known evalplus 0.3.1 behaviour kept as is: HumanEval/32 (``find_zero``) fails for every
solution (its special oracle skips recording the passed test), so HumanEval+ tops out at
163/164; the sanitizer drops top-level functions without a ``return`` (generators using
only ``yield``), which breaks e.g. the canonical Mbpp/630 once sanitised.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import math
import os
import pickle
import secrets
import threading
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from evaluation.harness import evalplus_check
from evaluation.stats import wilson_interval
from lopd.core.progress import progress

BENCHMARKS = ("humaneval_plus", "mbpp_plus")

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "evalplus"

# EvalPlus' instruction-model wording (evalplus/codegen.py, default "instruct" mode).
INSTRUCTION_PREFIX = (
    "Please provide a self-contained Python script that solves the following problem "
    "in a markdown code block:"
)
RESPONSE_PREFIX = (
    "Below is a Python script with a self-contained function that solves the problem "
    "and passes corresponding tests:"
)
STOP_STRINGS = ("<|endoftext|>", "<|endofmask|>", "</s>", "\nif __name__", "\ndef main(", "\nprint(", "\n```\n")
"""Where EvalPlus ends a chat model's output: ``evalplus.provider.utility.EOS`` and the closing fence its HF and
vLLM providers add for chat models. What follows them (prose, a main block, demo prints) is mostly what the
sanitizer drops anyway; stopping there saves those tokens and cuts the output exactly where EvalPlus cuts it."""
MAX_NEW_TOKENS = 768
"""EvalPlus' response budget: its providers' default ``max_new_tokens``, which ``evalplus.codegen`` keeps."""

# evalplus' own per-check memory cap (EVALPLUS_MAX_MEMORY_BYTES default: 4 GiB).
BASE_MEMORY_MB = 4096
# Samples of tasks whose expected outputs exceed this (HumanEval/15, HumanEval/130, Mbpp/255)
# run one at a time: each needs several times the pickle size in memory, host and sandbox side.
BIG_GROUNDTRUTH_BYTES = 64 * 1024 * 1024
_BIG_TASK_SLOT = threading.Semaphore(1)
# Fixed wall-clock allowance per sandbox run for interpreter start, imports and forks.
STARTUP_SECONDS = 10.0


class EvalPlusDataUnavailable(RuntimeError):
    """An EvalPlus release file is not in the data dir."""


@dataclass(frozen=True)
class _Spec:
    dataset: str  # evalplus' dataset name, used by its special oracles
    filename: str
    module: str
    override_attr: str
    loader: str
    hasher: str


_SPECS = {
    "humaneval_plus": _Spec(
        "humaneval", "HumanEvalPlus-v0.1.10.jsonl.gz", "evalplus.data.humaneval",
        "HUMANEVAL_OVERRIDE_PATH", "get_human_eval_plus", "get_human_eval_plus_hash",
    ),
    "mbpp_plus": _Spec(
        "mbpp", "MbppPlus-v0.2.0.jsonl.gz", "evalplus.data.mbpp",
        "MBPP_OVERRIDE_PATH", "get_mbpp_plus", "get_mbpp_plus_hash",
    ),
}


def _spec(benchmark: str) -> _Spec:
    if benchmark not in _SPECS:
        raise ValueError(f"unknown benchmark {benchmark!r}; expected one of {BENCHMARKS}")
    return _SPECS[benchmark]


# --------------------------------------------------------------------------- data

_OVERRIDE_LOCK = threading.Lock()


def _data_file(spec: _Spec, data_dir: str | Path | None) -> Path:
    base = Path(os.path.expanduser(str(data_dir))) if data_dir is not None else DEFAULT_DATA_DIR
    return base / spec.filename


def _call_evalplus_data(benchmark: str, data_dir: str | Path | None, what: str) -> Any:
    """Call evalplus' loader (what="loader") or hasher (what="hasher") on the release file in `data_dir`.

    evalplus reads its override path once at import into a module global, so the global is
    swapped for the call. Without the file nothing is called: evalplus would fetch the release
    from the internet (or read a stale copy from its cache), and data is read only from params' paths."""
    import importlib

    spec = _spec(benchmark)
    path = _data_file(spec, data_dir)
    if not path.is_file():
        raise EvalPlusDataUnavailable(
            f"{benchmark}: {path} not found: put the official EvalPlus release there "
            f"(the evalplus/ folder of data.shared_dir; see docs/data.md)")
    module = importlib.import_module(spec.module)
    fn: Callable[[], Any] = getattr(module, getattr(spec, what))
    with _OVERRIDE_LOCK:
        saved = getattr(module, spec.override_attr)
        setattr(module, spec.override_attr, str(path))
        try:
            return fn()
        except (EOFError, OSError, ValueError, zlib.error) as err:  # truncated or corrupt (.gz, JSON lines)
            raise EvalPlusDataUnavailable(
                f"{benchmark}: {path} is unreadable ({type(err).__name__}: {str(err).splitlines()[0]}): put the "
                f"official EvalPlus release there (see docs/data.md)") from None
        finally:
            setattr(module, spec.override_attr, saved)


def load_problems(
    benchmark: str, data_dir: str | Path | None, *, limit: int | None = None
) -> dict[str, dict]:
    """task_id -> evalplus problem, in release order.

    ``data_dir`` holds the release ``.jsonl.gz`` files (None: ``<repo>/../shared/data/evalplus``).
    ``limit=N`` keeps the first N task ids of the release order (HumanEval/0.., Mbpp/2..)."""
    if limit is not None and limit < 1:
        raise ValueError("limit must be >= 1 or None")
    problems = _call_evalplus_data(benchmark, data_dir, "loader")
    if limit is not None:
        problems = {tid: problems[tid] for tid in list(problems)[:limit]}
    return problems


# ------------------------------------------------------------------------- prompt


def build_messages(
    problem: dict, benchmark: str, *, prefill_response: bool = False
) -> list[dict]:
    """Chat messages for an instruct model, EvalPlus protocol, no system prompt.

    The user turn is exactly what ``evalplus.provider.utility.make_raw_chat_prompt`` puts there.
    EvalPlus' HF/vLLM backends also start the assistant turn with ``RESPONSE_PREFIX`` and an
    opened python fence; ``prefill_response=True`` appends that turn (render it with
    ``continue_final_message=True``)."""
    _spec(benchmark)
    task_prompt = problem["prompt"].strip() + "\n"  # as evalplus.codegen passes it
    messages = [
        {"role": "user", "content": f"{INSTRUCTION_PREFIX}\n```\n{task_prompt.strip()}\n```\n"}
    ]
    if prefill_response:
        messages.append({"role": "assistant", "content": f"{RESPONSE_PREFIX}\n```python\n"})
    return messages


def chat_solution(generated: str) -> str:
    """The raw solution ``evalplus.codegen`` keeps for a chat model, from the text generated after the prefilled
    turn (``build_messages(..., prefill_response=True)``): cut before the earliest stop string, tabs as four spaces,
    as ``evalplus.provider.hf`` returns it (its vLLM provider gets the same text from vLLM's stop strings). The
    prefix is not prepended: the text is plain code, which the sanitizer takes as it is."""
    cut = min((i for i in (generated.find(s) for s in STOP_STRINGS) if i >= 0), default=len(generated))
    return generated[:cut].replace("\t", "    ")


# ----------------------------------------------------------------------- sanitize


# Longest fence-free run of lines searched exhaustively; see sanitize_completion.
MAX_SEGMENT_LINES = 300


def sanitize_completion(text: str, entry_point: str) -> str:
    """``evalplus.sanitize.sanitize(text, entry_point)``, computed faster on long outputs.

    evalplus' ``code_extract`` parses every line span, cubic in the line count (~7 s at 400
    lines of code, ~40 s at 1000 lines of prose). A span containing a markdown fence line
    cannot parse, so the best span lies in one fence-free segment: the segments are searched
    separately with evalplus' ``code_extract``, and the winner (the first of the longest, as
    evalplus picks it) goes through evalplus' ``sanitize``, which then returns what it returns
    on the whole text. Two departures, both outside normal model output: a fence line inside
    a triple-quoted string, and segments over ``MAX_SEGMENT_LINES`` lines (rambling prose,
    degenerate repetition), of which only the first ``MAX_SEGMENT_LINES`` lines are searched."""
    from evalplus.sanitize import code_extract, sanitize

    lines = text.split("\n")
    if len(lines) <= 40:
        return sanitize(text, entry_point)
    best, best_count = None, 0
    segment: list[str] = []
    for line in lines + ["```"]:
        if not line.lstrip().startswith("```"):
            segment.append(line)
            continue
        if len(segment) >= 2:
            span = code_extract("\n".join(segment[:MAX_SEGMENT_LINES]))
            span_lines = span.split("\n")
            count = sum(1 for ln in span_lines if ln.strip())
            # code_extract returns a 1-line span only when nothing (of >= 2 lines) parses.
            if len(span_lines) >= 2 and count > best_count:
                best, best_count = span, count
        segment = []
    return sanitize(best if best is not None else lines[0], entry_point)


# -------------------------------------------------------------------- ground truth


def default_cache_dir() -> Path:
    from evalplus.data.utils import CACHE_DIR

    return Path(CACHE_DIR) / "lopd-suite"


def _gt_paths(cache_root: Path, benchmark: str, dataset_hash: str, task_id: str) -> tuple[Path, Path]:
    folder = cache_root / f"{benchmark}-{dataset_hash}"
    stem = task_id.replace("/", "_")
    return folder / f"{stem}.pkl", folder / f"{stem}.meta.json"


def _ensure_groundtruth(spec: _Spec, problem: dict, pkl: Path, meta: Path) -> dict:
    """Expected outputs of one task via evalplus' get_groundtruth, cached; returns the meta
    (reference times and pickle size)."""
    if meta.is_file() and pkl.is_file():
        return json.loads(meta.read_text())
    # No meta (never built, or a build killed before it wrote the meta): build it. The host never unpickles
    # the cached file; only the sandboxed harness reads it, with a restricted unpickler.
    from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS
    from evalplus.evaluate import get_groundtruth

    pkl.parent.mkdir(parents=True, exist_ok=True)
    # get_groundtruth writes os.path.join(CACHE_DIR, hashcode + ".pkl"); an absolute
    # hashcode puts it here. A unique name, then an atomic rename, keeps racing writers safe.
    tmp = pkl.with_name(f"{pkl.stem}.tmp-{os.getpid()}-{uuid.uuid4().hex}")
    not_none = MBPP_OUTPUT_NOT_NONE_TASKS if spec.dataset == "mbpp" else []
    with contextlib.redirect_stdout(io.StringIO()):
        oracle = get_groundtruth({problem["task_id"]: problem}, str(tmp), not_none)
    os.replace(f"{tmp}.pkl", pkl)
    entry = oracle[problem["task_id"]]
    info = {
        "base_time": list(entry["base_time"]),
        "plus_time": list(entry["plus_time"]),
        "pickle_bytes": pkl.stat().st_size,
    }
    tmp_meta = meta.with_name(f"{meta.name}.tmp-{os.getpid()}-{uuid.uuid4().hex}")
    tmp_meta.write_text(json.dumps(info))
    os.replace(tmp_meta, meta)
    return info


def _stage_seconds(ref_time: list[float]) -> float:
    """Upper bound on evalplus' untrusted_check wall time for one stage (its own formula)."""
    from evalplus.config import DEFAULT_GT_TIME_LIMIT_FACTOR, DEFAULT_MIN_TIME_LIMIT

    limits = [max(DEFAULT_MIN_TIME_LIMIT, DEFAULT_GT_TIME_LIMIT_FACTOR * t) for t in ref_time]
    return min(60.0, sum(limits)) + 1 + 1 + 1  # timeout, +1 join, +1 slack for kill/sleeps


# ------------------------------------------------------------------------ harness

# Runs inside the sandbox (evaluation/harness/evalplus_check.py). The nonce arrives on stdin (read before
# any model code runs); the verdict is printed by this process after evalplus' forked child has finished.
_HARNESS = Path(evalplus_check.__file__).read_text(encoding="utf-8")

_MARKER = "@@LOPD-EVALPLUS-VERDICT"


@dataclass(frozen=True)
class _TaskRun:
    payload: dict  # everything but the solution
    expected_file: Path  # evalplus' ground-truth pickle of the task
    limits: Any  # SandboxLimits


def _prepare_task(spec: _Spec, problem: dict, pkl: Path, meta: dict) -> _TaskRun:
    from evaluation.sandbox import SandboxLimits

    payload = {
        "task_id": problem["task_id"],
        "dataset": spec.dataset,
        "entry_point": problem["entry_point"],
        "atol": problem["atol"],
        "inputs": base64.b64encode(
            pickle.dumps((problem["base_input"], problem["plus_input"]))
        ).decode("ascii"),
    }
    size_mb = meta["pickle_bytes"] / 2**20
    wall = (
        STARTUP_SECONDS
        + size_mb / 10.0  # moving and unpickling the expected outputs (~30 s for 750 MB)
        + _stage_seconds(meta["base_time"])
        + _stage_seconds(meta["plus_time"])
    )
    limits = SandboxLimits(
        wall_seconds=wall,
        cpu_seconds=int(math.ceil(wall)) + 1,
        memory_mb=int(BASE_MEMORY_MB + 6 * size_mb),
        file_size_mb=16,
        max_processes=8,
        workdir_mb=int(64 + 1.4 * size_mb + len(payload["inputs"]) / 2**20),
    )
    return _TaskRun(payload, pkl, limits)


HARNESS_CHECK_TASKS = {"humaneval_plus": "HumanEval/0", "mbpp_plus": "Mbpp/2"}
"""The task whose canonical solution `check_harness` runs: one that evalplus 0.3.1 passes (not HumanEval/32, whose
canonical solution its find_zero oracle fails), with small expected outputs."""


def check_harness(benchmark: str, problem: dict, run: _TaskRun) -> None:
    """Raise SandboxUnavailable unless the harness, in the sandbox, passes the canonical solution of `problem` (the
    benchmark's `HARNESS_CHECK_TASKS` task) and fails a wrong one: a harness that cannot run (evalplus not importable
    there, say) would otherwise fail every sample."""
    from evaluation.sandbox import SandboxUnavailable

    tid = problem["task_id"]
    (_, _, right), _ = rechecked(lambda: _run_sample(run, problem["prompt"] + problem["canonical_solution"]),
                                 lambda verdict: verdict[2] in TIMEOUT_STATUSES)
    if right != "pass":
        raise SandboxUnavailable(f"{benchmark}: the canonical solution of {tid} scores {right} in the sandbox")
    _, _, wrong = _run_sample(run, problem["prompt"] + "    raise NotImplementedError\n")
    if wrong == "pass":
        raise SandboxUnavailable(f"{benchmark}: a wrong solution of {tid} passes in the sandbox")


def _run_sample(run: _TaskRun, completion: str) -> tuple[bool, bool, str]:
    from evaluation.sandbox import run_python

    try:
        solution = sanitize_completion(completion, run.payload["entry_point"])
    except Exception:  # noqa: BLE001 - unparsable junk is a failed sample, not a crash
        return False, False, "sanitize:error"
    nonce = f"{_MARKER}-{secrets.token_hex(16)}"
    big = run.expected_file.stat().st_size > BIG_GROUNDTRUTH_BYTES
    with _BIG_TASK_SLOT if big else contextlib.nullcontext():
        res = run_python(
            _HARNESS,
            stdin=nonce + "\n",
            limits=run.limits,
            files={
                "payload.json": json.dumps(dict(run.payload, solution=solution)),
                # the sandbox hides the host's cache dirs: expected outputs travel in the workdir
                "expected.b64": base64.b64encode(run.expected_file.read_bytes()).decode("ascii"),
            },
        )
    verdicts = [ln[len(nonce) + 1 :] for ln in res.stdout.splitlines() if ln.startswith(nonce + " ")]
    if len(verdicts) != 1:
        return False, False, f"sandbox:{res.status}" if res.status != "ok" else "sandbox:no_verdict"
    try:
        verdict = json.loads(verdicts[0])
    except ValueError:
        verdict = {"ok": False, "error": "unreadable verdict"}
    if not verdict.get("ok"):
        log.warning("%s: evalplus harness failed in the sandbox: %s",
                    run.payload["task_id"], verdict.get("error"))
        return False, False, "harness:error"
    base_ok = verdict.get("base") == "pass"
    plus_ok = base_ok and verdict.get("plus") == "pass"
    if plus_ok:
        return True, True, "pass"
    stage = "base" if not base_ok else "plus"
    return base_ok, False, f"{stage}:{verdict.get(stage)}"


# -------------------------------------------------------------------------- score

Verdict = TypeVar("Verdict")
TIMEOUT_STATUSES = ("base:timeout", "plus:timeout", "sandbox:timeout")
"""The statuses of a sample that failed only by a time limit: evalplus' limit on a stage (its per-test limits give a
fail; it also calls a child that died without a verdict a timeout), or the sandbox's wall clock."""


def rechecked(check: Callable[[], Verdict], timed_out: Callable[[Verdict], bool]) -> tuple[Verdict, bool]:
    """`check()`'s verdict and whether it was checked twice: a verdict that fails only by a time limit is checked
    once more and the second counts, since load on the machine can push a correct solution past its limit (a
    HumanEval+ sample timed out once under load and passed 3 of 3 quiet runs)."""
    verdict = check()
    if not timed_out(verdict):
        return verdict, False
    return check(), True


def score(
    benchmark: str,
    problems: dict[str, dict],
    completions: dict[str, list[str]],
    *,
    data_dir: str | Path | None = None,
    workers: int = 2,
    cache_dir: str | Path | None = None,
) -> dict:
    """Score raw model outputs (``completions[task_id]``: n samples) with EvalPlus.

    ``data_dir`` names the release the problems came from (its evalplus hash keys the
    ground-truth cache, kept under ``cache_dir``, default ``<evalplus cache>/lopd-suite``).
    Returns pass@1 on base tests and on base+plus tests (EvalPlus+), in percent, plus
    ``per_task[task_id] = {"base": [...], "plus": [...], "status": [...], "rechecked": [...]}``; a status is
    ``pass``, ``base:fail|timeout``, ``plus:fail|timeout``, ``sandbox:<sandbox status>``,
    ``sandbox:no_verdict``, ``harness:error`` or ``sanitize:error``. A sample that failed only by a time limit
    (``TIMEOUT_STATUSES``) is checked once more and its second verdict counts (``rechecked`` true); how many were
    is ``n_timeout_rechecks``."""
    spec = _spec(benchmark)
    if not problems:
        raise ValueError("no problems to score")
    if workers < 1:
        raise ValueError("workers must be >= 1")
    missing = [tid for tid in problems if not completions.get(tid)]
    extra = [tid for tid in completions if tid not in problems]
    if missing or extra:
        raise ValueError(
            f"completions must give >= 1 sample for exactly the scored tasks "
            f"(missing: {missing[:5]}, unknown: {extra[:5]})"
        )
    dataset_hash = _call_evalplus_data(benchmark, data_dir, "hasher")
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()

    runs: dict[str, _TaskRun] = {}
    started, built = time.monotonic(), 0
    # transient: minutes the first time (evalplus runs every canonical solution), a blink once cached
    check_id = HARNESS_CHECK_TASKS[benchmark]
    checked = {check_id: problems.get(check_id) or load_problems(benchmark, data_dir)[check_id]}
    for tid, problem in progress({**checked, **problems}.items(), desc=f"{benchmark} expected outputs",
                                 total=len({**checked, **problems}), unit="task", transient=True):
        pkl, meta_path = _gt_paths(cache_root, benchmark, dataset_hash, tid)
        built += not pkl.is_file()
        meta = _ensure_groundtruth(spec, problem, pkl, meta_path)
        runs[tid] = _prepare_task(spec, problem, pkl, meta)
    if built:
        log.info("%s: expected outputs of %d task(s) computed in %.1fs (cached in %s)",
                 benchmark, built, time.monotonic() - started, cache_root)
    check_harness(benchmark, checked[check_id], runs[check_id])

    # sample-major order: the samples of one (possibly big) task do not queue up together
    max_n = max(len(c) for c in completions.values())
    jobs = [(tid, i) for i in range(max_n) for tid in problems if i < len(completions[tid])]

    def check(job: tuple[str, int]) -> tuple[tuple[bool, bool, str], bool]:
        tid, i = job
        return rechecked(lambda: _run_sample(runs[tid], completions[tid][i]), lambda out: out[2] in TIMEOUT_STATUSES)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(progress(pool.map(check, jobs), desc=f"score {benchmark}", total=len(jobs), unit="sample"))

    per_task: dict[str, dict[str, list]] = {
        tid: {"base": [], "plus": [], "status": [], "rechecked": []} for tid in problems
    }
    for (tid, _), ((base_ok, plus_ok, status), again) in zip(jobs, outcomes):
        per_task[tid]["base"].append(base_ok)
        per_task[tid]["plus"].append(plus_ok)
        per_task[tid]["status"].append(status)
        per_task[tid]["rechecked"].append(again)
    return {**summarize(benchmark, per_task), "n_timeout_rechecks": sum(again for _, again in outcomes)}


def summarize(benchmark: str, per_task: dict[str, dict[str, list]]) -> dict:
    """The score() dict from per-sample verdicts: pass@1 (percent) is the mean over tasks of
    evalplus' unbiased estimate with the task's n samples, i.e. c/n, with its 95% Wilson interval over tasks."""
    import numpy as np
    from evalplus.eval import estimate_pass_at_k

    if not per_task:
        raise ValueError("no tasks to summarize")
    n = np.array([len(v["base"]) for v in per_task.values()])
    base_c = np.array([sum(v["base"]) for v in per_task.values()])
    plus_c = np.array([sum(v["plus"]) for v in per_task.values()])
    scores = {"benchmark": benchmark, "n_tasks": len(per_task), "n_samples_per_task": int(n.min())}  # same n in use
    for tests, correct in (("base", base_c), ("plus", plus_c)):
        rate = float(estimate_pass_at_k(n, correct, 1).mean())
        low, high = wilson_interval(rate, len(per_task))
        scores.update({f"pass@1_{tests}": rate * 100, f"pass@1_{tests}_ci_low": low * 100,
                       f"pass@1_{tests}_ci_high": high * 100})
    return {**scores, "per_task": per_task}
