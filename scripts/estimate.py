"""`make estimate PROFILE=cpu GPUS=1 GPU=cpu`: the predicted wall time of every stage of `dvc repro` for a profile on
a machine, before a long run, and of the learning races (`make learn`: coding tasks; `make learn-tool`: tool use).

Every rate is a benchmark's, from reports/perf/ (never a recorded stage time: those are the check, `--check`):
- profile_rollouts.json (scripts/bench/bench_profile_rollouts.py): one training step's rollouts, one validation point
  and each code benchmark's first tasks at the profile's own settings on its model and engine, scored: their effective
  tokens/s (long tails included) and mean lengths; the agentic episodes as each stage plays them (a training step in
  groups, one per task, the bank's batch; AGENTIC_PLAYS): their seconds, steps, tokens and sequence length, and the
  bank's successes;
- rollout.json (`make bench-rollout`): the engine's prompt prefill and multi-turn rates (agentic episodes);
- lopd_step.json: a whole GRPO and LOPD update per trained action token (the first update of a process, less its
  first AdamW step) and the passes of LOPD's teacher and composer; composer.json (scripts/bench/bench_composer.py):
  composing an evaluation task's latent context (Base + Composer; LOPD's anchors, a task's once) and the cold start's
  step and NLL measurement (its privilege's passes too); cpu.json (`make bench`): an AdamW step, the first and a
  later one; agentic_update.json: updates on agentic
  episodes (per sequence token; LOPD's at a text teacher's cost where the bank is expected empty); tool_calls.json:
  agentic success; stage_startup.json: a stage's start-up and the rollout engine's, which every stage that samples
  pays once; agentic_eval.json (scripts/bench/bench_agentic_eval.py): an agentic evaluation's seconds per episode, its
  benchmarks played together as the stage plays them (where the profile has one; else from the episode lengths and
  the training rate); malloc.json (scripts/bench/bench_malloc.py): sampling and updates with glibc's heap against its
  default mappings, which scales a benchmark that recorded (`malloc`) another mode than the one priced (the stages'
  heap; a recorded run's own mode for --check) by the kind of work it timed;
- on a GPU (GPU=h100|h200), gpu.json from `make bench-gpu` on that GPU: the CPU's sampling rates are scaled by the
  measured engine speed-up (its decode engine's tokens/s over the CPU engine's, rollout.json) and the update costs by
  its GRPO and LOPD update rates; the sandbox and start-up stay the CPU's.
A stage's time is its start-up plus its work: rollouts x mean tokens / the effective rate, plus the sandbox's scoring,
plus each update's trained action tokens x its measured seconds per token, plus one optimizer step per step (the first
once a stage: it allocates AdamW's state). A step whose rollouts carry no gradient costs its optimizer step. The work
is counted from the profile's config and its data; every assumption is printed. GPUS=N processes split each stage's
rollouts and updates evenly (the launcher's data parallelism); start-up does not shrink.
`--check` compares the estimate with a recorded default run (`--record`, by default CHECK_RECORD: the newest record of
today's code timed on one machine) per domain (a domain whose stages the record lacks is n/a, and is compared over the
stages it has: a re-recording in progress), and writes reports/perf/estimate_check.<the record's name>.json; like with
like: the params that run ran, from the rates of the sampler it sampled with (profile_rollouts.json measures both CPU
samplers side by side), and again at the recording machine's speed: per domain, work timed on the benchmarks' machine
and in the record (code: a first GRPO batch as long as the benchmark's training step, other tasks; agentic: the base
model's evaluation, its benchmarks played together), or the same work timed on both machines where `--record-rollouts`
gives that machine's profile_rollouts (its training steps, code and agentic; CHECK_RECORD's is profile_rollouts.json
itself); its updates at the same speed as on the benchmarks' machine through the record's path, unless `--record-cpu`
gives that machine's `make bench` (cpu.json's update and AdamW step, timed on both).
Run: python scripts/estimate.py [--profile cpu] [--gpus 1] [--gpu cpu|h100|h200]
                                [--check [--record FILE] [--record-cpu FILE] [--record-rollouts FILE]]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from baselines.config import GRPOConfig, SDPOConfig, SkillSDConfig  # noqa: E402
from lopd.core.config import ColdStartConfig, Config, load_config, resolve, resolve_recorded  # noqa: E402
from lopd.core.device import stage_malloc_mode  # noqa: E402
from pipelines.common import RACES, for_domain  # noqa: E402

PERF = REPO / "reports" / "perf"
GPU_NAMES = {"h100": "H100", "h200": "H200"}
TEACHER_FORWARD_SHARE = 1 / 3
"""A pass without backward as a share of the same pass with one (a forward is ~1/3 of forward + backward): the
text-context baselines' teachers and the composer's forward passes, which no benchmark times alone."""
CHECK_TOLERANCE = 0.25
SAME_WORK_TOKENS = 0.02
"""Two machines sampled the same work where the same tasks and seeds sampled this close a token count: their float
rounding differs by CPU kind, which can flip a sampled token and so a continuation."""
CHECK_RECORD = PERF / "default_run_wall_time.2026-12-04-tool-use.json"
"""The record `--check` compares with by default: the newest of today's code timed on one machine (scripts/wall_time.py;
8 tool-use stages run on the benchmarks' machine in the session that measured profile_rollouts.json). Older records,
e.g. the first complete one (default_run_wall_time.json, 2026-11-26, another sampler), are checked with `--record`."""
BANK_RECORD = "metrics/agentic/bank.json"
"""build_bank_agentic's metrics: how many of the episodes it played the bank kept."""
CHECK_RECORD_ROLLOUTS = PERF / "profile_rollouts.json"
"""CHECK_RECORD's machine's `--record-rollouts`: that record was timed in the session that measured this file."""


def read(name: str) -> dict:
    path = PERF / name
    if not path.exists():
        sys.exit(f"error: reports/perf/{name}: not found (run its benchmark: python scripts/estimate.py --help)")
    return json.loads(path.read_text())


@dataclass
class Costs:
    """What a unit of work costs on one process, in seconds, and where each figure comes from."""

    train_rate: float
    """Effective sampled tokens/s of a training step's batch (long tails included)."""
    validation_rate: float
    eval_rate: dict[str, float]
    """Per code benchmark; its mean tokens per task in `eval_tokens`."""
    train_tokens: float
    """Mean sampled tokens of a training rollout at the profile's budget."""
    eval_tokens: dict[str, float]
    sandbox_s: float
    """Scoring one training rollout."""
    eval_scoring_s: dict[str, float]
    """Scoring one evaluation task."""
    prefill_rate: float
    """Prompt tokens/s (agentic contexts)."""
    student_s: float
    """A GRPO update per trained action token: the student's forward and backward with the loss and its diagnostics
    (entropy, sampler gap), all of which run per trained micro-batch."""
    teacher_s: float
    """LOPD's teacher pass (forward + backward to its latent inputs), per action token."""
    composer_s: float
    """The composer's pass with backward, per action token of the trajectories it serves."""
    compose_s: float
    """Composing one code task's latent context at evaluation (retrieval, the encoder pass, the QFormer)."""
    cold_start_entry_s: float
    """A cold start step per bank entry it trains on (compose, the teacher's pass, backward, AdamW)."""
    cold_start_measure_s: float
    """The cold start's NLL measurement per bank entry (forward only)."""
    cold_start_entry_positions: float
    """The positions a measured (code) bank entry puts through the models: its teacher sequence and the encoder's
    items; a tool-use entry's cost scales by its own (`agentic_entry_positions`)."""
    compose_positions: float
    """The encoder positions a measured (code) task's composing reads: its query and its retrieved items; a tool-use
    task's scale by its own (`agentic_compose_positions`). LOPD composes each task's anchor latents c_phi0 so, once,
    when it first trains on it."""
    lopd_s: float
    """A whole LOPD update, per action token."""
    optimizer_s: float
    """One optimizer step."""
    first_optimizer_s: float
    """What a stage's first optimizer step costs beyond `optimizer_s` (it allocates AdamW's state)."""
    agentic_update_s: dict[str, float]
    """Per sequence token of a trained episode: grpo (the student alone) and lopd."""
    startup_s: float
    engine_start_s: float
    """Starting the rollout engine, once in every stage that samples (its model loaded, its cache allocated, its
    warm-up)."""
    agentic_play_s: dict[str, float] = field(default_factory=dict)
    """Seconds per episode of each agentic play (AGENTIC_PLAYS) profile_rollouts.json measured with the backend's
    sampler; empty (another sampler's rates): from the episode lengths and the training rate."""
    agentic_eval_episode_s: float | None = None
    """Seconds per episode of an agentic evaluation, as agentic_eval.json measured the stage playing the profile's
    benchmarks together; None: from the episode lengths and the training rate."""
    sources: dict[str, str] = field(default_factory=dict)

    def update_s(self, method: str, latent: bool = True) -> float:
        """Seconds per trained action token of `method`'s update. LOPD without latent context (`latent` False: its
        bank is empty) has nothing to compose and nothing in its teacher's pass to train: a forward, as a text
        teacher's."""
        if method == "grpo":
            return self.student_s
        if method == "lopd" and latent:
            return self.lopd_s
        return self.student_s + self.teacher_s * TEACHER_FORWARD_SHARE  # a text-context teacher: forward only


