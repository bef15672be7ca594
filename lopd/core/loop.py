"""The one on-policy loop every method shares.

tasks -> batched sampling and scoring (a domain's `Rollouts`: single-turn or multi-turn episodes) -> method loss
-> AdamW step -> weight sync. `train` is `setup`, then `train_step` per step, then `finish` (torchtune's recipe shape).
Training runs under `accelerate` on the accelerator's device (`lopd.core.device`). Under `accelerate launch` or
torchrun each process rolls out its own equal share of the step's tasks; DDP averages the policy's gradients, the loop
averages the method's own (LOPD's composer), reduces the step's metrics over processes before the method's dual and
EMA updates see them, and hands every process all the step's trajectories, so skills and grown banks agree too.

With `train.sharding: fsdp2` and more than one process the loop shards the student itself (`shard`: torch's FSDP2
`fully_shard` per decoder layer, then the root) instead of letting accelerate wrap it in DDP; whatever reads the
student's weights outside its forward gathers the full tensors (`output_weight`, the EMA and live teachers,
`full_state_dict`, `full_optimizer_state`, and `full_parameters`, one tensor at a time, for the rollout engine).

Randomness is a pure function of (seed, step, process), so a resumed run continues exactly as an
uninterrupted one: the resumable state is the weights, the optimizer state and the step counter.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from lopd.core import checkpoint
from lopd.core.adapters import (
    adapter_parameters,
    adapter_state,
    add_student_adapter,
    base_module,
    is_lora,
    load_adapter_state,
)
from lopd.core.config import Config, ConfigError
from lopd.core.device import deterministic_kernels, device, mixed_precision, release_freed_memory
from lopd.core.distributed import (
    check_split,
    full_optimizer_state,
    full_parameters,
    full_state_dict,
    load_full_optimizer_state,
    output_weight,
    reduce_metrics,
    shard,
    synchronise_only,
    unwrap,
)
from lopd.core.losses import chunked_entropy
from lopd.core.methods import Method, MethodContext, PolicyOutputs
from lopd.core.models import check_weights, load_model, load_tokenizer
from lopd.core.progress import progress, write
from lopd.core.rollout import Rollouts, Task, greedy_params, make_backend, sampling_params, step_seed
from lopd.core.sampling import SamplingParams
from lopd.core.tracking import Tracker
from lopd.core.trajectory import BEHAVIOUR_KEYS, Trajectory, collate


class MethodInputError(RuntimeError):
    """A method could not load what it needs beyond the student (its message names the file and the stage)."""


def tasks_for_step(tasks: Sequence[Task], n: int, seed: int, step: int) -> list[Task]:
    """The step's tasks: consecutive slices of a fresh seeded permutation per epoch."""
    picked = []
    for i in range(step * n, (step + 1) * n):
        epoch, pos = divmod(i, len(tasks))
        picked.append(tasks[random.Random(seed * 7_727 + epoch).sample(range(len(tasks)), len(tasks))[pos]])
    return picked


def policy_outputs(model: torch.nn.Module, batch, temperature: float, chunk_size: int,
                   tis_cap: float | None = None) -> PolicyOutputs:
    """Student forward pass: final hidden states at the action positions only (the vocabulary projection
    is the loss's business, so prompt and tool-output positions never reach it), with the sampler's log-probs there
    for the truncated importance-sampling correction (`tis_cap`; None: off)."""
    # Through the (DDP-)wrapped model, whose forward syncs gradients; the per-layer hidden states it returns are the
    # checkpointed layers' saved inputs anyway, so they cost no extra memory.
    out = model(input_ids=batch.input_ids_B_L, attention_mask=batch.attention_mask_B_L,
                output_hidden_states=True, logits_to_keep=1, use_cache=False)
    where_B_T = batch.action_mask_B_T > 0
    return PolicyOutputs(hidden_N_D=out.hidden_states[-1][:, :-1][where_B_T],
                         weight_V_D=output_weight(model),
                         targets_N=batch.target_ids_B_T[where_B_T], where_B_T=where_B_T,
                         temperature=temperature, chunk_size=chunk_size,
                         sampler_logp_N=batch.sampler_logprobs_B_T[where_B_T], tis_cap=tis_cap)


