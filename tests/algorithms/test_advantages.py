"""Advantage estimators: hand-computed examples, loop-vs-vectorised, masked-value invariance, guards."""

from __future__ import annotations

import itertools

import pytest
import torch

from vlarl_cli.algorithms.advantages import (
    ADVANTAGES,
    advantage_metrics,
    aggregate_dones,
    aggregate_rewards,
    compute_advantages,
    filter_groups,
    gae,
    get_advantage_fn,
    group_normalize,
    grpo,
    loss_mask_from_dones,
    masked_normalize,
    raw,
    reinpp,
    trajectory_valid_fraction,
)
from vlarl_cli.errors import ConfigError

F, T_ = False, True


def test_gae_hand_computed_no_done():
    r = torch.tensor([[1.0], [0.0], [2.0]])
    v = torch.tensor([[0.5], [1.0], [0.2], [0.3]])
    d = torch.zeros(4, 1, dtype=torch.bool)
    adv, ret = gae(r, v, d, gamma=0.9, gae_lambda=0.8, normalize=False)
    # delta2 = 2 + .9*.3 - .2 = 2.07 ; delta1 = .9*.2 - 1 = -.82 ; delta0 = 1 + .9 - .5 = 1.4
    # A1 = -.82 + .72*2.07 = .6704 ; A0 = 1.4 + .72*.6704 = 1.882688
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.882688, 0.6704, 2.07]))
    torch.testing.assert_close(ret[:, 0], torch.tensor([2.382688, 1.6704, 2.27]))


def test_gae_hand_computed_with_done():
    r = torch.tensor([[1.0], [0.0], [2.0]])
    v = torch.tensor([[0.5], [1.0], [0.2], [0.3]])
    d = torch.tensor([[F], [F], [T_], [F]])  # episode ends after step 1
    adv, _ = gae(r, v, d, gamma=0.9, gae_lambda=0.8, normalize=False)
    # delta1 = 0 + 0 - 1 = -1, A1 = -1 (no bootstrap across the done) ; A0 = 1.4 + .72*(-1) = .68
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.68, -1.0, 2.07]))


def _gae_vectorised(r, v, d, gamma, lam):
    """Closed form A_t = sum_{s>=t} (gamma lam)^(s-t) prod_{j=t..s-1} (1 - d_{j+1}) delta_s, as tensors."""
    t = r.shape[0]
    nd = (~d).double()
    delta = r.double() + gamma * v[1:].double() * nd[1:] - v[:-1].double()  # [T, B]
    idx = torch.arange(t)
    upper = idx.view(1, -1) >= idx.view(-1, 1)  # [t, s]: s >= t
    m = torch.where(upper.unsqueeze(-1), nd[1:].unsqueeze(0), torch.ones(1, 1, 1, dtype=torch.float64))
    p = torch.cumprod(m, dim=1)  # p[t, s] = prod_{j=t..s} (1 - d_{j+1})
    alive = torch.cat([torch.ones_like(p[:, :1]), p[:, :-1]], dim=1) * upper.unsqueeze(-1)
    disc = torch.tensor(gamma * lam, dtype=torch.float64) ** (idx.view(1, -1) - idx.view(-1, 1)).clamp(min=0)
    return (alive * disc.unsqueeze(-1) * delta.unsqueeze(0)).sum(1)


@pytest.mark.parametrize(("gamma", "lam", "t", "b"),
                         list(itertools.product([0.9, 0.99, 1.0], [0.0, 0.95, 1.0], [1, 7], [1, 5])))
