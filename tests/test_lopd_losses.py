"""LOPD's loss pieces against brute-force references written independently here."""

import math
from functools import partial

import pytest
import torch

from lopd.core.losses import TopkTailReverseKL, chunked_distillation, sequence_means, topk_tail_reverse_kl
from lopd.latent.losses import anchor_penalty, dual_update, lopd_loss, privilege_margin


def brute_topm_tail_kl(p_s: list[float], p_t: list[float], m: int) -> float:
    """KL over the teacher's top-m tokens plus one tail bucket, by explicit loops over plain floats."""
    support = sorted(range(len(p_t)), key=lambda v: -p_t[v])[:m]
    kl = 0.0
    for v in support:
        kl += p_s[v] * math.log(p_s[v] / p_t[v])
    tail_s = sum(p_s[v] for v in range(len(p_s)) if v not in support)
    tail_t = sum(p_t[v] for v in range(len(p_t)) if v not in support)
    if tail_s > 0:
        kl += tail_s * math.log(tail_s / tail_t)
    return kl


@pytest.mark.parametrize("m", [1, 3, 7, 10])
def test_topm_tail_kl_matches_brute_force(m):
    g = torch.Generator().manual_seed(m)
    logits_s, logits_t = torch.randn(5, 10, generator=g) * 2, torch.randn(5, 10, generator=g) * 2
    logp_s, logp_t = logits_s.double().log_softmax(-1), logits_t.double().log_softmax(-1)
    got = topk_tail_reverse_kl(logp_s, logp_t, m)
    for n in range(5):
        want = brute_topm_tail_kl(logp_s[n].exp().tolist(), logp_t[n].exp().tolist(), m)
        assert got[n].item() == pytest.approx(want, abs=1e-9)
    assert (got >= -1e-12).all()


def test_topm_tail_kl_is_zero_for_equal_distributions_and_full_support_is_full_kl():
    logp = torch.randn(4, 12).double().log_softmax(-1)
    assert torch.allclose(topk_tail_reverse_kl(logp, logp, 5), torch.zeros(4, dtype=torch.double), atol=1e-12)
    other = torch.randn(4, 12).double().log_softmax(-1)
    full = (logp.exp() * (logp - other)).sum(-1)
    assert torch.allclose(topk_tail_reverse_kl(logp, other, 12), full, atol=1e-12)


def _hidden_case(n=37, d=16, v=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g, requires_grad=True), torch.randn(v, d, generator=g) / 4,
            torch.randn(n, d, generator=g, requires_grad=True), torch.randn(v, d, generator=g) / 4,
            torch.randint(0, v, (n,), generator=g))


@pytest.mark.parametrize("chunk", [1, 8, 37, 100])
def test_chunked_topm_tail_equals_plain_in_value_and_gradient(chunk):
    hs, ws, ht, wt, targets = _hidden_case()
    ws.requires_grad_(True)  # the student's output weight trains (tied embeddings)
    temperature = 0.7
    kl, ls, lt = chunked_distillation(hs, ws, ht, wt, targets, TopkTailReverseKL(6),
                                      temperature=temperature, chunk_size=chunk)
    assert not ls.requires_grad and lt.requires_grad  # the margin trains through the teacher's value only
    (kl.sum() + 2 * lt.sum()).backward()
    grads = hs.grad.clone(), ht.grad.clone(), ws.grad.clone()
    hs.grad = ht.grad = ws.grad = None
    logp_s = (hs @ ws.T / temperature).log_softmax(-1)
    logp_t = (ht @ wt.T / temperature).log_softmax(-1)
    kl_ref = topk_tail_reverse_kl(logp_s, logp_t, 6)
    ls_ref, lt_ref = logp_s[torch.arange(37), targets], logp_t[torch.arange(37), targets]
    (kl_ref.sum() + 2 * lt_ref.sum()).backward()
    for got, want in ((kl, kl_ref), (ls, ls_ref), (lt, lt_ref), (grads[0], hs.grad), (grads[1], ht.grad),
                      (grads[2], ws.grad)):
        assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("support", ["teacher", "student"])
@pytest.mark.parametrize("top_k", [1, 6, 50])  # 50 = the whole vocabulary: an empty tail
@pytest.mark.parametrize("sharpness", [1.0, 8.0])  # 8: nearly one-hot, as a confident model's next-token
def test_closed_form_gradient_equals_autograd_on_the_plain_function(support, top_k, sharpness):
    """The closed-form chunk against autograd through `topk_tail_reverse_kl` (the generic path) in float64, with
    arbitrary upstream gradients on the KL and on the teacher's target log-prob (as LOPD's margin weights them)."""
    g = torch.Generator().manual_seed(99)
    up_kl, up_lt = torch.randn(37, generator=g, dtype=torch.float64), torch.randn(37, generator=g, dtype=torch.float64)
    results = []
    for divergence, dtype in ((TopkTailReverseKL(top_k, support), torch.float32),
                              (partial(topk_tail_reverse_kl, top_k=top_k, support=support), torch.float64)):
        hs, ws, ht, wt, targets = _hidden_case(seed=top_k)
        hs, ws, ht, wt = (t.detach().to(dtype) for t in (hs * sharpness, ws, ht * sharpness, wt))
        for t in (hs, ws, ht):
            t.requires_grad_(True)
        kl, ls, lt = chunked_distillation(hs, ws, ht, wt, targets, divergence, temperature=0.9, chunk_size=16)
        ((kl * up_kl.to(dtype)).sum() + (lt * up_lt.to(dtype)).sum()).backward()
        results.append([t.detach().double() for t in (kl, ls, lt, hs.grad, ws.grad, ht.grad)])
    for got, want in zip(*results):  # float32 against float64: an error relative to the tensor's size
        assert torch.isfinite(got).all() and (got - want).norm() <= 2e-5 * want.norm() + 1e-6, (got - want).norm()