def reward_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """TRL GRPOTrainer's reward statistics over the step's rollouts: `reward_std` is Bessel-corrected like TRL's
    nanstd (0 for a single rollout, where TRL's is NaN, so the metrics stay valid JSON), and
    `frac_reward_zero_std` is the share of task groups whose rewards all agree (a one-rollout group counts)."""
    rewards_R = torch.tensor([t.reward for t in trajectories], dtype=torch.float64, device="cpu")
    groups_R = torch.tensor([t.group for t in trajectories], device="cpu")
    members_G = [rewards_R[groups_R == g] for g in groups_R.unique()]
    std_G = torch.stack([r.std() if r.numel() > 1 else r.new_zeros(()) for r in members_G])
    return {"reward": sum(t.reward for t in trajectories) / len(trajectories),
            "reward_std": rewards_R.std().item() if len(trajectories) > 1 else 0.0,
            "frac_reward_zero_std": torch.isclose(std_G, torch.zeros_like(std_G)).double().mean().item()}


def validate(backend, tokenizer, collect: Rollouts, tasks: Sequence[Task], params: SamplingParams, samples: int,
             seed: int, accelerator: Accelerator) -> dict[str, float]:
    """The policy's reward on the validation tasks (each process plays its share), so a learning curve is not the noise
    of each step's sampled batch: greedy with one sample per task, or `samples` per task at the training temperature,
    a task's score then being their mean reward (its expected reward under the policy). `val_rewards` holds each
    task's score (in the order of the processes' shares), for paired comparisons between validation points;
    `val_success_rate` is the share of samples that pass."""
    rank, world = accelerator.process_index, accelerator.num_processes
    share = list(tasks)[rank::world]
    played = collect(backend, tokenizer, share, params, seed, samples) if share else []
    per_task = [played[i * samples:(i + 1) * samples] for i in range(len(share))]  # grouped by task, in order
    scores = [(sum(t.reward for t in group) / samples, sum(t.reward >= 1.0 for t in group) / samples)
              for group in per_task]
    if world > 1:
        scores = [pair for part in gather_object([scores]) for pair in part]
    n = len(scores)
    return {"val_reward": sum(r for r, _ in scores) / n, "val_success_rate": sum(s for _, s in scores) / n,
            "val_n": n, "val_rewards": [r for r, _ in scores]}