def test_gae_loop_equals_vectorised(gamma, lam, t, b):
    g = torch.Generator().manual_seed(t * 10 + b)
    r = torch.randn(t, b, generator=g, dtype=torch.float64)
    v = torch.randn(t + 1, b, generator=g, dtype=torch.float64)
    d = torch.rand(t + 1, b, generator=g) < 0.3
    adv, ret = gae(r, v, d, gamma=gamma, gae_lambda=lam, normalize=False)
    torch.testing.assert_close(adv, _gae_vectorised(r, v, d, gamma, lam), atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(ret, adv + v[:-1])


def test_gae_action_level_hand_computed():
    # T = 2 chunks of C = 2 actions, one env; flat action steps s = 0..3, bootstrap = values[T, :, 0]
    r = torch.tensor([[[1.0, 0.0]], [[0.0, 2.0]]])  # [T, B, C]
    v = torch.tensor([[[0.5, 1.0]], [[0.2, 0.4]], [[0.3, 9.0]]])  # [T+1, B, C]; 9.0 is never read
    d = torch.zeros(3, 1, 2, dtype=torch.bool)
    adv, ret = gae(r, v, d, gamma=0.9, gae_lambda=0.8, normalize=False)
    # delta3 = 2 + .9*.3 - .4 = 1.87 ; delta2 = 0 + .9*.4 - .2 = .16 ; delta1 = 0 + .9*.2 - 1 = -.82
    # delta0 = 1 + .9*1 - .5 = 1.4 ; A3 = 1.87 ; A2 = .16 + .72*1.87 = 1.5064
    # A1 = -.82 + .72*1.5064 = .264608 ; A0 = 1.4 + .72*.264608 = 1.59051776
    assert adv.shape == ret.shape == (2, 1, 2)
    torch.testing.assert_close(adv[:, 0], torch.tensor([[1.59051776, 0.264608], [1.5064, 1.87]]))
    torch.testing.assert_close(ret, adv + v[:-1])
    # a done after action step 1 (stored at dones[1, :, 1]) cuts the bootstrap of step 1 and the trace
    d[1, 0, 1] = True
    adv, _ = gae(r, v, d, gamma=0.9, gae_lambda=0.8, normalize=False)
    # delta1 = 0 + 0 - 1 = -1, A1 = -1 ; A0 = 1.4 + .72*(-1) = .68 ; steps 2, 3 unchanged
    torch.testing.assert_close(adv[:, 0], torch.tensor([[0.68, -1.0], [1.5064, 1.87]]))


def test_gae_action_level_ignores_carried_in_dones_except_the_last_action():
    # RLinf keeps the LAST T*C+1 flat dones: of row 0 only dones[0, :, C-1] exists, and GAE never reads it
    r = torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    v = torch.randn(4, 2, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    d = torch.zeros(4, 2, 4, dtype=torch.bool)
    d2 = d.clone()
    d2[0] = True
    a, _ = gae(r, v, d, gamma=0.99, gae_lambda=0.95, normalize=False)
    a2, _ = gae(r, v, d2, gamma=0.99, gae_lambda=0.95, normalize=False)
    torch.testing.assert_close(a, a2)


@pytest.mark.parametrize(("gamma", "lam", "t", "b", "c"),
                         list(itertools.product([0.9, 1.0], [0.0, 0.95], [1, 4], [1, 3], [1, 5])))
def test_gae_action_level_loop_equals_vectorised(gamma, lam, t, b, c):
    g = torch.Generator().manual_seed(t * 100 + b * 10 + c)
    r = torch.randn(t, b, c, generator=g, dtype=torch.float64)
    v = torch.randn(t + 1, b, c, generator=g, dtype=torch.float64)
    d = torch.rand(t + 1, b, c, generator=g) < 0.2
    adv, ret = gae(r, v, d, gamma=gamma, gae_lambda=lam, normalize=False)
    # the closed form over the flat time-major action sequence, built independently with index loops
    r_flat = torch.stack([r[i, :, j] for i in range(t) for j in range(c)])  # [T*C, B]
    v_flat = torch.stack([v[i, :, j] for i in range(t) for j in range(c)] + [v[t, :, 0]])  # [T*C+1, B]
    d_flat = torch.stack([d[0, :, c - 1]] + [d[i + 1, :, j] for i in range(t) for j in range(c)])
    expected = _gae_vectorised(r_flat, v_flat, d_flat, gamma, lam)
    for i, j in itertools.product(range(t), range(c)):
        torch.testing.assert_close(adv[i, :, j], expected[i * c + j], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(ret, adv + v[:-1])


def test_gae_action_level_refuses_chunk_values():
    with pytest.raises(ValueError, match=r"one value per chunk needs reward_type chunk_level"):
        gae(torch.zeros(2, 3, 4), torch.zeros(3, 3), torch.zeros(3, 3, 4, dtype=torch.bool), gamma=0.9,
            gae_lambda=0.9)


def test_gae_masked_values_change_nothing():
    g = torch.Generator().manual_seed(0)
    t, b = 6, 4
    r = torch.randn(t, b, generator=g)
    v = torch.randn(t + 1, b, generator=g)
    d = torch.zeros(t + 1, b, dtype=torch.bool)
    d[3, 0] = True  # env 0 ends after step 2
    d[5, 2] = True
    mask = loss_mask_from_dones(d)
    adv, ret = gae(r, v, d, gamma=0.99, gae_lambda=0.95, loss_mask=mask)
    v2, r2 = v.clone(), r.clone()
    v2[:-1][~mask] = 1e3  # values at masked steps
    r2[~mask] = -7.0  # rewards at masked steps
    v2[-1, 0] = 55.0  # bootstrap of a finished env
    adv2, ret2 = gae(r2, v2, d, gamma=0.99, gae_lambda=0.95, loss_mask=mask)
    torch.testing.assert_close(adv2[mask], adv[mask])
    torch.testing.assert_close(ret2[mask], ret[mask])
    assert (adv2[~mask] == 0).all()


def test_gae_guards_the_broadcast_bug():
    r = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"\[T\+1, B\]"):
        gae(r, torch.zeros(4, 4, 1), torch.zeros(4, 4, dtype=torch.bool), gamma=0.9, gae_lambda=0.9)
    with pytest.raises(ValueError, match=r"action-level gae.*\[T\+1, B, C\]"):
        gae(torch.zeros(3, 4, 2), torch.zeros(4, 4), torch.zeros(4, 4, dtype=torch.bool), gamma=0.9,
            gae_lambda=0.9)


def test_loss_mask_from_dones_chunk_level():
    d = torch.tensor([[F, F, T_], [F, F, F], [F, T_, F], [T_, F, F], [F, F, F]])  # [T+1=5, B=3]
    mask = loss_mask_from_dones(d)
    # env0: done after step 2 -> steps 0..2 valid ; env1: done after step 1 ; env2: carried-in done
    expected = torch.tensor([[T_, T_, F], [T_, T_, F], [T_, F, F], [F, F, F]])
    assert torch.equal(mask, expected)


def test_loss_mask_from_dones_action_level():
    # T=2 chunks, B=1, C=3; done after the 2nd step of chunk 1
    d = torch.zeros(3, 1, 3, dtype=torch.bool)
    d[2, 0, 1] = True
    d[0, 0, 0] = True  # only the LAST entry of the carry-in row matters
    mask = loss_mask_from_dones(d)
    assert mask.shape == (2, 1, 3)
    assert mask[:, 0].tolist() == [[True, True, True], [True, True, False]]
    d[0, 0, -1] = True
    assert not loss_mask_from_dones(d).any()


def test_reward_and_done_aggregation():
    r = torch.arange(12.0).view(2, 2, 3)
    assert torch.equal(aggregate_rewards(r, "chunk_level"), torch.tensor([[3.0, 12.0], [21.0, 30.0]]))
    assert aggregate_rewards(r, "action_level") is r
    d = torch.zeros(3, 2, 3, dtype=torch.bool)
    d[1, 1, 2] = True
    assert aggregate_dones(d, "chunk_level").tolist() == [[F, F], [F, T_], [F, F]]
    with pytest.raises(ConfigError, match='Did you mean "chunk_level"'):
        aggregate_rewards(r, "chunk")


def test_masked_normalize_uses_unbiased_std_over_valid_entries():
    x = torch.tensor([1.0, 2.0, 3.0, 100.0])
    m = torch.tensor([T_, T_, T_, F])
    out = masked_normalize(x, m, eps=1e-5)
    # mean 2, unbiased std 1
    torch.testing.assert_close(out, torch.tensor([-1 / (1 + 1e-5), 0.0, 1 / (1 + 1e-5), 0.0]))
    x2 = x.clone()
    x2[3] = -5.0
    assert torch.equal(masked_normalize(x2, m), out)


def test_grpo_hand_computed_and_filter():
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0])
    s = 2**-0.5  # unbiased std of (1, 0)
    torch.testing.assert_close(group_normalize(scores, 2), torch.tensor([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0, 0]))
    torch.testing.assert_close(group_normalize(scores, 2, normalize=False), torch.tensor([0.5, -0.5, 0, 0]))
    assert filter_groups(scores, 2, 0.1, 0.9).tolist() == [T_, T_, F, F]
    # full estimator: rewards [T=3, B=4], success rewards at different steps, masked after the done
    r = torch.zeros(3, 4)
    r[1, 0] = 1.0
    r[2, 2] = 1.0
    r[0, 3] = 1.0
    r[2, 3] = 5.0  # after env 3's done -> ignored
    d = torch.zeros(4, 4, dtype=torch.bool)
    d[2, 0] = d[3, 2] = d[1, 3] = True
    mask = loss_mask_from_dones(d)
    res = compute_advantages("grpo", r, d, mask, group_size=2, filter_bounds=(0.1, 0.9))
    adv, m2 = res.advantages, res.loss_mask
    assert torch.equal(m2[:, 2:], torch.zeros(3, 2, dtype=torch.bool))  # all-success group filtered
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0, 1.0, 0.0]) * 0.5 / (s + 1e-6))
    torch.testing.assert_close(adv[:, 1], torch.full((3,), -0.5 / (s + 1e-6)))
    assert (adv[:, 2:] == 0).all()


