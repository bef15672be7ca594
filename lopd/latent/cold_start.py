"""Composer cold start (paper Appendix A.2): next-token NLL of successful bank trajectories given their
latent context, backbone frozen, so the composer starts out producing informative context.

For every bank entry the teacher reads its task with the latent context of `n_ret` retrieved entries
(never its own task unless self-retrieval is on) and is scored on the entry's own sampled tokens, environment
output masked as in the student's loss. The tasks of `cold_start.held_out_tasks` are held out: their entries measure
the composer's privilege (lopd/latent/privilege.py). LOPD composes the cold-start latents c_phi0 of its anchor term
from the saved phi_0, for the tasks it trains on (lopd/latent/method.py).

Every step is checkpointed to `progress.pt` in the output folder (written to a temporary file, then renamed), so a
killed run resumes where it stopped and ends exactly as an uninterrupted one; the file is removed once phi_0 is
written. A checkpoint from another configuration, other code or other inputs is not resumed.

Under several processes (`launch.processes`) each process scores its share of every batch, and the shares' gradients
are summed (each share's mean weighted by its size), so a step is the one-process step up to rounding (under bf16
autocast the backward rounds each share at its own loss scale); the anchor latents are split the same way. Process 0
writes the checkpoints and the outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from pathlib import Path
from typing import Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object

from lopd.core import provenance
from lopd.core.config import Config
from lopd.core.device import deterministic_kernels, device, mixed_precision
from lopd.core.models import load_model, load_tokenizer
from lopd.core.progress import progress, write
from lopd.core.rollout import Task
from lopd.core.tracking import Tracker
from lopd.latent.bank import BankEntry
from lopd.latent.composer import Composer, grad_norms_by_part
from lopd.latent.privilege import (
    HeldOut,
    held_out_latent_geometry,
    held_out_latent_nll,
    held_out_task_ids,
    latent_nlls,
    reference_nlls,
    share_closed,
    share_note,
)
from lopd.latent.retrieval import load_bank

COMPOSER_FILE, PROGRESS_FILE = "composer.pt", "progress.pt"
STAGE_MODULE = "pipelines.cold_start"


def build_composer(cfg: Config, base_dir: str | Path) -> tuple[Composer, object]:
    """A fresh composer around a frozen copy of the base model (seeded QFormer init) and its tokenizer."""
    torch.manual_seed(cfg.seed)
    tokenizer = load_tokenizer(base_dir)
    backbone = load_model(base_dir)
    return Composer(backbone, tokenizer, cfg.composer, cfg.latent_tokens).to(device()), tokenizer


def cold_start(cfg: Config, base_dir: str | Path, bank_dir: str | Path, tasks: Sequence[Task], out_dir: str | Path,
               framing: tuple[str, str], tracker: Tracker | None = None) -> dict:
    """Train the composer from its seeded init on the bank (its held-out tasks aside), measure its privilege on them,
    save phi_0; returns metrics."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bank, retriever = load_bank(bank_dir, cfg.bank.self_retrieval)  # the inputs first, then the models
    composer, tokenizer = build_composer(cfg, base_dir)
    by_id = {t.task_id: t for t in tasks}
    missing = sorted({e.task_id for e in bank} - set(by_id))
    if missing:
        raise ValueError(f"bank entries for tasks outside the training split: {missing[:3]}")
    held_out_ids = held_out_task_ids(bank, cfg.cold_start.held_out_tasks, cfg.seed)
    held = HeldOut.of(bank, held_out_ids, by_id, retriever, load_bank(bank_dir, self_retrieval=True)[1], cfg.n_ret)
    examples = [(e, retriever.retrieve(e.task_id, cfg.n_ret)) for e in bank if e.task_id not in held_out_ids]
    accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                              mixed_precision=mixed_precision(cfg.train.mixed_precision))
    params = [p for p in composer.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.cold_start.lr)
    size = cfg.cold_start.batch_size

    def nlls(batch: list[tuple[BankEntry, list[int]]]) -> torch.Tensor:
        return latent_nlls(composer, tokenizer, [e for e, _ in batch], [r for _, r in batch], bank,
                           [by_id[e.task_id] for e, _ in batch], framing, accelerator)

    rank, world = accelerator.process_index, accelerator.num_processes
    log = write if accelerator.is_main_process else lambda line: None

    def mean(items: list, nlls_of) -> float | None:
        """The mean of `nlls_of` over `items`, in batches, each process its share (all of it in one process)."""
        if not items:
            return None
        share = items[rank::world]
        with torch.no_grad():
            total = sum(nlls_of(share[i:i + size]).sum().item() for i in range(0, len(share), size))
        return summed(total, world) / len(items)

    def privilege_point(step: int) -> dict:
        latent = held_out_latent_nll(composer, tokenizer, held, bank, framing, accelerator, mean)
        point = {"step": step, "nll_latent": latent,
                 "share_closed": share_closed(reference["nll_none"], latent, reference["nll_text"]),
                 **held_out_latent_geometry(composer, held, bank, accelerator)}
        log(f"[cold_start] held-out NLL at step {step}: latent {latent:.4f} (none {reference['nll_none']:.4f}, "
            f"text {reference['nll_text']:.4f}): {share_note(point['share_closed'])}")
        return point

    n_measured = len(examples) if cfg.cold_start.eval_examples is None else cfg.cold_start.eval_examples
    measured = random.Random(cfg.seed).sample(examples, min(n_measured, len(examples)))

    fingerprint = _fingerprint(cfg, base_dir, bank_dir)
    steps = cfg.cold_start.steps if examples else 0
    resumed = _load_progress(out_dir / PROGRESS_FILE, fingerprint, steps)
    if tracker:
        tracker.begin(fingerprint, len(resumed["history"]) if resumed else 0)
    start = time.perf_counter() - (resumed["elapsed_s"] if resumed else 0.0)
    order = random.Random(cfg.seed)
    every = cfg.cold_start.privilege_every
    if resumed:
        composer.load_trainable_state(resumed["trainable"])
        optimizer.load_state_dict(resumed["optimizer"])
        order.setstate(resumed["order"])
        torch.set_rng_state(resumed["torch_rng"])
        history, queue, nll_before = resumed["history"], resumed["queue"], resumed["nll_before"]
        reference, privilege = resumed["reference"], resumed["privilege"]
        log(f"[cold_start] resuming after step {len(history)}/{steps}")
    else:
        history, queue, nll_before = [], [], mean(measured, nlls)
        reference = reference_nlls(composer, tokenizer, held, bank, framing, accelerator, mean) if held.entries else {}
        privilege = [privilege_point(0)] if held.entries else []
    for step in progress(range(len(history), steps), desc="cold start", unit="step", initial=len(history),
                         total=steps):
        picked = []
        while len(picked) < min(size, len(examples)):
            queue = queue or order.sample(range(len(examples)), len(examples))
            picked.append(examples[queue.pop()])
        optimizer.zero_grad(set_to_none=True)
        mine = picked[rank::world]  # the batch's mean NLL is the sum of the processes' share-weighted means
        with deterministic_kernels():  # a resumed cold start equals an uninterrupted one on a GPU too
            loss = nlls(mine).mean() * (len(mine) / len(picked)) if mine else torch.zeros((), device=device())
            grad_norm, part_norms = 0.0, {}
            # false only when nothing in the batch retrieved anything (a one-task bank): then no process steps
            if any_process(loss.requires_grad, world):
                if loss.requires_grad:
                    accelerator.backward(loss)
                if world > 1:  # the composer is not DDP-wrapped: sum the shares' gradients
                    for p in params:
                        p.grad = accelerator.reduce(torch.zeros_like(p) if p.grad is None else p.grad, reduction="sum")
                part_norms = grad_norms_by_part(composer.own_parameters())  # before clipping, as grad_norm
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.cold_start.grad_clip))
                optimizer.step()
        history.append({"step": step + 1, "nll": summed(loss.item(), world), "grad_norm": grad_norm, **part_norms})
        if held.entries and ((step + 1) % every == 0 or step + 1 == steps):
            privilege.append(privilege_point(step + 1))
        if tracker:
            measured_now = privilege[-1] if privilege and privilege[-1]["step"] == step + 1 else {}
            tracker.log_metrics({**history[-1], **{f"held_out_{k}": v for k, v in measured_now.items()
                                                   if k != "step" and v is not None}}, step=step + 1)
        if accelerator.is_main_process:
            _save_progress(out_dir / PROGRESS_FILE, {
                "fingerprint": fingerprint, "trainable": composer.trainable_state(),
                "optimizer": optimizer.state_dict(), "order": order.getstate(), "torch_rng": torch.get_rng_state(),
                "history": history, "queue": queue, "nll_before": nll_before, "reference": reference,
                "privilege": privilege, "elapsed_s": time.perf_counter() - start})
        log(f"[cold_start] step {step + 1}/{steps} nll {history[-1]['nll']:.4f} "
            f"({time.perf_counter() - start:.0f} s since the start)")
    nll_after = mean(measured, nlls)

    if accelerator.is_main_process:
        composer.save(out_dir / COMPOSER_FILE)
        (out_dir / PROGRESS_FILE).unlink(missing_ok=True)
    accelerator.wait_for_everyone()  # every process returns once the outputs are there
    summary = {"n_examples": len(examples), "steps": steps, "nll_examples": len(measured), "nll_before": nll_before,
               "nll_after": nll_after, "latent_tokens": cfg.latent_tokens, "n_ret": cfg.n_ret,
               "wall_s": round(time.perf_counter() - start, 1)}
    if not examples:
        summary["note"] = "n/a: the experience bank is empty, the composer keeps its initialisation"
    held_out = ({**reference, "nll_latent": privilege[-1]["nll_latent"], "share_closed": privilege[-1]["share_closed"],
                 "tasks": sorted(held_out_ids)} if held.entries else
                {"n_trajectories": 0, "note": f"n/a: the bank's {len({e.task_id for e in bank})} tasks are too few to "
                                              f"hold {cfg.cold_start.held_out_tasks} out (cold_start.held_out_tasks)"})
    return {"summary": summary, "history": history, "held_out": held_out, "privilege_history": privilege}


