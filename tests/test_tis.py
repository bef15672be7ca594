"""Truncated importance sampling (`train.tis_cap`): the weights and every weighted loss against brute-force
references written independently here (python floats, loops); off (None) leaves every loss bit-for-bit as before."""

import math
from types import SimpleNamespace

import pytest
import torch

from baselines.grpo import GRPO
from baselines.sdft import SDFT
from lopd.core.config import Config, ConfigError, resolve
from lopd.core.domain import Domain
from lopd.core.losses import distillation_loss, forward_kl, ppo_clip_loss, token_logprobs, truncated_is_weights
from lopd.core.methods import PolicyOutputs
from lopd.latent.losses import lopd_loss

CAP = 2.0


def _ref_weights(train, sampler, cap):
    return [min(math.exp(a - b), cap) for a, b in zip(train, sampler)]


def _ref_ppo(logp, old, adv, mask, lo, hi, weights):
    """Nested loops over sequences and tokens: -min(r A, clip(r) A) * w, mean per sequence, mean over sequences."""
    per_seq = []
    for b in range(len(logp)):
        total, count = 0.0, 0
        for t in range(len(logp[b])):
            if not mask[b][t]:
                continue
            r = math.exp(logp[b][t] - old[b][t])
            surrogate = -min(r * adv[b], min(max(r, 1 - lo), 1 + hi) * adv[b])
            total += weights[b][t] * surrogate
            count += 1
        per_seq.append(total / count if count else 0.0)
    return sum(per_seq) / len(per_seq)


def _ragged():
    """Three sequences of 4 target positions (the last has no action token), and per-position log-probs."""
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 4, generator=g) * 3
    sampler = (logp + torch.randn(3, 4, generator=g)) * mask  # the sampler's log-probs are 0 off the mask
    return logp * mask, sampler, mask


# --- the weights --------------------------------------------------------------------------------------------------

def test_weights_match_a_per_token_loop():
    train = torch.tensor([-0.5, -2.0, -1.0, -3.0, -0.1, -7.0])
    sampler = torch.tensor([-0.5, -3.0, -0.2, -3.5, -0.1, -1.0])
    got = truncated_is_weights(train, sampler, CAP)
    assert got.dtype == torch.float32 and not got.requires_grad
    assert got.tolist() == pytest.approx(_ref_weights(train.tolist(), sampler.tolist(), CAP), rel=1e-6)


def test_a_sampler_logprob_far_below_the_trainers_is_capped_at_c():
    train = torch.tensor([-0.1, -0.2], dtype=torch.float64)
    sampler = torch.tensor([-60.0, -1e4], dtype=torch.float64)  # ratios e^60 and an overflowing exp
    assert truncated_is_weights(train, sampler, 3.5).tolist() == [3.5, 3.5]


def test_equal_logprobs_give_weight_one():
    logp = torch.tensor([-0.3, -4.0, 0.0])
    assert truncated_is_weights(logp, logp.clone(), CAP).tolist() == [1.0, 1.0, 1.0]


# --- ppo_clip_loss ---------------------------------------------------------------------------------------------

