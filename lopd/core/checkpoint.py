"""Training checkpoints: layout, crash-safe saving, loading with fallback, the manifest and the resume fingerprint.

Layout of a method's checkpoint folder (e.g. checkpoints/grpo/):

    manifest.json             {"method", "steps", "weights"}: the commit record; "weights" is the model folder
                              relative to this folder ("step-000006/model"), or "base" for vanilla
    step-000006/model/        plain save_pretrained folder (weights + tokenizer) after step 6
    step-000006/trainer_state.pt
                              step, AdamW state, metric and validation histories, fingerprint, method state, the
                              run's training time so far (`elapsed_s`, which a resumed run counts on from), and
                              the size of every model file (the completion check)
    step-000005/              the previous checkpoint, kept while training as a fallback (dropped once the run ends)

A finished run (`finish`) keeps only its last step folder, without the AdamW state (twice the weights' size: 5 GB of
a 7.5 GB checkpoint for the 0.5B model), which only resuming needs, and without its timings and `elapsed_s`, which
differ between two runs that compute the same weights.

A save writes step N into a fresh `.tmp-*` folder, fsyncs it, renames it to `step-00000N/` and only then commits by
atomically replacing manifest.json; older folders are deleted after the commit. A kill at any point therefore
leaves the manifest naming a complete folder whose weights and trainer state belong to the same step. Loading reads
the manifest and, if it is missing, unreadable or names an incomplete folder, falls back to the newest complete
step folder.

A run saves its steps into a work folder (`work_dir`), not into the checkpoint folder, and `publish` moves its last
step there only when the run ends. The checkpoint folder is a DVC output, which `dvc exp run` restores from the cache
before it runs a stage, and a queued experiment runs in a fresh copy of the repository: a killed run's steps kept
there would be lost to the next try. The work folder is beside the checkpoint folder, in the repository DVC was
started in, under `.resume/`, and named after the run's fingerprint, so only a run of the same config, code and
inputs finds it (`resume_point`). Only an interrupted run resumes: a finished run's checkpoint folder is never read
back, so a forced re-run (`dvc repro -f`, `dvc exp run -f`) or a larger step budget trains from step 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch
from safetensors import SafetensorError

from lopd.core import provenance, registry
from lopd.core.config import Config, resolve_path

if TYPE_CHECKING:
    from lopd.core.methods import Method

MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.pt"
MODEL = "model"
TMP_PREFIX = ".tmp-"
RESUME = ".resume"
"""The folder, beside a checkpoint folder, of its runs' work folders (`work_dir`)."""
STAGE_MODULE = "pipelines.train"
"""The CLI every training stage runs (`train@<method>`, `train_agentic@<method>`, `train_lopd`); the stage passes
its full module list (with its domain's task module) to `train`, whose import closure is the checkpoint's code."""
LEGACY = ("model", "model.tmp", TRAINER_STATE)
"""The layout before step folders: removed by the first save in the new layout."""
_STEP_DIR = re.compile(r"step-(\d+)")
_BUDGET_KEYS = ("steps", "save_every", "activation_checkpointing")
"""Config keys that may change without invalidating a checkpoint: step budgets (an interrupted run may be extended),
how often it saves, and activation checkpointing (same gradients). Not `train.sharding`: checkpoints of both modes
share one format, but resuming across modes is untested, so a changed mode starts fresh."""


class UnwritableOutput(Exception):
    """A folder an output cannot be written to (read-only, full, over the file-size limit, or not a folder)."""


@dataclass
class Checkpoint:
    """A complete step folder and its trainer state."""

    dir: Path
    state: dict[str, Any]

    @property
    def model_dir(self) -> Path:
        return self.dir / MODEL

    @property
    def weights(self) -> str:
        """The model folder as the manifest names it (relative to the checkpoint folder)."""
        return f"{self.dir.name}/{MODEL}"

    @property
    def step(self) -> int:
        return self.state["step"]


def _crash_point(name: str) -> None:
    """Test hook marking the points between the steps of a save; tests make it raise to simulate a kill there."""