def _fingerprint(cfg: Config, base_dir: str | Path, bank_dir: str | Path) -> str:
    """What a progress checkpoint must match to be resumed: the config (less the step budget, which a run may
    extend, and activation checkpointing, which does not change results), the stage's code, the model and bank."""
    d = cfg.to_dict()
    d["cold_start"] = {k: v for k, v in d["cold_start"].items() if k != "steps"}
    d["composer"] = {k: v for k, v in d["composer"].items() if k != "activation_checkpointing"}
    d.pop("tracking")
    files = [*provenance.source_files([STAGE_MODULE]), Path(base_dir), Path(bank_dir)]
    return hashlib.sha256((json.dumps(d, sort_keys=True) + provenance.digest(files)).encode()).hexdigest()[:16]


def _save_progress(path: Path, state: dict) -> None:
    """Write the progress checkpoint crash-safely: a kill leaves either the previous file or this one."""
    tmp = path.with_name(f".tmp-{path.name}")
    with tmp.open("wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _load_progress(path: Path, fingerprint: str, steps: int) -> dict | None:
    """The progress checkpoint to resume, or None (with one line saying why when there is one it cannot use)."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=True)  # tensors and plain data only: no code runs
    except Exception as err:  # truncated or foreign: torch raises EOFError, RuntimeError, UnpicklingError, ...
        reason = f"unreadable ({type(err).__name__})"
    else:
        reason = ("it is from another configuration, other code or other inputs"
                  if not isinstance(state, dict) or state.get("fingerprint") != fingerprint else
                  f"it is from a longer run ({len(state['history'])} > {steps} steps)"
                  if len(state["history"]) > steps else None)
    if reason is None:
        return state
    write(f"[cold_start] not resuming {path}: {reason}; starting fresh")
    return None


def summed(value: float, world: int) -> float:
    """`value` summed over the processes (collective; itself in one process)."""
    return sum(gather_object([value])) if world > 1 else value


def any_process(flag: bool, world: int) -> bool:
    """Whether `flag` holds on any process (collective; itself in one process)."""
    return any(gather_object([flag])) if world > 1 else flag
