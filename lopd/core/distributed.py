"""What several processes need beyond a single one: their metrics reduced, the student sharded (FSDP2) and its full
weights (also one tensor at a time, for the rollout engine) and optimizer state gathered, the check that the step's
tasks split evenly, and a stage's work split into shares and gathered back in order (the bank, the evaluations).

Under DDP (accelerate's wrapper) and FSDP2 (`shard`) alike: every function here that gathers is collective, so every
process calls it.
"""

from __future__ import annotations

from typing import Iterator

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Partial

from lopd.core.adapters import is_lora, merged_parameters


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside accelerate's DDP wrapper (itself when unwrapped or sharded in place)."""
    return getattr(model, "module", model)


class ProcessSplitError(ValueError):
    """The step's tasks do not split evenly over the processes."""


TOKEN_MEANS = ("sampler_logp_abs_gap", "entropy")
"""Step metrics that are means over action tokens (weighted by each process's token count when reduced); every
other update metric is a mean over trajectories, and every process holds as many."""


def shard(model: torch.nn.Module) -> None:
    """FSDP2, in place: each decoder layer, then the root (the embedding, tied to the output projection, and the
    final norm). Every process then holds 1/world of each weight, gradient and AdamW moment (float32 master weights;
    the forward runs under the loop's bf16 autocast, as under DDP). The root reshards after its forward like the
    layers (FSDP2 keeps a root gathered by default): the loss reads the output projection after the forward, as a
    gathered copy of its own (`output_weight`), since the backward frees the root's gathered weights while the
    step's metrics still read it."""
    for layer in model.get_decoder().layers:
        fully_shard(layer)
    fully_shard(model, reshard_after_forward=True)


def output_weight(model: torch.nn.Module) -> torch.Tensor:
    """The output embedding [V, D] the loss projects onto the vocabulary with, differentiable. An FSDP2 shard
    (DTensor) is gathered to the full tensor (collective); its gradient flows back reduce-scattered and averaged over
    processes (Partial avg), like FSDP's reduction of the forward's gradients, into the same sharded gradient."""
    weight = unwrap(model).get_output_embeddings().weight
    if isinstance(weight, DTensor):
        return weight.full_tensor(grad_placements=[Partial("avg")] * len(weight.placements))
    return weight


def reduce_metrics(metrics: dict[str, float], action_tokens: float) -> dict[str, float]:
    """The step's metrics over all processes: trajectory means averaged (each process holds as many trajectories),
    `TOKEN_MEANS` weighted by each process's action tokens; a key some process lacks is averaged over those with it."""
    per_process = gather_object([(metrics, action_tokens)])
    out = {}
    for key in sorted({k for m, _ in per_process for k in m}):
        pairs = [(m[key], n if key in TOKEN_MEANS else 1.0) for m, n in per_process if key in m]
        weight = sum(w for _, w in pairs)
        out[key] = sum(v * w for v, w in pairs) / weight if weight else 0.0
    return out


def synchronise_only(model: torch.nn.Module, params: list[torch.nn.Parameter]) -> None:
    """Have the DDP wrapper `accelerator.prepare` puts around `model` all-reduce the gradients of `params` alone: a LoRA
    student's adapter. Another adapter on its base (LOPD's encoder) gets its gradient outside the student's forward,
    in some micro-batches only, and is averaged with the method's own parameters instead."""
    from torch.nn.parallel import DistributedDataParallel

    keep = {id(p) for p in params}
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, [name for name, p in model.named_parameters() if id(p) not in keep])


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's complete weights on every process, whatever wraps them (DDP, FSDP shards are gathered; a LoRA
    student merged): what a checkpoint saves and what the rollout engine loads. Collective: every process must call
    it."""
    if is_lora(model):
        return dict(merged_parameters(model))
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def full_parameters(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """`full_state_dict`'s (name, tensor) pairs one at a time, for a weight push that never holds a second full copy
    of the policy: a plain tensor is the model's own (detached, no copy), an FSDP2 shard is gathered when its turn
    comes (collective: every process must run the generator to its end). Tied weights come under both names, as in
    the state dict (HFBackend loads both; vLLM skips the tied output projection). A LoRA student's are merged
    (`adapters.merged_parameters`)."""
    if is_lora(model):
        yield from merged_parameters(model)
        return
    for name, tensor in unwrap(model).state_dict(keep_vars=True).items():
        tensor = tensor.detach()
        yield name, tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _optimized(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.nn.Module:
    """A module naming every parameter the optimizer steps (the student's, then the method's own, e.g. LOPD's
    composer), for torch's shard-aware optimizer state dicts, which key parameters by name."""
    owner = torch.nn.Module()
    owner.student = model
    owner.method = torch.nn.ParameterList([p for group in optimizer.param_groups[1:] for p in group["params"]])
    return owner


def full_optimizer_state(model: torch.nn.Module, optimizer) -> dict:
    """A sharded student's optimizer state, gathered (collective) into `optimizer.state_dict()`'s own layout
    (parameters numbered in param-group order), so a checkpoint is the same whatever the sharding. The full tensors
    go to the CPU of the main process only (elsewhere the state is empty)."""
    optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper
    full = get_optimizer_state_dict(_optimized(model, optimizer), optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not full:  # not the main process
        return {}
    number = {name: i for i, name in enumerate(name for group in full["param_groups"] for name in group["params"])}
    return {"state": {number[name]: state for name, state in full["state"].items()},
            "param_groups": [{**group, "params": [number[name] for name in group["params"]]}
                             for group in full["param_groups"]]}


def load_full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a full optimizer state (`optimizer.state_dict()`'s layout, as every checkpoint holds) into a sharded
    student's optimizer: each process keeps its own shards of it (collective)."""
    owner = _optimized(model, optimizer)
    names = {id(p): name for name, p in owner.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    set_optimizer_state_dict(owner, optimizer, {
        "state": {order[i]: s for i, s in state["state"].items()},
        "param_groups": [{**group, "params": [order[i] for i in group["params"]]} for group in state["param_groups"]],
    }, options=StateDictOptions(full_state_dict=True))


def process_share(n: int) -> range:
    """The indices of this process's share of `n` items (a benchmark's prompts, a bank's tasks): every world-th one
    from its rank on; all of them in one process."""
    state = PartialState()
    return range(state.process_index, n, state.num_processes)


def gather_shares(share: list, n: int) -> list:
    """Every process's results for its `process_share` of `n` items, back in item order, on every process
    (collective; the list itself in one process)."""
    if PartialState().num_processes == 1:
        return list(share)
    return interleave(gather_object([list(share)]), n)


def interleave(parts: list[list], n: int) -> list:
    """The `n` items whose every len(parts)-th one from index r on is in parts[r] (`process_share`), in item order."""
    return [parts[i % len(parts)][i // len(parts)] for i in range(n)]


def check_split(tasks_per_step: int, world: int) -> None:
    if tasks_per_step % world:
        raise ProcessSplitError(f"train.rollouts_per_step: {tasks_per_step} tasks per step do not split evenly over "
                                f"{world} processes (make the tasks per step a multiple of the process count)")
