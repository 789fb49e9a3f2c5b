"""ppo_update: micro-batching equals one big batch, ratio == 1 before the first step, NaN skipping,
critic warm-up, a KL penalty that acts, metric names and bounds, clear errors."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from vlarl_cli.envs.toy import ReachEnv
from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.flow_matching import FlowConfig
from vlarl_cli.policies.toy import ToyFlowPolicy, ToyGaussianPolicy, ToyTokenPolicy
from vlarl_cli.training.toy import collect_toy
from vlarl_cli.training.update import RolloutBatch, UpdateSettings, ppo_update

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


REQUIRED = ["train/actor/policy_loss", "train/critic/value_loss", "train/actor/approx_kl", "train/actor/clip_fraction", "train/actor/clipped_ratio",
            "train/critic/value_clip_ratio", "train/actor/grad_norm", "train/critic/explained_variance", "train/actor/lr", "train/actor/total_loss",
            "train/actor/skipped_steps"]


def _policy(kind: str, seed: int = 0) -> torch.nn.Module:
    if kind == "gaussian":
        return ToyGaussianPolicy(seed=seed)
    if kind == "token":
        return ToyTokenPolicy(seed=seed, temperature=1.6)
    method, _, joint = kind.partition("+")
    return ToyFlowPolicy(flow=FlowConfig(method=method, num_steps=3, joint_logprob=joint == "joint"), seed=seed)


def _batch(policy, num_envs: int = 16, seed: int = 0, critic: bool = True) -> RolloutBatch:
    env = ReachEnv(num_envs)
    ro = collect_toy(env, policy, generator=torch.Generator().manual_seed(seed))
    t, b, c, a = ro.logprobs.shape
    g = torch.Generator().manual_seed(seed + 1)
    mask = torch.rand(t * b, c, generator=g) > 0.2
    mask[:, 0] = True
    return RolloutBatch(
        replay=ro.replay, old_logprobs=ro.logprobs.reshape(t * b, c, a),
        advantages=torch.randn(t * b, generator=g), loss_mask=mask,
        old_values=ro.values[:-1].reshape(-1) if critic else None,
        returns=torch.randn(t * b, generator=g) if critic else None,
        valid_fraction=0.25 + 0.75 * torch.rand(t * b, generator=g), steps_per_trajectory=t)


def _settings(**kw) -> UpdateSettings:
    base = dict(update_epoch=1, global_batch_size=64, micro_batch_size=64, clip_ratio_low=0.2, clip_ratio_high=0.28,
                clip_ratio_c=3.0, value_clip=0.2, huber_delta=10.0, entropy_bonus=0.0, kl_beta=0.0, kl_type="k3",
                logprob_type="token_level", loss_agg="token-mean", clip_grad=1e9)
    base.update(kw)
    return UpdateSettings(**base)


@pytest.mark.parametrize(("kind", "level", "agg"), [
    ("gaussian", "token_level", "token-mean"),
    ("gaussian", "action_level", "seq-mean-token-mean"),
    ("gaussian", "chunk_level", "seq-mean-token-sum"),
    ("flow_sde", "chunk_level", "token-mean"),
    ("flow_noise+joint", "token_level", "seq-mean-token-mean"),
    ("token", "action_level", "token-mean"),
])
def test_micro_batching_equals_one_big_batch(kind, level, agg):
    torch.manual_seed(0)
    base = _policy(kind)
    batch = _batch(base)  # N = 4 chunk steps x 16 envs = 64
    results = []
    for micro in (64, 16, 8):
        policy = copy.deepcopy(base)
        opt = torch.optim.SGD(policy.parameters(), lr=0.1)
        bonus = 0.01 if kind != "flow_sde" else 0.0
        m = ppo_update(policy, opt, batch, _settings(micro_batch_size=micro, logprob_type=level, loss_agg=agg,
                                                     entropy_bonus=bonus),
                       generator=torch.Generator().manual_seed(0))
        results.append((torch.cat([p.detach().flatten() for p in policy.parameters()]), m))
    for params, m in results[1:]:
        torch.testing.assert_close(params, results[0][0], atol=2e-6, rtol=1e-5)
        for k in ("train/actor/policy_loss", "train/critic/value_loss", "train/actor/total_loss", "train/actor/grad_norm", "train/actor/clip_fraction"):
            assert m[k] == pytest.approx(results[0][1][k], rel=1e-4, abs=1e-6), k


@pytest.mark.parametrize("kind", ["flow_sde", "flow_cps", "flow_noise", "flow_sde+joint", "flow_cps+joint",
                                  "flow_noise+joint", "gaussian", "token"])
def test_ratio_is_exactly_one_before_the_first_step(kind):
    policy = _policy(kind)
    batch = _batch(policy)
    seen = []
    original = policy.evaluate

    def spy(replay):
        out = original(replay)
        seen.append(out.logprobs.detach())
        return out

    policy.evaluate = spy  # type: ignore[method-assign]
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    m = ppo_update(policy, opt, batch, _settings(global_batch_size=64, micro_batch_size=64),
                   generator=torch.Generator().manual_seed(0))
    # first evaluate sees all 64 samples (shuffled); compare as sets of rows via sorting by a key
    first = seen[0]
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(0))
    ratio = torch.exp(first - batch.old_logprobs[perm])
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)
    assert abs(m["train/actor/approx_kl"]) < 1e-6 and m["train/actor/clip_fraction"] == 0.0


def test_zero_lr_keeps_ratio_one_for_all_epochs():
    policy = _policy("flow_sde")
    batch = _batch(policy)
    opt = torch.optim.SGD(policy.parameters(), lr=0.0)
    m = ppo_update(policy, opt, batch, _settings(update_epoch=3, global_batch_size=32, micro_batch_size=16),
                   generator=torch.Generator().manual_seed(0))
    assert m["train/actor/ratio"] == pytest.approx(1.0, abs=1e-6) and m["train/actor/optimizer_steps"] == 6
    assert abs(m["train/actor/approx_kl"]) < 1e-6


def test_metrics_present_and_bounded():
    policy = _policy("gaussian")
    batch = _batch(policy)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-2)
    m = ppo_update(policy, opt, batch, _settings(update_epoch=4, global_batch_size=16, micro_batch_size=8),
                   generator=torch.Generator().manual_seed(0))
    for k in [*REQUIRED, "train/actor/entropy_loss"]:
        assert k in m, k
    assert 0.0 < m["train/actor/clip_fraction"] <= 1.0  # large lr: something gets clipped
    assert 0.0 <= m["train/critic/value_clip_ratio"] <= 1.0
    assert m["train/actor/lr"] == 3e-2 and m["train/actor/skipped_steps"] == 0 and m["train/actor/optimizer_steps"] == 16


def test_nan_loss_skips_the_step_with_a_warning():
    policy = _policy("gaussian")
    batch = _batch(policy)
    batch.advantages[3] = float("nan")
    batch.loss_mask[3] = True
    before = [p.detach().clone() for p in policy.parameters()]
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    with pytest.warns(RuntimeWarning, match="skipping an optimizer step"):
        m = ppo_update(policy, opt, batch, _settings(update_epoch=2), generator=torch.Generator().manual_seed(0))
    assert m["train/actor/skipped_steps"] == 2 and m["train/actor/optimizer_steps"] == 0
    for p, q in zip(before, policy.parameters(), strict=True):
        assert torch.equal(p, q)


def test_grad_sync_is_called_once_per_optimizer_step():
    policy = _policy("gaussian")
    batch = _batch(policy)
    calls = []
    ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.01), batch,
               _settings(update_epoch=2, global_batch_size=32, micro_batch_size=8),
               generator=torch.Generator().manual_seed(0), grad_sync=lambda model: calls.append(model))
    assert len(calls) == 4 and all(c is policy for c in calls)


def test_critic_warmup_trains_only_the_value_head():
    policy = _policy("gaussian")
    batch = _batch(policy)
    actor_before = [p.detach().clone() for p in policy.mean.parameters()]
    value_before = [p.detach().clone() for p in policy.value_head.parameters()]
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    ppo_update(policy, opt, batch, _settings(critic_warmup_steps=5, update_epoch=2, global_batch_size=32,
                                             micro_batch_size=32),
               generator=torch.Generator().manual_seed(0), step_offset=1)  # steps 1..4 < 5: warm-up
    assert all(torch.equal(a, b) for a, b in zip(actor_before, policy.mean.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(value_before, policy.value_head.parameters(), strict=True))
    # past the warm-up the actor moves
    ppo_update(policy, opt, batch, _settings(critic_warmup_steps=5), generator=torch.Generator().manual_seed(0),
               step_offset=5)
    assert not all(torch.equal(a, b) for a, b in zip(actor_before, policy.mean.parameters(), strict=True))


@pytest.mark.parametrize("kl_type", ["k1", "k2", "k3", "abs"])
def test_kl_penalty_pulls_towards_the_reference(kl_type):
    ref = _policy("gaussian", seed=0)
    policy = copy.deepcopy(ref)
    with torch.no_grad():
        policy.mean[-1].bias.add_(0.5)  # move the policy away from the reference
    batch = _batch(policy)
    batch.advantages.zero_()  # only the KL term acts
    opt = torch.optim.SGD(policy.parameters(), lr=0.05)
    kls = []
    for _ in range(5):
        m = ppo_update(policy, opt, batch, _settings(kl_beta=1.0, kl_type=kl_type, value_clip=None),
                       generator=torch.Generator().manual_seed(0), ref_policy=ref)
        kls.append(m["train/actor/kl_loss"])
    dist = (policy.mean[-1].bias - ref.mean[-1].bias).abs().mean().item()
    assert dist < 0.5, f"policy did not move towards the reference ({dist})"
    if kl_type != "k1":  # k1 is signed; the others are >= 0 and must shrink
        assert kls[-1] < kls[0]


def test_without_critic_there_is_no_value_loss():
    policy = _policy("flow_sde")
    batch = _batch(policy, critic=False)
    value_before = [p.detach().clone() for p in policy.value_head.parameters()]
    m = ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.1), batch, _settings(),
                   generator=torch.Generator().manual_seed(0))
    assert "train/critic/value_loss" not in m and "train/critic/explained_variance" not in m
    assert all(torch.equal(a, b) for a, b in zip(value_before, policy.value_head.parameters(), strict=True))


def test_clear_errors():
    policy = _policy("flow_sde")
    batch = _batch(policy)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ConfigError, match="not a multiple of global_batch_size"):
        ppo_update(policy, opt, batch, _settings(global_batch_size=48, micro_batch_size=16), generator=g)
    with pytest.raises(ConfigError, match="reference policy"):
        ppo_update(policy, opt, batch, _settings(kl_beta=0.1), generator=g)
    with pytest.raises(ConfigError, match="defines no entropy"):
        ppo_update(policy, opt, batch, _settings(entropy_bonus=0.01), generator=g)
    with pytest.raises(ConfigError, match="multiple of micro_batch_size"):
        _settings(global_batch_size=64, micro_batch_size=24)
    with pytest.raises(ValueError, match="advantages must be"):
        RolloutBatch(replay={}, old_logprobs=torch.zeros(4, 2, 3), advantages=torch.zeros(4, 1),
                     loss_mask=torch.ones(4, 2, dtype=torch.bool))


def test_update_is_deterministic_for_a_fixed_generator():
    outs = []
    for _ in range(2):
        policy = _policy("flow_sde")
        batch = _batch(policy)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            m = ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=1e-2), batch,
                           _settings(update_epoch=2, global_batch_size=16, micro_batch_size=8),
                           generator=torch.Generator().manual_seed(0))
        outs.append((m, torch.cat([p.detach().flatten() for p in policy.parameters()])))
    assert outs[0][0] == outs[1][0] and torch.equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("level", ["token_level", "action_level", "chunk_level"])
def test_values_at_masked_entries_change_nothing_not_even_nan(level):
    """Garbage (finite or NaN) in masked advantages / old log-probs / returns gives identical weights."""
    base = _policy("gaussian")
    batch = _batch(base)
    batch.loss_mask[5:9] = False  # four fully masked samples
    batch.loss_mask[10, 1:] = False  # a partly masked sample (its advantage is per sample: stays valid)
    results = []
    for garbage in (None, 1e3, float("nan")):
        policy = copy.deepcopy(base)
        b = RolloutBatch(**{**batch.__dict__, "replay": dict(batch.replay)})
        if garbage is not None:
            b.advantages = b.advantages.clone()
            b.advantages[5:9] = garbage
            b.old_logprobs = b.old_logprobs.clone()
            b.old_logprobs[5:9] = garbage
            b.returns = b.returns.clone()
            b.returns[5:9] = garbage
            b.old_values = b.old_values.clone()
            b.old_values[5:9] = garbage
        m = ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.1), b,
                       _settings(logprob_type=level, update_epoch=2, global_batch_size=32, micro_batch_size=16),
                       generator=torch.Generator().manual_seed(0))
        results.append((torch.cat([p.detach().flatten() for p in policy.parameters()]), m))
    for params, m in results[1:]:
        assert torch.equal(params, results[0][0])
        assert m["train/actor/skipped_steps"] == 0 and m["train/actor/policy_loss"] == results[0][1]["train/actor/policy_loss"]


def test_shuffle_by_env_column_is_split_invariant_and_mixes_time_steps() -> None:
    """12 slots x 4 envs, mini-batches of 8 = 2 slots per env: a permutation; every mini-batch holds 2 of
    each env's slots; the 2-process split (envs 0-1 and 2-3) forms the same mini-batches; and envs do not
    all take the same slots (time steps are mixed)."""
    from vlarl_cli.training.update import _permutation

    slots, envs = 12, 4

    def batches(cols: range, batch: int) -> list[set[tuple[int, int]]]:
        perm = _permutation(slots * len(cols), batch, cols, torch.Generator().manual_seed(3))
        assert sorted(perm.tolist()) == list(range(slots * len(cols)))
        rows = perm.view(-1, batch)
        return [{(int(r) // len(cols), cols[int(r) % len(cols)]) for r in mb} for mb in rows]  # (slot, env)

    whole = batches(range(envs), 8)
    halves = [batches(range(0, 2), 4), batches(range(2, 4), 4)]
    assert whole == [a | b for a, b in zip(*halves, strict=True)]
    for mb in whole:
        assert all(sum(1 for _, e in mb if e == env) == 2 for env in range(envs))
    per_env = [{s for s, e in whole[0] if e == env} for env in range(envs)]
    assert len({frozenset(x) for x in per_env}) > 1


def _action_value_batch(seed: int = 0) -> tuple[torch.nn.Module, RolloutBatch]:
    """A ToyGaussianPolicy with one value per executed action and a batch with [N, C] values and returns."""
    policy = ToyGaussianPolicy(seed=seed, action_values=True)
    ro = collect_toy(ReachEnv(16), policy, generator=torch.Generator().manual_seed(seed))
    t, b, c, a = ro.logprobs.shape
    assert ro.values.shape == (t + 1, b, c)
    g = torch.Generator().manual_seed(seed + 1)
    mask = torch.rand(t * b, c, generator=g) > 0.3
    return policy, RolloutBatch(
        replay=ro.replay, old_logprobs=ro.logprobs.reshape(t * b, c, a), advantages=torch.randn(t * b, c, generator=g),
        loss_mask=mask, old_values=ro.values[:-1].reshape(t * b, c), returns=torch.randn(t * b, c, generator=g),
        valid_fraction=torch.ones(t * b), steps_per_trajectory=t)


def test_per_action_value_loss_by_hand():
    """values [N, C]: the value loss is the mean over the VALID ACTION steps of huber(R - V) (here R^2 / 2
    below the Huber delta, V from the policy before the step), masked action steps count for nothing."""
    policy, batch = _action_value_batch()
    with torch.no_grad():
        v = policy.evaluate(batch.replay).values
    assert v.shape == batch.returns.shape == batch.loss_mask.shape
    m = batch.loss_mask
    expected = float((0.5 * (batch.returns - v) ** 2)[m].sum() / m.sum())
    settings = _settings(global_batch_size=len(batch), micro_batch_size=len(batch) // 4, value_clip=None,
                         critic_warmup_steps=10)  # policy loss off: only the critic trains
    garbage = RolloutBatch(**{**batch.__dict__, "replay": dict(batch.replay)})
    garbage.returns = batch.returns.masked_fill(~m, float("nan"))
    garbage.old_values = batch.old_values.masked_fill(~m, 1e6)
    results = []
    for b in (batch, garbage):
        p = copy.deepcopy(policy)
        out = ppo_update(p, torch.optim.SGD(p.parameters(), lr=0.1), b, settings,
                         generator=torch.Generator().manual_seed(0))
        results.append((out, torch.cat([x.detach().flatten() for x in p.value_head.parameters()])))
    assert results[0][0]["train/critic/value_loss"] == pytest.approx(expected, rel=1e-5)
    assert "train/critic/explained_variance" in results[0][0]
    assert results[1][0]["train/critic/value_loss"] == pytest.approx(expected, rel=1e-5)
    assert torch.equal(results[0][1], results[1][1])


def test_per_action_values_need_matching_shapes():
    _, batch = _action_value_batch()
    with pytest.raises(ValueError, match=r"returns .* and old_values .* must have one shape"):
        RolloutBatch(**{**batch.__dict__, "old_values": batch.old_values[:, 0]})
    with pytest.raises(ValueError, match=r"old_values must be \[N=.*\] or \[N, C\]"):
        RolloutBatch(**{**batch.__dict__, "old_values": batch.old_values[:, :2], "returns": batch.returns[:, :2]})


def test_a_trajectory_loss_gets_whole_trajectories_in_every_micro_batch() -> None:
    """GSPO (a trajectory-level loss): rows are shuffled by trajectory, each kept whole and in time order, so every
    micro-batch of a multiple of T rows holds whole trajectories; the split over processes stays invariant."""
    from vlarl_cli.training.update import _row_order

    t, n, epochs = 3, 4, 2
    rows = t * n * epochs
    trajectory = torch.cat([(e * n + torch.arange(n)).repeat(t) for e in range(epochs)])  # the batch builder's ids
    batch = RolloutBatch(replay={}, old_logprobs=torch.zeros(rows, 1, 1), advantages=torch.zeros(rows),
                         loss_mask=torch.ones(rows, 1, dtype=torch.bool), steps_per_trajectory=t, trajectory=trajectory)
    s = UpdateSettings(update_epoch=1, global_batch_size=2 * t * n, micro_batch_size=t, clip_ratio_low=0.2,
                       clip_ratio_high=0.2, clip_ratio_c=None, value_clip=None, huber_delta=1.0, entropy_bonus=0.0,
                       kl_beta=0.0, kl_type="kl", logprob_type="chunk_level", loss_agg="token-mean", clip_grad=1.0,
                       policy_loss="gspo")
    order = _row_order(batch, s, range(n), torch.Generator().manual_seed(0))
    assert sorted(order.tolist()) == list(range(rows))
    pieces = order.view(-1, t)  # one trajectory per micro-batch here
    for piece in pieces:
        assert len(set(trajectory[piece].tolist())) == 1 and piece.tolist() == sorted(piece.tolist())
    vanilla = _row_order(batch, UpdateSettings(**{**s.__dict__, "policy_loss": "vanilla"}), range(n),
                         torch.Generator().manual_seed(0))
    assert any(len(set(trajectory[p].tolist())) > 1 for p in vanilla.view(-1, t))  # chunk steps are mixed there