def policy_optimizer(model: torch.nn.Module, method: Method, cfg: Config) -> torch.optim.AdamW:
    """AdamW over the policy (the first group, at the method's lr) and the method's own parameters. On CPU it takes
    torch's fused kernel, which updates each tensor in one pass without temporaries (the multi-tensor `foreach` path
    allocates some the size of all the parameters at once, which the CPU's memory cannot spare; the plain per-tensor
    loop takes 2.2x as long a step on the cpu profile's model: `make bench`)."""
    cpu = device().type == "cpu"
    return torch.optim.AdamW([{"params": trainable(model)}, *method.param_groups()], lr=method.lr(cfg),
                             weight_decay=cfg.train.weight_decay, foreach=not cpu, fused=cpu or None)


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The policy's parameters the optimizer steps: all of them, or a LoRA student's adapter (another adapter on
    the same base, LOPD's encoder, belongs to the method)."""
    return list(adapter_parameters(model).values()) if is_lora(model) else list(model.parameters())


def micro_batches(trajectories: Sequence[Trajectory], size: int) -> list[list[Trajectory]]:
    """The update's micro-batches: sorted by length (similar lengths per micro-batch: less padding), `size` each."""
    ordered = sorted(trajectories, key=lambda t: len(t.token_ids))
    return [ordered[start:start + size] for start in range(0, len(ordered), size)]


def update(model, optimizer, accelerator: Accelerator, method: Method, trajectories: list[Trajectory],
           pad_id: int, cfg: Config) -> dict[str, float]:
    """One optimizer step over the step's trajectories, accumulated over micro-batches."""
    method.prepare(trajectories)
    optimizer.zero_grad(set_to_none=True)
    totals: dict[str, float] = {"loss": 0.0}
    gap_sum, entropy_sum, action_tokens = 0.0, 0.0, 0.0
    micro = cfg.train.micro_batch_size
    # Skipping zero-gradient trajectories is exact: the loss stays normalised by the whole step's count.
    # Only in a single process: under DDP every rank must run the same number of backward passes.
    single = accelerator.num_processes == 1
    active = [t for t in trajectories if (method.contributes(t) and t.num_action_tokens) or not single]
    for chunk in micro_batches(active, micro):
        batch = collate(chunk, pad_id, device())
        student = policy_outputs(model, batch, cfg.sampling.temperature, cfg.train.loss_chunk_size,
                                 cfg.train.tis_cap)
        loss, metrics = method.loss(student, batch, chunk)
        weight = len(chunk) / len(trajectories)
        accelerator.backward(loss * weight)
        release_freed_memory()
        for k, v in {"loss": loss.item(), **metrics}.items():
            totals[k] = totals.get(k, 0.0) + v * weight
        mask = batch.action_mask_B_T
        with torch.no_grad():
            gap_sum += ((student.logp_B_T() - batch.sampler_logprobs_B_T).abs() * mask).sum().item()
            entropy_sum += chunked_entropy(student.hidden_N_D, student.weight_V_D, student.temperature,
                                           student.chunk_size).sum().item()
        action_tokens += mask.sum().item()
    extra = [p for group in optimizer.param_groups[1:] for p in group["params"]]
    if not active:  # still step AdamW on zero gradients: its moments and step count evolve as before
        for p in [*trainable(model), *extra]:
            p.grad = torch.zeros_like(p)
    if extra and not single:  # DDP (FSDP2) averages the policy's gradients; the method's own are averaged here
        for p in extra:
            p.grad = torch.zeros_like(p) if p.grad is None else p.grad
            p.grad = accelerator.reduce(p.grad, reduction="mean")
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)  # global, also over shards
    totals["grad_norm"] = float(grad_norm.full_tensor() if isinstance(grad_norm, DTensor) else grad_norm)
    if extra:  # a method's own parameters (e.g. LOPD's composer) are clipped on their own
        totals["method_grad_norm"] = float(torch.nn.utils.clip_grad_norm_(extra, cfg.train.grad_clip))
    totals["learning_rate"] = optimizer.param_groups[0]["lr"]  # the policy's lr this step applies
    optimizer.step()
    release_freed_memory()
    totals["trained_fraction"] = len(active) / len(trajectories)
    if action_tokens:  # how far the rollout engine's log-probs are from the trainer's (dtype / kernel mismatch)
        totals["sampler_logp_abs_gap"] = gap_sum / action_tokens
        totals["entropy"] = entropy_sum / action_tokens  # of the sampling distribution (logits / temperature)
    return reduce_metrics(totals, action_tokens) if not single else totals


@dataclass(frozen=True)
class SampledValidation:
    """Validation points that sample instead of decoding greedily: `samples` per task at the run's sampling params, a
    task's score their mean reward (its expected reward under the policy). Point `step` draws from `point_seed(step)`,
    a function of `seed` alone, so every run with this `seed` draws the same at the same step, and (with a `seed`
    that is not the run's) never replays the run's training samples."""

    samples: int
    seed: int

    def point_seed(self, step: int, rank: int = 0) -> int:
        return step_seed(self.seed, step, rank)