def rate(part: dict) -> float:
    """Sampled tokens per second of a profile_rollouts.json part, its scoring left out."""
    return part["sampled_tokens"] / (part["wall_s"] - part.get("scoring_s", 0))


UNNAMED_SAMPLER = "vocabulary_sort"
"""What a measurement or a recorded run without a `sampler` key sampled with on CPU: vLLM's own sort over the
vocabulary; they predate the backend's `top_k_first` (lopd.core.vllm_backend.top_k_top_p_cpu)."""


UNNAMED_MATMUL = "blas"
"""The float32 matmul path of an update measurement or a recorded run without a `cpu_matmul` key: torch's BLAS; they
predate `model.cpu_matmul` (lopd.core.device.use_cpu_matmul)."""


def matmul_factor(measured: str, target: str) -> float:
    """How many times as long an update takes through the `target` float32 matmul path as through the `measured`
    one: the ratio of cpu.json's updates through each, timed side by side."""
    if measured == target:
        return 1.0
    paths = read("cpu.json")["update"]["paths"]
    return paths[f"fp32_{target}"]["update_s"] / paths[f"fp32_{measured}"]["update_s"]


AGENTIC_PLAYS = {"grouped": ("agentic_train_step", "step"), "single": ("agentic_train_step_single", "step"),
                 "bank": ("agentic_bank_batch", "call")}
"""How the agentic stages play their episodes: profile_rollouts.json's part that times each, and malloc.json's kind of
work it is. A training step in groups (GRPO, SDPO, Skill-SD), one per task (a prompt to read for every episode:
OPSD, SDFT, LOPD), the bank's batch (many tasks at once)."""
AGENTIC_WORDS = {"grouped": "a training step in groups", "single": "one per task", "bank": "the bank's batch"}
UNNAMED_MALLOC = "mapped"
"""How glibc served the tensors of a measurement or a recorded run without a `malloc` key: its default mappings; they
predate `lopd.core.device.reuse_freed_memory`."""


MALLOC_KINDS = {"call": "sampling", "step": "train_step_sampling", "update": "later_update"}
"""malloc.json's ratio for each kind of work (`malloc_factors`): sampling a call of many rows (a validation point, an
evaluation: blocks over 32 MB, which glibc's default maps afresh), a training step's or an agentic step's few rows
(blocks it mostly reuses already), and an update."""


MALLOC_WORK = {"call": "sampling a call of many rows", "step": "a step of few", "update": "updates"}
MALLOC_USES = {"profile_rollouts.json": ("call", "step"), "rollout.json": ("step",), "agentic_eval.json": ("step",),
               "lopd_step.json": ("update",), "composer.json": ("update",), "agentic_update.json": ("update",)}
"""The kinds of work each benchmark file `cpu_costs` reads has timed."""


def malloc_factors(measured: str, target: str) -> dict[str, float]:
    """How many times as long each kind of work (`MALLOC_KINDS`) takes with glibc's `target` mode as with the
    `measured` one: malloc.json's ratios (scripts/bench/bench_malloc.py: heap over mapped, timed side by side)."""
    if measured == target:
        return {kind: 1.0 for kind in MALLOC_KINDS}
    ratios = read("malloc.json")["heap_over_mapped"]
    power = 1 if target == "heap" else -1
    return {kind: ratios[key] ** power for kind, key in MALLOC_KINDS.items()}


def sampled_parts(entry: dict, sampler: str | None) -> dict:
    """The train_step, validation and eval parts of a profile_rollouts.json entry as `sampler` sampled them (None:
    the entry's top level, the backend's own; `vocabulary_sort`: vLLM's CPU sampler, measured beside it)."""
    if sampler is None or sampler == entry.get("sampler", UNNAMED_SAMPLER):
        return entry
    if sampler not in entry:
        sys.exit(f"error: reports/perf/profile_rollouts.json: profile {entry['profile']} has no rates measured with "
                 f"the {sampler} sampler (run python scripts/bench/bench_profile_rollouts.py --profile "
                 f"{entry['profile']})")
    return entry[sampler]


def cpu_costs(cfg: Config, mean_tokens: float | None, eval_mean_tokens: float | None,
              on_gpu: bool = False, sampler: str | None = None, matmul: str | None = None,
              malloc: str | None = None) -> Costs:
    """This CPU's costs from the benchmarks. `sampler`: the rates of that CPU sampler (None: the backend's own).
    `matmul`: the float32 matmul path updates are costed for (None: lopd_step.json's, the path the stages take on the
    benchmarks' machine); an update measured through another path is scaled by `matmul_factor`. `malloc`: glibc's
    mode the costs are for (None: the stages', `stage_malloc_mode`); a benchmark measured with the other is scaled by
    `malloc_factors` for the kind of work it timed (`MALLOC_USES`)."""
    profiles, rollout, step_file, agentic, startup, cpu, latent = (read(n) for n in (
        "profile_rollouts.json", "rollout.json", "lopd_step.json", "agentic_update.json", "stage_startup.json",
        "cpu.json", "composer.json"))
    measured = profiles.get(cfg.profile)
    if measured is None and (mean_tokens is None or eval_mean_tokens is None):
        sys.exit(f"error: reports/perf/profile_rollouts.json: no entry for profile {cfg.profile} (run python "
                 f"scripts/bench/bench_profile_rollouts.py --profile {cfg.profile}, or give --mean-tokens and "
                 f"--eval-mean-tokens)")
    model = cfg.model.name if cfg.model.name in step_file["models"] else None
    if model is None and not on_gpu:
        sys.exit(f"error: reports/perf/lopd_step.json: no entry for {cfg.model.name} "
                 "(python scripts/bench/bench_lopd_step.py)")
    model = model or "qwen2.5-coder-0.5b"  # on a GPU only its passes' ratios to the student's are used
    entry = profiles.get(cfg.profile) or profiles["cpu"]  # rates of the engine on this CPU
    base, used = sampled_parts(entry, sampler), sampler or entry.get("sampler")  # an engine on CUDA names none
    evals = {b: e for b, e in base["eval"].items() if isinstance(e, dict)}
    step = step_file["models"][model]["step"]
    tokens, passes = step["action_tokens"], step["passes_s"]
    adamw = cpu["adamw"]["fused"]  # the loop's AdamW on CPU (lopd.core.loop.policy_optimizer); memory-bound
    first_update = {kind: step[f"{kind}_update_s"] - adamw["first_step_s"] for kind in ("grpo", "lopd")}
    if not isinstance(startup.get("engine_start_s"), (int, float)):
        sys.exit("error: reports/perf/stage_startup.json: engine_start_s is "
                 f"{startup.get('engine_start_s', 'missing')} (python scripts/bench/bench_stage_startup.py on a "
                 "machine with vLLM and models/base)")
    if latent["model"] != model:
        sys.exit(f"error: reports/perf/composer.json: measured on {latent['model']}, not {model} "
                 "(python scripts/bench/bench_composer.py)")
    if agentic.get("model") != model:  # a file without the key predates it: the cpu profile's SmolLM2-135M then
        sys.exit(f"error: reports/perf/agentic_update.json: measured on {agentic.get('model', 'an unnamed model')}, "
                 f"not {model} (python scripts/bench/bench_agentic_update.py)")
    step_matmul = step_file["models"][model].get("cpu_matmul", UNNAMED_MATMUL)
    target = matmul or step_matmul
    variants = {kind: agentic["variants"][f"{kind}:on"] for kind in ("grpo", "lopd")}
    cold = latent["cold_start"]
    measured_paths = [("lopd_step.json", step_matmul), ("composer.json", latent["cpu_matmul"]),
                      *((f"agentic_update.json's {kind}", v.get("cpu_matmul", UNNAMED_MATMUL))
                        for kind, v in variants.items())]
    train = base["train_step"]
    eval_play = (PERF / "agentic_eval.json").exists() and read("agentic_eval.json").get(cfg.profile)
    malloc = malloc or stage_malloc_mode()
    measured_modes = {"profile_rollouts.json": entry.get("malloc", UNNAMED_MALLOC),
                      "rollout.json": rollout.get("malloc", UNNAMED_MALLOC),
                      "agentic_eval.json": (eval_play or {}).get("malloc", UNNAMED_MALLOC),
                      "lopd_step.json": step_file["models"][model].get("malloc", UNNAMED_MALLOC),
                      "composer.json": latent.get("malloc", UNNAMED_MALLOC),
                      "agentic_update.json": agentic.get("malloc", UNNAMED_MALLOC)}
    # x the time each file's measurements take at `malloc`, per kind of work (rates divide by it)
    scale = {name: malloc_factors(measured_mode, malloc) for name, measured_mode in measured_modes.items()}
    sampled = scale["profile_rollouts.json"]
    step_scale = matmul_factor(step_matmul, target) * scale["lopd_step.json"]["update"]
    latent_scale = matmul_factor(latent["cpu_matmul"], target) * scale["composer.json"]["update"]
    # the episodes were measured with the backend's own sampler: a record sampled with vLLM's sort keeps the episode
    # model (a sampler-free estimate, or a record sampled with ours, takes them)
    own_sampler = sampler is None or sampler == entry.get("sampler", UNNAMED_SAMPLER)
    eval_episode_s = eval_play["together"]["seconds_per_episode"] if eval_play and own_sampler else None
    return Costs(
        train_rate=rate(train) / sampled["step"], validation_rate=rate(base["validation"]) / sampled["call"],
        eval_rate={b: rate(e) / sampled["call"] for b, e in evals.items()},
        train_tokens=mean_tokens or sampled_parts(measured, sampler)["train_step"]["mean_tokens"],
        eval_tokens={b: eval_mean_tokens or e["mean_tokens"] for b, e in evals.items()},
        sandbox_s=rollout["grpo_step"]["reward_s"] / rollout["grpo_step"]["rollouts"],
        eval_scoring_s={b: e["scoring_s"] / e["rollouts"] for b, e in evals.items()},
        prefill_rate=rollout["prefill_tokens_per_s"] / scale["rollout.json"]["step"],
        student_s=step_scale * first_update["grpo"] / tokens, teacher_s=step_scale * passes["teacher"] / tokens,
        composer_s=step_scale * passes["composer"] / tokens, lopd_s=step_scale * first_update["lopd"] / tokens,
        compose_s=latent_scale * latent["compose"]["seconds_per_task"],
        cold_start_entry_s=latent_scale * cold["step_s"] / cold["batch_size"],
        cold_start_measure_s=latent_scale * cold["seconds_per_measured_entry"],
        cold_start_entry_positions=cold["step_positions"] / cold["batch_size"],
        compose_positions=mean(b["positions_per_task"] for b in latent["compose"]["per_benchmark"].values()),
        optimizer_s=adamw["step_s"], first_optimizer_s=adamw["first_step_s"] - adamw["step_s"],
        agentic_update_s={kind: matmul_factor(v.get("cpu_matmul", UNNAMED_MATMUL), target)
                          * scale["agentic_update.json"]["update"] * v["update_s"] / sum(v["sequence_tokens"])
                          for kind, v in variants.items()},
        startup_s=sum(startup["imports_s"].values()) / len(startup["imports_s"]) + startup["mlflow_s"],
        engine_start_s=startup["engine_start_s"],
        agentic_play_s={shape: sampled[kind] * entry[part]["seconds_per_episode"]
                        for shape, (part, kind) in AGENTIC_PLAYS.items() if own_sampler and part in entry},
        agentic_eval_episode_s=eval_episode_s and eval_episode_s * scale["agentic_eval.json"]["step"],
        sources={"sampling": f"profile_rollouts.json ({entry['backend']}{', sampler ' + used if used else ''}, "
                             f"{entry['model']}, profile {entry['profile']})",
                 "updates": f"lopd_step.json, agentic_update.json and composer.json ({model}), float32 matmuls "
                            f"through {target}; "
                            f"AdamW steps: cpu.json ({adamw['step_s']} s, the first {adamw['first_step_s']} s)"
                            + "".join(f"; {name} measured through {path}: x{matmul_factor(path, target):.2f}"
                                      for name, path in measured_paths if path != target),
                 "glibc's malloc": f"priced {malloc}" + "".join(
                     f"; {name} measured {measured_modes[name]}: " + ", ".join(
                         f"{MALLOC_WORK[kind]} x{scale[name][kind]:.2f}" for kind in kinds) + " (malloc.json)"
                     for name, kinds in MALLOC_USES.items() if measured_modes[name] != malloc),
                 "start-up": "stage_startup.json"})


