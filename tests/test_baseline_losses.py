"""The baselines' divergences against brute-force references written here, their chunked forms against
the plain ones, and TRL 1.16's self-distillation loss_utils as a peer on the same tensors."""

import itertools
import math

import pytest
import torch

from lopd.core.losses import (
    TopkTailReverseKL,
    chunked_distillation,
    distillation_loss,
    forward_kl,
    importance_weights,
    sampled_token_reverse_kl,
    topk_tail_reverse_kl,
)


def _logps(n=5, v=11, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(n, v, generator=g) * scale).double().log_softmax(-1),
            (torch.randn(n, v, generator=g) * scale).double().log_softmax(-1))


def test_forward_kl_matches_a_loop_over_the_vocabulary():
    logp_s, logp_t = _logps()
    got = forward_kl(logp_s, logp_t)
    for n in range(5):
        p_s, p_t = logp_s[n].exp().tolist(), logp_t[n].exp().tolist()
        want = sum(pt * math.log(pt / ps) for ps, pt in zip(p_s, p_t))
        assert got[n].item() == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("k", [1, 4, 11])
def test_student_support_topk_tail_matches_brute_force(k):
    logp_s, logp_t = _logps(seed=k)
    got = topk_tail_reverse_kl(logp_s, logp_t, k, support="student")
    for n in range(5):
        p_s, p_t = logp_s[n].exp().tolist(), logp_t[n].exp().tolist()
        support = sorted(range(len(p_s)), key=lambda v: -p_s[v])[:k]
        want = sum(p_s[v] * math.log(p_s[v] / p_t[v]) for v in support)
        tail_s = sum(p for v, p in enumerate(p_s) if v not in support)
        tail_t = sum(p for v, p in enumerate(p_t) if v not in support)
        if tail_s > 0:
            want += tail_s * math.log(tail_s / tail_t)
        assert got[n].item() == pytest.approx(want, abs=1e-10)


def test_student_and_teacher_supports_differ_when_the_top_tokens_differ():
    logp_s, logp_t = _logps(seed=3)
    assert not torch.allclose(topk_tail_reverse_kl(logp_s, logp_t, 2, "student"),
                              topk_tail_reverse_kl(logp_s, logp_t, 2, "teacher"))


def test_importance_weighted_sampled_token_kl_value_and_gradient_by_hand():
    ls = torch.tensor([-0.5, -2.0, -1.0, -3.0], requires_grad=True)
    lt = torch.tensor([-1.0, -1.5, -1.0, -0.1])
    old = torch.tensor([-0.5, -3.0, -0.2, -3.0])
    w = importance_weights(ls, old, clip=2.0)
    # ratios exp(ls - old): 1, e^1 -> capped at 2, e^-0.8, 1
    want_w = [1.0, 2.0, math.exp(-0.8), 1.0]
    assert w.tolist() == pytest.approx(want_w, abs=1e-6) and not w.requires_grad
    per_token = sampled_token_reverse_kl(ls, lt, w)
    assert per_token.tolist() == pytest.approx([wi * (a - b) * a for wi, a, b in zip(want_w, ls.tolist(), lt.tolist())],
                                               abs=1e-6)
    per_token.sum().backward()
    # d/d ls of w * sg(ls - lt) * ls is w * (ls - lt): the score-function estimate of the reverse KL gradient
    assert ls.grad.tolist() == pytest.approx([wi * (a - b) for wi, a, b in zip(want_w, ls.tolist(), lt.tolist())],
                                             abs=1e-6)
    assert importance_weights(ls, old, clip=None)[1].item() == pytest.approx(math.e, rel=1e-6)


def test_distillation_loss_is_a_weighted_mean_of_per_trajectory_means():
    kl = torch.tensor([1.0, 3.0, 2.0, 4.0, 6.0, 5.0])
    seq = torch.tensor([0, 0, 1, 2, 2, 2])
    weights = torch.tensor([1.0, 0.0, 1.0, 1.0])  # trajectory 1 has no privileged context; 3 has no tokens
    loss, metrics = distillation_loss(kl, seq, weights)
    assert loss.item() == pytest.approx((2.0 + 0.0 + 5.0 + 0.0) / 4)
    assert metrics["kl_mean"] == pytest.approx((2.0 + 5.0 + 0.0) / 3)