@dataclass
class Run:
    """What a training run holds between its steps: built by `setup`, advanced by `train_step`, closed by `finish`."""

    cfg: Config
    method: Method
    accelerator: Accelerator
    tokenizer: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    backend: Any
    out_dir: Path
    """Where the finished run's checkpoint goes (a DVC output); its steps are saved in `work_dir` until then."""
    work_dir: Path
    fingerprint: dict[str, str]
    steps: int
    tasks_per_step: int
    resumed: checkpoint.Checkpoint | None
    started: float
    """When this session of the run began (`time.perf_counter`)."""
    start_step: int = 0
    elapsed_before: float = 0.0
    """The run's training time in its sessions before this one (a resumed run's, from its checkpoint)."""
    history: list[dict] = field(default_factory=list)
    validated: list[dict] = field(default_factory=list)
    sampled: SampledValidation | None = None
    """How validation points sample (None: greedy, one sample per task)."""
    step0: dict | None = None
    """The step-0 point measured already, as this run would measure it (the base weights every run starts from)."""

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    def log(self, line: str) -> None:
        if self.accelerator.is_main_process:
            write(line)

    def elapsed(self) -> float:
        """The run's training time so far, in seconds: this session's and the sessions' before a resume."""
        return self.elapsed_before + time.perf_counter() - self.started


def train(cfg: Config, method: Method, tasks: Sequence[Task], collect: Rollouts, base_dir: str | Path,
          out_dir: str | Path, tracker: Tracker | None = None,
          stage_modules: Sequence[str] = (checkpoint.STAGE_MODULE,), validation: Sequence[Task] = (),
          sampled: SampledValidation | None = None, step0: dict | None = None) -> dict:
    """Run (or resume) the on-policy loop; returns {"history": [per-step metrics], "validation": [reward on the
    `validation` tasks at step 0, every train.val_every steps and the last step], "elapsed_s": the run's training
    time in seconds} (a resumed run's include the steps and the time before the resume). Validation is greedy, one
    sample per task, unless `sampled` says otherwise; `step0` is the step-0 point measured already that way on the
    same weights (`validate`'s result), taken instead of measuring it again.
    `stage_modules` are the modules the calling stage runs (pipelines.common.stage_modules): with the method's
    module, their import closure is the code a checkpoint must match to be resumed."""
    out_dir = Path(out_dir)
    if not method.trains:
        checkpoint.write_manifest(out_dir, method.name, 0, weights="base")
        return {"history": [], "validation": [], "elapsed_s": 0.0}
    run = setup(cfg, method, tasks, base_dir, out_dir, stage_modules, tracker)
    run.sampled, run.step0 = sampled, step0
    run.log(f"[{method.name}] training on {device()} x {run.world} process(es), rollouts by "
            f"{type(run.backend).__name__}")
    if validation and run.start_step == 0:
        validate_run(run, collect, validation, 0, tracker)
    bar = progress(desc=f"train {method.name}", total=run.steps, initial=run.start_step, unit="step")
    for step in range(run.start_step, run.steps):
        metrics, seconds = train_step(run, collect, tasks, step)
        run.history.append({"step": step + 1, **metrics})
        if tracker:
            tracker.log_metrics(metrics, step=step + 1)
        bar.update(1)
        run.log(f"[{method.name}] step {step + 1}/{run.steps} reward {metrics['reward']:.3f} loss "
                f"{metrics['loss']:.4f} ({seconds:.1f}s)")
        if validation and ((step + 1) % cfg.train.val_every == 0 or step + 1 == run.steps):
            validate_run(run, collect, validation, step + 1, tracker)
        if (step + 1) % cfg.train.save_every == 0 or step + 1 == run.steps:
            save_run(run, step + 1)
    bar.close()
    finish(run)
    return {"history": run.history, "validation": run.validated, "elapsed_s": run.elapsed()}