def gpu_costs(cfg: Config, gpu: str, cpu: Costs) -> Costs:
    """The CPU's costs with sampling scaled by gpu.json's engine speed-up over the CPU engine, and updates by its
    update rates (per sequence token, converted with the measured prompt length)."""
    bench = read("gpu.json")
    name = bench["device"]["name"]
    if bench["size"] != "real" or GPU_NAMES[gpu] not in name:
        sys.exit(f"error: reports/perf/gpu.json is from {name!r} at {bench['size']} size, not an {GPU_NAMES[gpu]} "
                 f"(run make bench-gpu on one)")
    architecture = "qwen3-4b" if "qwen3" in cfg.model.name.lower() else "qwen2.5-coder-0.5b"
    rollouts = [r for r in bench["rollout"] if r["architecture"] == architecture]
    updates = [u for u in bench["update"] if u["architecture"] == architecture]
    if not rollouts or not updates or "tokens_per_s" not in updates[0]["grpo"]:
        sys.exit(f"error: reports/perf/gpu.json: no {architecture} rollout and GRPO update measurements")
    engine = next(e for e in ("vllm", "static", "loop") if isinstance(rollouts[0][e], dict))  # the fastest that ran
    cpu_engine = read("rollout.json")["vllm"]["train_setting"]["tokens_per_s"]
    sampling = min(r[engine]["tokens_per_s"] for r in rollouts) / cpu_engine
    update = updates[0]
    prompt = read("profile_rollouts.json")["cpu"]["train_step"]["mean_prompt_tokens"]
    steps = read("lopd_step.json")["models"]
    step = steps.get(cfg.model.name, steps["qwen2.5-coder-0.5b"])["step"]
    action = step["action_tokens"] / step["rollouts"]
    cpu_per_sequence_token = cpu.student_s * action / (action + prompt)
    per_action = (cpu.train_tokens + prompt) / cpu.train_tokens  # sequence tokens per trained action token
    grpo_s = per_action / update["grpo"]["tokens_per_s"]
    speedup = cpu_per_sequence_token / (1 / update["grpo"]["tokens_per_s"])
    lopd_s = (per_action / update["lopd"]["tokens_per_s"] if "tokens_per_s" in update["lopd"]
              else cpu.lopd_s / speedup)
    return Costs(
        train_rate=cpu.train_rate * sampling, validation_rate=cpu.validation_rate * sampling,
        eval_rate={b: r * sampling for b, r in cpu.eval_rate.items()}, train_tokens=cpu.train_tokens,
        eval_tokens=cpu.eval_tokens, sandbox_s=cpu.sandbox_s, eval_scoring_s=cpu.eval_scoring_s,
        prefill_rate=cpu.prefill_rate * sampling, student_s=grpo_s, teacher_s=cpu.teacher_s / speedup,
        composer_s=cpu.composer_s / speedup, lopd_s=lopd_s, compose_s=cpu.compose_s / speedup,
        cold_start_entry_s=cpu.cold_start_entry_s / speedup, cold_start_measure_s=cpu.cold_start_measure_s / speedup,
        cold_start_entry_positions=cpu.cold_start_entry_positions,
        compose_positions=cpu.compose_positions, optimizer_s=0.0,
        first_optimizer_s=0.0,
        agentic_update_s={k: v / speedup for k, v in cpu.agentic_update_s.items()}, startup_s=cpu.startup_s,
        engine_start_s=cpu.engine_start_s,
        agentic_play_s={shape: s / sampling for shape, s in cpu.agentic_play_s.items()},
        agentic_eval_episode_s=cpu.agentic_eval_episode_s and cpu.agentic_eval_episode_s / sampling,
        sources={"sampling": f"this CPU's, x{sampling:.0f}: {engine} on {name} (gpu.json, {architecture}, random "
                             f"weights) over vllm on this CPU (rollout.json)",
                 "updates": f"gpu.json's GRPO and LOPD update rates on {name} (optimizer step included); the other "
                            f"passes this CPU's, / {speedup:.0f} (GRPO's speed-up)",
                 "sandbox, start-up, the engine's start": "this CPU's"})


def after_first_step(first: float, steps: int) -> float:
    """The mean share of rollouts trained over `steps` steps, the first training `first` of them and the others all
    (Skill-SD: its first step has no skills yet)."""
    return (first + steps - 1) / steps


def signal_shares(cfg: Config, p: float) -> tuple[dict[str, dict[str, float]], str]:
    """Per domain, the share of a step's rollouts each method trains on, over its steps (the rest carry no gradient
    and are skipped): GRPO needs a group of mixed rewards, SDPO a successful sibling; Skill-SD's PPO part needs a
    mixed group, but its distillation term trains every rollout whose task has a skill, and every task has one once
    the first step's summaries are written, so its first step trains the mixed groups and every later one all
    (as its recorded runs did); OPSD, SDFT and LOPD train on every rollout. Code: GRPO's share as rollout.json's GRPO
    step measured it (SDPO's taken equal). Agentic: from `p`, the success rate of an episode."""
    mixed_code = read("rollout.json")["grpo_step"]["trained_fraction"]
    mixed = 1 - p ** cfg.section(GRPOConfig).group_size - (1 - p) ** cfg.section(GRPOConfig).group_size
    sibling = 1 - (1 - p) ** (cfg.section(SDPOConfig).group_size - 1)
    every = {"opsd": 1.0, "sdft": 1.0, "lopd": 1.0}
    note = (f"code: {mixed_code:.0%} of GRPO's rollouts carry a gradient (rollout.json; SDPO alike); "
            f"agentic: {p:.0%} of episodes succeed: {mixed:.0%} of groups mixed, {sibling:.0%} "
            f"with a successful sibling; Skill-SD: as GRPO on its first step, then all (its skills); OPSD, SDFT, "
            f"LOPD: all")
    return {"code": {"grpo": mixed_code, "sdpo": mixed_code, **every,
                     "skill_sd": after_first_step(mixed_code, training_steps(cfg, "skill_sd"))},
            "agentic": {"grpo": mixed, "sdpo": sibling, **every,
                        "skill_sd": after_first_step(mixed, cfg.agentic.steps)}}, note


