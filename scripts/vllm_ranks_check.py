"""vLLM on every process (colocate) check: run under torchrun with N processes.

Each process builds its own in-process engine (`sampling.backend: vllm`, float32, prompt embeddings on) next to its
trainer, on its own device (`lopd.core.device`: the CPU with gloo, or one GPU per process with NCCL), and writes to
WORK_DIR/rank<r>.pt:
- "push": a student sharded over the processes (FSDP2) takes one AdamW step on its engine's samples and is pushed to
  the engine by `full_parameters` (one gathered tensor at a time); then the sampled tokens' log-probs from the engine,
  from an fp32 forward of the gathered weights and of the weights before the step; and whether `full_parameters`
  gave what `full_state_dict` gives;
- "embeds": greedy tokens from the prompts' ids and from their input embeddings (latent context's path);
- "step": this process's rollouts of step STEP (its share of `tasks_for_step`, split as the loop splits it); the last
  process then samples once more than the others (sampling must not wait for them);
- "grpo" (DDP), "lopd" (FSDP2): 2 steps through `lopd.core.loop.train` with the vllm backend: history, full weights,
  β, and how far the loop's engine, after training, is from an fp32 forward of the trained weights.
tests/test_vllm_multiprocess.py runs it with 2 CPU processes on a tiny model with 32-dim heads (vLLM's CPU attention
does not take tiny-random's 16).

Usage: python -m torch.distributed.run --nproc_per_node N scripts/vllm_ranks_check.py MODEL_DIR WORK_DIR
(WORK_DIR/bank and WORK_DIR/composer must exist: ddp_check.prepare_inputs; MLflow store: LOPD_MLFLOW_URI.)
"""

import argparse
import sys
from pathlib import Path

import torch
from accelerate import PartialState

from baselines.grpo import GRPO
from evaluation.coding.code_blocks import extract_code
from lopd.core import loop
from lopd.core.config import resolve
from lopd.core.device import device
from lopd.core.distributed import full_parameters, full_state_dict, shard
from lopd.core.domain import Domain
from lopd.core.models import load_model, load_tokenizer
from lopd.core.rollout import encode_prompt, make_backend, sampling_params, single_turn, step_seed
from lopd.core.sampling import SamplingParams
from lopd.latent.method import LOPD

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by a test
from ddp_check import TASKS, overrides, score  # noqa: E402

PARAMS = SamplingParams(temperature=0.7, top_p=0.95, top_k=20, max_new_tokens=16)
GREEDY = SamplingParams(temperature=0.7, top_p=1.0, top_k=1, max_new_tokens=16)
STEP, STEP_TASKS, ROLLOUTS_PER_TASK = 1, 4, 2
"""The step whose rollouts "step" records, its task count and rollouts per task."""
KV_CACHE_GIB = 0.25


def config(sharding: str = "ddp"):
    """ddp_check's smoke overrides with a float32 vLLM engine and an fp32 trainer (no autocast): the engine's
    log-probs then equal the trainer's up to summation order."""
    base = overrides()
    return resolve({**base, "train": {**base["train"], "sharding": sharding, "mixed_precision": "no"},
                    "sampling": {"backend": "vllm", "dtype": "float32", "kv_cache_gib": KV_CACHE_GIB}})


def logprobs(model: torch.nn.Module, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """log softmax(z / T) of `tokens` after `prompt` in one fp32 forward: what the trainer computes."""
    ids = torch.tensor([prompt + tokens], device=device())
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens, device=ids.device)[:, None]).squeeze(-1)


@torch.no_grad()
def sampled_logprobs(engine, models: dict[str, torch.nn.Module], prompts: list[list[int]], seed: int) -> dict:
    """The engine's log-probs of its own samples ("engine") and each model's of the same tokens, per prompt."""
    samples = engine.generate(prompts, PARAMS, seed)
    out = {"engine": [torch.tensor(c.logprobs) for c in samples]}
    for name, model in models.items():
        out[name] = [logprobs(model.eval(), p, c.token_ids, PARAMS.temperature).cpu() for p, c in zip(prompts, samples)]
    return out


def gathered(weights: dict[str, torch.Tensor], model_dir: str) -> torch.nn.Module:
    model = load_model(model_dir).to(device())
    model.load_state_dict(weights)
    return model