def setup(cfg: Config, method: Method, tasks: Sequence[Task], base_dir: str | Path, out_dir: Path,
          stage_modules: Sequence[str], tracker: Tracker | None) -> Run:
    """Everything a run needs before its first step: the student (from the checkpoint to resume, if one matches),
    the method, AdamW, the accelerator's wrapping and the rollout engine; the tracker's run (continued on a resume)."""
    started = time.perf_counter()
    accelerator = Accelerator(cpu=device().type == "cpu", mixed_precision=mixed_precision(cfg.train.mixed_precision))
    tasks_per_step = cfg.train.rollouts_per_step // method.rollouts_per_task
    check_split(tasks_per_step, accelerator.num_processes)
    tokenizer = load_tokenizer(base_dir)
    check_weights(base_dir)  # a corrupt base model is named as such, not mistaken for a changed input below
    steps = method.steps(cfg)
    fingerprint = checkpoint.fingerprint(cfg, method, base_dir, stage_modules)
    resumed = checkpoint.resume_point(out_dir, fingerprint, steps)
    if tracker:
        tracker.begin(checkpoint.key(fingerprint), resumed.step if resumed else 0)
    start_dir = resumed.model_dir if resumed else base_dir
    sharded = cfg.train.sharding == "fsdp2" and accelerator.num_processes > 1
    if sharded and cfg.train.lora_rank:
        raise ConfigError("train.lora_rank with train.sharding=fsdp2: a LoRA student is not sharded (its trainable "
                          "state is small); use train.sharding=ddp")
    # a LoRA student is always the base model plus its adapter (restored from the checkpoint)
    model = load_student(cfg, base_dir if cfg.train.lora_rank else start_dir, sharded)
    try:
        method.setup(MethodContext(cfg, accelerator, tokenizer, Path(base_dir), model, tasks))
    except (OSError, ValueError) as err:  # a missing or unusable upstream output (bank, composer, pool)
        raise MethodInputError(f"{method.name}: {err}") from err
    optimizer = policy_optimizer(model, method, cfg)
    if is_lora(model) and accelerator.num_processes > 1:
        synchronise_only(model, trainable(model))
    run = Run(cfg, method, accelerator, tokenizer, model, optimizer, None, out_dir,
              checkpoint.work_dir(out_dir, fingerprint), fingerprint, steps, tasks_per_step, resumed, started)
    if resumed:
        restore(run, sharded)
    if sharded:  # no DDP wrapper: accelerate only adds its autocast to the forward (what evaluation_mode does)
        run.model = accelerator.prepare_model(model, evaluation_mode=True)
        run.optimizer = accelerator.prepare_optimizer(optimizer, device_placement=False)  # the shards are in place
    else:
        run.model, run.optimizer = accelerator.prepare(model, optimizer)
    run.backend = make_backend(start_dir, tokenizer, cfg, cfg.sampling.batch_size)
    return run


def load_student(cfg: Config, model_dir: str | Path, sharded: bool) -> torch.nn.Module:
    """The student in float32 master weights (whatever the saved dtype), on this process's device, in train mode;
    with a fresh adapter for a LoRA student (`train.lora_rank`); sharded before any method sees it (a live teacher
    is the student itself)."""
    model = load_model(model_dir).to(device())
    if cfg.train.activation_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if cfg.train.lora_rank:
        torch.manual_seed(cfg.seed)  # the adapter's A is drawn at random: a seeded draw, the same on a resume
        model = add_student_adapter(model, cfg.train)
    model.train()
    if sharded:
        shard(model)
    return model


def restore(run: Run, sharded: bool) -> None:
    """Continue from `run.resumed`: its AdamW state (None in a finished run: `checkpoint.finish`), the method's own
    state, the step counter, the history so far and the training time before it (none kept in a finished run: a run
    killed as it published counts from its resume)."""
    resumed = run.resumed
    if resumed.state["optimizer"] is not None:
        if sharded:
            load_full_optimizer_state(run.model, run.optimizer, resumed.state["optimizer"])
        else:
            run.optimizer.load_state_dict(resumed.state["optimizer"])  # AdamW moves its state to its params' device
    run.method.load_state_dict(resumed.state["method"])
    if is_lora(run.model):
        load_adapter_state(run.model, resumed.state["adapter"])
    run.start_step, run.history, run.validated = resumed.step, resumed.state["history"], resumed.state["validation"]
    run.elapsed_before = resumed.state.get("elapsed_s", 0.0)
    print(f"resuming {run.method.name} from step {run.start_step}")


