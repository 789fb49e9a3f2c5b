"""A fake third simulator written against the simulator table alone (:mod:`vlarl_cli.envs.registry`): what a
new simulator writes (docs/adding_a_simulator.md counts these lines).

``fake_hop``: each env holds a point on a line and a goal; an action ``[C, 1]`` chunk moves the point by
``0.25 * clip(a, -1, 1)`` per step; reaching within 0.2 of the goal gives reward 1 and ends the episode;
``max_episode_steps`` cuts it. State observations ``[pos, goal]``, so the toy policies act in it. Plain
numpy: it imports nothing of vlarl but the registry and the key names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vlarl_cli import keys
from vlarl_cli.envs.registry import EnvRequest, Simulator

#: every env this process made, so a test can see what the trainer asked for
MADE: list[HopVectorEnv] = []


class HopVectorEnv:
    """N hop envs stepped one chunk at a time (the ``envs/base.py`` VectorEnv contract, no auto-reset)."""

    def __init__(self, num_envs: int, *, max_steps: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.num_envs, self.max_steps = num_envs, max_steps
        self.goals = rng.choice([-1.0, 1.0], 256) * rng.uniform(0.5, 1.0, 256)
        self.pool = np.arange(len(self.goals))
        self.actions_seen: list[tuple[int, ...]] = []

    def reset(self, reset_state_ids: Any = None) -> dict[str, Any]:
        ids = np.arange(self.num_envs) if reset_state_ids is None else np.asarray(reset_state_ids) % len(self.pool)
        self.goal, self.pos = self.goals[ids], np.zeros(self.num_envs)
        self.steps, self.done = np.zeros(self.num_envs, np.int64), np.zeros(self.num_envs, bool)
        self.success, self.ret = np.zeros(self.num_envs, bool), np.zeros(self.num_envs, np.float32)
        return self._obs()

    def _obs(self) -> dict[str, Any]:
        return {keys.STATES: torch.from_numpy(np.stack([self.pos, self.goal], -1).astype(np.float32))}

    def step_chunk(self, actions: torch.Tensor) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor, dict[str, Any]]:
        a = np.clip(actions.detach().cpu().numpy().astype(np.float64), -1, 1)
        self.actions_seen.append(tuple(a.shape))
        n, c = a.shape[:2]
        rewards, dones = np.zeros((n, c), np.float32), np.zeros((n, c), bool)
        success, truncated = np.zeros((n, c), bool), np.zeros((n, c), bool)
        was_done = self.done.copy()
        for j in range(c):
            live = ~self.done
            self.pos = np.where(live, self.pos + 0.25 * a[:, j, 0], self.pos)
            self.steps += live
            reached = live & (np.abs(self.pos - self.goal) < 0.2)
            truncated[:, j] = live & ~reached & (self.steps >= self.max_steps)
            rewards[:, j], success[:, j] = reached, reached
            self.success |= reached
            self.done |= reached | truncated[:, j]
            dones[:, j] = self.done
        self.ret += rewards.sum(-1)
        t = torch.from_numpy
        infos = {keys.SUCCESS: t(success), keys.TRUNCATED: t(truncated), keys.EPISODE_DONE: t(self.done & ~was_done),
                 keys.SUCCESS_ONCE: t(self.success.copy()), keys.SUCCESS_AT_END: t(self.success.copy()),
                 keys.RETURN: t(self.ret.copy()), keys.EPISODE_LEN: t(self.steps.copy()), keys.ERRORS: {}}
        return self._obs(), t(rewards), t(dones), infos

    def stage_ids(self, stage: int) -> list[int]:
        raise NotImplementedError("fake_hop steps in-process")

    def episode_frames(self, env_id: int) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        return None


def make_env(split: Any, request: EnvRequest) -> HopVectorEnv:
    """The config mapping: an ``env.<split>`` section and the rank's request -> this rank's envs."""
    if split.auto_reset:
        raise ValueError("fake_hop has no auto-reset")
    env = HopVectorEnv(request.num_envs, max_steps=split.max_episode_steps, seed=split.seed + 1000 * request.rank)
    MADE.append(env)
    return env


SIMULATOR = Simulator(
    name="fake_hop",
    summary="fake_hop (a test simulator: hop to a goal on a line)",
    make_env=f"{__name__}:make_env",
    images=False,
    state_policies=True,  # [pos, goal] states: the toy policies act in it
    action_dim=1,
    default_demos=0,
)
