"""OpenVLA-OFT with ``value_type: action_level`` through GAE at action level (RLinf's OFT PPO setting):
the tiny policy's [B, C] values go through a rollout, the batch (returns [N, C]) and one PPO update."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from vlarl_cli.config.loading import load_config
from vlarl_cli.training.actor import update_settings
from vlarl_cli.training.batch import build_batch
from vlarl_cli.training.rollout import Rollout
from vlarl_cli.training.update import ppo_update


def _rollout(policy: Any, make_obs: Any, t: int, n: int) -> Rollout:
    outs = [policy.sample(make_obs(batch=n, seed=s)) for s in range(t)]
    last = policy.sample(make_obs(batch=n, seed=t), deterministic=True).values
    c = outs[0].actions.shape[1]
    rewards = torch.zeros(t, n, c)
    rewards[1, 0, 3] = 1.0  # env 0 succeeds at its 12th action step
    dones = torch.zeros(t + 1, n, c, dtype=torch.bool)
    dones[2, 0, 3] = True  # ... which ends its episode (stored one row later, at the same action)
    return Rollout(replay={k: torch.cat([o.replay[k] for o in outs]) for k in outs[0].replay},
                   logprobs=torch.stack([o.logprobs for o in outs]),
                   values=torch.cat([torch.stack([o.values for o in outs]), last[None]]).float(),
                   rewards=rewards, dones=dones, truncated=torch.zeros_like(dones[1:]), final_values=torch.zeros(t, n),
                   success=rewards.bool())


def test_oft_action_level_values_through_gae_and_the_update(make_policy, make_obs) -> None:
    policy = make_policy(add_value_head=True, value_type="action_level")
    t, n, c = 3, 2, policy.cfg.num_action_chunks
    rollout = _rollout(policy, make_obs, t, n)
    assert rollout.values.shape == (t + 1, n, c)
    config = load_config("libero_10_ppo_openvlaoft", ["algorithm.reward_type=action_level",
                                                      "actor.model.value_type=action_level"]).config
    batch, metrics = build_batch(config, [rollout], critic=True)
    assert batch.returns is not None and batch.old_values is not None
    assert batch.returns.shape == batch.old_values.shape == batch.advantages.shape == (t * n, c)
    # env 0: the done after its action step 11 masks every later action step (not the whole chunk)
    assert batch.loss_mask[1 * n + 0].tolist() == [True] * 4 + [False] * (c - 4)
    assert not batch.loss_mask[2 * n + 0].any() and batch.loss_mask[:, :].sum() == (t * n * c) - (c - 4) - c
    # the return of env 0's last valid action = its reward (no bootstrap across the done)
    assert float(batch.returns[1 * n + 0, 3]) == 1.0
    settings = dataclasses.replace(update_settings(config, 1), global_batch_size=t * n, micro_batch_size=n,
                                   update_epoch=1)
    opt = torch.optim.SGD(policy.parameters(), lr=1e-3)
    out = ppo_update(policy, opt, batch, settings, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(torch.tensor(out["train/critic/value_loss"])) and out["train/actor/skipped_steps"] == 0
    assert abs(out["train/actor/ratio"] - 1.0) < 1e-4  # first evaluation reproduces the rollout log-probs
    assert "rollout/returns_mean" in metrics