def validate_run(run: Run, collect: Rollouts, validation: Sequence[Task], step: int, tracker: Tracker | None) -> None:
    """A validation point after `step` steps, appended to the run's, logged and tracked."""
    cfg = run.cfg
    sampled = run.sampled
    if step == 0 and run.step0 is not None:
        measured = run.step0
    elif sampled:
        measured = validate(run.backend, run.tokenizer, collect, validation,
                            sampling_params(cfg, cfg.sampling.max_new_tokens), sampled.samples,
                            sampled.point_seed(step, run.rank), run.accelerator)
    else:  # greedy: the seed draws nothing
        measured = validate(run.backend, run.tokenizer, collect, validation, greedy_params(cfg.sampling.max_new_tokens),
                            1, step_seed(cfg.seed, step, run.rank), run.accelerator)
    release_freed_memory()
    record = {"step": step, "cumulative_rollouts": step * cfg.train.rollouts_per_step, **measured}
    run.validated.append(record)
    if tracker:
        tracker.log_metrics({k: v for k, v in record.items() if k.startswith("val_") and k != "val_rewards"},
                            step=step)
    run.log(f"[{run.method.name}] validation after step {step}: reward {record['val_reward']:.3f} over "
            f"{record['val_n']} validation tasks")


def train_step(run: Run, collect: Rollouts, tasks: Sequence[Task], step: int) -> tuple[dict[str, float], float]:
    """One step: this process's share of the step's rollouts, the update, the method's after-step (on every
    process's trajectories), the new weights pushed to the rollout engine; returns the step's metrics and seconds."""
    cfg, backend = run.cfg, run.backend
    t0 = time.perf_counter()
    sampler_s = backend.stats["sampling_s"]
    step_tasks = tasks_for_step(tasks, run.tasks_per_step, cfg.seed, step)[run.rank::run.world]
    trajectories = collect(backend, run.tokenizer, step_tasks, sampling_params(cfg, cfg.sampling.max_new_tokens),
                           step_seed(cfg.seed, step, run.rank), run.method.rollouts_per_task)
    for traj in trajectories:  # group ids unique over processes (each process's tasks are its own groups)
        traj.group += run.rank * len(step_tasks)
    release_freed_memory()  # the engine's freed blocks (reuse_freed_memory): not held through the update
    t1 = time.perf_counter()
    sampling_s, collect_s = backend.stats["sampling_s"] - sampler_s, t1 - t0  # the rest: reward/env time
    backend.sleep()  # a colocated vLLM engine frees the GPU for the update
    with deterministic_kernels():  # a resumed run must equal an uninterrupted one on a GPU too
        metrics = update(run.model, run.optimizer, run.accelerator, run.method, trajectories,
                         run.tokenizer.pad_token_id, cfg)
    if run.world > 1:  # every process's after_step (skills, grown bank) and step metrics see the whole step
        trajectories = gather_object(trajectories)
        # the step waits for the slowest process's rollouts: its timings are the step's
        sampling_s, collect_s = max(gather_object([(sampling_s, collect_s)]), key=lambda pair: pair[1])
    metrics.update(run.method.after_step(metrics, trajectories))
    backend.wake_up()
    backend.load_weights(full_parameters(run.model))  # gathered one tensor at a time (collective)
    release_freed_memory()
    t2 = time.perf_counter()
    # cumulative over the run, read from the previous entry, so a resumed run continues the count
    previous_tokens = run.history[-1]["num_tokens"] if run.history else 0
    metrics.update(step_metrics(trajectories, previous_tokens, (step + 1) * cfg.train.rollouts_per_step,
                                sampling_s, collect_s - sampling_s, t2 - t1))
    return metrics, t2 - t0