def code_counts(cfg: Config) -> dict[str, int]:
    """Training tasks, and tasks per code benchmark (0 where its data is missing: that evaluation is n/a)."""
    from pipelines.domains.code import coding_tasks
    from pipelines.evaluate import NotAvailable, code_benchmark

    counts = {"train_tasks": len(coding_tasks(cfg)) - cfg.data.validation_tasks}
    for benchmark in cfg.benchmarks:
        try:
            counts[benchmark] = len(code_benchmark(cfg, benchmark).messages)
        except NotAvailable:
            counts[benchmark] = 0
    return counts


def agentic_counts(cfg: Config) -> dict[str, int]:
    """Training tasks, and episodes per agentic benchmark (0 where its data is missing: that evaluation is n/a)."""
    from evaluation.agentic.benchmarks import load_benchmark

    counts = {"train_tasks": agentic_train_tasks(cfg)}
    for name in cfg.agentic.benchmarks:
        try:
            bench = load_benchmark(cfg, name, None)
        except (OSError, ValueError, ImportError):
            counts[name] = 0
            continue
        counts[name] = len(bench.episodes)
        bench.close()
    return counts


def agentic_train_tasks(cfg: Config) -> int:
    """The EnvScaler-format training split's size."""
    from evaluation.agentic import envscaler_split

    return len(envscaler_split.envscaler_data(cfg).train)


@dataclass
class Episodes:
    """An agentic training episode as the benchmarks measured it on the profile's model."""

    steps: float
    step_tokens: float
    context_tokens: float
    """The first prompt (tool list included)."""
    sequence_tokens: float
    """The whole episode as the update reads it: prompt, actions and observations."""
    success: float
    """The share of episodes that complete (tool_calls.json): what decides a group's or a sibling's signal."""
    bank_success: float
    """The share of episodes whose reward reaches agentic.bank_success_threshold: those the bank keeps."""
    bank_note: str


def episodes(cfg: Config, bank: dict | None = None) -> Episodes:
    """Steps, tokens and sequence as profile_rollouts.json's agentic training step played them (the profile's entry,
    else the cpu profile's); the bank's successes from `bank` (a build_bank_agentic record: metrics/agentic/bank.json,
    all of its episodes, on any CPU) where given, else from the benchmark's bank batch where measured (else its
    step's); the success rate tool_calls.json's."""
    profiles = read("profile_rollouts.json")
    entry = profiles.get(cfg.profile) or profiles["cpu"]
    played = entry.get("agentic_train_step")
    if played is None:
        sys.exit(f"error: reports/perf/profile_rollouts.json: no agentic_train_step for profile {cfg.profile} (run "
                 f"python scripts/bench/bench_profile_rollouts.py --profile {cfg.profile} --parts agentic)")
    if "bank_successes" not in played:
        sys.exit(f"error: reports/perf/profile_rollouts.json: the agentic_train_step of profile {cfg.profile} has no "
                 f"bank_successes (python scripts/bench/bench_profile_rollouts.py --profile {cfg.profile} "
                 "--parts agentic)")
    ended = read("tool_calls.json")["episodes"]["ended"]
    if bank and bank.get("n_rollouts"):
        successes = round(bank["rollout_success_rate"] * bank["n_rollouts"])
        bank_success = successes / bank["n_rollouts"]
        bank_note = (f"{successes} of the {bank['n_rollouts']} episodes build_bank_agentic played reached the bank's "
                     f"threshold (metrics/agentic/bank.json)")
    else:
        banked, which = ((entry["agentic_bank_batch"], "bank") if "agentic_bank_batch" in entry
                         else (played, "training"))
        bank_success = banked["bank_successes"] / banked["episodes"]
        bank_note = (f"{banked['bank_successes']} of the {banked['episodes']} measured {which} episodes reached the "
                     f"bank's threshold {banked['bank_success_threshold']} (profile_rollouts.json)")
    return Episodes(played["mean_steps"], played["mean_step_tokens"], played["mean_first_context_tokens"],
                    played["mean_sequence_tokens"], ended.get("completed", 0) / sum(ended.values()), bank_success,
                    bank_note)


def train_stage(method: str) -> str:
    """The DVC stage that trains `method` on code."""
    return "train_lopd" if method == "lopd" else f"train@{method}"


def training_steps(cfg: Config, method: str) -> int:
    """`method`'s code training steps: its own `steps`, else train.steps."""
    return cfg.method_sections[method].steps or cfg.train.steps


def validation_points(cfg: Config, method: str) -> int:
    """How often `method`'s code training validates: every train.val_every steps and the last (step 0 is the base
    model's, stage validate_base's)."""
    if not cfg.data.validation_tasks:
        return 0
    return math.ceil(training_steps(cfg, method) / cfg.train.val_every)


def episode_seconds(c: Costs, episode: Episodes) -> dict[str, float]:
    """Seconds an agentic training episode takes in each play (AGENTIC_PLAYS): measured per play (a play not measured
    costs the grouped step's), or modelled: an episode samples each step's tokens and reads its context once (prefix
    caching keeps it)."""
    modelled_s = episode.steps * episode.step_tokens / c.train_rate + episode.context_tokens / c.prefill_rate
    return {shape: c.agentic_play_s.get(shape) or c.agentic_play_s.get("grouped") or modelled_s
            for shape in AGENTIC_PLAYS}


def episode_update_s(c: Costs, method: str, latent: bool, episode: Episodes) -> float:
    """Seconds `method`'s update takes per trained agentic episode: its sequence at the measured rate per sequence
    token (agentic_update.json: the student alone, or LOPD's with latent context), a text teacher's forward on top of
    the student's for the distillation methods and for LOPD without latent context (`latent` False: an empty bank)."""
    kind = "lopd" if method == "lopd" and latent else "grpo"
    teacher = c.update_s(method, latent) / c.student_s if kind == "grpo" else 1.0
    return episode.sequence_tokens * c.agentic_update_s[kind] * teacher


def agentic_entry_positions(cfg: Config, episode: Episodes) -> float:
    """Positions a tool-use bank entry puts through the models in the cold start: the teacher reads the episode and
    its n_ret x K latents, the encoder n_ret retrieved items of at most composer.max_item_tokens."""
    return episode.sequence_tokens + cfg.n_ret * (cfg.latent_tokens + cfg.composer.max_item_tokens)


def built_bank(cfg: Config) -> dict | None:
    """build_bank_agentic's record in the working tree (BANK_RECORD) if params.yaml runs `cfg`'s profile: the bank's
    successes as the pipeline found them; None otherwise (the benchmark's bank batch decides)."""
    path = REPO / BANK_RECORD
    if not path.exists() or load_config().profile != cfg.profile:
        return None
    return json.loads(path.read_text())["build_bank_agentic"]


def agentic_compose_positions(cfg: Config) -> float:
    """Encoder positions composing a tool-use task's latent context reads: n_ret retrieved episodes' traces, each cut
    at composer.max_item_tokens (they run longer), its short query aside."""
    return cfg.n_ret * cfg.composer.max_item_tokens


def held_out_entries(cold: ColdStartConfig, samples_per_task: int) -> float:
    """The bank entries of the cold start's held-out tasks: a bank task has 1 to samples_per_task entries (the code
    bank measured: 55 of 37 tasks at 2 samples, 1.5 a task), the midpoint assumed."""
    return cold.held_out_tasks * (1 + samples_per_task) / 2


def privilege_passes(cold: ColdStartConfig, samples_per_task: int) -> float:
    """Forward passes over a held-out entry that measure the composer's privilege, each priced as an NLL measurement
    of a bank entry: no context, the text of both retrievals, and the latent context at step 0, every
    cold_start.privilege_every steps and the last."""
    points = 1 + len({s for s in range(1, cold.steps + 1) if s % cold.privilege_every == 0 or s == cold.steps})
    return held_out_entries(cold, samples_per_task) * (3 + points)


def agentic_bank_episodes(cfg: Config, train_tasks: int) -> int:
    """The base model's episodes build_bank_agentic plays: agentic.bank_samples_per_task on each of its tasks."""
    a = cfg.agentic
    return min(train_tasks, a.bank_task_limit or train_tasks) * (a.bank_samples_per_task or cfg.bank.samples_per_task)