def test_weighted_ppo_clip_loss_matches_brute_force():
    logp, sampler, mask = _ragged()
    old = logp + 0.3 * torch.tensor([[1.0, -1.0, 0.5, -2.0], [0.2, 1.5, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    adv = torch.tensor([1.3, -0.7, 2.0])
    w = truncated_is_weights(logp, sampler, CAP) * mask
    got, _ = ppo_clip_loss(logp, old, adv, mask, 0.2, 0.28, w)
    want = _ref_ppo(logp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), 0.2, 0.28,
                    [_ref_weights(a, b, CAP) for a, b in zip(logp.tolist(), sampler.tolist())])
    assert got.item() == pytest.approx(want, rel=1e-6)
    unweighted, _ = ppo_clip_loss(logp, old, adv, mask, 0.2, 0.28)
    assert got.item() != pytest.approx(unweighted.item(), rel=1e-3)  # the weights did something


def test_ppo_clip_loss_off_is_the_old_call_and_weight_one_is_unweighted():
    logp, _, mask = _ragged()
    old, adv = logp.detach(), torch.tensor([0.5, -1.0, 0.0])
    before, before_metrics = ppo_clip_loss(logp, old, adv, mask, 0.2, 0.2)
    off, off_metrics = ppo_clip_loss(logp, old, adv, mask, 0.2, 0.2, None)
    assert torch.equal(before, off) and before_metrics == off_metrics
    ones = truncated_is_weights(logp, logp.clone(), CAP) * mask
    on, _ = ppo_clip_loss(logp, old, adv, mask, 0.2, 0.2, ones)
    assert torch.equal(on, before)


def test_no_gradient_flows_through_the_weights():
    train, sampler, mask = _ragged()
    adv = torch.tensor([1.0, -2.0, 0.5])

    def grad_of_logp(weights_fn):
        logp = train.clone().requires_grad_(True)
        loss, _ = ppo_clip_loss(logp, logp.detach(), adv, mask, 0.2, 0.2, weights_fn(logp) * mask)
        loss.backward()
        return logp.grad

    got = grad_of_logp(lambda logp: truncated_is_weights(logp, sampler, CAP))
    # ratio 1 at old = logp: d(-r A w)/d logp = -A w per token, / tokens in the sequence, / sequences
    w = [_ref_weights(a, b, CAP) for a, b in zip(train.tolist(), sampler.tolist())]
    m = mask.tolist()
    want = [[-adv[b].item() * w[b][t] * m[b][t] / max(sum(m[b]), 1) / 3 for t in range(4)] for b in range(3)]
    assert got.tolist() == [pytest.approx(row, rel=1e-6, abs=1e-9) for row in want]
    # the same weights left in the graph would add a gradient through w
    attached = grad_of_logp(lambda logp: torch.exp(logp - sampler).clamp(max=CAP))
    assert not torch.allclose(attached, got)


# --- the distillation losses ----------------------------------------------------------------------------------

def test_weighted_distillation_loss_matches_brute_force_and_off_is_the_old_call():
    kl = torch.tensor([0.3, 1.2, 0.05, 2.0, 0.7, 0.4])
    seq = torch.tensor([0, 0, 1, 1, 1, 2])
    weights_B = torch.tensor([1.0, 1.0, 0.0, 1.0])  # the last sequence has no tokens
    w = torch.tensor([1.0, 0.5, 2.0, 1.7, 0.1, 1.0])
    got, metrics = distillation_loss(kl, seq, weights_B, w)
    per_seq = []
    for b in range(4):
        vals = [k * ww for k, ww, s in zip(kl.tolist(), w.tolist(), seq.tolist()) if s == b]
        per_seq.append(weights_B[b].item() * (sum(vals) / len(vals) if vals else 0.0))
    assert got.item() == pytest.approx(sum(per_seq) / 4, rel=1e-6)
    before, before_metrics = distillation_loss(kl, seq, weights_B)
    assert metrics["kl_mean"] == before_metrics["kl_mean"]  # the diagnostic stays unweighted
    off = distillation_loss(kl, seq, weights_B, None)
    assert torch.equal(off[0], before) and off[1] == before_metrics
    assert torch.equal(distillation_loss(kl, seq, weights_B, torch.ones(6))[0], before)


def test_weighted_lopd_loss_weights_the_kl_but_not_the_margin():
    kl = torch.tensor([0.3, 1.2, 0.05, 2.0, 0.7])
    seq = torch.tensor([0, 0, 1, 1, 1])
    logp_t, logp_s = torch.tensor([-0.5, -1.0, -0.2, -3.0, -1.1]), torch.tensor([-0.7, -0.9, -0.4, -2.0, -1.0])
    adv, anchor = torch.tensor([1.0, -1.0]), torch.tensor(0.25)
    w = torch.tensor([2.0, 0.5, 1.0, 0.3, 1.5])
    args = (kl, logp_t, logp_s, seq, adv, 0.7, 0.05, anchor, 0.2)
    got, metrics = lopd_loss(*args, w)
    distill = sum(sum(k * ww for k, ww, s in zip(kl.tolist(), w.tolist(), seq.tolist()) if s == b)
                  / seq.tolist().count(b) for b in range(2)) / 2
    delta = sum(adv[b].item() * sum(t - s for t, s, q in zip(logp_t.tolist(), logp_s.tolist(), seq.tolist()) if q == b)
                / seq.tolist().count(b) for b in range(2)) / 2
    assert got.item() == pytest.approx(distill + 0.7 * (0.05 - delta) + 0.2 * 0.25, rel=1e-6)
    before, before_metrics = lopd_loss(*args)
    assert metrics["privilege_margin"] == before_metrics["privilege_margin"]
    assert metrics["kl_mean"] == before_metrics["kl_mean"]
    off = lopd_loss(*args, None)
    assert torch.equal(off[0], before) and off[1] == before_metrics
    assert torch.equal(lopd_loss(*args, torch.ones(5))[0], before)


# --- PolicyOutputs and the methods -------------------------------------------------------------------------------

def _student(sampler_shift=None, tis_cap=None, seed=0):
    """A hand-built PolicyOutputs over a [2, 3] batch with 4 action positions (no model)."""
    g = torch.Generator().manual_seed(seed)
    where = torch.tensor([[True, True, False], [False, True, True]])
    hidden = torch.randn(4, 6, generator=g).requires_grad_(True)
    weight = torch.randn(9, 6, generator=g)
    targets = torch.randint(0, 9, (4,), generator=g)
    sampler = None
    if sampler_shift is not None:
        sampler = token_logprobs(hidden.detach(), weight, targets, 0.7) + sampler_shift
    return PolicyOutputs(hidden_N_D=hidden, weight_V_D=weight, targets_N=targets, where_B_T=where,
                         temperature=0.7, chunk_size=3, sampler_logp_N=sampler, tis_cap=tis_cap)


def test_policy_outputs_weights_are_off_by_default_and_computed_from_logp_when_on():
    assert _student().token_weights_N() is None
    shift = torch.tensor([0.0, 0.5, -0.4, -50.0])  # sampler above, below, and far below the trainer
    student = _student(shift, tis_cap=CAP)
    w = student.token_weights_N()  # computes logp_N on the way, as logp_B_T does
    assert student.logp_N is not None and not w.requires_grad
    want = [min(math.exp(-s), CAP) for s in shift.tolist()]
    assert w.tolist() == pytest.approx(want, rel=1e-5)
    assert student.tis_metrics(w) == pytest.approx({"tis_weight_mean": sum(want) / 4, "tis_capped_fraction": 0.25})
    with pytest.raises(ValueError, match="train.tis_cap"):
        _student(tis_cap=CAP).token_weights_N()


def _batch():
    return SimpleNamespace(advantages_B=torch.tensor([1.5, -0.5]),
                           action_mask_B_T=torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))


def test_grpo_loss_off_is_the_old_call_and_equal_sampler_logprobs_change_nothing():
    grpo = GRPO(Config(), Domain.scratch("unused"))
    student = _student()
    off, off_metrics = grpo.loss(student, _batch(), [])
    logp = _student().logp_B_T()
    old, old_metrics = ppo_clip_loss(logp, logp.detach(), _batch().advantages_B, _batch().action_mask_B_T, 0.2, 0.2)
    assert torch.equal(off, old) and off_metrics == old_metrics
    on, on_metrics = grpo.loss(_student(torch.zeros(4), tis_cap=CAP), _batch(), [])
    assert torch.equal(on, off) and on_metrics["tis_weight_mean"] == 1.0
    shifted, _ = grpo.loss(_student(torch.tensor([0.0, 0.5, -0.4, -50.0]), tis_cap=CAP), _batch(), [])
    logp = _student().logp_B_T().tolist()
    w = [[min(math.exp(0.0), CAP), min(math.exp(-0.5), CAP), 0.0], [0.0, min(math.exp(0.4), CAP), CAP]]
    want = _ref_ppo(logp, logp, [1.5, -0.5], _batch().action_mask_B_T.tolist(), 0.2, 0.2, w)
    assert shifted.item() == pytest.approx(want, rel=1e-5)


def test_self_distillation_loss_weights_the_divergence_per_token():
    g = torch.Generator().manual_seed(1)
    teacher_hidden, teacher_weight = torch.randn(4, 6, generator=g), torch.randn(9, 6, generator=g)
    sdft = SDFT(Config(), Domain.scratch("unused"))
    sdft.teacher_view = lambda trajectories: (teacher_hidden, torch.tensor([1.0, 1.0]), {})
    sdft.teacher_model = SimpleNamespace(weight_V_D=teacher_weight)
    plain = _student()
    off, off_metrics = sdft.loss(plain, _batch(), [])
    same = _student(tis_cap=CAP)  # the sampler's log-probs exactly the ones the loss computes: w = 1
    same.sampler_logp_N = plain.logp_N.detach().clone()
    on, on_metrics = sdft.loss(same, _batch(), [])
    assert torch.equal(on, off) and "tis_weight_mean" not in off_metrics and on_metrics["tis_weight_mean"] == 1.0
    shift = torch.tensor([0.0, 0.5, -0.4, -50.0])
    student = _student(shift, tis_cap=CAP)
    shifted, _ = sdft.loss(student, _batch(), [])
    s = _student()
    logp_s = torch.log_softmax(s.hidden_N_D @ s.weight_V_D.T / 0.7, -1)
    logp_t = torch.log_softmax(teacher_hidden @ teacher_weight.T / 0.7, -1)
    kl = forward_kl(logp_s, logp_t).tolist()
    w = [min(math.exp(-x), CAP) for x in shift.tolist()]
    want = ((kl[0] * w[0] + kl[1] * w[1]) / 2 + (kl[2] * w[2] + kl[3] * w[3]) / 2) / 2
    assert shifted.item() == pytest.approx(want, rel=1e-5)
    shifted.backward()  # the gradient reaches the student only through the divergence
    assert student.hidden_N_D.grad is not None


# --- configuration --------------------------------------------------------------------------------------------

def test_tis_cap_is_off_by_default_and_validated():
    assert Config().train.tis_cap is None and resolve({}).train.tis_cap is None
    assert resolve({"train": {"tis_cap": 2}}).train.tis_cap == 2.0
    for bad in (0.5, 0, -1):
        with pytest.raises(ConfigError) as err:
            resolve({"train": {"tis_cap": bad}})
        assert "train.tis_cap: must be >= 1 or null" in str(err.value) and "\n" not in str(err.value)


def test_the_loop_passes_the_sampler_logprobs_and_logs_the_weights(tiny_model_dir, tmp_path):
    from lopd.core.loop import train
    from lopd.core.rollout import Task, single_turn

    tasks = [Task(f"t{i}", [{"role": "user", "content": f"Count to {i}."}]) for i in range(4)]
    cfg = resolve({"profile": "smoke", "train": {"steps": 1, "tis_cap": CAP}})
    history = train(cfg, GRPO(cfg, Domain.scratch("unused")), tasks,
                    single_turn(lambda t, c: [float(len(x) % 2) for x in c]), tiny_model_dir,
                    tmp_path / "run")["history"]
    # the bf16 rollout copy and the fp32 trainer nearly agree: weights close to 1, none at the cap
    assert history[0]["tis_weight_mean"] == pytest.approx(1.0, abs=0.05)
    assert history[0]["tis_capped_fraction"] == 0.0