def test_grpo_group_errors():
    with pytest.raises(ConfigError, match="group_size"):
        group_normalize(torch.zeros(4), 1)
    with pytest.raises(ConfigError, match="multiple of group_size"):
        group_normalize(torch.zeros(5), 2)


def test_reinpp_hand_computed():
    # B=2 (one group), T=3, gamma=1; env0 succeeds at step 2, env1 never
    r = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    d = torch.zeros(4, 2, dtype=torch.bool)
    mask = torch.ones(3, 2, dtype=torch.bool)
    g = reinpp(r, d, mask, gamma=1.0, group_size=2, baseline=True, normalize=False)
    torch.testing.assert_close(g, torch.tensor([[0.5, -0.5]] * 3))
    g = reinpp(r, d, mask, gamma=0.5, group_size=1, baseline=False, normalize=False)
    torch.testing.assert_close(g, torch.tensor([[0.25, 0.0], [0.5, 0.0], [1.0, 0.0]]))
    gn = reinpp(r, d, mask, gamma=0.5, group_size=1, baseline=False, normalize=True)
    torch.testing.assert_close(gn, masked_normalize(g, mask))


def test_raw_is_the_score_on_valid_steps():
    r = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    mask = torch.tensor([[T_, T_], [T_, F]])
    assert raw(r, mask).tolist() == [[2.0, 1.0], [2.0, 0.0]]