def estimate(cfg: Config, costs: Costs, processes: int, bank: dict | None = None
             ) -> tuple[dict[str, float], dict[str, int], list[str]]:
    """Seconds per stage of the DAG, the counts behind them, and the assumptions made (`bank`: as `episodes`)."""
    counts = code_counts(cfg)
    agentic = agentic_counts(cfg)
    episode = episodes(cfg, bank)
    shares, share_note = signal_shares(cfg, episode.success)
    a, c, share = cfg.agentic, costs, 1 / processes
    skill_sd = cfg.section(SkillSDConfig)
    stage_s: dict[str, float] = {}

    def stage(name: str, work_s: float = 0.0, samples: bool = False) -> None:
        stage_s[name] = c.startup_s + (c.engine_start_s if samples else 0.0) + work_s * share

    def step_sampling(rollouts: float) -> float:
        return rollouts * (c.train_tokens / c.train_rate + c.sandbox_s)

    validation_s = cfg.data.validation_tasks * (c.train_tokens / c.validation_rate + c.sandbox_s)
    eval_s = sum(counts[b] * cfg.eval.n_samples * (c.eval_tokens[b] / c.eval_rate[b] + c.eval_scoring_s[b])
                 for b in cfg.benchmarks if counts[b])
    eval_tasks = sum(counts[b] for b in cfg.benchmarks) * cfg.eval.n_samples

    stage("prepare_model")
    stage("validate_base", validation_s, samples=bool(cfg.data.validation_tasks))
    for method in cfg.methods:
        name = train_stage(method)
        if method == "vanilla":
            stage(name)
            continue
        steps, rollouts = training_steps(cfg, method), cfg.train.rollouts_per_step
        points = validation_points(cfg, method)
        trained = rollouts * shares["code"][method] * c.train_tokens
        work = (steps * (step_sampling(rollouts) + c.optimizer_s + trained * c.update_s(method)) + c.first_optimizer_s
                + points * validation_s)
        if method == "skill_sd":  # a skill summary per rollout group after every step
            work += steps * rollouts / skill_sd.group_size * skill_sd.summary_tokens / c.train_rate
        if method == "lopd":  # c_phi0 of each task it trains on, composed when the task first comes up
            work += min(steps * rollouts, counts["train_tasks"]) * c.compose_s
        stage(name, work, samples=True)
    bank_rollouts = min(counts["train_tasks"], cfg.bank.task_limit or counts["train_tasks"]) * cfg.bank.samples_per_task
    stage("build_bank", step_sampling(bank_rollouts), samples=True)
    stage("build_pool")
    measured = cfg.cold_start.eval_examples or bank_rollouts * 0.5
    stage("cold_start", cfg.cold_start.steps * cfg.cold_start.batch_size * c.cold_start_entry_s
          + (2 * measured + privilege_passes(cfg.cold_start, cfg.bank.samples_per_task)) * c.cold_start_measure_s)
    for method in cfg.methods:
        stage(f"eval@{method}", eval_s, samples=eval_tasks > 0)
    stage("eval_base_composer", eval_s + eval_tasks * c.compose_s, samples=eval_tasks > 0)

    episode_s = episode_seconds(c, episode)
    per_task = cfg.rollouts_per_task()
    bank_episodes = agentic_bank_episodes(cfg, agentic["train_tasks"])
    stage("build_bank_agentic", bank_episodes * episode_s["bank"], samples=True)
    stage("build_pool_agentic")
    entries = bank_episodes * episode.bank_success
    latent = entries >= 1  # an empty bank retrieves nothing: no latent context (LOPD trains as self-distillation)
    cold = for_domain(cfg, "agentic").cold_start
    per_entry = agentic_entry_positions(cfg, episode) / c.cold_start_entry_positions  # x a code entry's cost
    bank_samples = cfg.agentic.bank_samples_per_task or cfg.bank.samples_per_task
    trained_entries = max(entries - held_out_entries(cold, bank_samples), 1.0)
    stage("cold_start_agentic", cold.steps * min(cold.batch_size, trained_entries) * c.cold_start_entry_s * per_entry
          + (2 * min(cold.eval_examples or trained_entries, trained_entries) + privilege_passes(cold, bank_samples))
          * c.cold_start_measure_s * per_entry if latent else 0.0)
    agentic_anchor_s = c.compose_s * agentic_compose_positions(cfg) / c.compose_positions if latent else 0.0
    for method in cfg.methods:
        name = "train_lopd_agentic" if method == "lopd" else f"train_agentic@{method}"
        if method == "vanilla":
            stage(name)
            continue
        update = shares["agentic"][method] * episode_update_s(c, method, latent, episode)
        work = a.steps * a.rollouts_per_step * (episode_s["grouped" if per_task[method] > 1 else "single"] + update)
        if method == "skill_sd":  # a skill summary per episode group after every step
            work += a.steps * a.rollouts_per_step / skill_sd.group_size * skill_sd.summary_tokens / c.train_rate
        if method == "lopd":  # c_phi0 of each task it trains on
            work += min(a.steps * a.rollouts_per_step, agentic["train_tasks"]) * agentic_anchor_s
        stage(name, work, samples=True)
    played = sum(agentic[name] for name in a.benchmarks)
    eval_episode_s = c.agentic_eval_episode_s or episode_s["grouped"]
    for method in cfg.methods:
        stage(f"eval_agentic@{method}", played * eval_episode_s, samples=played > 0)
    stage("eval_agentic_base_composer", played * (eval_episode_s + (c.compose_s if latent else 0.0)),
          samples=played > 0)
    stage("latent_decode")
    stage("report")
    assumptions = [
        f"training rollouts: {c.train_tokens:.0f} tokens on average; evaluation: "
        + ", ".join(f"{b} {t:.0f}" for b, t in c.eval_tokens.items()),
        f"agentic training episodes: {episode.steps:.1f} steps of {episode.step_tokens:.0f} tokens after a "
        f"{episode.context_tokens:.0f}-token prompt, {episode.sequence_tokens:.0f} tokens in all, "
        + ("seconds an episode (profile_rollouts.json): " + ", ".join(
            f"{AGENTIC_WORDS[shape]} {seconds:.1f}" + ("" if shape in c.agentic_play_s else " (as grouped)")
            for shape, seconds in episode_s.items()) if c.agentic_play_s else
           "at the training rate (profile_rollouts.json's lengths)")
        + f"; {episode.success:.0%} complete (tool_calls.json)",
        "agentic evaluations: " + (f"{c.agentic_eval_episode_s:.1f} s an episode, the benchmarks played together "
                                   "(agentic_eval.json)" if c.agentic_eval_episode_s else
                                   "the episodes above at the training rate"),
        f"trained rollouts: {share_note}",
        f"validation: {cfg.data.validation_tasks} tasks every {cfg.train.val_every} steps and the last, step 0 once "
        "for all methods (validate_base)",
        f"a forward pass alone: {TEACHER_FORWARD_SHARE:.2f} of the measured pass with backward (text-context "
        "teachers)",
        f"cold start: {cfg.cold_start.steps} steps of {cfg.cold_start.batch_size} bank entries, "
        f"{c.cold_start_entry_s:.1f} s an entry, its NLL measurement {c.cold_start_measure_s:.1f} s an entry (the "
        f"privilege's passes over {held_out_entries(cfg.cold_start, cfg.bank.samples_per_task):.1f} held-out entries "
        f"priced so; LOPD's anchors as composing a task, once a task it trains on) (tool use: "
        f"{for_domain(cfg, 'agentic').cold_start.steps} "
        f"steps, an entry's cost x{agentic_entry_positions(cfg, episode) / c.cold_start_entry_positions:.1f}, its "
        f"positions); Base + Composer: {c.compose_s:.1f} s to compose a task's "
        f"latent context (composer.json; agentic tasks priced as code ones); agentic bank: {entries:.1f} "
        f"successful episodes expected: {episode.bank_note}"
        + ("" if latent else "; so no latent context: LOPD's tool-use update is priced as a text teacher's "
                                   "(the stage trains as self-distillation)"),
        f"{processes} process(es) split rollouts and updates evenly; start-up ({c.startup_s:.0f} s a stage, and "
        f"{c.engine_start_s:.0f} s to start the rollout engine in a stage that samples) does not shrink",
        *(f"{k}: {v}" for k, v in c.sources.items())]
    return stage_s, {**counts, **{f"agentic.{k}": v for k, v in agentic.items()}}, assumptions


