"""``env.<split>`` (``env_type: toy_reach``) -> :class:`ToyVectorEnv`."""

from __future__ import annotations

from typing import Any

from vlarl_cli.envs.registry import EnvRequest
from vlarl_cli.envs.toy.reach import ToyVectorEnv


def make_env(split: Any, request: EnvRequest) -> ToyVectorEnv:
    """The toy task ignores cameras and the gripper convention (2-d state actions)."""
    return ToyVectorEnv(request.num_envs, chunk=request.chunk, max_steps=split.max_episode_steps, seed=split.seed,
                        auto_reset=split.auto_reset)