def push(engine, model_dir: str, prompts: list[list[int]], rank: int) -> tuple[dict, torch.nn.Module]:
    """One AdamW step of a sharded student raising the log-prob of its engine's samples, pushed to the engine; the
    log-probs after it, and the stepped student gathered into a plain model."""
    student = load_model(model_dir).to(device())
    shard(student)
    before = load_model(model_dir).to(device())
    samples = engine.generate(prompts, PARAMS, seed=5 + rank)
    loss = -sum(logprobs(student, p, c.token_ids, PARAMS.temperature).sum() for p, c in zip(prompts, samples))
    loss.backward()
    torch.optim.AdamW(student.parameters(), lr=1e-2).step()
    engine.load_weights(full_parameters(student))
    pairs, full = list(full_parameters(student)), full_state_dict(student)
    trainer = gathered(full, model_dir)
    return {**sampled_logprobs(engine, {"trainer": trainer, "before": before}, prompts, seed=7 + rank),
            "same_as_full_state_dict": [n for n, _ in pairs] == list(full)
            and all(torch.equal(t, full[n]) for n, t in pairs)}, trainer


def embeds(engine, trainer: torch.nn.Module, prompts: list[list[int]]) -> dict:
    """Greedy tokens from the prompts' ids and from their own input embeddings (the engine's current weights')."""
    with torch.no_grad():
        rows = [trainer.get_input_embeddings()(torch.tensor(p, device=device())) for p in prompts]
    return {"ids": [c.token_ids for c in engine.generate(prompts, GREEDY, seed=0)],
            "embeds": [c.token_ids for c in engine.generate(prompts, GREEDY, seed=0, embeds=rows)]}


def step_rollouts(engine, tokenizer, rank: int, world: int) -> dict:
    """This process's rollouts of step STEP, as the loop samples them."""
    cfg = config()
    mine = loop.tasks_for_step(TASKS, STEP_TASKS, cfg.seed, STEP)[rank::world]
    played = single_turn(score)(engine, tokenizer, mine, sampling_params(cfg, cfg.sampling.max_new_tokens),
                                step_seed(cfg.seed, STEP, rank), ROLLOUTS_PER_TASK)
    return {"task_ids": [t.task_id for t in played], "prompts": [t.turns[0].context_ids for t in played],
            "completions": [t.turns[0].action_ids for t in played]}


def trained(name: str, method, cfg, model_dir: str, work: Path, prompts: list[list[int]]) -> dict:
    """2 steps through the loop; the student's full weights after them and how far the loop's engine is from them."""
    kept = {}
    setup, real_make_backend = method.setup, loop.make_backend

    def keep_student(ctx):
        kept["student"] = ctx.student
        setup(ctx)

    def keep_backend(*args, **kwargs):
        kept["backend"] = real_make_backend(*args, **kwargs)
        return kept["backend"]

    method.setup, loop.make_backend = keep_student, keep_backend
    try:
        history = loop.train(cfg, method, TASKS, single_turn(score), model_dir, work / "runs" / name)["history"]
    finally:
        loop.make_backend = real_make_backend
    weights = {k: v.detach().cpu().clone() for k, v in full_state_dict(kept["student"]).items()}
    models = {"trainer": gathered(weights, model_dir), "base": load_model(model_dir).to(device())}
    probe = sampled_logprobs(kept["backend"], models, prompts, seed=11)
    gap = {name: max((a - b).abs().max().item() for a, b in zip(probe["engine"], probe[name])) for name in models}
    return {"history": history, "weights": weights, "backend": type(kept["backend"]).__name__, "gap": gap,
            "beta": getattr(method, "beta", None)}


def main() -> None:
    parser = argparse.ArgumentParser(description="a vLLM engine on every process: weight push, split, training")
    parser.add_argument("model_dir")
    parser.add_argument("work", type=Path)
    args = parser.parse_args()
    model_dir, work = args.model_dir, args.work
    device()  # the process state as training sets it up (on the CPU, accelerate needs cpu=True to go multi-process)
    state = PartialState()
    rank, world = state.process_index, state.num_processes
    tokenizer = load_tokenizer(model_dir)
    prompts = [encode_prompt(tokenizer, t.messages) for t in TASKS[:4]]
    engine = make_backend(model_dir, tokenizer, config(), batch_size=8, prompt_embeds=True)
    out = {"backend": type(engine).__name__, "step": step_rollouts(engine, tokenizer, rank, world)}
    out["push"], trainer = push(engine, model_dir, prompts, rank)
    out["embeds"] = embeds(engine, trainer, prompts)
    if rank == world - 1:
        engine.generate(prompts, PARAMS, seed=13)
    cfg = config()
    domain = Domain.scratch(work, "code", extract_code)  # the bank and composer prepared in WORK_DIR
    out["grpo"] = trained("grpo", GRPO(cfg, domain), cfg, model_dir, work, prompts)
    cfg = config("fsdp2")
    lopd = LOPD(cfg, domain)
    out["lopd"] = trained("lopd", lopd, cfg, model_dir, work, prompts)
    torch.save(out, work / f"rank{rank}.pt")


if __name__ == "__main__":
    main()
