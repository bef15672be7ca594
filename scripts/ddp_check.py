"""Multi-process agreement check: run under torchrun with N processes.

Each process trains GRPO, SDPO (EMA teacher), Skill-SD (skills) and LOPD (composer, β, grown bank), and with DDP
SDPO and LOPD with LoRA students (`sdpo_lora`, `lopd_lora`), for 2 steps on
the given model (with DDP also 2 steps of the composer's cold start, each process scoring its share of a batch, and
the experience bank's rollouts, each process sampling its share of the tasks), on its own device (`lopd.core.device`:
the CPU with gloo, or one GPU per process with NCCL), then writes to WORK_DIR/rank<r>.pt what must agree across
processes: the student's full weights, the method's state, the history, plus its own rewards, the device its student
lived on and whether every loss was finite.
SHARDING (`train.sharding`, default ddp) fsdp2 shards the students; that run also interrupts a 2-step LOPD run
right after step 1's checkpoint and resumes it ("lopd_resumed": must equal the uninterrupted "lopd") and skips the
uneven-split check.
PROFILE (`--profile`, default smoke) cpu trains with the cpu profile's budgets instead (384 new tokens, 16 rollouts a
step, micro-batches of 2, loss chunks of 512) in bf16 with the HF sampler: a real-size model's cost on a GPU.
tests/test_multiprocess.py runs it with 2 CPU processes on the tiny model; scripts/gpu_check.py on every GPU.

Usage: python -m torch.distributed.run --nproc_per_node N scripts/ddp_check.py MODEL_DIR WORK_DIR [ddp|fsdp2]
[--embedder NAME] [--profile smoke|cpu] (WORK_DIR/bank and WORK_DIR/composer must exist: `prepare_inputs`, with the same
embedder, by default `bank.embedder`'s; MLflow store: LOPD_MLFLOW_URI.)
"""

import argparse
import math
from pathlib import Path

import torch
from accelerate import PartialState

from baselines.grpo import GRPO
from baselines.sdpo import SDPO
from baselines.skill_sd import SkillSD
from evaluation.coding.code_blocks import extract_code
from lopd.core import loop
from lopd.core.config import resolve
from lopd.core.device import device
from lopd.core.distributed import ProcessSplitError, full_state_dict
from lopd.core.domain import Domain
from lopd.core.loop import train
from lopd.core.rollout import Task, single_turn
from lopd.core.tracking import Tracker
from lopd.latent.bank import BankEntry, sample_rollouts, task_text, write_bank
from lopd.latent.cold_start import COMPOSER_FILE, cold_start
from lopd.latent.composer import FRAMINGS
from lopd.latent.method import LOPD
from lopd.latent.retrieval import (
    BANK_FILE,
    DOCUMENTS_FILE,
    QUERIES_FILE,
    TextEmbedder,
    document_text,
    query_text,
    save_vectors,
)

TASKS = [Task(f"t{i}", [{"role": "system", "content": "You are an expert Python programmer."},
                        {"role": "user", "content": f"Print the number {i} times two."}]) for i in range(6)]
OVERRIDES = {"profile": "smoke", "train": {"steps": 2, "save_every": 1},
             "bank": {"grow_during_training": True, "success_threshold": 0.5}}
PROFILES = {
    "smoke": OVERRIDES,
    # the cpu profile's budgets, 2 steps of every method, in bf16 with the HF sampler (no vLLM needed)
    "cpu": {**OVERRIDES, "profile": "cpu", "train": {**OVERRIDES["train"], "mixed_precision": "bf16"},
            "sampling": {"backend": "hf"}, **{m: {"steps": 2} for m in ("sdpo", "skill_sd", "lopd")}},
}


def score(tasks, completions):
    """A reward that varies between rollouts (so GRPO has a signal and the bank grows)."""
    return [float(len(c) % 2) for c in completions]


def overrides(embedder: str | None = None, profile: str = "smoke") -> dict:
    """The profile's overrides (PROFILES), with `bank.embedder` set to `embedder` when one is named."""
    base = PROFILES[profile]
    return base if embedder is None else {**base, "bank": {**base["bank"], "embedder": embedder}}


def cold_start_config(base: dict):
    """2 cold-start steps on batches of the whole 3-entry bank (none held out): 2 processes score 2 and 1 entries."""
    return resolve({**base, "cold_start": {"steps": 2, "batch_size": 3, "held_out_tasks": 0}})


def prepare_inputs(model_dir: str | Path, work: Path, embedder: str | None = None, profile: str = "smoke") -> None:
    """A three-entry bank (embedded with `embedder`, by default the configured one) and a cold-start composer
    under `work`."""
    cfg = resolve({**overrides(embedder, profile), "cold_start": {"steps": 0}})
    text_embedder = TextEmbedder(cfg.bank.embedder)
    entries = [BankEntry(t.task_id, task_text(t.messages), f"print({i} * 2)", "ok", 1.0, [[[], [10 + i, 11, 12]]])
               for i, t in enumerate(TASKS[:3])]
    write_bank(work / "bank" / BANK_FILE, entries, {})
    save_vectors(work / "bank" / DOCUMENTS_FILE, [e.task_id for e in entries],
                 text_embedder.embed([document_text(e) for e in entries]))
    save_vectors(work / "bank" / QUERIES_FILE, [t.task_id for t in TASKS],
                 text_embedder.embed([query_text(task_text(t.messages), "q") for t in TASKS]))
    cold_start(cfg, model_dir, work / "bank", TASKS, work / "composer", FRAMINGS["code"])


class Interrupted(BaseException):
    """A simulated kill: a BaseException, which nothing in the training loop catches."""


