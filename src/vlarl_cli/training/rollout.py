"""Collect rollouts: the policy acts in the vector env for ``T`` chunk steps.

Shapes (RLinf's embodied layout, REFERENCE.md section 2): ``T`` chunk steps, ``N`` envs, ``C`` env steps
per chunk, ``A`` action dims.

    replay      dict of [T * N, ...]   (t-major: row t * N + n)
    logprobs    [T, N, C, A]
    values      [T + 1, N]             values[T] bootstraps the observation after the last chunk
    rewards     [T, N, C]
    dones       [T + 1, N, C]          row 0 is the flag carried in (zeros after a reset)
    success     [T, N, C]

Pipelining (``stages > 1``): env ``e`` belongs to stage ``e % S``; while the workers step stage ``s`` the
policy computes the actions of stage ``s + 1``, so simulator time and inference time overlap.

Sampling noise: with ``generator`` (a ``policies.noise.RowGenerator`` of one stream per env) each env's
actions depend only on its own stream, so a rollout is the same with 1 or 2 pipeline stages and with any
split of the envs over processes (up to the float rounding of different batch sizes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vlarl_cli import keys
from vlarl_cli.policies.base import Policy, PolicyOutput, Replay
from vlarl_cli.policies.noise import RowGenerator


@dataclass
class Rollout:
    replay: Replay
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    success: torch.Tensor
    episodes: dict[str, list[float]] = field(default_factory=dict)  # finished-episode metrics
    env_time: float = 0.0
    inference_time: float = 0.0
    collect_time: float = 0.0

    def columns(self) -> dict[str, Any]:
        """The tensors with envs on dim 1 (replay rows ``t * N + n`` -> ``[T, N, ...]``), for moving env
        columns between ranks (``distributed.columns``); episodes and timings stay."""
        t, n = self.rewards.shape[:2]
        out: dict[str, Any] = {name: getattr(self, name) for name in _TENSORS}
        out["replay"] = {k: v.reshape(t, n, *v.shape[1:]) for k, v in self.replay.items()}
        return out

    @classmethod
    def from_columns(cls, columns: dict[str, Any]) -> Rollout:
        """The inverse of :meth:`columns` (replay flattened t-major again)."""
        replay = {k: v.reshape(v.shape[0] * v.shape[1], *v.shape[2:]) for k, v in columns["replay"].items()}
        return cls(replay=replay, **{name: columns[name] for name in _TENSORS})


_TENSORS = ("logprobs", "values", "rewards", "dones", "success")


def _subset_obs(obs: dict[str, Any], rows: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obs.items():
        if isinstance(v, torch.Tensor):
            out[k] = v[rows]
        elif isinstance(v, list):
            out[k] = [v[i] for i in rows]
        else:
            out[k] = v
    return out


def _record_episodes(store: dict[str, list[float]], infos: dict[str, Any]) -> None:
    done = infos["episode_done"]
    for key in (keys.SUCCESS_ONCE, keys.SUCCESS_AT_END, keys.RETURN, keys.EPISODE_LEN):
        store.setdefault(key, []).extend(float(x) for x in infos[key][done].tolist())


@torch.no_grad()
def collect(policy: Policy, env: Any, num_chunk_steps: int, *, stages: int = 1,
            deterministic: bool = False, reset_state_ids: Any = None, generator: RowGenerator | None = None
            ) -> Rollout:
    """Reset ``env`` (to ``reset_state_ids`` when given) and run ``num_chunk_steps`` chunk steps of ``policy``
    (sampling noise from ``generator``'s per-env streams when given, else the policy's default)."""
    start = time.perf_counter()
    env_time = infer_time = 0.0
    t0 = time.perf_counter()
    obs = env.reset(reset_state_ids)
    env_time += time.perf_counter() - t0
    n = env.num_envs
    stage_rows = [env.stage_ids(s) for s in range(stages)] if stages > 1 else [list(range(n))]
    stage_obs = [_subset_obs(obs, rows) for rows in stage_rows]
    stage_gen = [generator.rows(rows) if generator is not None else None for rows in stage_rows]
    if generator is not None and len(generator) != n:
        raise ValueError(f"generator has {len(generator)} streams for {n} envs")

    outs: list[list[PolicyOutput]] = [[] for _ in range(stages)]
    rewards = [[] for _ in range(stages)]  # type: list[list[torch.Tensor]]
    dones = [[] for _ in range(stages)]  # type: list[list[torch.Tensor]]
    success = [[] for _ in range(stages)]  # type: list[list[torch.Tensor]]
    episodes: dict[str, list[float]] = {}

    def receive(s: int) -> None:
        nonlocal env_time
        t = time.perf_counter()
        if stages == 1:
            o, r, d, info = env.step_chunk(outs[s][-1].actions)
        else:
            o, r, d, info = env.wait(s)
        env_time += time.perf_counter() - t
        stage_obs[s] = o
        rewards[s].append(r.float())
        dones[s].append(d.bool())
        success[s].append(info[keys.SUCCESS].bool())
        _record_episodes(episodes, info)

    for _ in range(num_chunk_steps):
        for s in range(stages):
            if stages > 1 and outs[s]:
                receive(s)  # this stage's previous chunk; the other stages keep stepping meanwhile
            t = time.perf_counter()
            out = (policy.sample(stage_obs[s], deterministic=deterministic) if stage_gen[s] is None
                   else policy.sample(stage_obs[s], deterministic=deterministic, generator=stage_gen[s]))
            infer_time += time.perf_counter() - t
            outs[s].append(out)
            if stages > 1:
                env.step_chunk_async(s, out.actions)
            else:
                receive(s)
    if stages > 1:
        for s in range(stages):
            receive(s)
    t = time.perf_counter()
    last_values = [policy.sample(stage_obs[s], deterministic=True).values for s in range(stages)]
    infer_time += time.perf_counter() - t

    # Reassemble stage-major pieces into env order: row positions of each stage's envs.
    order = torch.tensor([e for rows in stage_rows for e in rows])
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(n)

    def merge(per_stage: list[torch.Tensor]) -> torch.Tensor:  # [rows_s, ...] per stage -> [N, ...]
        return torch.cat(per_stage, dim=0)[inverse]

    steps = num_chunk_steps
    logprobs = torch.stack([merge([outs[s][t].logprobs for s in range(stages)]) for t in range(steps)])
    values = torch.stack([merge([outs[s][t].values for s in range(stages)]) for t in range(steps)]
                         + [merge(last_values)])
    reward_t = torch.stack([merge([rewards[s][t] for s in range(stages)]) for t in range(steps)])
    done_t = torch.stack([merge([dones[s][t] for s in range(stages)]) for t in range(steps)])
    success_t = torch.stack([merge([success[s][t] for s in range(stages)]) for t in range(steps)])
    dones_full = torch.cat([torch.zeros_like(done_t[:1]), done_t], dim=0)
    replay_keys = outs[0][0].replay.keys()
    replay = {k: torch.cat([merge([outs[s][t].replay[k] for s in range(stages)]) for t in range(steps)])
              for k in replay_keys}
    return Rollout(replay=replay, logprobs=logprobs, values=values.float(), rewards=reward_t,
                   dones=dones_full, success=success_t, episodes=episodes, env_time=env_time,
                   inference_time=infer_time, collect_time=time.perf_counter() - start)
