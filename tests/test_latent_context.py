"""Base + Composer: the base model reads each task with the latent context LOPD's composer builds from its retrieved
bank entries, through a wrapper around any rollout backend (single-turn prompts and multi-turn continuations)."""

import numpy as np
import pytest
import torch

from lopd.core.config import resolve
from lopd.core.rollout import Task, encode_prompt
from lopd.core.sampling import HFBackend, SamplingParams
from lopd.latent.bank import BankEntry
from lopd.latent.cold_start import build_composer
from lopd.latent.composer import FRAMINGS, compose, teacher_prompt_ids
from lopd.latent.context import LatentContextBackend, RegisteringEnvironment
from lopd.latent.retrieval import Retriever

BANK = [BankEntry(f"b{i}", f"Print {i}.", f"print({i})", f"print({i})", 1.0, [[[], [5]]]) for i in range(3)]
TASKS = [Task("eval/0", [{"role": "user", "content": "Print the sum of 2 and 3."}]),
         Task("eval/1", [{"role": "user", "content": "Reverse the string abc."},
                         {"role": "assistant", "content": "```python\n"}])]


class _Embedder:
    """Fixed query vectors standing in for the MiniLM embedder: task 0 is nearest entry 2, then 0."""

    def embed(self, texts):
        table = {"Print the sum of 2 and 3.": [0.6, 0.0, 0.8], "Reverse the string abc.": [0.0, 1.0, 0.1]}
        return np.array([table[t.split("Query: ")[-1]] for t in texts], dtype=np.float32)


@pytest.fixture(scope="module")
def setup(tiny_model_dir):
    cfg = resolve({"profile": "smoke", "n_ret": 2})
    composer, tokenizer = build_composer(cfg, tiny_model_dir)
    retriever = Retriever(np.eye(3, dtype=np.float32), [e.task_id for e in BANK], {})
    inner = HFBackend(composer.backbone, stop_ids=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id)
    return cfg, composer, tokenizer, retriever, inner


def _reference(cfg, composer, tokenizer, task, idx, continue_final):
    """The teacher's view built by hand: framed prompt ids, and their embeddings with the composed span."""
    (latents,) = compose(composer, [task.messages[0]["content"]], [[BANK[i].trace for i in idx]])
    ids, start = teacher_prompt_ids(tokenizer, task.messages, FRAMINGS["code"], latents.shape[0],
                                    continue_final=continue_final)
    with torch.no_grad():
        embeds = composer.backbone.get_input_embeddings()(torch.tensor(ids, device=composer.device)).clone()
    embeds[start:start + latents.shape[0]] = latents
    return ids, embeds


@pytest.mark.parametrize("continue_final", [False, True])
def test_registered_prompts_are_read_with_their_latent_context(setup, continue_final):
    cfg, composer, tokenizer, retriever, inner = setup
    task = TASKS[1] if continue_final else TASKS[0]
    backend = LatentContextBackend(inner, tokenizer, composer, BANK, retriever, _Embedder(), cfg, FRAMINGS["code"],
                                   continue_final=continue_final)
    backend.add_tasks([task])
    expected = [1, 2] if continue_final else [2, 0]  # cosine order of the stand-in query vectors
    assert backend.retrieved == {task.task_id: expected}
    student = encode_prompt(tokenizer, task.messages, continue_final=continue_final)
    params = SamplingParams(max_new_tokens=8)
    ids, embeds = _reference(cfg, composer, tokenizer, task, expected, continue_final)
    (got,) = backend.generate([student], params, seed=4)
    (want,) = inner.generate([ids], params, seed=4, embeds=[embeds])
    assert got.token_ids == want.token_ids and got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    (plain,) = inner.generate([student], params, seed=4)
    with torch.no_grad():  # the model read the latent span: log-probs of a forward over the teacher's embeddings
        got_ids = torch.tensor(got.token_ids, device=composer.device)
        inputs = torch.cat([embeds, composer.backbone.get_input_embeddings()(got_ids)])[None]
        logits = composer.backbone(inputs_embeds=inputs).logits[0, len(ids) - 1:-1] / params.temperature
    ref = torch.log_softmax(logits.float(), -1).gather(-1, got_ids[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(got.logprobs), ref.cpu(), atol=1e-4)
    # a later turn of an episode: the registered prompt plus more tokens keeps the context and the extra tokens
    (turn2,) = backend.generate([student + [11, 12, 13]], params, seed=4)
    extra = composer.backbone.get_input_embeddings()(torch.tensor([11, 12, 13], device=composer.device)).detach()
    (want2,) = inner.generate([ids + [11, 12, 13]], params, seed=4, embeds=[torch.cat([embeds, extra])])
    assert turn2.token_ids == want2.token_ids
    with pytest.raises(KeyError, match="no registered task"):
        backend.generate([[1, 2, 3]], params, seed=4)


def test_an_environment_registers_its_task_on_reset(setup):
    cfg, composer, tokenizer, retriever, inner = setup
    backend = LatentContextBackend(inner, tokenizer, composer, BANK, retriever, _Embedder(), cfg, FRAMINGS["agentic"])

    class Env:
        closed = False

        def reset(self):
            return TASKS[0].messages, [{"type": "function", "function": {"name": "add", "parameters": {}}}]

        def close(self):
            self.closed = True

    env = RegisteringEnvironment(Env(), "eval/0", backend)
    messages, tools = env.reset()
    assert backend.retrieved == {"eval/0": [2, 0]}
    assert tuple(encode_prompt(tokenizer, messages, tools)) in backend.contexts
    env.close()
    assert env._env.closed
