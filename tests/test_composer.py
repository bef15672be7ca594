"""Latent composer and injection on the tiny model: the paper's equivalence check, gradient routing,
adapter isolation, and the placeholder prompt."""

import types

import pytest
import torch

from lopd.core.adapters import attribute_set
from lopd.core.config import ComposerConfig
from lopd.core.models import load_model
from lopd.core.trajectory import Trajectory, Turn
from lopd.latent.composer import (
    FRAMINGS,
    Composer,
    block_mask,
    compose,
    encoder_text,
    grad_norms_by_part,
    inject_latents,
    shared_prefix_row,
    teacher_batch,
    teacher_prompt_ids,
)

MESSAGES = [{"role": "system", "content": "You are an expert Python programmer."},
            {"role": "user", "content": "Print the sum of two integers read from stdin."}]


@pytest.fixture
def composer(tiny_model_dir, tokenizer):
    torch.manual_seed(0)
    return Composer(load_model(tiny_model_dir), tokenizer, ComposerConfig(qformer_layers=2, max_item_tokens=64),
                    latent_tokens=4)


def test_teacher_prompt_has_framing_and_a_contiguous_placeholder_span(tokenizer):
    ids, start = teacher_prompt_ids(tokenizer, MESSAGES, FRAMINGS["code"], n_latent=6)
    assert ids[start:start + 6] == [tokenizer.pad_token_id] * 6
    head, tail = tokenizer.decode(ids[:start]), tokenizer.decode(ids[start + 6:])
    assert head.rstrip().endswith(FRAMINGS["code"][0])
    assert tail.lstrip().startswith(FRAMINGS["code"][1]) and "sum of two integers" in tail
    assert "<|LATENT_PH|>" not in head + tail
    assert head.count("<|im_start|>user") == 1  # the framing sits in the first user message


def test_with_nothing_retrieved_the_teacher_reads_the_students_own_prompt(tokenizer):
    """An empty bank: no framing around an empty span (it announces a reference and shows none)."""
    ids, start = teacher_prompt_ids(tokenizer, MESSAGES, FRAMINGS["agentic"], n_latent=0)
    plain = tokenizer(tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False),
                      add_special_tokens=False)["input_ids"]
    assert ids == plain and start == len(ids)
    assert FRAMINGS["agentic"][0] not in tokenizer.decode(ids)


def test_inject_latents_equals_indexed_assignment_and_carries_gradient():
    embeds = torch.randn(2, 9, 5)
    latents = [torch.randn(3, 5, requires_grad=True), torch.randn(2, 5, requires_grad=True)]
    starts = [1, 6]
    out = inject_latents(embeds, latents, starts)
    want = embeds.clone()
    want[0, 1:4] = latents[0].detach()
    want[1, 6:8] = latents[1].detach()
    assert torch.equal(out, want)
    out.sum().backward()
    assert all(torch.equal(lat.grad, torch.ones_like(lat)) for lat in latents)


def _greedy(model, ids, steps, embeds_fn):
    ids = list(ids)
    for _ in range(steps):
        logits = model(inputs_embeds=embeds_fn(torch.tensor([ids])), use_cache=False).logits
        ids.append(int(logits[0, -1].argmax()))
    return ids


def test_embedding_path_equals_token_id_path(composer, tokenizer):
    """Paper B.2: fill the latent span with embeddings of real tokens; the embedding path and the
    token-id path give the same greedy decode and the same log-probs (fp32 tolerance)."""
    model, n = composer.backbone.eval(), 8
    ids, start = teacher_prompt_ids(tokenizer, MESSAGES, FRAMINGS["code"], n_latent=n)
    real = torch.randint(100, 5000, (n,), generator=torch.Generator().manual_seed(1))
    token_ids = torch.tensor([ids[:start] + real.tolist() + ids[start + n:]])
    embed = model.get_input_embeddings()
    latents = [embed(real).detach()]
    with torch.no_grad(), composer.model.disable_adapter():
        by_ids = model(input_ids=token_ids, use_cache=False).logits.log_softmax(-1)
        by_embeds = model(inputs_embeds=inject_latents(embed(torch.tensor([ids])), latents, [start]),
                          use_cache=False).logits.log_softmax(-1)
        assert torch.allclose(by_ids, by_embeds, atol=1e-5)
        decode_ids = _greedy(model, token_ids[0].tolist(), 6, embed)
        decode_embeds = _greedy(model, ids, 6, lambda t: inject_latents(embed(t), latents, [start]))
    assert decode_ids[len(ids):] == decode_embeds[len(ids):]


def _tiny_teacher_loss(composer, tokenizer):
    latents = compose(composer, ["Add two numbers."], [["print(sum(map(int, input().split())))", "x = 1"]])
    assert latents[0].shape == (2 * 4, composer.backbone.config.hidden_size)
    actions = tokenizer("print(1)", add_special_tokens=False)["input_ids"]
    batch, starts = teacher_batch(tokenizer, [Trajectory("t", [Turn([], actions, [0.0] * len(actions))])],
                                  [MESSAGES], FRAMINGS["code"], [latents[0].shape[0]], tokenizer.pad_token_id)
    hidden = composer.teacher_hidden(batch, latents, starts)
    return hidden[:, :-1][batch.action_mask_B_T > 0].pow(2).mean(), latents