@pytest.mark.parametrize("divergence", ["forward", "student_topk"])
@pytest.mark.parametrize("chunk", [1, 7, 37, 100])
def test_chunked_divergences_equal_plain_in_value_and_gradient(divergence, chunk):
    fn = forward_kl if divergence == "forward" else TopkTailReverseKL(5, support="student")
    for seed in itertools.count():
        g = torch.Generator().manual_seed(seed)
        hs = torch.randn(37, 16, generator=g, requires_grad=True)
        ws = torch.randn(50, 16, generator=g, requires_grad=True)
        # The top-5 support is discontinuous: a near-tie at its edge could flip under the roundoff of a different
        # matmul blocking (chunk size, thread count). Take the first seed whose 5th and 6th logits are well apart.
        top_6 = (hs @ ws.T / 0.7).detach().topk(6, dim=-1).values
        if (top_6[:, 4] - top_6[:, 5]).min() > 1e-3:
            break
    ht, wt = torch.randn(37, 16, generator=g), torch.randn(50, 16, generator=g)
    targets = torch.randint(0, 50, (37,), generator=g)
    kl, ls, lt = chunked_distillation(hs, ws, ht, wt, targets, fn, temperature=0.7, chunk_size=chunk)
    assert not ls.requires_grad  # the student's target log-prob is a weight, never differentiated
    kl.sum().backward()
    got_grads = hs.grad.clone(), ws.grad.clone()
    hs.grad = ws.grad = None
    # the reference in float64 on the same inputs: per-position KLs reach ~30 here, where float32 autograd through
    # the plain function is itself off by ~2e-5 in these gradients
    hs64, ws64 = hs.detach().double().requires_grad_(), ws.detach().double().requires_grad_()
    logp_s, logp_t = (hs64 @ ws64.T / 0.7).log_softmax(-1), (ht.double() @ wt.double().T / 0.7).log_softmax(-1)
    kl_ref, ls_ref = fn(logp_s, logp_t), logp_s[torch.arange(37), targets]
    kl_ref.sum().backward()
    assert torch.allclose(kl.double(), kl_ref, atol=1e-5) and torch.allclose(ls.double(), ls_ref, atol=1e-5)
    assert torch.allclose(lt.double(), logp_t[torch.arange(37), targets], atol=1e-5)
    # the weight gradient (entries up to ~11) sums over all positions, chunk by chunk: float32 roundoff
    assert torch.allclose(got_grads[0].double(), hs64.grad, atol=1e-5)
    assert torch.allclose(got_grads[1].double(), ws64.grad, atol=5e-5)


# --- TRL 1.16 (trl/experimental/sdpo and sdft loss_utils) as a peer implementation -----------------------------

trl_sdpo = pytest.importorskip("trl.experimental.sdpo.loss_utils")
trl_sdft = pytest.importorskip("trl.experimental.sdft.loss_utils")


def _logits(seed=0, n=6, v=40):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, n, v, generator=g, dtype=torch.float64),
            torch.randn(1, n, v, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("k", [3, 10])
def test_trl_sdpo_topk_tail_reverse_kl_agrees(k):
    s, t = _logits(k)
    theirs = trl_sdpo.compute_topk_self_distillation_loss(s, t, distillation_topk=k, distillation_alpha=1.0,
                                                          distillation_add_tail=True)
    ours = topk_tail_reverse_kl(s[0].log_softmax(-1), t[0].log_softmax(-1), k, support="student")
    assert torch.allclose(theirs[0], ours, atol=1e-9)


@pytest.mark.parametrize("peer", [trl_sdft, trl_sdpo])
def test_trl_full_vocabulary_forward_kl_agrees(peer):
    s, t = _logits(1)
    theirs = peer.compute_full_logit_self_distillation_loss(s, t, distillation_alpha=0.0)
    assert torch.allclose(theirs[0], forward_kl(s[0].log_softmax(-1), t[0].log_softmax(-1)), atol=1e-9)


def test_trl_importance_weighted_sampled_token_reverse_kl_agrees_in_value_and_gradient():
    s, t = _logits(2)
    ids = torch.randint(0, 40, (1, 6), generator=torch.Generator().manual_seed(2))
    old = s[0].log_softmax(-1).gather(-1, ids[0][:, None]).squeeze(-1) + torch.linspace(-1, 1, 6, dtype=torch.float64)
    s_theirs, s_ours = s.clone().requires_grad_(), s.clone().requires_grad_()
    ls_theirs = s_theirs.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)
    theirs = trl_sdpo.apply_importance_sampling_clipping(
        trl_sdpo.compute_sampled_token_self_distillation_loss(s_theirs, t, ids, distillation_alpha=1.0),
        ls_theirs, old[None], 2.0)
    ls = s_ours[0].log_softmax(-1).gather(-1, ids[0][:, None]).squeeze(-1)
    lt = t[0].log_softmax(-1).gather(-1, ids[0][:, None]).squeeze(-1)
    ours = sampled_token_reverse_kl(ls, lt, importance_weights(ls, old, 2.0))
    assert torch.allclose(theirs[0], ours, atol=1e-9)
    theirs.sum().backward()
    ours.sum().backward()
    assert torch.allclose(s_theirs.grad, s_ours.grad, atol=1e-9)
