"""Each loss against a brute-force reference written independently here."""

import math

import pytest
import torch

from lopd.core.losses import chunked_entropy, group_advantages, ppo_clip_loss, token_logprobs


def test_token_logprobs_chunked_equals_full_log_softmax_values_and_grads():
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    targets = torch.randint(0, 50, (37,))
    got = token_logprobs(hidden, weight, targets, temperature=0.7, chunk_size=8)
    # brute force: one token at a time with explicit softmax
    ref = torch.stack([torch.log(torch.exp(hidden[i] @ weight.T / 0.7)[targets[i]]
                                 / torch.exp(hidden[i] @ weight.T / 0.7).sum()) for i in range(37)])
    assert torch.allclose(got, ref, atol=1e-5)
    g1 = torch.autograd.grad(got.sum(), (hidden, weight))
    g2 = torch.autograd.grad(ref.sum(), (hidden, weight))
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, atol=1e-4)


def test_token_logprobs_chunk_size_does_not_change_result():
    torch.manual_seed(1)
    hidden, weight, targets = torch.randn(20, 8), torch.randn(30, 8), torch.randint(0, 30, (20,))
    assert torch.allclose(token_logprobs(hidden, weight, targets, 1.0, 3),
                          token_logprobs(hidden, weight, targets, 1.0, 100))


def test_group_advantages_brute_force():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    got = group_advantages(rewards, groups)
    for g in (0, 1):
        rs = [r for r, gg in zip(rewards.tolist(), groups.tolist()) if gg == g]
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / (len(rs) - 1))
        for i, (r, gg) in enumerate(zip(rewards.tolist(), groups.tolist())):
            if gg == g:
                assert got[i].item() == pytest.approx((r - mean) / (std + 1e-4), rel=1e-5)
    assert torch.all(group_advantages(torch.ones(4), torch.zeros(4, dtype=torch.long)) == 0)


def test_ppo_clip_loss_brute_force():
    torch.manual_seed(2)
    logp = torch.randn(3, 5) * 0.3
    old = logp + torch.randn(3, 5) * 0.3
    adv = torch.tensor([1.5, -0.7, 0.2])
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.float32)
    loss, metrics = ppo_clip_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    per_seq = []
    for b in range(3):
        terms = []
        for t in range(5):
            if mask[b, t]:
                ratio = math.exp(logp[b, t].item() - old[b, t].item())
                clipped = min(max(ratio, 0.8), 1.28)
                terms.append(-min(ratio * adv[b].item(), clipped * adv[b].item()))
        per_seq.append(sum(terms) / len(terms) if terms else 0.0)
    assert loss.item() == pytest.approx(sum(per_seq) / 3, abs=1e-6)
    assert 0 <= metrics["clip_ratio/region_mean"] <= 1


def test_ppo_clip_ratios_brute_force():
    """TRL's clip_ratio/*: a token clips low when ratio < 1 - eps_lo with A < 0, high when ratio > 1 + eps_hi
    with A > 0; each is a share of all action tokens."""
    ratios = [[0.5, 0.9, 1.5, 1.1], [0.5, 1.5, 0.7, 1.5], [1.6, 0.5, 0.5, 1.0]]  # masked ones would clip
    old = torch.zeros(3, 4)
    logp = torch.tensor(ratios).log()
    adv = torch.tensor([-1.0, 2.0, -0.5])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float32)
    _, metrics = ppo_clip_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    low = high = tokens = 0
    for b in range(3):
        for t in range(4):
            if mask[b, t]:
                tokens += 1
                low += ratios[b][t] < 0.8 and adv[b].item() < 0
                high += ratios[b][t] > 1.28 and adv[b].item() > 0
    assert (low, high, tokens) == (2, 1, 9)  # the case exercises both sides
    assert metrics["clip_ratio/low_mean"] == pytest.approx(low / tokens)
    assert metrics["clip_ratio/high_mean"] == pytest.approx(high / tokens)
    assert metrics["clip_ratio/region_mean"] == pytest.approx((low + high) / tokens)
    assert metrics["ratio_mean"] == pytest.approx(sum(r for row, m in zip(ratios, mask.tolist())
                                                      for r, k in zip(row, m) if k) / tokens, rel=1e-6)


def test_chunked_entropy_equals_full_softmax_entropy():
    torch.manual_seed(3)
    hidden, weight = torch.randn(23, 8), torch.randn(40, 8)
    probs = torch.softmax(hidden @ weight.T / 0.7, dim=-1)  # brute force: the full [N, V] distribution
    ref = torch.tensor([-sum(p * math.log(p) for p in row.tolist() if p > 0) for row in probs])
    for chunk_size in (5, 23, 100):  # 5 does not divide 23
        got = chunked_entropy(hidden, weight, temperature=0.7, chunk_size=chunk_size)
        assert got.shape == (23,)
        assert torch.allclose(got, ref, atol=1e-5)
    assert chunked_entropy(torch.randn(0, 8), weight, 1.0, 4).shape == (0,)
    flat = chunked_entropy(torch.zeros(3, 8), weight, 1.0, 2)  # zero logits: uniform over V
    assert torch.allclose(flat, torch.full((3,), math.log(40)), atol=1e-5)


def test_ppo_clip_gradient_equals_policy_gradient_on_policy():
    """At ratio 1 the surrogate's gradient is -A * grad log pi, averaged per sequence."""
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = ppo_clip_loss(logp, logp.detach(), torch.tensor([2.0]), mask, 0.2, 0.2)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.allclose(grad, torch.tensor([[-1.0, -1.0, 0.0]]))