def test_gradient_reaches_lora_and_qformer_and_not_the_backbone(composer, tokenizer):
    for name, p in composer.named_parameters():
        if "lora_B" in name:  # peft initialises B to zero; make the adapter active so its A gets gradient too
            torch.nn.init.normal_(p, std=0.02)
    loss, _ = _tiny_teacher_loss(composer, tokenizer)
    loss.backward()
    named = dict(composer.named_parameters())
    lora = [n for n in named if "lora_" in n]
    assert lora and all(named[n].grad is not None and named[n].grad.abs().sum() > 0 for n in lora)
    qformer = [n for n in named if n.startswith("qformer.")]
    assert all(named[n].grad is not None for n in qformer)
    backbone = [n for n in named if "lora_" not in n and not n.startswith("qformer.")]
    assert backbone and all(not named[n].requires_grad and named[n].grad is None for n in backbone)


def test_grad_norms_by_part_split_the_composers_gradient_by_queries_qformer_and_encoder(composer, tokenizer):
    for name, p in composer.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    _tiny_teacher_loss(composer, tokenizer)[0].backward()
    named = dict(composer.own_parameters())
    norms = grad_norms_by_part(composer.own_parameters())

    def norm(names):
        return sum(named[n].grad.pow(2).sum().item() for n in names) ** 0.5

    assert norms["grad_norm_queries"] == pytest.approx(named["qformer.queries_K_D"].grad.norm().item(), rel=1e-6)
    assert norms["grad_norm_qformer"] == pytest.approx(
        norm([n for n in named if n.startswith("qformer.") and n != "qformer.queries_K_D"]), rel=1e-6)
    assert norms["grad_norm_encoder"] == pytest.approx(norm([n for n in named if "lora_" in n]), rel=1e-6)
    total = torch.nn.utils.clip_grad_norm_([p for p in named.values()], float("inf")).item()
    assert sum(v ** 2 for v in norms.values()) ** 0.5 == pytest.approx(total, rel=1e-5)
    assert all(v > 0 for v in norms.values())


def test_checkpointed_teacher_gives_the_plain_gradients(tiny_model_dir, tokenizer):
    """The teacher's layers are recomputed in backward after the adapter is back on; their recomputation must
    switch it off again, so gradients equal those of a composer that keeps every activation."""
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        composer = Composer(load_model(tiny_model_dir), tokenizer,
                            ComposerConfig(qformer_layers=2, max_item_tokens=64,
                                           activation_checkpointing=checkpointing),
                            latent_tokens=4)
        with torch.no_grad():  # a live adapter: recomputing the teacher with it on would change the gradients
            for name, p in composer.named_parameters():
                if "lora_B" in name:
                    p.normal_(std=0.5)
        loss, _ = _tiny_teacher_loss(composer, tokenizer)
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in composer.named_parameters() if p.grad is not None})
    plain, checkpointed = grads
    assert plain.keys() == checkpointed.keys() and any("lora_" in n for n in plain)
    for name in plain:
        assert torch.allclose(plain[name], checkpointed[name], rtol=1e-4, atol=1e-7), name


def test_teacher_without_trainable_latents_builds_no_graph(composer, tokenizer):
    actions = tokenizer("print(1)", add_special_tokens=False)["input_ids"]
    batch, starts = teacher_batch(tokenizer, [Trajectory("t", [Turn([], actions, [0.0] * len(actions))])],
                                  [MESSAGES], FRAMINGS["code"], [0], tokenizer.pad_token_id)
    hidden = composer.teacher_hidden(batch, [torch.zeros(0, composer.backbone.config.hidden_size)], starts)
    assert not hidden.requires_grad


def test_adapter_is_on_only_while_encoding(composer, tokenizer):
    actions = tokenizer("print(1)", add_special_tokens=False)["input_ids"]
    batch, starts = teacher_batch(tokenizer, [Trajectory("t", [Turn([], actions, [0.0] * len(actions))])],
                                  [MESSAGES], FRAMINGS["code"], [0], tokenizer.pad_token_id)
    no_latents = [torch.zeros(0, composer.backbone.config.hidden_size)]
    with torch.no_grad():
        _, before = _tiny_teacher_loss(composer, tokenizer)
        teacher_before = composer.teacher_hidden(batch, no_latents, starts)
        for name, p in composer.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
        _, after = _tiny_teacher_loss(composer, tokenizer)
        teacher_after = composer.teacher_hidden(batch, no_latents, starts)
    assert not torch.allclose(before[0], after[0]), "the adapter must change the encoding"
    assert torch.equal(teacher_before, teacher_after), "the teacher forward must not see the adapter"