def estimate_learn(cfg: Config, costs: Costs, processes: int, section: str, bank: dict | None = None
                   ) -> tuple[dict[str, float], list[str]]:
    """Seconds per stage of a learning race (`section`: learn, the coding race; learn_tool, the tool-use race), and its
    assumptions: the selection's samples and step-0 measurement, then per run its steps (sampling, update) and its
    measurements (sampled at the training temperature, so at the training rate). A coding sample costs the training
    batch's mean tokens (capped at the race's budget) and its scoring; a tool-use episode what profile_rollouts.json
    measured it to cost in the play it is part of: a run's step as the tool-use training's step (in groups, or one per
    task), the selection's and the measurements' many tasks at once as the agentic bank's batch."""
    race = RACES[section]
    learn, c, share = race.settings(cfg), costs, 1 / processes
    if race.domain == "code":
        tokens = min(c.train_tokens, learn.max_new_tokens)
        per_sample = tokens / c.train_rate + c.sandbox_s
        play = dict.fromkeys(("many", "grouped", "single"), per_sample)
        trained_s = {method: tokens * c.update_s(method) for method in {run.method for run in learn.runs.values()}}
        train_tasks = code_counts(cfg)["train_tasks"]
        anchor_s = c.compose_s
        work = [f"race rollouts and measurement samples: {tokens:.0f} tokens on average (the training mean, capped at "
                f"{section}.max_new_tokens), sampled at the training rate"]
    else:
        episode = episodes(cfg, bank)
        episode_s = episode_seconds(c, episode)
        play = {"many": episode_s["bank"], "grouped": episode_s["grouped"], "single": episode_s["single"]}
        train_tasks = agentic_train_tasks(cfg)
        latent = agentic_bank_episodes(cfg, train_tasks) * episode.bank_success >= 1
        trained_s = {method: episode_update_s(c, method, latent, episode)
                     for method in {run.method for run in learn.runs.values()}}
        anchor_s = c.compose_s * agentic_compose_positions(cfg) / c.compose_positions if latent else 0.0
        work = [f"race episodes: as the tool-use training's measured, {episode.steps:.1f} steps of "
                f"{episode.step_tokens:.0f} tokens (at most agentic.max_step_tokens {cfg.agentic.max_step_tokens} "
                f"there; the race's per-step budget {section}.max_new_tokens {learn.max_new_tokens}), "
                f"{episode.sequence_tokens:.0f} sequence tokens to update on; seconds an episode: a step in groups "
                f"{play['grouped']:.1f}, one per task {play['single']:.1f}, the selection and the measurements (many "
                f"tasks at once) {play['many']:.1f}"
                + ("" if latent else "; LOPD's update priced as a text teacher's (no agentic bank entry expected)")]
    held_in = 0.5  # the held-in tasks are chosen for rewards that vary most: for 0/1 rewards, a pass rate near 1/2
    groups = {"grpo": cfg.section(GRPOConfig).group_size, "skill_sd": cfg.section(SkillSDConfig).group_size,
              "sdpo": cfg.section(SDPOConfig).group_size}
    candidates = min(learn.candidates or math.inf, train_tasks)
    measure_s = learn.tasks * learn.eval_samples * play["many"]
    fixed = c.startup_s + c.engine_start_s  # every race stage samples
    stage_s = {race.stage("select"): fixed + share * (candidates * learn.selection_samples * play["many"]
                                                      + measure_s)}
    for name, run in learn.runs.items():
        steps = run.steps or learn.steps
        group = groups.get(run.method, 1)
        mixed = 1 - held_in ** group - (1 - held_in) ** group
        trained = mixed if run.method == "grpo" else after_first_step(mixed, steps) if run.method == "skill_sd" else \
            (1 - (1 - held_in) ** (group - 1)) if run.method == "sdpo" else 1.0
        sampling = learn.rollouts_per_step * play["grouped" if group > 1 else "single"]
        update = learn.rollouts_per_step * trained * trained_s[run.method] + c.optimizer_s
        points = math.ceil(steps / learn.eval_every)  # step 0 is the select stage's
        summaries = learn.rollouts_per_step / group * cfg.section(SkillSDConfig).summary_tokens / c.train_rate \
            if run.method == "skill_sd" else 0.0  # a skill summary per rollout group after every step
        anchors = learn.tasks * anchor_s if run.method == "lopd" else 0.0  # c_phi0 of each held-in task, once
        stage_s[race.stage(name)] = fixed + share * (steps * (sampling + update + summaries) + c.first_optimizer_s
                                                     + points * measure_s + anchors)
    stage_s[race.stage("report")] = c.startup_s
    assumptions = [*work,
                   "held-in tasks pass half their samples (tool use: their rewards differ as often): a GRPO group is "
                   "mixed, an SDPO rollout has a successful sibling, 7 times in 8; Skill-SD as GRPO on its first step, "
                   "then every rollout"]
    return stage_s, assumptions


def domain_of(stage: str) -> str:
    return "agentic" if "agentic" in stage else "code"


def display(path: Path) -> str:
    """`path` relative to the repository where it lies in it: written files hold no machine's absolute path."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def recorded_run(path: Path) -> dict:
    """A recorded run's stage times (an output of scripts/wall_time.py)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        sys.exit(f"error: --record {path}: {err}")
    if not isinstance(record, dict) or not isinstance(record.get("stages"), dict):
        sys.exit(f"error: --record {path}: no `stages` (not an output of scripts/wall_time.py)")
    return record


def check(predicted: dict[str, float], record: dict) -> dict:
    """The estimate per domain against the recorded run (`domains`; n/a for a domain with stages the record lacks: a
    partial sum is no domain's time), and over the stages the record has, one by one and summed (`recorded_stages`:
    what a re-recording in progress can check). A stage timed together with others (its `includes`, e.g. a chain's
    commits) is compared with their estimates summed."""
    domains: dict[str, dict | str] = {}
    recorded_stages: dict[str, dict] = {}
    for domain in ("code", "agentic"):
        timed = {stage: {"recorded_s": entry["seconds"], "estimated_s": sum(
                     predicted.get(s, 0.0) for s in (stage, *entry.get("includes", ())))}
                 for stage, entry in record["stages"].items() if domain_of(stage) == domain}
        if timed:
            recorded_stages[domain] = {
                **compared(sum(e["recorded_s"] for e in timed.values()), sum(e["estimated_s"] for e in timed.values())),
                "stages": {stage: {k: round(v, 1) for k, v in e.items()} for stage, e in timed.items()}}
        lacking = [s for s in record.get("missing", []) if domain_of(s) == domain]
        domains[domain] = (
            f"n/a: the record lacks {len(lacking)} of its stages ({', '.join(lacking[:3])}, ...)" if lacking else
            compared(sum(e["recorded_s"] for e in timed.values()),
                     sum(s for stage, s in predicted.items() if domain_of(stage) == domain)))
    return {"recorded_run": record["written"], "tolerance": CHECK_TOLERANCE, "domains": domains,
            "recorded_stages": recorded_stages}


def compared(recorded_s: float, estimated_s: float) -> dict:
    """Estimated against recorded seconds: their ratio and whether it is within the check's tolerance."""
    ratio = round(estimated_s / recorded_s, 3)
    return {"recorded_s": round(recorded_s), "estimated_s": round(estimated_s), "ratio": ratio,
            "within_tolerance": abs(ratio - 1) <= CHECK_TOLERANCE}


def recorded_matmul(record: dict) -> str:
    """The float32 matmul path the recorded run's updates took, as its record says (scripts/wall_time.py)."""
    return record.get("cpu_matmul", UNNAMED_MATMUL)


def recorded_malloc(record: dict) -> str:
    """How glibc served the recorded run's tensors, as its record says (scripts/wall_time.py)."""
    return record.get("malloc", UNNAMED_MALLOC)


def recorded_sampler(record: dict) -> str:
    """The CPU sampler the recorded run sampled with, as its record says (scripts/wall_time.py)."""
    return record.get("sampler", UNNAMED_SAMPLER)


def eval_play_ratio(bench: dict, summaries: list[dict]) -> dict | None:
    """How much slower the benchmarks' machine played an agentic evaluation than the recording one: agentic_eval.json's
    `together` entry (with its `benchmarks`) against the recorded evaluation's per-benchmark summaries, or None where
    that evaluation did not play the same benchmarks together (a run before 2026-12-02 played them apart)."""
    if not summaries or any(sorted(s.get("played_together") or []) != sorted(bench["benchmarks"]) for s in summaries):
        return None
    recorded_s = summaries[0]["wall_s"]  # the benchmarks' shared play, in each summary
    return {"bench_s": round(bench["wall_s"], 1), "recorded_s": recorded_s, "bench_policy_steps": bench["policy_steps"],
            "recorded_policy_steps": sum(s["n_policy_steps"] for s in summaries),
            "ratio": round(bench["wall_s"] / recorded_s, 3)}


def machine_ratios(record: dict, profile: str, machine_rollouts: Path | None = None) -> dict[str, dict | str]:
    """Per domain, how much slower the benchmarks' machine sampled than the machine that recorded the run, with the
    same sampler: given `machine_rollouts` (that machine's scripts/bench/bench_profile_rollouts.py --parts train_step
    agentic), the same work timed on both (`rollout_ratios`); else from the record, code: profile_rollouts.json's
    training step against the recorded GRPO run's first step (plots/train/grpo.json), other tasks (the benchmark takes
    the first training tasks, the loop a seeded permutation's) and so only where the two are as long (mean tokens
    within 1); agentic: agentic_eval.json's benchmarks played together against the recorded Vanilla evaluation's play
    (results/agentic/eval/vanilla/), where that run played them together (else the code domain's ratio, said so).
    A diagnostic of the check only: the estimate never reads a recorded run."""
    if machine_rollouts is not None:
        ratios = rollout_ratios(machine_rollouts, profile)
    else:
        ratios = recorded_ratios(record, profile)
    for domain, ratio in ratios.items():
        if isinstance(ratio, dict):  # the stages of its domain timed on another CPU than the ratio's (wall_time.py)
            ratio["stages_on_other_machines"] = [
                stage for stage, entry in record["stages"].items()
                if domain_of(stage) == domain and entry.get("machine", "an unnamed CPU") != ratio["machine"]]
    return ratios