def test_registry_and_unknown_name():
    assert set(ADVANTAGES) >= {"gae", "grpo", "reinpp", "raw"}
    with pytest.raises(ConfigError, match=r'Unknown advantage estimator "gea".*Did you mean "gae".*grpo'):
        get_advantage_fn("gea")


def test_compute_advantages_dispatch():
    g = torch.Generator().manual_seed(1)
    r = (torch.rand(5, 4, generator=g) > 0.7).float()
    v = torch.randn(6, 4, generator=g)
    d = torch.zeros(6, 4, dtype=torch.bool)
    d[3, 1] = True
    res = compute_advantages("gae", r, d, values=v, gamma=0.9, gae_lambda=0.8)
    adv, ret = gae(r, v, d, gamma=0.9, gae_lambda=0.8, loss_mask=loss_mask_from_dones(d))
    assert torch.equal(res.advantages, adv) and torch.equal(res.returns, ret)
    assert torch.equal(res.loss_mask, loss_mask_from_dones(d))
    res = compute_advantages("grpo", r, d, group_size=2)
    assert res.returns is None and res.advantages.shape == (5, 4)
    with pytest.raises(ConfigError, match="value head"):
        compute_advantages("gae", r, d)
    with pytest.raises(ConfigError, match="filter_rewards drops groups"):
        compute_advantages("reinpp", r, d, filter_bounds=(0.1, 0.9))