def interrupted_at_step_1(run) -> None:
    """Call `run` with the loop's (collective) save stopping every process once step 1 is saved."""
    real_save = loop.save

    def save_then_stop(*args):
        real_save(*args)
        if args[5] == 1:  # save(accelerator, out_dir, model, tokenizer, optimizer, step, ...)
            raise Interrupted

    loop.save = save_then_stop
    try:
        run()
    except Interrupted:
        pass
    finally:
        loop.save = real_save


def main() -> None:
    parser = argparse.ArgumentParser(description="2 steps of GRPO, SDPO, Skill-SD and LOPD on every process")
    parser.add_argument("model_dir")
    parser.add_argument("work", type=Path)
    parser.add_argument("sharding", nargs="?", default="ddp", choices=["ddp", "fsdp2"])
    parser.add_argument("--embedder", help="bank.embedder (the one prepare_inputs used); default: the profile's")
    parser.add_argument("--profile", default="smoke", choices=sorted(PROFILES), help="the budgets (PROFILES)")
    args = parser.parse_args()
    model_dir, work, sharding = args.model_dir, args.work, args.sharding
    device()  # the process state as training sets it up (on the CPU, accelerate needs cpu=True to go multi-process)
    rank = PartialState().process_index
    base = overrides(args.embedder, args.profile)
    cfg = resolve({**base, "train": {**base["train"], "sharding": sharding}})

    domain = Domain.scratch(work, "code", extract_code)  # the bank and composer prepare_inputs wrote

    def lopd(cfg):
        return LOPD(cfg, domain)

    methods = {"grpo": (cfg, GRPO(cfg, domain)), "sdpo": (cfg, SDPO(cfg, domain)),
               "skill_sd": (cfg, SkillSD(cfg, domain)), "lopd": (cfg, lopd(cfg))}
    if sharding == "ddp":  # LoRA students (`train.lora_rank`): the EMA adapter, and LOPD's encoder on the same base
        lora = resolve({**base, "train": {**base["train"], "lora_rank": 4}})
        methods |= {"sdpo_lora": (lora, SDPO(lora, domain)), "lopd_lora": (lora, lopd(lora))}
    out = {}
    for name, (cfg, method) in methods.items():
        students, local_rewards = [], []
        setup = method.setup

        def capture(ctx, setup=setup, students=students):  # the student module this process trains
            students.append(ctx.student)
            setup(ctx)

        method.setup = capture
        collect = single_turn(score)
        on_gpu = torch.cuda.is_available()
        if on_gpu:  # the peak while this method trains (the other methods' frozen parts stay resident)
            torch.cuda.reset_peak_memory_stats()

        def recording(*args, collect=collect, local_rewards=local_rewards, **kwargs):
            trajectories = collect(*args, **kwargs)
            local_rewards.append([t.reward for t in trajectories])
            return trajectories

        with Tracker(cfg, f"train@{name}") as tracker:
            history = train(cfg, method, TASKS, recording, model_dir, work / "runs" / name, tracker)["history"]
        student = students[0]
        extra = {}
        if name.startswith("sdpo"):
            extra = {k: v.cpu() for k, v in method.teacher_model.state_dict().items()}
        elif name == "skill_sd":
            extra = method.skills.state_dict()
        elif name.startswith("lopd"):
            extra = {"beta": method.beta, "composer": method.composer.trainable_state(),
                     "bank": [e.task_id for e in method.bank], "composer_device": method.composer.device.type}
        out[name] = {"weights": {k: v.detach().cpu().clone() for k, v in full_state_dict(student).items()},
                     "device": next(student.parameters()).device.type, "extra": extra, "history": history,
                     "local_rewards": local_rewards, "finite": all(math.isfinite(h["loss"]) for h in history),
                     "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None}
    if sharding != "ddp":  # resume: a run stopped on every rank right after step 1's checkpoint, then rerun
        interrupted_at_step_1(lambda: train(cfg, lopd(cfg), TASKS, single_turn(score), model_dir,
                                            work / "runs" / "lopd_resumed"))
        students = []
        resumed = lopd(cfg)
        setup = resumed.setup
        resumed.setup = lambda ctx: (students.append(ctx.student), setup(ctx))
        history = train(cfg, resumed, TASKS, single_turn(score), model_dir, work / "runs" / "lopd_resumed")["history"]
        out["lopd_resumed"] = {"weights": {k: v.cpu().clone() for k, v in full_state_dict(students[0]).items()},
                               "history": history, "extra": {"beta": resumed.beta,
                                                             "composer": resumed.composer.trainable_state()}}
        torch.save(out, work / f"rank{rank}.pt")
        return
    cold = cold_start(cold_start_config(base), model_dir, work / "bank", TASKS, work / "cold_start", FRAMINGS["code"])
    out["cold_start"] = {"history": cold["history"], "summary": cold["summary"],
                         "composer": torch.load(work / "cold_start" / COMPOSER_FILE, weights_only=True)}
    out["bank_rollouts"] = [(task_id, t.token_ids) for task_id, _, t in
                            sample_rollouts(cfg, TASKS, single_turn(score), model_dir, tasks_per_batch=2)]
    try:  # 3 tasks per step cannot split over 2 processes
        uneven = resolve({"profile": "smoke", "train": {"steps": 1, "rollouts_per_step": 12}})
        train(uneven, GRPO(uneven, domain), TASKS, single_turn(score), model_dir, work / "runs" / "uneven")
        out["uneven"] = "no error"
    except ProcessSplitError as err:
        out["uneven"] = str(err)
    torch.save(out, work / f"rank{rank}.pt")


def load_ranks(work: Path, n: int) -> list[dict]:
    return [torch.load(work / f"rank{r}.pt", weights_only=True) for r in range(n)]


if __name__ == "__main__":
    main()