def test_closed_form_without_grad_and_with_a_trainable_teacher_weight():
    hs, ws, ht, wt, targets = _hidden_case()
    with torch.no_grad():
        kl, _, lt = chunked_distillation(hs, ws, ht, wt, targets, TopkTailReverseKL(6), chunk_size=8)
    assert not kl.requires_grad and not lt.requires_grad
    plain = topk_tail_reverse_kl((hs @ ws.T).log_softmax(-1), (ht @ wt.T).log_softmax(-1), 6)
    assert torch.allclose(kl, plain, atol=1e-5)
    with pytest.raises(ValueError, match="teacher's output weight must be frozen"):
        chunked_distillation(hs, ws, ht, wt.requires_grad_(True), targets, TopkTailReverseKL(6))


def test_privilege_margin_and_sequence_means_match_loops():
    g = torch.Generator().manual_seed(3)
    seq = torch.tensor([0, 0, 0, 1, 2, 2])
    lt, ls = torch.randn(6, generator=g, requires_grad=True), torch.randn(6, generator=g, requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.2])  # the last sequence has no action tokens
    want = 0.0
    for b in range(4):
        members = [i for i in range(6) if seq[i] == b]
        mean = sum(lt[i].item() - ls[i].item() for i in members) / len(members) if members else 0.0
        want += adv[b].item() * mean / 4
    got = privilege_margin(lt, ls, seq, adv)
    assert got.item() == pytest.approx(want, abs=1e-6)
    got.backward()
    assert ls.grad is None or torch.count_nonzero(ls.grad) == 0, "sg[log pi_S]: no gradient to the student"
    assert lt.grad[0].item() == pytest.approx(1.0 / 3 / 4) and lt.grad[3].item() == pytest.approx(-1.0 / 4)
    assert torch.allclose(sequence_means(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0, 0, 2, 2]), 3),
                          torch.tensor([1.5, 0.0, 3.5]))


@pytest.mark.parametrize("beta, margin, delta, lr, want", [
    (0.0, 0.05, 0.0, 0.5, 0.025), (0.0, 0.05, 0.2, 0.5, 0.0), (1.0, 0.05, 0.45, 0.5, 0.8), (0.1, 0.0, 0.3, 1.0, 0.0)])
def test_dual_update(beta, margin, delta, lr, want):
    assert dual_update(beta, margin, delta, lr) == pytest.approx(want)


def test_margin_collapse_guard_uninformative_teacher_gives_zero_delta_and_growing_beta():
    """A composer that tells the teacher nothing makes pi_T = pi_S: Delta = 0 < m, so beta climbs by
    eta * m every step and the margin term's gradient pushes teacher log-probs of successes up."""
    logp = torch.randn(8).log_softmax(-1)
    seq = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = torch.tensor([1.0, -1.0])
    beta, betas = 0.0, []
    for _ in range(4):
        lt = logp.clone().requires_grad_(True)
        kl = torch.zeros(8)
        loss, metrics = lopd_loss(kl, lt, logp, seq, adv, beta, margin=0.05, anchor=torch.zeros(()),
                                  anchor_weight=0.2)
        assert metrics["privilege_margin"] == pytest.approx(0.0, abs=1e-7)
        loss.backward()
        if beta > 0:
            assert (lt.grad[:4] < 0).all() and (lt.grad[4:] > 0).all()
        beta = dual_update(beta, 0.05, metrics["privilege_margin"], 0.5)
        betas.append(beta)
    assert betas == pytest.approx([0.025, 0.05, 0.075, 0.1])


def test_anchor_penalty_and_total_objective_match_hand_computation():
    c = [torch.tensor([[1.0, 2.0], [0.0, 1.0]], requires_grad=True), torch.tensor([[3.0, 3.0]], requires_grad=True)]
    c0 = [torch.tensor([[1.0, 1.0], [1.0, 1.0]]), torch.tensor([[1.0, 3.0]])]
    anchor = anchor_penalty(c, c0)
    assert anchor.item() == pytest.approx(((1 + 1) + 4) / 2)
    kl = torch.tensor([0.2, 0.4, 0.6])
    seq = torch.tensor([0, 0, 1])
    lt, ls = torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.5, -1.0, -1.0])
    adv = torch.tensor([1.0, -1.0])
    loss, metrics = lopd_loss(kl, lt, ls, seq, adv, beta=2.0, margin=0.05, anchor=anchor, anchor_weight=0.2)
    distill = (0.3 + 0.6) / 2
    delta = (1.0 * ((0.5 + -1.0) / 2) + -1.0 * 0.5) / 2
    assert metrics["distill_loss"] == pytest.approx(distill)
    assert metrics["privilege_margin"] == pytest.approx(delta)
    assert loss.item() == pytest.approx(distill + 2.0 * (0.05 - delta) + 0.2 * 3.0)
    loss.backward()
    assert torch.allclose(c[1].grad, torch.tensor([[0.2 * 2 * 2 / 2, 0.0]]))
