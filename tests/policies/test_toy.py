"""Toy policies keep the Policy contract; token helpers; the toy reach env's dynamics and layout."""

from __future__ import annotations

import math

import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.algorithms.advantages import loss_mask_from_dones
from vlarl_cli.envs.toy import ReachEnv
from vlarl_cli.policies.base import Policy
from vlarl_cli.policies.flow_matching import FlowConfig
from vlarl_cli.policies.token import (
    actions_to_tokens,
    bin_centers,
    sample_tokens,
    token_logprobs,
    tokens_to_actions,
)
from vlarl_cli.policies.toy import ToyFlowPolicy, ToyGaussianPolicy, ToyTokenPolicy
from vlarl_cli.training.toy import collect_toy, episode_success

POLICIES = {
    "flow_sde": lambda: ToyFlowPolicy(flow=FlowConfig(method="flow_sde", num_steps=3)),
    "flow_cps": lambda: ToyFlowPolicy(flow=FlowConfig(method="flow_cps", num_steps=3)),
    "flow_noise": lambda: ToyFlowPolicy(flow=FlowConfig(method="flow_noise", num_steps=3)),
    "flow_sde_gr00t_joint": lambda: ToyFlowPolicy(flow=FlowConfig(noise_at=0.0, joint_logprob=True)),
    "gaussian": lambda: ToyGaussianPolicy(),
    "token": lambda: ToyTokenPolicy(temperature=1.6),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize("name", list(POLICIES))
def test_contract_and_exact_recomputation(name):
    policy = POLICIES[name]()
    assert isinstance(policy, Policy)
    obs = {keys.STATES: torch.randn(7, 4)}
    with torch.no_grad():
        out = policy.sample(obs)
    assert out.actions.shape == out.logprobs.shape == (7, 4, 2) and out.values.shape == (7,)
    assert all(v.shape[0] == 7 for v in out.replay.values())
    ev = policy.evaluate(out.replay)
    torch.testing.assert_close(ev.logprobs, out.logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(ev.values, out.values)
    assert (ev.entropy is None) == (name in ("flow_sde", "flow_cps", "flow_sde_gr00t_joint"))
    with torch.no_grad():
        det = policy.sample(obs, deterministic=True)
    assert torch.equal(det.logprobs, torch.zeros(7, 4, 2))


def test_construction_is_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b = ToyFlowPolicy(seed=5), ToyFlowPolicy(seed=5)
    assert torch.equal(torch.rand(3), expected)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_token_helpers():
    centers = bin_centers(4)
    torch.testing.assert_close(centers, torch.tensor([-0.75, -0.25, 0.25, 0.75]))
    x = torch.tensor([-1.0, -0.6, -0.1, 0.2, 0.99, 1.0, 3.0])
    tok = actions_to_tokens(x, 4)
    assert tok.tolist() == [0, 0, 1, 2, 3, 3, 3]
    assert torch.equal(actions_to_tokens(tokens_to_actions(tok, 4), 4), tok)  # round trip on centres
    logits = torch.tensor([[1.0, 2.0, 0.5]])
    tokens = torch.tensor([1])
    for temp in (1.0, 1.6):
        logp, ent = token_logprobs(logits, tokens, temp)
        p = torch.softmax(logits / temp, -1)
        assert logp.item() == pytest.approx(math.log(p[0, 1].item()), abs=1e-6)
        assert ent.item() == pytest.approx(-(p * p.log()).sum().item(), abs=1e-6)
    assert sample_tokens(logits, deterministic=True).tolist() == [1]
    # sampling frequency matches the tempered softmax
    many = sample_tokens(logits.expand(20000, 3), 1.6, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(many, minlength=3).float() / 20000
    torch.testing.assert_close(freq, torch.softmax(logits[0] / 1.6, -1), atol=0.015, rtol=0)
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(logits, tokens, 0.0)


def test_reach_env_dynamics_and_done_layout():
    env = ReachEnv(3, chunk=2, max_steps=4, step_size=0.5, goal_radius=0.1)
    env.reset(torch.tensor([[1.0, 0.0], [0.0, 5.0], [0.0, -0.5]]))
    # env0 walks right: reaches (1, 0) at its 2nd step; env1 never reaches; env2 reaches at step 1
    a = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]], [[0.0, -1.0], [0.0, -1.0]]])
    s1 = env.step(a)
    assert s1.rewards.tolist() == [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
    assert s1.dones.tolist() == [[False, True], [False, False], [True, True]]
    s2 = env.step(a * 3)  # clipped to [-1, 1]
    assert s2.truncated.tolist() == [[False, False], [False, True], [False, False]]
    torch.testing.assert_close(s2.obs[keys.STATES][1], torch.tensor([0.0, 2.0, 0.0, 5.0]))
    assert env.success.tolist() == [True, False, True]
    with pytest.raises(ValueError, match="actions must be"):
        env.step(torch.zeros(3, 2, 3))


def test_collect_rollout_layout_and_group_goals():
    env = ReachEnv(8, chunk=4, max_steps=16)
    ro = collect_toy(env, ToyGaussianPolicy(), group_size=4, generator=torch.Generator().manual_seed(0))
    assert ro.logprobs.shape == (4, 8, 4, 2) and ro.values.shape == (5, 8)
    assert ro.rewards.shape == (4, 8, 4) and ro.dones.shape == (5, 8, 4) and not ro.dones[0].any()
    assert ro.dones[-1, :, -1].all()  # every episode is over by the time limit
    goals = ro.replay[keys.STATES][:8, 2:]
    assert torch.equal(goals[:4], goals[:1].expand(4, 2)) and not torch.equal(goals[0], goals[4])
    # the reward of each successful env sits on its last valid step
    mask = loss_mask_from_dones(ro.dones)
    assert torch.equal((ro.rewards * mask).sum((0, 2)) > 0, episode_success(ro))


def test_toy_policy_loads_model_path(tmp_path) -> None:
    """rl-train and sft write model.safetensors; actor.model.model_path loads it (e.g. RL from an SFT run)."""
    from safetensors.torch import save_file

    from vlarl_cli.errors import CheckpointError
    from vlarl_cli.policies.toy import ModelSettings, build_policy

    trained = build_policy(ModelSettings())
    save_file({k: v.contiguous() for k, v in trained.state_dict().items()}, str(tmp_path / "model.safetensors"))
    loaded = build_policy(ModelSettings(model_path=str(tmp_path)))
    fresh = build_policy(ModelSettings())
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in trained.state_dict().items())
    assert not all(torch.equal(v, fresh.state_dict()[k]) for k, v in trained.state_dict().items())
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        build_policy(ModelSettings(model_path=str(tmp_path / "nowhere")))