# --- fingerprint ---------------------------------------------------------------------------------------------------

def inputs(cfg: Config, method: Method, base_dir: str | Path) -> list[Path]:
    """The files a training run reads besides code and config: the base model, the training data file if one is
    configured (the built-in data are source files), and the method's upstream outputs (bank, pool, composer)."""
    data = [cfg.data.taco_path, cfg.agentic.envscaler_envs, cfg.agentic.envscaler_tasks]
    return [Path(base_dir), *(resolve_path(p) for p in data if p), *method.inputs()]


def fingerprint(cfg: Config, method: Method, base_dir: str | Path,
                stage_modules: Sequence[str] = (STAGE_MODULE,)) -> dict[str, str]:
    """What a checkpoint must match to be resumed: {"config": ..., "code": ...}.

    "config" hashes the config minus `_BUDGET_KEYS` and tracking; "code" hashes the training code (the import
    closure of the stage's modules and of the method's module) and the input files (`inputs`). Hashing the base model
    reads it once per run: ~0.5 GB for SmolLM2-135M in float32 (well under a second), more for larger models.
    """
    d = cfg.to_dict()
    for name in ("train", "agentic", *registry.METHODS):
        if isinstance(d.get(name), dict):
            d[name] = {k: v for k, v in d[name].items() if k not in _BUDGET_KEYS}
    d.pop("tracking")
    code = provenance.source_files([*stage_modules, type(method).__module__])
    return {"config": hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16],
            "code": hashlib.sha256((provenance.digest(code) + provenance.digest(
                p for p in inputs(cfg, method, base_dir) if p.exists())).encode()).hexdigest()[:16]}


def stale_reason(checkpoint: Checkpoint, expected: dict[str, str], steps: int) -> str | None:
    """Why `checkpoint` must not be resumed by a run with fingerprint `expected` and budget `steps`, or None."""
    found = checkpoint.state.get("fingerprint")
    if not isinstance(found, dict) or found.get("config") != expected["config"]:
        return "the checkpoint is from a different configuration"
    if found.get("code") != expected["code"]:
        return "code or inputs changed since the checkpoint"
    if checkpoint.step > steps:
        return f"the checkpoint is from a longer run ({checkpoint.step} > {steps} steps)"
    if checkpoint.step < steps and checkpoint.state.get("optimizer") is None:
        return f"the checkpoint ends a finished {checkpoint.step}-step run (no optimizer state kept to extend it)"
    return None


def key(fingerprint: dict[str, str]) -> str:
    return f"{fingerprint['config']}-{fingerprint['code']}"


def work_dir(out_dir: str | Path, fingerprint: dict[str, str]) -> Path:
    """Where a run with `fingerprint` that publishes into `out_dir` saves its steps until it ends (see the module
    docstring): `<parent>/.resume/<name>/<key>`. In a queued DVC experiment, which runs in a copy of the repository,
    `<parent>` is the same folder in the repository DVC was started in (DVC sets DVC_ROOT to it), so the next try of
    the experiment, in a new copy, finds the steps."""
    out_dir = Path(out_dir).resolve()
    parent = out_dir.parent
    copy = next((d for d in out_dir.parents if (d / ".dvc").is_dir()), None)  # the repository the stage runs in
    if (root := os.environ.get("DVC_ROOT")) and copy:
        parent = Path(root).resolve() / parent.relative_to(copy)
    return parent / RESUME / out_dir.name / key(fingerprint)


def resume_point(out_dir: str | Path, fingerprint: dict[str, str], steps: int) -> Checkpoint | None:
    """The checkpoint a run with `fingerprint` and budget `steps` continues from: the last step an interrupted run of
    the same fingerprint saved in its work folder, or, where a kill cut that run's `publish` short (its work folder's
    manifest names a step folder already moved into `out_dir`), that step. None otherwise (saying why in one line
    when there is a checkpoint it cannot use): a finished run's checkpoint in `out_dir` is never resumed."""
    work, out_dir = work_dir(out_dir, fingerprint), Path(out_dir)
    moved = _committed(work)[0]
    if moved and not (work / moved).exists():
        folder, found = out_dir, _complete(out_dir / moved)
        if found is None:
            print(f"{work}: its last step was being published into {out_dir}, which no longer holds it; "
                  "starting fresh")
    else:
        folder, found = work, load(work)
    if found is None:
        return None
    if (reason := stale_reason(found, fingerprint, steps)) is None:
        return found
    print(f"{folder}: {reason}; starting fresh")
    return None


