"""OftPolicy: the RL contract (sample / evaluate), exact log-prob recomputation, temperature, training."""

from __future__ import annotations

import itertools

import pytest
import torch

from vlarl_cli.policies.base import Policy, index_replay, stack_replays
from vlarl_cli.policies.openvla_oft.policy import REPLAY_KEYS
from vlarl_cli.policies.openvla_oft.processing import pixel_values


@pytest.mark.parametrize("value_head", [False, True])
def test_evaluate_recomputes_sampled_logprobs_exactly(make_policy, make_obs, value_head):
    policy = make_policy(add_value_head=value_head)
    assert isinstance(policy, Policy)
    out = policy.sample(make_obs(batch=4), generator=torch.Generator().manual_seed(3))
    ev = policy.evaluate(out.replay)
    assert out.actions.shape == out.logprobs.shape == ev.logprobs.shape == ev.entropy.shape == (4, 8, 7)
    assert out.values.shape == ev.values.shape == (4,)
    assert sorted(out.replay) == sorted((*REPLAY_KEYS, "action_tokens"))
    assert out.replay["action_tokens"].shape == (4, 8, 7) and out.replay["action_tokens"].dtype == torch.long
    assert torch.allclose(ev.logprobs, out.logprobs, atol=1e-5, rtol=0)
    ratio = torch.exp(ev.logprobs - out.logprobs)
    assert torch.equal(ratio, torch.ones_like(ratio))  # PPO ratio exactly 1 with unchanged weights
    assert torch.allclose(ev.values, out.values, atol=1e-6, rtol=0)
    assert (out.logprobs < 0).all() and (out.logprobs > -torch.log(torch.tensor(256.0)) * 3).all()
    if value_head:
        assert out.values.abs().max() > 0
    else:
        assert torch.equal(out.values, torch.zeros(4))


def test_logprobs_match_a_hand_computed_tempered_softmax(make_policy, make_obs):
    policy = make_policy()
    policy.temperature = 0.7
    obs = make_obs(batch=2)
    out = policy.sample(obs, generator=torch.Generator().manual_seed(0))
    inputs = policy.processor.prepare(obs)
    with torch.no_grad():
        logits, _ = policy.action_outputs(pixel_values(inputs["images"]), inputs["tokens"], inputs["token_mask"])
    k = out.replay["action_tokens"].reshape(2, 56) - policy.cfg.action_token_start
    p = torch.softmax(logits.double() / 0.7, dim=-1)
    want = torch.log(p.gather(-1, k[..., None]).squeeze(-1)).reshape(2, 8, 7)
    assert torch.allclose(out.logprobs.double(), want, atol=1e-5)
    ent = -(p * torch.log(p)).sum(-1).reshape(2, 8, 7)
    assert torch.allclose(policy.evaluate(out.replay).entropy.double(), ent, atol=1e-5)


def test_replays_stack_slice_and_recompute_in_shuffled_minibatches(make_policy, make_obs):
    policy = make_policy(add_value_head=True)
    outs = [policy.sample(make_obs(batch=3, seed=s), generator=torch.Generator().manual_seed(s)) for s in (1, 2)]
    replay = stack_replays([o.replay for o in outs])
    old = torch.cat([o.logprobs for o in outs])
    perm = torch.tensor([5, 0, 3, 1])
    ev = policy.evaluate(index_replay(replay, perm))
    assert torch.allclose(ev.logprobs, old[perm], atol=1e-5, rtol=0)


def test_deterministic_is_argmax_with_zero_logprobs(make_policy, make_obs):
    policy = make_policy()
    obs = make_obs(batch=3)
    out = policy.sample(obs, deterministic=True)
    assert torch.equal(out.logprobs, torch.zeros(3, 8, 7))
    inputs = policy.processor.prepare(obs)
    with torch.no_grad():
        logits, _ = policy.action_outputs(pixel_values(inputs["images"]), inputs["tokens"], inputs["token_mask"])
    want = logits.argmax(-1).reshape(3, 8, 7) + policy.cfg.action_token_start
    assert torch.equal(out.replay["action_tokens"], want)
    again = policy.sample(obs, deterministic=True)
    assert torch.equal(again.actions, out.actions)
    assert torch.equal(out.actions, policy.processor.actions_to_env(want - policy.cfg.action_token_start))