def test_trajectory_valid_fraction_and_metrics():
    mask = torch.tensor([[T_, T_], [T_, F], [T_, F], [F, F]])
    vf = trajectory_valid_fraction(mask)
    assert vf.tolist() == [[0.75, 0.25]] * 4
    m = advantage_metrics(torch.tensor([[1.0, -3.0], [2.0, 9.0]]), torch.tensor([[T_, T_], [T_, F]]))
    assert m == {"advantages_mean": 0.0, "advantages_min": -3.0, "advantages_max": 2.0}


def _loop_mask(dones):
    """Step-by-step reference: walk each env column, valid until the first done (carry-in included)."""
    t1, b = dones.shape[:2]
    flat = dones if dones.dim() == 2 else None
    out = []
    for j in range(b):
        if flat is not None:
            seq = [bool(dones[0, j])] + [bool(dones[s + 1, j]) for s in range(t1 - 1)]
        else:
            c = dones.shape[2]
            seq = [bool(dones[0, j, -1])] + [bool(dones[s // c + 1, j, s % c]) for s in range((t1 - 1) * c)]
        ended, col = False, []
        for s in range(len(seq) - 1):
            ended = ended or seq[s]
            col.append(not ended)
        out.append(col)
    res = torch.tensor(out).T  # [steps, B]
    return res if flat is not None else res.reshape(t1 - 1, dones.shape[2], b).permute(0, 2, 1)


@pytest.mark.parametrize(("t", "b", "c", "p"), list(itertools.product([1, 4], [1, 6], [0, 3], [0.1, 0.4])))
def test_loss_mask_loop_equals_vectorised(t, b, c, p):
    g = torch.Generator().manual_seed(t * 100 + b * 10 + c)
    shape = (t + 1, b) if c == 0 else (t + 1, b, c)
    dones = torch.rand(shape, generator=g) < p
    assert torch.equal(loss_mask_from_dones(dones), _loop_mask(dones))


@pytest.mark.parametrize(("group_size", "normalize"), list(itertools.product([2, 3, 4], [True, False])))
def test_grpo_loop_equals_vectorised(group_size, normalize):
    g = torch.Generator().manual_seed(group_size)
    t, b = 5, group_size * 4
    r = (torch.rand(t, b, generator=g) > 0.8).float() * torch.rand(t, b, generator=g)
    d = torch.rand(t + 1, b, generator=g) < 0.2
    d[0] = False
    mask = loss_mask_from_dones(d)
    adv, _ = grpo(r, mask, group_size=group_size, normalize=normalize)
    for j in range(b):
        lo = (j // group_size) * group_size
        scores = [float((r[:, k] * mask[:, k]).sum()) for k in range(lo, lo + group_size)]
        mean = sum(scores) / group_size
        std = (sum((x - mean) ** 2 for x in scores) / (group_size - 1)) ** 0.5
        a = (scores[j - lo] - mean) / (std + 1e-6) if normalize else scores[j - lo] - mean
        for s in range(t):
            assert adv[s, j].item() == pytest.approx(a if mask[s, j] else 0.0, abs=1e-5)
