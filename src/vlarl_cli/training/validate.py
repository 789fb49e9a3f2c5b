"""``eval/*`` every ``runner.val_check_interval`` iterations: deterministic actions on ``env.eval``.

LIBERO runs the same code as ``vlarl eval`` (protocol, fixed init states, results folder
``<run>/eval/iter_<k>``) on the rollout ranks; the toy task runs one deterministic collect.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, cast

import torch

from vlarl_cli.config.schema import VlarlConfig
from vlarl_cli.envs import registry
from vlarl_cli.keys import policy_cameras, policy_gripper, policy_obs_mode
from vlarl_cli.policies.base import Policy
from vlarl_cli.training.batch import rollout_metrics
from vlarl_cli.training.envs import make_env, sampling_generator
from vlarl_cli.training.rollout import collect


def evaluate_in_training(policy: torch.nn.Module, config: VlarlConfig, iteration: int, run_dir: Path, *,
                         rank: int, ranks: list[int], group: Any = None, env: Any = None) -> dict[str, float]:
    """``eval/*`` metrics of ``policy`` on ``env.eval``, split over the rollout ``ranks`` (process ``group``).
    ``env``: this rank's training env, handed to a simulator's evaluation that takes it (LIBERO evaluates in
    its simulators when they play the evaluation's episodes alike)."""
    split = config.env.eval
    simulator = registry.get(split.env_type)
    if simulator.evaluate is not None:  # the simulator's own evaluation protocol (LIBERO: standard / rlinf)
        evaluate = registry.load(simulator.evaluate)
        extra = {"env": env} if env is not None and "env" in inspect.signature(evaluate).parameters else {}
        return cast(dict[str, float], evaluate(policy, config, rank=ranks.index(rank), world_size=len(ranks),
                                               out_dir=run_dir / "eval" / f"iter_{iteration:05d}", group=group,
                                               **extra))
    env = make_env(config, split, num_envs=max(1, split.total_num_envs or 1), rank=rank, group_size=1,
                   cameras=policy_cameras(policy), obs_mode=policy_obs_mode(policy), gripper=policy_gripper(policy),
                   record_video=False, stages=1)  # toy_reach ignores cameras; ManiSkill renders the policy's
    try:
        policy.eval()
        steps = split.max_steps_per_rollout_epoch // config.actor.model.num_action_chunks
        # the same noise streams at every evaluation (flow policies start their ODE from noise)
        streams = sampling_generator(config.actor.seed, -1, range(env.num_envs))
        rollout = collect(cast(Policy, policy), env, steps, deterministic=True, generator=streams)
    finally:
        env.close()
    return {k.replace("env/", "eval/"): v for k, v in rollout_metrics([rollout]).items()}