def recorded_ratios(record: dict, profile: str) -> dict[str, dict | str]:
    """`machine_ratios` from the record itself: its first GRPO step and its Vanilla tool-use evaluation."""
    ratios: dict[str, dict | str] = {}
    history = recorded_file(record, "train@grpo", "plots/train/grpo.json")
    entry = read("profile_rollouts.json")[profile]
    bench = sampled_parts(entry, recorded_sampler(record))["train_step"]
    as_recorded = malloc_factors(entry.get("malloc", UNNAMED_MALLOC), recorded_malloc(record))["step"]
    first = json.loads(history)[0] if history is not None else None
    if first is None:
        ratios["code"] = "n/a: the record has no train@grpo"
    elif abs(first["completions/mean_length"] - bench["mean_tokens"]) >= 1:
        ratios["code"] = (f"n/a: the record's first GRPO batch is not as long as the benchmark's training step ("
                          f"{first['completions/mean_length']:.1f} tokens on average against {bench['mean_tokens']}); "
                          f"--record-rollouts times the same work on both machines")
    else:
        recorded_s = first["time_sampling_s"] + first["time_reward_s"]
        ratios["code"] = {"bench_s": bench["wall_s"], "recorded_s": round(recorded_s, 1),
                          "bench_mean_tokens": bench["mean_tokens"],
                          "recorded_mean_tokens": first["completions/mean_length"],
                          "bench_malloc_factor": round(as_recorded, 3),
                          "ratio": round(bench["wall_s"] * as_recorded / recorded_s, 3),
                          "work": "a first GRPO batch as long as the benchmark's training step (other tasks)",
                          "machine": record["stages"]["train@grpo"].get("machine", "an unnamed CPU")}
    measured = read("agentic_eval.json")[profile]
    played_as_recorded = malloc_factors(measured.get("malloc", UNNAMED_MALLOC), recorded_malloc(record))["step"]
    together = {**measured["together"], "wall_s": measured["together"]["wall_s"] * played_as_recorded,
                "benchmarks": measured["benchmarks"]}
    files = [recorded_file(record, "eval_agentic@vanilla", f"results/agentic/eval/vanilla/{b}.json")
             for b in together["benchmarks"]]
    played = None if None in files else eval_play_ratio(together, [json.loads(f)["summary"] for f in files])
    if played is not None:
        ratios["agentic"] = {**played, "work": "the base model's evaluation, its benchmarks played together",
                             "machine": record["stages"]["eval_agentic@vanilla"].get("machine", "an unnamed CPU")}
    elif isinstance(ratios["code"], dict):
        ratios["agentic"] = {**ratios["code"], "work": "the code domain's (the record's Vanilla evaluation played its "
                                                       "benchmarks apart, or is not in it)"}
    else:
        ratios["agentic"] = "n/a: the record has no eval_agentic@vanilla played together, and the code domain no ratio"
    return ratios


def same_work(bench: dict, there: dict, count: str) -> str | None:
    """Why two timings of one benchmark part are not the same work (None where they are): another number of `count`
    (rollouts, episodes), or sampled token counts further apart than SAME_WORK_TOKENS."""
    if bench[count] != there[count]:
        return f"{there[count]} {count} against the benchmark's {bench[count]}"
    if abs(there["sampled_tokens"] - bench["sampled_tokens"]) > SAME_WORK_TOKENS * bench["sampled_tokens"]:
        return f"{there['sampled_tokens']} sampled tokens against the benchmark's {bench['sampled_tokens']}"
    return None


def rollout_ratios(machine_rollouts: Path, profile: str) -> dict[str, dict | str]:
    """`machine_ratios` from the recording machine's profile_rollouts (`machine_rollouts`): its code and agentic
    training steps against profile_rollouts.json's, the same tasks, seeds and sampler on both machines."""
    try:
        there = json.loads(machine_rollouts.read_text())[profile]
        missing = [key for key in ("sampler", "train_step", "agentic_train_step") if key not in there]
    except (OSError, ValueError, KeyError, TypeError) as err:
        missing, there = [f"its {profile} profile ({type(err).__name__}: {err})"], {}
    if missing:
        sys.exit(f"error: --record-rollouts {machine_rollouts}: no {', '.join(missing)} (scripts/bench/"
                 f"bench_profile_rollouts.py --profile {profile} --parts train_step agentic --out FILE)")
    here = read("profile_rollouts.json")[profile]
    if there["sampler"] != here.get("sampler", UNNAMED_SAMPLER):
        sys.exit(f"error: --record-rollouts {machine_rollouts}: sampled with {there['sampler']}, "
                 f"profile_rollouts.json with {here.get('sampler', UNNAMED_SAMPLER)}")
    ratios: dict[str, dict | str] = {}
    # the same work at the other machine's malloc mode (a file without the key measured mapped)
    as_there = malloc_factors(here.get("malloc", UNNAMED_MALLOC), there.get("malloc", UNNAMED_MALLOC))["step"]
    for domain, part, count in (("code", "train_step", "rollouts"), ("agentic", "agentic_train_step", "episodes")):
        other = same_work(here[part], there[part], count)
        ratios[domain] = f"n/a: {display(machine_rollouts)}'s {part} is not the same work: {other}" if other else {
            "bench_s": here[part]["wall_s"], "recorded_s": there[part]["wall_s"],
            "bench_sampled_tokens": here[part]["sampled_tokens"],
            "recorded_sampled_tokens": there[part]["sampled_tokens"], "bench_malloc_factor": round(as_there, 3),
            "ratio": round(here[part]["wall_s"] * as_there / there[part]["wall_s"], 3),
            "work": f"the benchmark's {part}, timed on both machines ({display(machine_rollouts)})",
            "machine": there.get("machine", "an unnamed CPU")}
    return ratios