def test_attribute_set_restores_each_objects_own_value_even_on_error():
    objects = [types.SimpleNamespace(flag=False), types.SimpleNamespace(flag=True)]
    with attribute_set(objects, "flag", "on"):
        assert [o.flag for o in objects] == ["on", "on"]
    assert [o.flag for o in objects] == [False, True]
    with pytest.raises(RuntimeError), attribute_set(objects, "flag", "on"):
        raise RuntimeError
    assert [o.flag for o in objects] == [False, True]


def test_qformer_weights_are_shared_across_layers(tiny_model_dir, tokenizer):
    sizes = []
    for layers in (1, 8):
        c = Composer(load_model(tiny_model_dir), tokenizer, ComposerConfig(qformer_layers=layers), latent_tokens=4)
        sizes.append(sum(p.numel() for p in c.qformer.parameters()))
    assert sizes[0] == sizes[1]


def test_composer_state_round_trips_and_rejects_a_different_shape(composer, tiny_model_dir, tokenizer, tmp_path):
    composer.save(tmp_path / "c.pt")
    other = Composer(load_model(tiny_model_dir), tokenizer, ComposerConfig(qformer_layers=2, max_item_tokens=64),
                     latent_tokens=4)
    other.load_trainable_state(torch.load(tmp_path / "c.pt"))
    assert torch.equal(other.qformer.queries_K_D, composer.qformer.queries_K_D)
    wider = Composer(load_model(tiny_model_dir), tokenizer, ComposerConfig(qformer_layers=2), latent_tokens=8)
    with pytest.raises(ValueError, match="latent_tokens"):
        wider.load_trainable_state(torch.load(tmp_path / "c.pt"))


def test_shared_prefix_row_and_block_mask_against_a_loop():
    items = [[5, 6, 7, 8], [5, 6, 9], [5, 6, 7]]
    tokens, positions, blocks = shared_prefix_row(items)
    assert tokens == [5, 6, 7, 8, 9, 7] and positions == [0, 1, 2, 3, 2, 2] and blocks == [-1, -1, 0, 0, 1, 2]
    assert shared_prefix_row([[1, 2]]) == ([1, 2], [0, 1], [-1, -1])  # one item: all of it is the prefix
    assert shared_prefix_row([[1, 2], [3]]) == ([1, 2, 3], [0, 1, 0], [0, 0, 1])
    width = len(tokens) + 2  # two padding slots
    pos = torch.tensor([positions + [0, 0]])
    blk = torch.tensor([blocks + [-2, -2]])
    got = block_mask(pos, blk)[0]
    for q in range(width):
        for k in range(width):
            if blocks[q:q + 1] == []:  # padding: itself only
                want = q == k
            elif k >= len(tokens):
                want = False
            else:  # the prefix, or its own sequence up to itself
                want = (blocks[k] == -1 or blocks[k] == blocks[q]) and positions[k] <= positions[q]
            assert bool(got[q, k]) == want, (q, k)


def test_shared_prefix_encoding_equals_each_item_encoded_alone(composer, tokenizer):
    """Encoding a task's items with the shared prefix once gives every item the latents (and gradients) it gets
    when encoded alone (the reference: the decoder on that item only, without any mask)."""
    with torch.no_grad():  # a non-zero adapter, so the LoRA path is exercised too
        for name, p in composer.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    task = "Read two integers and print their sum, then their product, each on its own line."
    groups = [[encoder_text(task, "print(a + b)"), encoder_text(task, "x = input()\n" * 30),
               encoder_text(task, "print(a * b)")],
              [encoder_text("Reverse a string.", "print(s[::-1])")],
              ["Reference past trajectory:\nprint(1)", encoder_text(task, "print(2)")]]
    got = composer.encode(groups)
    lora = [p for n, p in composer.named_parameters() if "lora_" in n]
    got_grads = torch.autograd.grad(sum((lat * (i + 1)).sum() for i, lat in enumerate(got)), lora)
    want, flat = [], [t for g in groups for t in g]
    for text in flat:
        ids = torch.tensor([tokenizer(text, truncation=True, max_length=composer.max_item_tokens)["input_ids"]])
        hidden = composer.backbone.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
        want.append(composer.qformer(hidden, torch.ones_like(ids))[0])
    assert [lat.shape[0] for lat in got] == [3, 1, 2]
    assert torch.allclose(torch.cat(got), torch.stack(want), atol=1e-5)
    weights = [1] * 3 + [2] + [3] * 2
    want_grads = torch.autograd.grad(sum((lat * w).sum() for lat, w in zip(want, weights)), lora)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got_grads, want_grads))


def test_compose_encodes_a_repeated_task_once(composer, monkeypatch):
    calls = []
    encode = composer.encode
    monkeypatch.setattr(composer, "encode", lambda groups: calls.append(len(groups)) or encode(groups))
    tasks, traces = ["Add.", "Sort.", "Add.", "Empty."], [["print(1)", "print(2)"], ["x"], ["print(1)", "print(2)"], []]
    out = compose(composer, tasks, traces)
    assert calls == [2] and out[0] is out[2]
    assert [lat.shape[0] for lat in out] == [8, 4, 8, 0]  # K = 4 latent tokens per retrieved item
    assert torch.allclose(out[1], compose(composer, ["Sort."], [["x"]])[0], atol=1e-6)