TIMINGS = ("time_sampling_s", "time_reward_s", "time_update_s", "rollout_tokens_per_s")
"""The per-step metrics a rerun of the same step does not reproduce: kept out of a finished checkpoint."""


def step_metrics(trajectories: Sequence[Trajectory], previous_tokens: int, cumulative_rollouts: int,
                 sampling_s: float, reward_s: float, update_s: float) -> dict[str, float]:
    """The step's rollout statistics, named as TRL's GRPOTrainer logs them; `num_tokens` (prompts and every turn)
    counts on from `previous_tokens`. Multi-turn rollouts add their behaviour metrics as step means."""
    rewards = [t.reward for t in trajectories]
    lengths = [t.num_action_tokens for t in trajectories]
    metrics = {
        **reward_metrics(trajectories),
        "success_rate": sum(r >= 1.0 for r in rewards) / len(rewards),
        "completions/mean_length": sum(lengths) / len(lengths),
        "completions/min_length": min(lengths), "completions/max_length": max(lengths),
        "completions/clipped_ratio": sum(not t.stopped for t in trajectories) / len(trajectories),
        "num_tokens": previous_tokens + sum(len(t.token_ids) for t in trajectories),
        "cumulative_rollouts": cumulative_rollouts,
        "time_sampling_s": sampling_s, "time_reward_s": reward_s, "time_update_s": update_s,
        "rollout_tokens_per_s": sum(lengths) / max(sampling_s, 1e-9),
    }
    if trajectories[0].behaviour is not None:
        for key in BEHAVIOUR_KEYS:
            metrics[key] = sum(getattr(t.behaviour, key) for t in trajectories) / len(trajectories)
    return metrics


def finish(run: Run) -> None:
    """Close the run: its last step, without the fallback folder, the AdamW state and the timings, which a finished
    run no longer needs, goes from the work folder to the checkpoint folder. A run that found its last step there
    already (a kill cut its publish short: `checkpoint.resume_point`) commits it."""
    published = run.start_step == run.steps and run.resumed is not None and run.resumed.dir.parent == run.out_dir
    if run.start_step == run.steps and not run.resumed:
        save_run(run, 0)
    if run.accelerator.is_main_process:
        if published:
            checkpoint.write_manifest(run.out_dir, run.method.name, run.steps, weights=run.resumed.weights)
            checkpoint.finish(run.out_dir, TIMINGS)
        else:
            checkpoint.finish(run.work_dir, TIMINGS)
            checkpoint.publish(run.work_dir, run.out_dir)
        checkpoint.discard(run.work_dir)
    run.accelerator.wait_for_everyone()


def save_run(run: Run, step: int) -> None:
    """Save step `step` into the run's work folder; a failed first save leaves no (empty) work folder behind."""
    first = not run.work_dir.exists()
    try:
        save(run.accelerator, run.work_dir, run.model, run.tokenizer, run.optimizer, step, run.history, run.validated,
             run.fingerprint, run.method, run.elapsed())
    except checkpoint.UnwritableOutput:
        if first:
            checkpoint.discard(run.work_dir)
        raise


def save(accelerator: Accelerator, out_dir: Path, model, tokenizer, optimizer, step: int, history: list[dict],
         validation: list[dict], fingerprint: dict[str, str], method: Method, elapsed_s: float) -> None:
    """Gather the full weights on every process and a sharded optimizer state on the main one (collective), then the
    main process writes the checkpoint."""
    weights = full_state_dict(model)
    optimizer_state = full_optimizer_state(model, optimizer) if isinstance(unwrap(model), FSDPModule) else None
    if accelerator.is_main_process:
        checkpoint.save(out_dir, base_module(model), tokenizer, optimizer, step, history, validation, fingerprint,
                        method, weights, optimizer_state, adapter_state(model) if is_lora(model) else None, elapsed_s)
    accelerator.wait_for_everyone()
