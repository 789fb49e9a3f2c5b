"""Training the toy policies on the toy reach task (``envs/toy.py``) with the RL core, outside the runner.

Used by ``tests/training/test_learning.py`` (fixed seeds, few iterations) and
``benchmarks/learning_curve.py`` (longer curves, PNG + JSON). It drives the real pieces directly: a policy
from ``policies/toy.py``, ``algorithms.advantages`` and ``training.update.ppo_update``; ``vlarl rl-train
--config toy_reach_ppo`` runs the same task through the full runner instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from vlarl_cli.algorithm_types import ADVANTAGE_TYPES
from vlarl_cli.algorithms.advantages import (
    aggregate_dones,
    aggregate_rewards,
    compute_advantages,
    loss_mask_from_dones,
    trajectory_valid_fraction,
)
from vlarl_cli.envs.toy import ReachEnv, ToyVectorEnv
from vlarl_cli.policies.base import Policy
from vlarl_cli.policies.flow_matching import FlowConfig
from vlarl_cli.policies.toy import ToyFlowPolicy, ToyGaussianPolicy, ToyTokenPolicy
from vlarl_cli.training.rollout import Rollout, collect
from vlarl_cli.training.update import RolloutBatch, UpdateSettings, ppo_update

POLICY_KINDS = ("flow_sde", "flow_cps", "flow_noise", "gaussian", "token")


@dataclass
class ToyRun:
    """Settings of one toy training run (plain numbers)."""

    policy: str = "flow_sde"  # one of POLICY_KINDS
    adv_type: str = "gae"
    iterations: int = 30
    num_envs: int = 64
    group_size: int = 8  # group estimators only (grpo, drgrpo, rloo)
    eval_envs: int = 256
    lr: float = 5e-3
    seed: int = 0
    update_epoch: int = 4
    global_batch_size: int = 128
    micro_batch_size: int = 64
    logprob_type: str = "chunk_level"
    joint_logprob: bool = False
    denoising_steps: int = 4
    noise_level: float = 1.0
    entropy_bonus: float = 0.0
    # flow_noise std bounds: ReinFlow's [0.08, 0.16] suits fine-tuning a pretrained policy; training the toy
    # from scratch needs exploration on the scale of the initial noise
    noise_std_min: float = 0.3
    noise_std_max: float = 1.0
    eval_every: int = 5
    extra: dict[str, float] = field(default_factory=dict)


def make_policy(run: ToyRun, env: ReachEnv) -> torch.nn.Module:
    kw: dict[str, Any] = {"state_dim": env.state_dim, "action_dim": env.action_dim, "chunk": env.chunk, "seed": run.seed}
    if run.policy.startswith("flow_"):
        flow = FlowConfig(num_steps=run.denoising_steps, method=run.policy, noise_level=run.noise_level,
                          joint_logprob=run.joint_logprob, logvar_min=2 * math.log(run.noise_std_min),
                          logvar_max=2 * math.log(run.noise_std_max))
        return ToyFlowPolicy(flow=flow, **kw)
    if run.policy == "gaussian":
        return ToyGaussianPolicy(**kw)
    if run.policy == "token":
        return ToyTokenPolicy(**kw)
    raise ValueError(f"unknown toy policy {run.policy!r}; known: {POLICY_KINDS}")


@torch.no_grad()
def collect_toy(env: ReachEnv, policy: Policy, *, deterministic: bool = False, goals: torch.Tensor | None = None,
                group_size: int = 1, generator: torch.Generator | None = None) -> Rollout:
    """One episode per env of the toy task (``env.num_chunks`` chunk steps) through the runner's
    :func:`~vlarl_cli.training.rollout.collect`. ``goals [B, 2]``, or drawn from ``generator`` with
    ``group_size`` consecutive envs sharing a goal (GRPO); sampling noise from the global torch RNG."""
    if goals is None:
        if env.num_envs % group_size:
            raise ValueError(f"num_envs {env.num_envs} is not a multiple of group_size {group_size}")
        goals = env.sample_goals(env.num_envs // group_size, generator).repeat_interleave(group_size, 0)
    vector_env = ToyVectorEnv.over(env, goals)
    return collect(policy, vector_env, env.num_chunks, deterministic=deterministic,
                   reset_state_ids=np.arange(env.num_envs))


def episode_success(rollout: Rollout) -> torch.Tensor:
    """``[N]`` bool: env ``n`` reached its goal at some step (one episode per env, no auto-reset)."""
    return rollout.success.any(dim=(0, 2))


@torch.no_grad()
def evaluate_success(policy: torch.nn.Module, goals: torch.Tensor) -> float:
    """Success rate of the deterministic policy on fixed goals."""
    env = ReachEnv(goals.shape[0])
    rollout = collect_toy(env, cast(Policy, policy), deterministic=True, goals=goals)
    return episode_success(rollout).float().mean().item()


def train_toy(run: ToyRun) -> dict[str, object]:
    """Train a toy policy; return ``{"iterations": [...], "success": [...], "train_success": [...],
    "metrics": last update metrics}``. Deterministic for a fixed ``run.seed``."""
    torch.manual_seed(run.seed)
    env = ReachEnv(run.num_envs)
    policy = make_policy(run, env)
    optimizer = torch.optim.Adam(policy.parameters(), lr=run.lr)
    gen = torch.Generator().manual_seed(run.seed + 100)
    eval_goals = env.sample_goals(run.eval_envs, torch.Generator().manual_seed(12345))
    kind = ADVANTAGE_TYPES[run.adv_type]
    settings = UpdateSettings(
        update_epoch=run.update_epoch, global_batch_size=run.global_batch_size,
        micro_batch_size=run.micro_batch_size, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0,
        value_clip=None, huber_delta=10.0, entropy_bonus=run.entropy_bonus, kl_beta=0.0, kl_type="k3",
        logprob_type=run.logprob_type, loss_agg="token-mean", clip_grad=1.0, value_coef=0.5)
    its, succ, train_succ = [0], [evaluate_success(policy, eval_goals)], []
    metrics: dict[str, float] = {}
    steps = 0
    for it in range(1, run.iterations + 1):
        ro = collect_toy(env, cast(Policy, policy), group_size=run.group_size if kind.groups else 1, generator=gen)
        train_succ.append(episode_success(ro).float().mean().item())
        rewards = aggregate_rewards(ro.rewards, "chunk_level")  # [T, B]
        dones = aggregate_dones(ro.dones, "chunk_level")  # [T+1, B]
        chunk_mask = loss_mask_from_dones(dones)  # [T, B]
        step_mask = loss_mask_from_dones(ro.dones)  # [T, B, C]
        res = compute_advantages(run.adv_type, rewards, dones, chunk_mask, values=ro.values, gamma=0.99,
                                 gae_lambda=0.95, group_size=run.group_size, normalize=True)
        t, b = rewards.shape
        step_mask = step_mask & res.loss_mask.unsqueeze(-1)  # GRPO filtering, if any
        batch = RolloutBatch(
            replay=ro.replay, old_logprobs=ro.logprobs.reshape(t * b, *ro.logprobs.shape[2:]),
            advantages=res.advantages.reshape(t * b), loss_mask=step_mask.reshape(t * b, -1),
            old_values=ro.values[:-1].reshape(t * b) if kind.critic else None,
            returns=None if res.returns is None else res.returns.reshape(t * b),
            valid_fraction=trajectory_valid_fraction(step_mask).reshape(t * b), steps_per_trajectory=t,
            trajectory=torch.arange(b).repeat(t))
        metrics = ppo_update(policy, optimizer, batch, settings, generator=gen, step_offset=steps)
        steps += int(metrics["train/actor/optimizer_steps"])
        if it % run.eval_every == 0 or it == run.iterations:
            its.append(it)
            succ.append(evaluate_success(policy, eval_goals))
    return {"iterations": its, "success": succ, "train_success": train_succ, "metrics": metrics}
