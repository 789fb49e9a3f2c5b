"""PPO losses: hand-computed values, loop-vs-vectorised over a grid, metric denominators, invariances."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from vlarl_cli.algorithms.advantages import trajectory_valid_fraction
from vlarl_cli.algorithms.losses import (
    aggregate_logprobs,
    aggregate_loss,
    expand_to_elements,
    explained_variance,
    huber,
    kl_penalty,
    loss_weights,
    mask_to_unit,
    ppo_actor_loss,
    to_unit,
    value_loss,
)
from vlarl_cli.errors import ConfigError


def test_ppo_actor_loss_hand_computed():
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1, 5.0]))  # ratios 1.5, 0.5, 1.1, 5.0 vs old = 0
    old = torch.zeros(4)
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0])
    w = torch.ones(4)
    loss, m = ppo_actor_loss(logp, old, adv, w, 4.0, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    # per unit: max(-A r, -A clip(r)):
    #  0: max(-1.5, -1.28) = -1.28 (clipped)   1: max(-0.5, -0.8) = -0.5
    #  2: max(2.2, 2.2) = 2.2                   3: max(5, 1.28) = 5 -> dual clip min(5, 3) = 3
    torch.testing.assert_close(loss, torch.tensor((-1.28 - 0.5 + 2.2 + 3.0) / 4))
    assert m["clipfrac"].item() == pytest.approx(0.25)  # only unit 0 takes the clipped branch
    assert m["dual_clipfrac"].item() == pytest.approx(0.25)
    assert m["approx_kl"].item() == pytest.approx(-float(logp.mean()))
    assert m["clipped_ratio"].item() == pytest.approx((1.28 + 0.8 + 1.1 + 1.28) / 4)
    # without dual clip unit 3 keeps its loss of 5
    loss, _ = ppo_actor_loss(logp, old, adv, w, 4.0, clip_ratio_low=0.2, clip_ratio_high=0.28)
    torch.testing.assert_close(loss, torch.tensor((-1.28 - 0.5 + 2.2 + 5.0) / 4))
    with pytest.raises(ConfigError, match="clip_ratio_c"):
        ppo_actor_loss(logp, old, adv, w, 4.0, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=1.0)


def _reference_ppo(logp, old, adv, mask, lo, hi, c, level):
    """Straight loop over units, masked mean."""
    n, cc, a = logp.shape
    units = []
    for i in range(n):
        if level == "chunk_level":
            groups = [[(i, j, k) for j in range(cc) for k in range(a)]]
        elif level == "action_level":
            groups = [[(i, j, k) for k in range(a)] for j in range(cc)]
        else:
            groups = [[(i, j, k)] for j in range(cc) for k in range(a)]
        for grp in groups:
            valid = [e for e in grp if mask[e[0], e[1]]]
            if not valid:
                continue
            lr = sum(float(logp[e]) - float(old[e]) for e in grp)
            av = sum(float(adv[e]) for e in valid) / len(valid)
            r = math.exp(lr)
            rc = min(max(r, 1 - lo), 1 + hi)
            loss = max(-av * r, -av * rc)
            if c is not None and av < 0:
                loss = min(loss, -c * av)
            units.append((loss, float(-av * rc > -av * r), -lr))
    k = len(units)
    return (sum(u[0] for u in units) / k, sum(u[1] for u in units) / k, sum(u[2] for u in units) / k)


@pytest.mark.parametrize(("level", "lo", "hi", "c"), list(itertools.product(
    ["token_level", "action_level", "chunk_level"], [0.1, 0.2], [0.2, 0.28], [None, 3.0])))
def test_ppo_loss_loop_equals_vectorised(level, lo, hi, c):
    g = torch.Generator().manual_seed(0)
    n, cc, a = 6, 3, 2
    old = torch.randn(n, cc, a, generator=g, dtype=torch.float64)
    logp = old + 0.3 * torch.randn(n, cc, a, generator=g, dtype=torch.float64)
    adv = torch.randn(n, cc, generator=g, dtype=torch.float64)  # action-level advantages
    if level == "chunk_level":
        adv = adv[:, :1].expand(n, cc).contiguous()
    mask = torch.rand(n, cc, generator=g) > 0.3
    mask[0] = False  # one fully masked sample
    shape = logp.shape
    um = mask_to_unit(mask, level, shape)
    w, den = loss_weights(um, "token-mean")
    loss, m = ppo_actor_loss(aggregate_logprobs(logp, level), aggregate_logprobs(old, level),
                             to_unit(adv, level, shape, mask), w.double(), den.double(),
                             clip_ratio_low=lo, clip_ratio_high=hi, clip_ratio_c=c)
    ref_loss, ref_clip, ref_kl = _reference_ppo(logp, old, adv.unsqueeze(-1).expand(n, cc, a), mask, lo, hi, c, level)
    assert loss.item() == pytest.approx(ref_loss, abs=1e-9)
    assert m["clipfrac"].item() == pytest.approx(ref_clip, abs=1e-9)
    assert m["approx_kl"].item() == pytest.approx(ref_kl, abs=1e-9)


def test_token_level_metric_denominators_are_correct():
    """RLinf defect: token-level sums over [N, C, A] divided by a count of [N, C] mask entries."""
    n, c, a = 4, 2, 7
    old = torch.zeros(n, c, a)
    logp = torch.full((n, c, a), 1.0)  # ratio e > 1.2: every positive-advantage element is clipped
    adv = torch.ones(n, c)
    mask = torch.ones(n, c, dtype=torch.bool)
    shape = (n, c, a)
    um = mask_to_unit(mask, "token_level", shape)
    w, den = loss_weights(um, "token-mean")
    _, m = ppo_actor_loss(logp, old, to_unit(adv, "token_level", shape), w, den,
                          clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert m["clipfrac"].item() == 1.0  # not 7.0
    assert m["approx_kl"].item() == pytest.approx(-1.0)  # not -7.0
    assert m["count"].item() == n * c * a


def test_masked_entries_change_nothing():
    g = torch.Generator().manual_seed(3)
    n, c, a = 5, 2, 3
    logp = torch.randn(n, c, a, generator=g, requires_grad=True)
    old = logp.detach() + 0.1 * torch.randn(n, c, a, generator=g)
    adv = torch.randn(n, c, generator=g)
    mask = torch.rand(n, c, generator=g) > 0.4
    shape = (n, c, a)

    def run(old_, adv_):
        um = mask_to_unit(mask, "token_level", shape)
        w, den = loss_weights(um, "token-mean")
        loss, m = ppo_actor_loss(logp, old_, to_unit(adv_, "token_level", shape), w, den,
                                 clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0)
        (grad,) = torch.autograd.grad(loss, logp)
        return loss, m, grad

    base = run(old, adv)
    old2, adv2 = old.clone(), adv.clone()
    old2[~mask] = 123.0
    adv2[~mask] = -1e6
    other = run(old2, adv2)
    assert torch.equal(base[0], other[0]) and torch.equal(base[2], other[2])
    for k in base[1]:
        assert torch.equal(base[1][k], other[1][k]), k
    # NaN at a masked entry cannot leak into the forward value either
    loss_nan = aggregate_loss(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 0.0]), 1.0)
    assert loss_nan.item() == 1.0


def test_trajectory_weighted_aggregation_equals_mean_of_trajectory_means():
    g = torch.Generator().manual_seed(0)
    t, b = 5, 4
    per_step = torch.randn(t, b, generator=g)
    mask = torch.ones(t, b, dtype=torch.bool)
    mask[2:, 0] = False
    mask[4:, 1] = False
    mask[1:, 3] = False
    vf = trajectory_valid_fraction(mask)
    w, den = loss_weights(mask.reshape(-1), "seq-mean-token-mean", valid_fraction=vf.reshape(-1))
    got = aggregate_loss(per_step.reshape(-1), w, den)
    expected = torch.stack([per_step[mask[:, j], j].mean() for j in range(b)]).mean()
    torch.testing.assert_close(got, expected)
    w, den = loss_weights(mask.reshape(-1), "seq-mean-token-sum", steps_per_trajectory=t)
    got = aggregate_loss(per_step.reshape(-1), w, den)
    expected = torch.stack([per_step[mask[:, j], j].sum() for j in range(b)]).mean()
    torch.testing.assert_close(got, expected)
    w, den = loss_weights(mask.reshape(-1), "token-mean")
    torch.testing.assert_close(aggregate_loss(per_step.reshape(-1), w, den), per_step[mask].mean())
    with pytest.raises(ConfigError, match='Did you mean "token-mean"'):
        loss_weights(mask, "token_mean")
    with pytest.raises(ValueError, match="needs valid_fraction"):
        loss_weights(mask, "seq-mean-token-mean")


def test_value_loss_hand_computed_and_clip_ratio_before_clamp():
    v = torch.tensor([1.0, 0.5, 3.0, 0.0])
    v_old = torch.tensor([0.5, 0.4, 0.0, 0.0])
    ret = torch.tensor([2.0, 0.0, 30.0, 1.0])
    w = torch.tensor([1.0, 1.0, 1.0, 0.0])
    loss, m = value_loss(v, v_old, ret, w, 3.0, value_clip=0.2, huber_delta=10.0)
    # 0: V_clip = 0.7: max(h(1.0)=.5, h(1.3)=.845) = .845
    # 1: V_clip = 0.5: max(h(-.5)=.125, h(-.5)) = .125
    # 2: V_clip = 0.2: max(h(27)=10*(27-5)=220, h(29.8)=10*(29.8-5)=248) = 248
    torch.testing.assert_close(loss, torch.tensor((0.845 + 0.125 + 248.0) / 3))
    assert m["value_clip_ratio"].item() == pytest.approx(2 / 3)  # units 0 and 2 moved > 0.2
    loss, m = value_loss(v, v_old, ret, w, 3.0, value_clip=None, huber_delta=10.0)
    torch.testing.assert_close(loss, torch.tensor((0.5 + 0.125 + 220.0) / 3))
    assert m["value_clip_ratio"].item() == 0.0


def test_huber_and_kl_estimators():
    torch.testing.assert_close(huber(torch.tensor([0.5, -2.0, 3.0]), 1.0), torch.tensor([0.125, 1.5, 2.5]))
    lp, ref = torch.tensor([0.0, -1.0]), torch.tensor([-0.5, -1.0])
    torch.testing.assert_close(kl_penalty(lp, ref, "k1"), torch.tensor([0.5, 0.0]))
    torch.testing.assert_close(kl_penalty(lp, ref, "kl"), torch.tensor([0.5, 0.0]))
    torch.testing.assert_close(kl_penalty(-lp, ref, "abs"), torch.tensor([0.5, 2.0]))
    torch.testing.assert_close(kl_penalty(lp, ref, "mse"), torch.tensor([0.125, 0.0]))
    torch.testing.assert_close(kl_penalty(lp, ref, "low_var_kl"),
                               torch.tensor([math.exp(-0.5) + 0.5 - 1.0, 0.0]))
    with pytest.raises(ConfigError, match="KL estimator"):
        kl_penalty(lp, ref, "k4")


def test_k3_is_an_unbiased_kl_estimate():
    """E_{x~p}[k3] = KL(p || q) for two Gaussians (statistical, 200k samples)."""
    p, q = torch.distributions.Normal(0.0, 1.0), torch.distributions.Normal(0.3, 1.2)
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(0))  # samples of p
    k3 = kl_penalty(p.log_prob(x), q.log_prob(x), "k3").mean()
    kl = torch.distributions.kl_divergence(p, q)
    assert abs(k3.item() - kl.item()) < 3e-3


def test_granularity_helpers_and_broadcast_guard():
    x = torch.arange(12.0).view(2, 3, 2)
    assert torch.equal(aggregate_logprobs(x, "action_level"), x.sum(-1))
    assert torch.equal(aggregate_logprobs(x, "chunk_level"), x.sum((1, 2)))
    assert aggregate_logprobs(x, "token_level") is x
    with pytest.raises(ConfigError, match="logprob_type"):
        aggregate_logprobs(x, "chunk")
    assert expand_to_elements(torch.tensor([1.0, 2.0]), (2, 3, 2)).shape == (2, 3, 2)
    with pytest.raises(ValueError, match="cannot align"):
        expand_to_elements(torch.ones(2, 1), (2, 3, 2))  # [B, 1] vs [B]: never broadcast silently
    m = torch.tensor([[True, False, False], [False, False, False]])
    assert mask_to_unit(m, "chunk_level", (2, 3, 2)).tolist() == [True, False]
    assert mask_to_unit(m, "action_level", (2, 3, 2)).tolist() == m.tolist()
    adv = torch.tensor([[1.0, 5.0, 5.0], [2.0, 2.0, 2.0]])
    # unit 1 is fully masked: 0, whatever its (possibly NaN) advantage
    torch.testing.assert_close(to_unit(adv, "chunk_level", (2, 3, 2), m), torch.tensor([1.0, 0.0]))
    adv[1] = float("nan")
    torch.testing.assert_close(to_unit(adv, "chunk_level", (2, 3, 2), m), torch.tensor([1.0, 0.0]))


def test_explained_variance():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(r, r) == 1.0
    assert explained_variance(torch.full((4,), 2.5), r) == pytest.approx(0.0)
    mask = torch.tensor([True, True, True, False])
    assert explained_variance(torch.tensor([1.0, 2.0, 3.0, 99.0]), r, mask) == 1.0
    assert math.isnan(explained_variance(r, torch.ones(4)))


@pytest.mark.parametrize(("clip", "delta"), list(itertools.product([None, 0.1, 0.5], [0.5, 10.0])))
def test_value_loss_loop_equals_vectorised(clip, delta):
    g = torch.Generator().manual_seed(0)
    n = 12
    v, v_old, ret = (torch.randn(n, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(n, generator=g) > 0.3
    w, den = loss_weights(mask, "token-mean")
    loss, m = value_loss(v, v_old, ret, w.double(), den.double(), value_clip=clip, huber_delta=delta)

    def hub(x):
        return 0.5 * x * x if abs(x) <= delta else delta * (abs(x) - 0.5 * delta)

    total, clipped, k = 0.0, 0, 0
    for i in range(n):
        if not mask[i]:
            continue
        k += 1
        vi, oi, ri = float(v[i]), float(v_old[i]), float(ret[i])
        li = hub(ri - vi)
        if clip is not None:
            vc = oi + min(max(vi - oi, -clip), clip)
            li = max(li, hub(ri - vc))
            clipped += abs(vi - oi) > clip
        total += li
    assert loss.item() == pytest.approx(total / k, abs=1e-9)
    assert m["value_clip_ratio"].item() == pytest.approx(clipped / k if clip is not None else 0.0, abs=1e-9)
