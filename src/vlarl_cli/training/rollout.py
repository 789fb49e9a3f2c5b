"""Collect rollouts: the policy acts in the vector env for ``T`` chunk steps.

Shapes (RLinf's embodied layout, REFERENCE.md section 2): ``T`` chunk steps, ``N`` envs, ``C`` env steps
per chunk, ``A`` action dims.

    replay      dict of [T * N, ...]   (t-major: row t * N + n)
    logprobs    [T, N, C, A]
    values      [T + 1, N]             values[T] bootstraps the observation after the last chunk
                or [T + 1, N, C]       from a policy with one value per executed action (value_type action_level)
    rewards     [T, N, C]
    dones       [T + 1, N, C]          row 0 is the flag carried in (zeros after a reset); done = terminated
                                       or truncated (TorchRL's split), and the dead steps after an end
    truncated   [T, N, C]              the episode was cut by the time limit at this step
    final_values [T, N]                V(final observation) of the episode cut in chunk step t (auto-reset
                                       only, ``bootstrap``), else 0: GAE adds gamma * final_values at the cut
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
from typing import Any, cast

import torch

from vlarl_cli import keys
from vlarl_cli.envs.base import PipelinedVectorEnv, VectorEnv
from vlarl_cli.errors import EnvError
from vlarl_cli.policies.base import Policy, PolicyOutput, Replay
from vlarl_cli.policies.noise import RowGenerator


@dataclass
class Rollout:
    replay: Replay
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    truncated: torch.Tensor
    final_values: torch.Tensor
    success: torch.Tensor
    episodes: dict[str, list[float]] = field(default_factory=dict)  # finished-episode metrics
    env_time: float = 0.0
    inference_time: float = 0.0
    collect_time: float = 0.0

    @property
    def terminated(self) -> torch.Tensor:
        """``[T, N, C]`` the episode was over after this step for another reason than the time limit
        (success, a failure, or a dead step after the end): ``done & ~truncated``."""
        return self.dones[1:] & ~self.truncated

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


_TENSORS = ("logprobs", "values", "rewards", "dones", "truncated", "final_values", "success")


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


@torch.no_grad()
def collect(policy: Policy, env: VectorEnv, num_chunk_steps: int, *, stages: int = 1,
            deterministic: bool = False, reset_state_ids: Any = None, generator: RowGenerator | None = None,
            bootstrap: bool = False) -> Rollout:
    """Reset ``env`` (to ``reset_state_ids`` when given) and run ``num_chunk_steps`` chunk steps of ``policy``
    (sampling noise from ``generator``'s per-env streams when given, else the policy's default). With
    ``bootstrap`` (an auto-resetting env) the policy's value of every time-limit-cut episode's final
    observation goes into ``Rollout.final_values``."""
    start = time.perf_counter()
    run = _Collection(policy, env, stages, deterministic, bootstrap)
    run.reset(reset_state_ids, generator)
    for _ in range(num_chunk_steps):
        for s in range(stages):
            if stages > 1 and run.outs[s]:
                run.receive(s)  # this stage's previous chunk; the other stages keep stepping meanwhile
            run.act(s)
    if stages > 1:
        for s in range(stages):
            run.receive(s)
    return run.rollout(num_chunk_steps, start)


class _Collection:
    """The per-stage state of one :func:`collect`: observations, policy outputs, env results, timings."""

    def __init__(self, policy: Policy, env: VectorEnv, stages: int, deterministic: bool, bootstrap: bool) -> None:
        if stages > 1 and not (hasattr(env, "step_chunk_async") and hasattr(env, "wait")):
            raise ValueError(f"{type(env).__name__} steps in-process and cannot be pipelined; "
                             "use rollout.pipeline_stage_num: 1")
        self.policy, self.env, self.stages, self.deterministic = policy, env, stages, deterministic
        self.bootstrap = bootstrap
        self.env_time = self.infer_time = 0.0
        self.outs: list[list[PolicyOutput]] = [[] for _ in range(stages)]
        self.rewards: list[list[torch.Tensor]] = [[] for _ in range(stages)]
        self.dones: list[list[torch.Tensor]] = [[] for _ in range(stages)]
        self.truncated: list[list[torch.Tensor]] = [[] for _ in range(stages)]
        self.final_values: list[list[torch.Tensor]] = [[] for _ in range(stages)]
        self.success: list[list[torch.Tensor]] = [[] for _ in range(stages)]
        self.episodes: dict[str, list[float]] = {}

    def reset(self, reset_state_ids: Any, generator: RowGenerator | None) -> None:
        t0 = time.perf_counter()
        obs = self.env.reset(reset_state_ids)
        self.env_time += time.perf_counter() - t0
        n = self.env.num_envs
        self.rows = [self.env.stage_ids(s) for s in range(self.stages)] if self.stages > 1 else [list(range(n))]
        self.obs = [_subset_obs(obs, rows) for rows in self.rows]
        self.gens = [generator.rows(rows) if generator is not None else None for rows in self.rows]
        if generator is not None and len(generator) != n:
            raise ValueError(f"generator has {len(generator)} streams for {n} envs")

    def act(self, s: int) -> None:
        """Stage ``s``'s actions for its current observations, sent to its envs."""
        t = time.perf_counter()
        gen = self.gens[s]
        out = (self.policy.sample(self.obs[s], deterministic=self.deterministic) if gen is None
               else self.policy.sample(self.obs[s], deterministic=self.deterministic, generator=gen))
        self.infer_time += time.perf_counter() - t
        self.outs[s].append(out)
        if self.stages > 1:
            cast(PipelinedVectorEnv, self.env).step_chunk_async(s, out.actions)
        else:
            self.receive(s)

    def receive(self, s: int) -> None:
        """Stage ``s``'s env results of its last actions."""
        t = time.perf_counter()
        if self.stages == 1:
            o, r, d, info = self.env.step_chunk(self.outs[s][-1].actions)
        else:
            o, r, d, info = cast(PipelinedVectorEnv, self.env).wait(s)
        self.env_time += time.perf_counter() - t
        self.obs[s] = o
        self.rewards[s].append(r.float())
        self.dones[s].append(d.bool())
        self.truncated[s].append(info[keys.TRUNCATED].bool())
        self.final_values[s].append(self.values_of_final(info))
        self.success[s].append(info[keys.SUCCESS].bool())
        done = info[keys.EPISODE_DONE]
        for key in keys.EPISODE_METRICS:
            self.episodes.setdefault(key, []).extend(float(x) for x in info[key][done].tolist())

    def values_of_final(self, info: dict[str, Any]) -> torch.Tensor:
        """``[n]`` V(final observation) of the rows whose episode the time limit cut in this chunk, 0 elsewhere
        (RLinf ``get_bootstrap_values``: the first value of the policy's output, ``prev_values[:, :1]``)."""
        cut = info[keys.TRUNCATED].bool().any(dim=-1)
        if not self.bootstrap or not bool(cut.any()):
            return torch.zeros(cut.shape[0])
        final = info.get(keys.FINAL_OBSERVATION)
        if final is None:
            raise EnvError(f"{type(self.env).__name__} cut an episode at its time limit but did not return the "
                           "episode's final observation (infos[keys.FINAL_OBSERVATION], envs/base.py), which the "
                           "bootstrap r += gamma * V(final observation) needs.",
                           fix="Set env.train.auto_reset: false (a cut episode then ends the env's rollout), or "
                           "use adv_type grpo.")
        t = time.perf_counter()
        values = self.policy.sample(final, deterministic=True).values
        self.infer_time += time.perf_counter() - t
        first = values[:, 0] if values.dim() == 2 else values  # one value per action: the chunk's first
        return torch.where(cut, first.float().cpu(), torch.zeros(()))

    def rollout(self, steps: int, start: float) -> Rollout:
        """The bootstrap values of the last observations, then every stage's pieces back in env order."""
        t = time.perf_counter()
        last_values = [self.policy.sample(self.obs[s], deterministic=True).values for s in range(self.stages)]
        self.infer_time += time.perf_counter() - t
        # row positions of each stage's envs
        order = torch.tensor([e for rows in self.rows for e in rows])
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order))
        stages = range(self.stages)

        def merge(per_stage: list[torch.Tensor]) -> torch.Tensor:  # [rows_s, ...] per stage -> [N, ...]
            return torch.cat(per_stage, dim=0)[inverse]

        def over_time(pieces: list[list[torch.Tensor]]) -> torch.Tensor:  # -> [T, N, ...]
            return torch.stack([merge([pieces[s][t] for s in stages]) for t in range(steps)])

        outs = self.outs
        values = torch.cat([over_time([[o.values for o in outs[s]] for s in stages]), merge(last_values)[None]])
        done_t = over_time(self.dones)
        replay = {k: torch.cat([merge([outs[s][t].replay[k] for s in stages]) for t in range(steps)])
                  for k in outs[0][0].replay}
        return Rollout(replay=replay, logprobs=over_time([[o.logprobs for o in outs[s]] for s in stages]),
                       values=values.float(), rewards=over_time(self.rewards),
                       dones=torch.cat([torch.zeros_like(done_t[:1]), done_t], dim=0),
                       truncated=over_time(self.truncated), final_values=over_time(self.final_values),
                       success=over_time(self.success), episodes=self.episodes, env_time=self.env_time,
                       inference_time=self.infer_time, collect_time=time.perf_counter() - start)