# --- saving --------------------------------------------------------------------------------------------------------

def _fsync(path: Path) -> None:
    """Flush a file's or a folder's entry to disk (a rename is durable only once its folder is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def step_name(step: int) -> str:
    return f"step-{step:06d}"


def save(out_dir: str | Path, model, tokenizer, optimizer, step: int, history: list[dict], validation: list[dict],
         fingerprint: dict[str, str], method: Method, state_dict: dict[str, torch.Tensor] | None = None,
         optimizer_state: dict[str, Any] | None = None, adapter: dict[str, torch.Tensor] | None = None,
         elapsed_s: float = 0.0) -> Path:
    """Save step `step` crash-safely (see the module docstring) and return its folder. `state_dict` and
    `optimizer_state`: the model's full weights and the optimizer's full state (`optimizer.state_dict()`'s layout)
    when their own are shards (the training loop gathers them) or merged (a LoRA student), else the model's and the
    optimizer's. `adapter`: a LoRA student's adapter, which a resume loads onto the base model. `elapsed_s`: the
    run's training time so far, the sessions before a resume included.

    No try/finally past the writes: a failure at any point after them must leave exactly what a kill there would.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(out_dir, "save")
    tmp.mkdir()
    try:
        _crash_point("save_started")
        model.save_pretrained(tmp / MODEL, state_dict=state_dict)
        tokenizer.save_pretrained(tmp / MODEL)
        _crash_point("model_written")
        files = {p.relative_to(tmp).as_posix(): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        optimizer_state = optimizer.state_dict() if optimizer_state is None else optimizer_state
        torch.save({"step": step, "optimizer": optimizer_state, "history": history, "validation": validation,
                    "fingerprint": fingerprint, "elapsed_s": elapsed_s,
                    "method": method.state_dict(), "files": files, **({"adapter": adapter} if adapter else {})},
                   tmp / TRAINER_STATE)
    except (OSError, SafetensorError, RuntimeError) as err:  # a full disk or a file-size limit, as each writer says it
        shutil.rmtree(tmp, ignore_errors=True)  # (a kill, which raises nothing, leaves it to the next save's prune)
        raise UnwritableOutput(f"{out_dir}: cannot save step {step} ({type(err).__name__}: "
                               f"{str(err).splitlines()[0]}); the last saved step is kept") from None
    _crash_point("state_written")
    for path in [*tmp.rglob("*"), tmp]:
        _fsync(path)
    final = out_dir / step_name(step)
    if final.exists():  # from a save killed before its commit, or from a stale run this fresh one replaces
        final.rename(_tmp_path(out_dir, final.name))
    tmp.rename(final)
    _fsync(out_dir)
    _crash_point("renamed")
    write_manifest(out_dir, method.name, step, weights=f"{final.name}/{MODEL}")
    _crash_point("committed")
    prune(out_dir, keep=2)
    return final


def write_manifest(out_dir: str | Path, method: str, steps: int, weights: str) -> None:
    """Atomically replace the manifest: the commit point of a save."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"{TMP_PREFIX}{MANIFEST}"
    with tmp.open("w") as f:
        f.write(json.dumps({"method": method, "steps": steps, "weights": weights}, indent=2))
        f.flush()
        os.fsync(f.fileno())
    _crash_point("manifest_written")
    os.replace(tmp, out_dir / MANIFEST)
    _fsync(out_dir)


def finish(out_dir: str | Path, timings: Sequence[str] = ()) -> None:
    """End a run: keep only the committed step folder and drop its AdamW state (see the module docstring), its
    training time and the `timings` keys of its histories, so two runs that compute the same weights write the same
    bytes (DVC then has no reason to re-run what reads them). The trainer state is replaced atomically, so a kill here
    leaves it with or without the optimizer, never broken."""
    out_dir = Path(out_dir)
    prune(out_dir, keep=1)
    committed = _committed(out_dir)[0]
    if committed is None:  # vanilla's manifest
        return
    path = out_dir / committed / TRAINER_STATE
    # Memory-mapped: the live run still holds its model and optimizer, and reading the 5 GB of AdamW moments only to
    # drop them had the kernel kill SDPO's and SDFT's runs here (24 GB). Unread pages never enter memory.
    state = torch.load(path, weights_only=True, mmap=True)
    # keys interned: pickle writes a string object once and then refers to it, so rows read back from a resumed
    # checkpoint (each with its own key strings) would otherwise pickle longer than the same rows never saved
    histories = {name: [{sys.intern(k): v for k, v in row.items() if k not in timings} for row in state[name]]
                 for name in ("history", "validation") if name in state}
    if state.get("optimizer") is None and "elapsed_s" not in state and all(
            histories[name] == state[name] for name in histories):
        return
    tmp = _tmp_path(out_dir, TRAINER_STATE)
    torch.save({**{k: v for k, v in state.items() if k != "elapsed_s"}, "optimizer": None, **histories}, tmp)
    _fsync(tmp)
    _crash_point("finishing")
    os.replace(tmp, path)
    _fsync(path.parent)


def publish(work: str | Path, out_dir: str | Path) -> None:
    """Move a finished run's committed step folder from its work folder into `out_dir`, in place of what was there;
    the caller then `discard`s the work folder. The manifest's replacement commits, as in `save`: a kill before the
    move leaves the work folder whole (the next run publishes it again), one after it leaves the step folder in
    `out_dir`, where the next run finds it by the work folder's manifest (`resume_point`) and commits it."""
    work, out_dir = Path(work), Path(out_dir)
    manifest, committed = _read_manifest(work), _committed(work)[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / committed
    if final.exists():  # the previous run's folder of the same step, or this one's from a publish killed midway
        final.rename(_tmp_path(out_dir, final.name))
    shutil.move(work / committed, final)  # a rename: the work folder is on the same file system
    _fsync(out_dir)
    _crash_point("published")
    write_manifest(out_dir, manifest["method"], manifest["steps"], weights=manifest["weights"])
    prune(out_dir, keep=1)


def discard(work: str | Path) -> None:
    """Delete a run's work folder, and `.resume/<name>` and `.resume` above it once nothing else is in them."""
    work = Path(work)
    shutil.rmtree(work, ignore_errors=True)
    for empty in (work.parent, work.parent.parent):
        try:
            empty.rmdir()
        except OSError:  # not empty (another run's work folder), or already gone
            break


def _tmp_path(out_dir: Path, label: str) -> Path:
    """A fresh name for a folder being written or deleted; `prune` removes whatever such names are left."""
    return out_dir / f"{TMP_PREFIX}{label}-{os.urandom(4).hex()}"


def prune(out_dir: str | Path, keep: int) -> None:
    """Delete all but the committed step folder and the `keep - 1` step folders before it, stale temporary
    folders and the legacy layout. Folders are renamed to `.tmp-*` first, so a kill mid-delete never leaves a
    half-deleted `step-*` folder."""
    out_dir = Path(out_dir)
    committed = _committed(out_dir)[0]
    if committed is None:  # nothing committed (or an unreadable manifest): keep everything for `load` to sort out
        return
    current = _step_of(out_dir / committed)
    older = [d for d in reversed(_step_dirs(out_dir)) if _step_of(d) < current]
    doomed = [d for d in _step_dirs(out_dir) if _step_of(d) > current] + older[keep - 1:]
    doomed += [out_dir / name for name in LEGACY if (out_dir / name).exists()]
    for path in doomed:
        path.rename(_tmp_path(out_dir, path.name))
    _crash_point("pruning")
    for path in out_dir.glob(f"{TMP_PREFIX}*"):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


# --- loading -------------------------------------------------------------------------------------------------------

def _step_of(step_dir: Path) -> int:
    return int(_STEP_DIR.fullmatch(step_dir.name)[1])


def _step_dirs(out_dir: Path) -> list[Path]:
    """The step folders in `out_dir`, oldest first."""
    if not out_dir.is_dir():
        return []
    return sorted((d for d in out_dir.iterdir() if d.is_dir() and _STEP_DIR.fullmatch(d.name)), key=_step_of)


def _read_manifest(out_dir: Path) -> dict[str, Any]:
    """The manifest; ValueError/OSError when it is missing or unreadable."""
    manifest = json.loads((out_dir / MANIFEST).read_text())
    if not isinstance(manifest, dict) or not isinstance(manifest.get("weights"), str):
        raise ValueError("not a checkpoint manifest")
    return manifest


def _committed(out_dir: Path) -> tuple[str | None, str | None]:
    """(the step folder the manifest names, None), or (None, why there is none); (None, None) for vanilla."""
    if not (out_dir / MANIFEST).exists():
        return None, f"no {MANIFEST}"
    try:
        weights = _read_manifest(out_dir)["weights"]
    except (OSError, ValueError):
        return None, f"{MANIFEST} is unreadable"
    parts = Path(weights).parts
    if len(parts) == 2 and parts[1] == MODEL and _STEP_DIR.fullmatch(parts[0]):
        return parts[0], None
    return None, None if weights == "base" else f"{MANIFEST} names no step folder (a checkpoint from before them)"


def _complete(step_dir: Path) -> Checkpoint | None:
    """The checkpoint in `step_dir` if its trainer state loads and every model file has its recorded size."""
    try:
        state = torch.load(step_dir / TRAINER_STATE, weights_only=True)  # tensors and plain data only: no code runs
    except Exception:  # missing, empty or truncated: torch raises EOFError, RuntimeError, UnpicklingError, ...
        return None
    files = state.get("files") if isinstance(state, dict) else None
    if not files or any(not (step_dir / f).is_file() or (step_dir / f).stat().st_size != n for f, n in files.items()):
        return None
    return Checkpoint(step_dir, state)


def load(out_dir: str | Path) -> Checkpoint | None:
    """The committed checkpoint in `out_dir`; if the manifest is missing, unreadable or names an incomplete
    folder, the newest complete step folder (saying so in one line); None if there is none."""
    out_dir = Path(out_dir)
    committed, problem = _committed(out_dir)
    if committed:
        if checkpoint := _complete(out_dir / committed):
            return checkpoint
        problem = f"{MANIFEST} names {committed}, which is incomplete"
    candidates = [d for d in reversed(_step_dirs(out_dir)) if d.name != committed]
    if problem is None or not (candidates or (out_dir / MANIFEST).exists()):
        return None  # vanilla's manifest, or a fresh folder
    for step_dir in candidates:
        if checkpoint := _complete(step_dir):
            print(f"{out_dir}: {problem}; falling back to {step_dir.name}")
            return checkpoint
    print(f"{out_dir}: {problem}; no complete checkpoint to fall back to, starting fresh")
    return None


def policy_dir(checkpoint_dir: str | Path, base_dir: str | Path) -> Path:
    """The model folder a checkpoint stands for: its own weights, or the base model (vanilla)."""
    checkpoint_dir = Path(checkpoint_dir)
    if not (checkpoint_dir / MANIFEST).exists():
        raise FileNotFoundError(f"{checkpoint_dir}: no checkpoint here (run its train stage first)")
    try:
        weights = _read_manifest(checkpoint_dir)["weights"]
    except (OSError, ValueError) as err:  # the train stage repairs it (`load` falls back past it)
        raise ValueError(f"{checkpoint_dir / MANIFEST}: unreadable ({err})") from err
    return Path(base_dir) if weights == "base" else checkpoint_dir / weights