def recorded_config(record: dict) -> Config:
    """The config the recorded run ran: params.yaml at the commit of its last stage (its stages' commits all resolve
    alike; keys added since at their defaults, `resolve_recorded`). Like with like: params changed since (e.g.
    data.validation_tasks 32 -> 96, agentic.envscaler_task_limit 48) change the estimate of a run to come, not of the
    one recorded."""
    commit = max(record["stages"].values(), key=lambda entry: entry["finished"])["commit"]
    text = subprocess.run(["git", "show", f"{commit}:params.yaml"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout
    return resolve_recorded(yaml.safe_load(text))


def recorded_file(record: dict, stage: str, path: str) -> str | None:
    """`path` as committed with the record's `stage`: the first commit that changed it after that stage finished, so
    a re-recording in progress does not replace it (the working tree's if none has); None if the record lacks it."""
    if stage not in record["stages"]:
        return None
    finished = record["stages"][stage]["finished"]
    commits = subprocess.run(["git", "log", "--reverse", f"--after={finished}", "--format=%H", "--", path], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    if not commits:
        return (REPO / path).read_text()
    return subprocess.run(["git", "show", f"{commits[0]}:{path}"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout


def at_speed(costs: Costs, factor: float, updates: dict | None = None) -> Costs:
    """`costs` with every sampling rate `factor` times as fast (prefill included) and, given `updates`
    (`update_ratios`), every update pass `updates["ratio"]` and every AdamW step `updates["adamw_ratio"]` times as
    fast."""
    update, adamw = (updates["ratio"], updates["adamw_ratio"]) if updates else (1.0, 1.0)
    return dataclasses.replace(costs, train_rate=costs.train_rate * factor,
                               validation_rate=costs.validation_rate * factor,
                               eval_rate={b: r * factor for b, r in costs.eval_rate.items()},
                               prefill_rate=costs.prefill_rate * factor,
                               agentic_play_s={shape: s / factor for shape, s in costs.agentic_play_s.items()},
                               agentic_eval_episode_s=costs.agentic_eval_episode_s and
                               costs.agentic_eval_episode_s / factor,
                               student_s=costs.student_s / update, teacher_s=costs.teacher_s / update,
                               composer_s=costs.composer_s / update, lopd_s=costs.lopd_s / update,
                               compose_s=costs.compose_s / update,
                               cold_start_entry_s=costs.cold_start_entry_s / update,
                               cold_start_measure_s=costs.cold_start_measure_s / update,
                               agentic_update_s={k: v / update for k, v in costs.agentic_update_s.items()},
                               optimizer_s=costs.optimizer_s / adamw,
                               first_optimizer_s=costs.first_optimizer_s / adamw)


def update_ratios(machine_cpu: Path, matmul: str) -> dict:
    """How much slower the benchmarks' machine updates than the recording one, on the same work: cpu.json's update
    through the recorded run's float32 matmul path and its fused AdamW step against the same in `machine_cpu`, that
    machine's `make bench` (scripts/bench/bench_cpu.py --out)."""
    try:
        there = json.loads(machine_cpu.read_text())
        there_update, there_adamw = there["update"]["paths"][f"fp32_{matmul}"]["update_s"], there["adamw"]["fused"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        sys.exit(f"error: --record-cpu {machine_cpu}: no fp32_{matmul} update and fused AdamW step of "
                 f"scripts/bench/bench_cpu.py ({type(err).__name__}: {err})")
    here = read("cpu.json")
    here_update, here_adamw = here["update"]["paths"][f"fp32_{matmul}"]["update_s"], here["adamw"]["fused"]
    # the same work at the other machine's malloc mode (a file without the key measured mapped)
    as_there = malloc_factors(here.get("malloc", UNNAMED_MALLOC), there.get("malloc", UNNAMED_MALLOC))["update"]
    return {"file": display(machine_cpu), "cpu": there.get("cpu"), "bench_update_s": here_update,
            "recorded_machine_update_s": there_update, "bench_malloc_factor": round(as_there, 3),
            "ratio": round(here_update * as_there / there_update, 3),
            "adamw_ratio": round(here_adamw["step_s"] / there_adamw["step_s"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--gpus", type=int, default=1, help="processes: one per GPU (on a CPU, one)")
    parser.add_argument("--gpu", choices=("cpu", *GPU_NAMES), default="cpu", help="the machine")
    parser.add_argument("--mean-tokens", type=float, help="a training rollout's mean length, for a profile that "
                                                          "profile_rollouts.json has not measured")
    parser.add_argument("--eval-mean-tokens", type=float, help="the same for an evaluation completion")
    parser.add_argument("--check", action="store_true", help="compare with the recorded default run")
    parser.add_argument("--record", type=Path, default=CHECK_RECORD,
                        help="the recorded run --check compares with (an output of scripts/wall_time.py; default: "
                             f"{display(CHECK_RECORD)}, the newest of today's code timed on one machine)")
    parser.add_argument("--record-cpu", type=Path, help="the recording machine's `make bench` (scripts/bench/"
                        "bench_cpu.py --out): --check's updates at that machine's speed")
    parser.add_argument("--record-rollouts", type=Path, help="the recording machine's scripts/"
                        "bench/bench_profile_rollouts.py --parts train_step agentic --out FILE: --check's sampling "
                        "speed from the same work (the default --record's: profile_rollouts.json)")
    args = parser.parse_args()
    if args.gpus < 1:
        sys.exit("error: --gpus: must be >= 1")
    cfg = resolve({"profile": args.profile})
    costs = cpu_costs(cfg, args.mean_tokens, args.eval_mean_tokens, on_gpu=args.gpu != "cpu")
    if args.gpu != "cpu":
        costs = gpu_costs(cfg, args.gpu, costs)
    bank = built_bank(cfg)
    predicted, counts, assumptions = estimate(cfg, costs, args.gpus, bank)
    print(f"Estimated wall time of dvc repro: profile {cfg.profile}, {args.gpus} x {args.gpu}")
    print("Assumptions (from reports/perf/ unless stated):")
    print("".join(f"  - {line}\n" for line in assumptions), end="")
    print("Work: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    width = max(map(len, predicted))
    for stage, seconds in predicted.items():
        print(f"  {stage:<{width}} {seconds / 60:8.1f} min")
    for domain in ("code", "agentic"):
        total = sum(s for stage, s in predicted.items() if domain_of(stage) == domain)
        print(f"  {domain + ' domain':<{width}} {total / 3600:8.2f} h")
    print(f"  {'total':<{width}} {sum(predicted.values()) / 3600:8.2f} h")
    reads = {"learn": "prepare_model, build_bank, build_pool, cold_start",
             "learn_tool": "prepare_model, build_bank_agentic, build_pool_agentic, cold_start_agentic"}
    races = {}
    for section, name in (("learn", "make learn's code race"), ("learn_tool", "make learn-tool")):
        race, race_assumptions = races[section] = estimate_learn(cfg, costs, args.gpus, section, bank)
        print(f"Estimated wall time of {name} (pipelines/learn/dvc.yaml; beside the stages above it reads: "
              f"{reads[section]}):")
        print("".join(f"  - {line}\n" for line in race_assumptions), end="")
        for stage, seconds in race.items():
            print(f"  {stage:<{width}} {seconds / 60:8.1f} min")
        print(f"  {section + ' race':<{width}} {sum(race.values()) / 3600:8.2f} h")
    print(f"  {'make learn (both)':<{width}} {sum(sum(r.values()) for r, _ in races.values()) / 3600:8.2f} h")
    if args.check:
        record = recorded_run(args.record)
        sampler, matmul = recorded_sampler(record), recorded_matmul(record)
        ran = recorded_config(record)
        malloc = recorded_malloc(record)
        as_recorded = cpu_costs(ran, args.mean_tokens, args.eval_mean_tokens, sampler=sampler, matmul=matmul,
                                malloc=malloc)
        ran_bank = recorded_file(record, "build_bank_agentic", BANK_RECORD)
        ran_bank = json.loads(ran_bank)["build_bank_agentic"] if ran_bank else None
        result = {**check(estimate(ran, as_recorded, args.gpus, ran_bank)[0], record), "record": display(args.record),
                  "sampler": sampler, "cpu_matmul": matmul, "malloc": malloc,
                  "validation_tasks": ran.data.validation_tasks}
        default_pair = args.record.resolve() == CHECK_RECORD.resolve()  # timed where and when the benchmarks were
        machine = machine_ratios(record, cfg.profile,
                                 args.record_rollouts or (CHECK_RECORD_ROLLOUTS if default_pair else None))
        result["machine"] = machine
        updates = update_ratios(args.record_cpu, matmul) if args.record_cpu else (
            f"n/a: no --record-cpu; updates at the benchmarks' machine's rates through {matmul}")
        result["updates"] = updates
        at_machine_speed = {
            domain: check(estimate(ran, at_speed(as_recorded, ratio["ratio"], updates if isinstance(updates, dict)
                                                 else None), args.gpus, ran_bank)[0], record)
            for domain, ratio in machine.items() if isinstance(ratio, dict)}
        result["at_recorded_machine_speed"] = {
            domain: at_machine_speed[domain]["domains"][domain] if domain in at_machine_speed else ratio
            for domain, ratio in machine.items()}
        result["recorded_stages_at_recorded_machine_speed"] = {
            domain: c["recorded_stages"][domain] for domain, c in at_machine_speed.items()
            if domain in c["recorded_stages"]}
        out = PERF / f"estimate_check.{args.record.stem}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"check against {display(args.record)}: the recorded run's params ({ran.data.validation_tasks} "
              f"validation tasks), from the rates of its sampler ({sampler}), float32 matmul path ({matmul}) and "
              f"glibc's malloc ({malloc})")
        for speed, domains, stages in (
                ("the benchmarks' machine", result["domains"], result["recorded_stages"]),
                ("the recording machine", result["at_recorded_machine_speed"],
                 result["recorded_stages_at_recorded_machine_speed"])):
            for domain, entry in domains.items():
                print(f"check {domain} at {speed}'s speed: " + (entry if isinstance(entry, str) else
                      f"estimated {entry['estimated_s'] / 3600:.2f} h, recorded {entry['recorded_s'] / 3600:.2f} h: "
                      f"x{entry['ratio']} ({'within' if entry['within_tolerance'] else 'outside'} "
                      f"+-{CHECK_TOLERANCE:.0%})"))
                if isinstance(entry, str) and domain in stages:
                    part = stages[domain]
                    print(f"  over the {len(part['stages'])} stages it has: estimated {part['estimated_s'] / 60:.1f} "
                          f"min, recorded {part['recorded_s'] / 60:.1f} min: x{part['ratio']} "
                          f"({'within' if part['within_tolerance'] else 'outside'} +-{CHECK_TOLERANCE:.0%}); "
                          + ", ".join(f"{s} {e['estimated_s'] / 60:.1f}/{e['recorded_s'] / 60:.1f}"
                                      for s, e in part["stages"].items()))
        for domain, ratio in machine.items():
            print(f"{domain} speed: " + (ratio if isinstance(ratio, str) else
                  f"{ratio['work']}: {ratio['bench_s']} s on the benchmarks' machine, {ratio['recorded_s']} s on "
                  f"{ratio['machine']} (x{ratio['ratio']})" + (
                      f"; timed on other CPUs: {', '.join(ratio['stages_on_other_machines'])}"
                      if ratio["stages_on_other_machines"] else "")))
        print("update speed: " + (updates if isinstance(updates, str) else
              f"cpu.json's update {updates['bench_update_s']} s on the benchmarks' machine, "
              f"{updates['recorded_machine_update_s']} s in {updates['file']} (x{updates['ratio']}; AdamW's step "
              f"x{updates['adamw_ratio']})"))
        print(f"wrote {display(out)}")

if __name__ == "__main__":
    main()