def test_temperature_controls_spread(make_policy, make_obs):
    policy = make_policy()
    obs = make_obs(batch=2)
    entropies = {}
    for t in (0.05, 1.0, 5.0):
        policy.temperature = t
        out = policy.sample(obs, generator=torch.Generator().manual_seed(0))
        entropies[t] = policy.evaluate(out.replay).entropy.mean().item()
    assert entropies[0.05] < entropies[1.0] < entropies[5.0] <= torch.log(torch.tensor(256.0)).item() + 1e-5
    # a very low temperature samples the argmax wherever the top-2 logit gap is not tiny
    policy.temperature = 1e-3
    cold = policy.sample(obs, generator=torch.Generator().manual_seed(0)).replay["action_tokens"]
    greedy = policy.sample(obs, deterministic=True).replay["action_tokens"]
    inputs = policy.processor.prepare(obs)
    with torch.no_grad():
        logits, _ = policy.action_outputs(pixel_values(inputs["images"]), inputs["tokens"], inputs["token_mask"])
    top2 = logits.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1] > 0.05).reshape(2, 8, 7)  # flip probability < exp(-50)
    assert clear.any()
    assert torch.equal(cold[clear], greedy[clear])


def test_sampling_is_seeded(make_policy, make_obs):
    policy = make_policy()
    obs = make_obs(batch=2)
    a = policy.sample(obs, generator=torch.Generator().manual_seed(7))
    b = policy.sample(obs, generator=torch.Generator().manual_seed(7))
    c = policy.sample(obs, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.replay["action_tokens"], b.replay["action_tokens"])
    assert not torch.equal(a.replay["action_tokens"], c.replay["action_tokens"])


def test_actions_are_env_scale(make_policy, make_obs):
    policy = make_policy()
    out = policy.sample(make_obs(batch=4), generator=torch.Generator().manual_seed(1))
    q01 = torch.tensor([-0.5, -0.4, -0.9, -0.1, -0.2, -0.3])
    q99 = torch.tensor([0.5, 0.8, 0.9, 0.1, 0.2, 0.3])
    assert ((out.actions[..., :6] >= q01 - 1e-6) & (out.actions[..., :6] <= q99 + 1e-6)).all()
    assert set(out.actions[..., 6].unique().tolist()) <= {-1.0, 0.0, 1.0}


def test_evaluate_rejects_bad_replays(make_policy, make_obs):
    policy = make_policy()
    out = policy.sample(make_obs(batch=2))
    with pytest.raises(KeyError, match="action_tokens"):
        policy.evaluate({k: v for k, v in out.replay.items() if k != "action_tokens"})
    bad = dict(out.replay)
    bad["action_tokens"] = bad["action_tokens"] - policy.cfg.action_token_start  # relative ids
    with pytest.raises(ValueError, match="action_tokens"):
        policy.evaluate(bad)


