"""A tiny vectorised pure-torch task for learning tests and smoke runs: 2-D reach-the-goal with chunks.

Each env holds a point starting at the origin and a goal drawn uniformly on an annulus
``goal_min_dist <= |g| <= goal_max_dist``. A policy emits action chunks ``[B, C, 2]``; every env step
moves the point by ``step_size * clip(a, -1, 1)``. Reaching within ``goal_radius`` of the goal gives a
sparse reward of 1 and ends the episode (``terminated``); after ``max_steps`` env steps the episode is
``truncated``. A finished env ignores the rest of its chunk; without auto-reset it also ignores every later
chunk and reports ``done`` on every later step, which is exactly what
:func:`vlarl_cli.algorithms.advantages.loss_mask_from_dones` expects; with auto-reset
(:class:`ToyVectorEnv`) it restarts from its goal after the chunk. Observations use the shared key ``STATES``: ``[pos_x, pos_y, goal_x, goal_y]``.

Random actions rarely succeed (a few percent with the defaults); moving straight to the goal always
does, so success rate is an unambiguous learning signal.

:class:`ToyVectorEnv` puts it behind the vector-env interface (``envs/base.py``), so rollouts of the toy
task come from the same ``training.rollout.collect`` as LIBERO's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vlarl_cli import keys
from vlarl_cli.envs.base import final_observation

__all__ = ["ReachEnv", "ReachStep", "ToyVectorEnv"]


@dataclass
class ReachStep:
    """Result of :meth:`ReachEnv.step` for one chunk."""

    obs: dict[str, Tensor]
    rewards: Tensor  # [B, C] float
    terminated: Tensor  # [B, C] bool (goal reached at this step)
    truncated: Tensor  # [B, C] bool (time limit at this step)
    dones: Tensor  # [B, C] bool: episode over after this step (including steps after the end)


class ReachEnv:
    """Vectorised 2-D reach-the-goal. ``num_envs`` envs, chunks of ``chunk`` steps."""

    action_dim = 2
    state_dim = 4

    def __init__(
        self,
        num_envs: int,
        *,
        chunk: int = 4,
        max_steps: int = 16,
        step_size: float = 0.25,
        goal_radius: float = 0.2,
        goal_min_dist: float = 0.5,
        goal_max_dist: float = 1.0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.num_envs, self.chunk, self.max_steps = num_envs, chunk, max_steps
        self.step_size, self.goal_radius = step_size, goal_radius
        self.goal_min_dist, self.goal_max_dist = goal_min_dist, goal_max_dist
        self.device = torch.device(device)
        self.pos = torch.zeros(num_envs, 2, device=self.device)
        self.goal = torch.zeros(num_envs, 2, device=self.device)
        self.done = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self.success = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self.steps = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    @property
    def num_chunks(self) -> int:
        """Chunk steps needed to reach the time limit."""
        return math.ceil(self.max_steps / self.chunk)

    def sample_goals(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``[n, 2]`` goals uniform on the annulus (area-uniform radius)."""
        u = torch.rand(n, 2, generator=generator)
        r = torch.sqrt(self.goal_min_dist**2 + u[:, 0] * (self.goal_max_dist**2 - self.goal_min_dist**2))
        angle = 2 * math.pi * u[:, 1]
        return torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=-1).to(self.device)

    def reset(
        self, goals: Tensor | None = None, *, group_size: int = 1, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        """Start new episodes. ``goals [B, 2]`` or drawn; ``group_size`` consecutive envs share a goal (GRPO)."""
        if goals is None:
            if self.num_envs % group_size:
                raise ValueError(f"num_envs {self.num_envs} is not a multiple of group_size {group_size}")
            goals = self.sample_goals(self.num_envs // group_size, generator).repeat_interleave(group_size, 0)
        if goals.shape != (self.num_envs, 2):
            raise ValueError(f"goals must be [{self.num_envs}, 2], got {tuple(goals.shape)}")
        self.goal = goals.to(self.device, torch.float32)
        self.pos.zero_()
        self.done.zero_()
        self.success.zero_()
        self.steps.zero_()
        return self.observe()

    def restart(self, rows: Tensor) -> None:
        """Start new episodes in ``rows`` (env indices) towards the same goals."""
        self.pos[rows] = 0.0
        self.done[rows] = False
        self.success[rows] = False
        self.steps[rows] = 0

    def observe(self) -> dict[str, Tensor]:
        return {keys.STATES: torch.cat([self.pos, self.goal], dim=-1)}

    def step(self, actions: Tensor) -> ReachStep:
        """Apply an action chunk ``[B, C', 2]`` (C' <= chunk is allowed)."""
        if actions.dim() != 3 or actions.shape[0] != self.num_envs or actions.shape[2] != 2:
            raise ValueError(f"actions must be [{self.num_envs}, C, 2], got {tuple(actions.shape)}")
        b, c, _ = actions.shape
        rewards = torch.zeros(b, c, device=self.device)
        terminated = torch.zeros(b, c, dtype=torch.bool, device=self.device)
        truncated = torch.zeros(b, c, dtype=torch.bool, device=self.device)
        dones = torch.zeros(b, c, dtype=torch.bool, device=self.device)
        a = actions.detach().to(self.device, torch.float32).clamp(-1.0, 1.0)
        for j in range(c):
            active = ~self.done
            self.pos = torch.where(active.unsqueeze(-1), self.pos + self.step_size * a[:, j], self.pos)
            self.steps = self.steps + active.long()
            reached = active & (torch.linalg.vector_norm(self.pos - self.goal, dim=-1) < self.goal_radius)
            timeout = active & ~reached & (self.steps >= self.max_steps)
            rewards[:, j] = reached.float()
            terminated[:, j] = reached
            truncated[:, j] = timeout
            self.success |= reached
            self.done |= reached | timeout
            dones[:, j] = self.done
        return ReachStep(self.observe(), rewards, terminated, truncated, dones)


class ToyVectorEnv:
    """:class:`ReachEnv` behind the vector-env interface the trainer uses (``LiberoVectorEnv``'s), so
    ``vlarl rl-train`` runs the toy task through exactly the same collect / advantage / update code.

    Reset states are goals: ``pool`` holds ``pool_size`` ids of goals drawn once from ``seed``. Without
    ``auto_reset`` one episode per env per reset (a finished env reports ``done`` until the next reset);
    with it, an env whose episode ended in a chunk restarts towards the same goal after that chunk, and
    a time-limit cut is reported with the cut episode's last observation (``keys.FINAL_OBSERVATION``).
    """

    def __init__(self, num_envs: int, *, chunk: int = 4, max_steps: int = 16, seed: int = 0,
                 pool_size: int = 1024, auto_reset: bool = False) -> None:
        env = ReachEnv(num_envs, chunk=chunk, max_steps=max_steps)
        self._setup(env, env.sample_goals(pool_size, torch.Generator().manual_seed(seed)), auto_reset)

    @classmethod
    def over(cls, env: ReachEnv, goals: Tensor, *, auto_reset: bool = False) -> ToyVectorEnv:
        """``env`` behind this interface with the pool ``goals [P, 2]`` (reset id ``i`` is goal ``i``)."""
        out = cls.__new__(cls)
        out._setup(env, goals, auto_reset)
        return out

    def _setup(self, env: ReachEnv, goals: Tensor, auto_reset: bool) -> None:
        self._env, self.auto_reset = env, auto_reset
        self.num_envs = env.num_envs
        self.goals = goals
        self.pool = np.arange(len(goals))
        self._ids = torch.zeros(env.num_envs, dtype=torch.long)
        self._return = torch.zeros(env.num_envs)

    def stage_ids(self, stage: int) -> list[int]:  # pipelining is meaningless for an in-process env
        raise NotImplementedError("the toy env runs in-process; use rollout.pipeline_stage_num: 1")

    def reset(self, reset_state_ids: Any = None) -> dict[str, Any]:
        ids = torch.as_tensor(reset_state_ids if reset_state_ids is not None else self.pool[: self.num_envs])
        self._ids = ids.long().reshape(-1) % len(self.pool)
        self._return.zero_()
        return self._env.reset(self.goals[self._ids])

    def step_chunk(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Any]]:
        was_done = self._env.done.clone()
        out = self._env.step(torch.as_tensor(actions)[..., :2])
        self._return += out.rewards.sum(-1)
        ended = out.dones[:, -1] & ~was_done
        infos = {
            keys.SUCCESS: out.terminated,
            keys.TRUNCATED: out.truncated,
            keys.EPISODE_DONE: ended,
            keys.SUCCESS_ONCE: self._env.success.clone(),
            keys.SUCCESS_AT_END: self._env.success.clone(),
            keys.RETURN: self._return.clone(),
            keys.EPISODE_LEN: self._env.steps.clone(),
            keys.ERRORS: {},
        }
        obs = out.obs
        if self.auto_reset and bool(ended.any()):
            cut = (ended & out.truncated.any(-1)).nonzero().flatten().tolist()
            finals = {e: {k: v[e] for k, v in out.obs.items()} for e in cut}
            rows = ended.nonzero().flatten()
            self._env.restart(rows)
            self._return[rows] = 0.0
            obs = self._env.observe()
            if finals:
                infos[keys.FINAL_OBSERVATION] = final_observation(obs, finals)
        return obs, out.rewards, out.dones, infos

    def episode_frames(self, env_id: int) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        return None
