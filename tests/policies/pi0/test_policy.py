"""Pi0Policy: the RL contract (sample / evaluate), exact log-prob recomputation, training behaviour."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from vlarl_cli.policies.base import Policy, index_replay, stack_replays
from vlarl_cli.policies.pi0.policy import REPLAY_KEYS
from vlarl_cli.policies.pi0.processing import to_model_images

CASES = [
    ("pi0", "flow_sde", False),
    ("pi0", "flow_sde", True),
    ("pi0", "flow_noise", False),
    ("pi05", "flow_noise", True),
    ("pi05", "flow_sde", False),
    ("pi05", "flow_cps", False),
    ("pi0", "ode", False),
]


@pytest.mark.parametrize(("variant", "method", "joint"), CASES)
def test_evaluate_recomputes_sampled_logprobs_exactly(make_policy, make_obs, variant, method, joint):
    policy = make_policy(variant, noise_method=method, joint_logprob=joint, num_steps=3)
    assert isinstance(policy, Policy)
    out = policy.sample(make_obs(batch=4), generator=torch.Generator().manual_seed(3))
    ev = policy.evaluate(out.replay)
    b, c, a = 4, policy.cfg.num_action_chunks, policy.cfg.action_env_dim
    assert out.actions.shape == out.logprobs.shape == ev.logprobs.shape == (b, c, a)
    assert out.values.shape == ev.values.shape == (b,)
    assert torch.allclose(ev.logprobs, out.logprobs, atol=1e-5, rtol=0)
    ratio = torch.exp(ev.logprobs - out.logprobs)
    assert torch.equal(ratio, torch.ones_like(ratio))  # PPO ratio exactly 1 with unchanged weights
    assert torch.allclose(ev.values, out.values, atol=1e-6, rtol=0)
    assert out.values.abs().max() > 0  # the (randomised) head is really used
    if method == "ode":
        assert torch.equal(out.logprobs, torch.zeros_like(out.logprobs))
    else:
        assert out.logprobs.abs().max() > 0
    if method == "flow_noise":
        lo, hi = (0.5 * math.log(2 * math.pi * math.e * s**2) for s in (0.08, 0.16))
        if joint:  # mean over the N(0, 1) initial noise (entropy 0.5 log(2 pi e)) and K transitions
            h0, k = 0.5 * math.log(2 * math.pi * math.e), policy.cfg.num_steps
            lo, hi = (h0 + k * lo) / (k + 1), (h0 + k * hi) / (k + 1)
        assert ev.entropy is not None and ev.entropy.shape == (b, c, a)
        assert ev.entropy.min() >= lo - 1e-6 and ev.entropy.max() <= hi + 1e-6
    else:
        assert ev.entropy is None


def test_replay_is_batch_first_and_stackable(make_policy, make_obs):
    policy = make_policy("pi0", num_steps=2)
    o1 = policy.sample(make_obs(batch=2, seed=1))
    o2 = policy.sample(make_obs(batch=3, seed=2))
    assert set(o1.replay) == set(REPLAY_KEYS)
    assert o1.replay["images"].dtype == torch.uint8
    assert o1.replay["chain"].shape == (2, 3, policy.cfg.action_horizon, policy.cfg.max_action_dim)
    stacked = stack_replays([o1.replay, o2.replay])
    ev = policy.evaluate(stacked)
    assert torch.allclose(ev.logprobs, torch.cat([o1.logprobs, o2.logprobs]), atol=1e-5, rtol=0)
    part = policy.evaluate(index_replay(stacked, torch.tensor([4, 0])))
    assert torch.allclose(part.logprobs, torch.stack([o2.logprobs[2], o1.logprobs[0]]), atol=1e-5, rtol=0)


def test_value_after_vlm_depends_on_observation_not_noise(make_policy, make_obs):
    policy = make_policy("pi05", value_after_vlm=True)
    obs = make_obs(batch=2)
    v1 = policy.sample(obs, generator=torch.Generator().manual_seed(0)).values
    v2 = policy.sample(obs, generator=torch.Generator().manual_seed(1)).values
    assert torch.equal(v1, v2)
    prefix_policy = make_policy("pi0", value_after_vlm=False)
    w1 = prefix_policy.sample(obs, generator=torch.Generator().manual_seed(0)).values
    w2 = prefix_policy.sample(obs, generator=torch.Generator().manual_seed(1)).values
    assert not torch.equal(w1, w2)  # expert-side value reads the t=1 pass on the initial noise


def test_deterministic_sample_is_the_ode_solution(make_policy, make_obs):
    policy = make_policy("pi0", num_steps=3)
    obs = make_obs(batch=2, size=32)
    g = torch.Generator().manual_seed(5)
    out = policy.sample(obs, deterministic=True, generator=g)
    assert torch.equal(out.logprobs, torch.zeros_like(out.logprobs))
    assert torch.equal(out.replay["denoise_index"], torch.full((2,), -1))
    inputs = policy.processor.prepare(obs)
    noise = out.replay["chain"][:, 0]
    again = policy.sample(obs, deterministic=True, noise=noise)  # explicit initial noise
    assert torch.equal(again.actions, out.actions)
    with torch.no_grad():
        ode = policy.sample_actions(to_model_images(inputs["images"]), inputs["image_masks"], inputs["tokens"],
                                    inputs["token_mask"], inputs["state"], noise, num_steps=3)
    assert torch.allclose(out.actions, ode[:, : policy.cfg.num_action_chunks, :7], atol=1e-5, rtol=0)


def test_changed_weights_change_logprobs(make_policy, make_obs):
    policy = make_policy("pi0", num_steps=2)
    out = policy.sample(make_obs(batch=3))
    with torch.no_grad():
        policy.action_out_proj.bias.add_(0.05)
    ev = policy.evaluate(out.replay)
    assert not torch.allclose(ev.logprobs, out.logprobs, atol=1e-3)


def _ppo_steps(policy, replay, old_logp, advantages, steps: int, lr: float = 3e-4) -> list[float]:
    """Token-level clipped PPO (one ratio per element, RLinf ``logprob_type: token_level``)."""
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    losses = []
    policy.train()
    for _ in range(steps):
        ev = policy.evaluate(replay)
        ratio = torch.exp(ev.logprobs - old_logp)
        pg_loss1 = -advantages * ratio
        pg_loss2 = -advantages * torch.clamp(ratio, 0.8, 1.2)
        loss = torch.max(pg_loss1, pg_loss2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_ppo_steps_decrease_loss_on_fixed_batch(make_policy, make_obs):
    policy = make_policy("pi0", num_steps=2, noise_method="flow_sde")
    out = policy.sample(make_obs(batch=4), generator=torch.Generator().manual_seed(0))
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None, None]
    losses = _ppo_steps(policy, out.replay, out.logprobs, adv, steps=4)
    assert losses[0] == pytest.approx(-adv.mean().item(), abs=1e-6)  # ratio 1 at the first step
    assert all(b < a for a, b in itertools.pairwise(losses))
    assert losses[-1] < losses[0] - 1e-2


def test_value_loss_trains_value_head(make_policy, make_obs):
    policy = make_policy("pi0", num_steps=2)
    out = policy.sample(make_obs(batch=3))
    target = torch.tensor([1.0, 0.0, 0.5])
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    first = last = None
    for _ in range(5):
        loss = ((policy.evaluate(out.replay).values - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    assert last < first


def test_train_expert_only_freezes_the_vlm(make_policy, make_obs):
    policy = make_policy("pi0", num_steps=2, train_expert_only=True)
    out = policy.sample(make_obs(batch=2))
    ev = policy.evaluate(out.replay)
    (ev.logprobs.sum() + ev.values.sum()).backward()
    assert all(not p.requires_grad and p.grad is None for p in policy.vlm.parameters())
    assert all(p.grad is not None for p in policy.expert.parameters())
    assert policy.action_in_proj.weight.grad.abs().sum() > 0
    # the prefix is computed without a graph when the VLM is frozen; expert gradients are unchanged
    full = make_policy("pi0", num_steps=2, train_expert_only=False)
    full.load_state_dict(policy.state_dict())
    ev2 = full.evaluate(out.replay)
    (ev2.logprobs.sum() + ev2.values.sum()).backward()
    assert torch.equal(ev2.logprobs, ev.logprobs)
    for (name, p), q in zip(policy.expert.named_parameters(), full.expert.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, atol=1e-6, rtol=1e-5), name


def test_lora_trains_only_adapters_in_the_vlm(make_policy, make_obs):
    from vlarl_cli.policies.lora import LoRALinear

    policy = make_policy("pi0", num_steps=2, is_lora=True, lora_rank=4)
    wrapped = [m for m in policy.vlm.language_model.modules() if isinstance(m, LoRALinear)]
    assert len(wrapped) == 7 * policy.cfg.vlm_depth
    out = policy.sample(make_obs(batch=2))
    policy.evaluate(out.replay).logprobs.sum().backward()
    trainable_vlm = {n for n, p in policy.vlm.named_parameters() if p.requires_grad}
    assert trainable_vlm and all(n.endswith(("lora_A", "lora_B")) for n in trainable_vlm)
    # the expert reads only the prefix keys/values: the VLM's last-layer q/o/MLP do not reach the
    # action log-prob (they would with value_after_vlm), every other adapter gets a gradient
    with_grad = {n for n, m in policy.vlm.language_model.named_modules()
                 if isinstance(m, LoRALinear) and m.lora_B.grad is not None}
    last = policy.cfg.vlm_depth - 1
    assert with_grad == {n for n, m in policy.vlm.language_model.named_modules() if isinstance(m, LoRALinear)
                         and (not n.startswith(f"layers.{last}.") or n.endswith(("k_proj", "v_proj")))}
    assert all(p.grad is None for n, p in policy.vlm.named_parameters() if n not in trainable_vlm)


def test_gradient_checkpointing_gives_the_same_gradients(make_policy, make_obs):
    policy = make_policy("pi05", num_steps=2)
    out = policy.sample(make_obs(batch=2))
    grads = []
    for flag in (False, True):
        policy.zero_grad()
        policy.gradient_checkpointing = flag
        ev = policy.evaluate(out.replay)
        (ev.logprobs.sum() + ev.values.sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_fsdp2_units_match_unsharded(make_policy, make_obs, tmp_path):
    """FSDP2 (one CPU rank, gloo) with the policy's own wrap classes: same samples and gradients."""
    import torch.distributed as dist

    from vlarl_cli.distributed.fsdp import shard_model

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this session")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        policy = make_policy("pi05", num_steps=2, train_expert_only=False)
        ref = make_policy("pi05", num_steps=2, train_expert_only=False)
        ref.load_state_dict(policy.state_dict())
        shard_model(policy, device=torch.device("cpu"), class_names=[])
        wrapped = {type(m).__name__ for m in policy.modules() if type(m).__name__.startswith("FSDP")}
        assert {"FSDPGemmaMLP", "FSDPSiglipEncoderLayer"} <= wrapped
        obs = make_obs(batch=2)
        out = policy.sample(obs, generator=torch.Generator().manual_seed(1))
        out_ref = ref.sample(obs, generator=torch.Generator().manual_seed(1))
        assert torch.allclose(out.actions, out_ref.actions, atol=1e-6, rtol=0)
        for p in (policy, ref):
            ev = p.evaluate(out.replay)
            (ev.logprobs.sum() + ev.values.sum()).backward()
        grad = policy.vlm.language_model.layers[0].mlp.up_proj.weight.grad.full_tensor()
        assert torch.allclose(grad, ref.vlm.language_model.layers[0].mlp.up_proj.weight.grad, atol=1e-6, rtol=1e-5)
        attn = policy.expert.layers[1].self_attn.q_proj.weight.grad.full_tensor()  # root unit
        assert torch.allclose(attn, ref.expert.layers[1].self_attn.q_proj.weight.grad, atol=1e-6, rtol=1e-5)
    finally:
        dist.destroy_process_group()


def test_row_streams_make_sampling_independent_of_batching(make_policy, make_obs, split_equals_whole) -> None:
    split_equals_whole(make_policy(noise_method="flow_sde"), make_obs(batch=4), exact_keys=("denoise_index",))