def _ppo_steps(policy, replay, old_logp, advantages, steps: int, lr: float = 1e-3) -> list[float]:
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    policy.train()
    losses = []
    for _ in range(steps):
        ratio = torch.exp(policy.evaluate(replay).logprobs - old_logp)
        pg_loss1 = -advantages * ratio
        pg_loss2 = -advantages * torch.clamp(ratio, 0.8, 1.28)
        loss = torch.max(pg_loss1, pg_loss2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_ppo_steps_decrease_loss_on_fixed_batch(make_policy, make_obs):
    policy = make_policy()
    out = policy.sample(make_obs(batch=4), generator=torch.Generator().manual_seed(0))
    adv = torch.tensor([1.0, -0.5, 2.0, -1.0])[:, None, None].expand(4, 8, 7)
    losses = _ppo_steps(policy, out.replay, out.logprobs, adv, steps=4)
    assert losses[0] == pytest.approx(-adv.mean().item(), abs=1e-6)  # ratio 1 at the first step
    assert all(b < a for a, b in itertools.pairwise(losses))
    assert losses[-1] < losses[0] - 1e-2


def test_value_loss_trains_value_head(make_policy, make_obs):
    policy = make_policy(add_value_head=True)
    out = policy.sample(make_obs(batch=3))
    target = torch.tensor([0.2, 0.9, -0.4])
    opt = torch.optim.Adam(policy.value_head.parameters(), lr=3e-2)
    losses = []
    for _ in range(30):
        loss = ((policy.evaluate(out.replay).values - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_value_pooling(make_policy, make_obs, pooling):
    policy = make_policy(add_value_head=True, value_pooling=pooling)
    obs = make_obs(batch=2)
    out = policy.sample(obs)
    inputs = policy.processor.prepare(obs)
    with torch.no_grad():
        _, hidden = policy.action_outputs(pixel_values(inputs["images"]), inputs["tokens"], inputs["token_mask"])
        pooled = hidden.mean(1) if pooling == "mean" else hidden[:, 0]
        assert torch.allclose(out.values, policy.value_head(pooled)[:, 0], atol=1e-6)


def test_lora_trains_only_adapters_and_value_head(make_policy, make_obs):
    policy = make_policy(is_lora=True, lora_rank=4, add_value_head=True)
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith(("lora_A", "lora_B")) or n.startswith("value_head.") for n in trainable)
    assert any("language_model.model.layers.0.self_attn.q_proj.lora_A" == n for n in trainable)
    out = policy.sample(make_obs(batch=2), generator=torch.Generator().manual_seed(0))
    adv = torch.ones(2, 8, 7)
    losses = _ppo_steps(policy, out.replay, out.logprobs, adv, steps=3, lr=1e-2)
    assert losses[-1] < losses[0]


def test_gradient_checkpointing_gives_same_gradients(make_policy, make_obs):
    policy = make_policy().train()
    out = policy.sample(make_obs(batch=2), generator=torch.Generator().manual_seed(0))
    grads = []
    for ckpt in (False, True):
        policy.gradient_checkpointing = ckpt
        policy.zero_grad()
        policy.evaluate(out.replay).logprobs.sum().backward()
        grads.append(policy.language_model.model.layers[0].mlp.down_proj.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_missing_statistics_or_wrong_dims_are_reported(make_policy, oft_stats):
    from vlarl_cli.errors import ConfigError

    policy = make_policy(stats=False)
    assert policy.processor.stats is None
    with pytest.raises(ConfigError, match="action_dim"):
        bad = {"libero_10_no_noops": {"action": {"q01": [0.0] * 6, "q99": [1.0] * 6}}}
        policy.set_dataset_statistics(bad)
    policy.set_dataset_statistics(oft_stats)
    assert policy.processor.stats.key == "libero_10_no_noops"


def test_bf16_policy_recomputes_its_own_logprobs(make_policy, make_obs):
    policy = make_policy(precision="bf16").to(torch.bfloat16)
    out = policy.sample(make_obs(batch=2), generator=torch.Generator().manual_seed(0))
    ev = policy.evaluate(out.replay)
    assert out.logprobs.dtype == ev.logprobs.dtype == torch.float32
    assert torch.allclose(ev.logprobs, out.logprobs, atol=1e-5, rtol=0)


def test_train_mode_has_no_dropout(make_policy, make_obs):
    policy = make_policy(add_value_head=True)
    out = policy.sample(make_obs(batch=2), generator=torch.Generator().manual_seed(0))
    policy.train()
    ev = policy.evaluate(out.replay)
    assert torch.equal(torch.exp(ev.logprobs - out.logprobs), torch.ones_like(out.logprobs))
    assert torch.allclose(ev.values, out.values, atol=1e-6, rtol=0)


def test_row_streams_make_sampling_independent_of_batching(make_policy, make_obs, split_equals_whole) -> None:
    split_equals_whole(make_policy(), make_obs(batch=4), exact_keys=("action_tokens",))
