"""The vector-env contract that ``training.rollout.collect`` drives.

Each simulator of ``envs.registry`` makes one: ``envs.libero.vector.LiberoVectorEnv`` (subprocess workers of
``envs.pool``), ``envs.maniskill.vector.ManiSkillVectorEnv`` and ``envs.toy.ToyVectorEnv`` (in-process);
``distributed.remote_env.RemoteVectorEnv`` serves envs of other ranks. A structural :class:`typing.Protocol`: nothing inherits from it, mypy checks the fit.

Shapes (``N`` = ``num_envs``, ``C`` env steps per chunk, ``A`` action dims):
    reset(ids)          -> obs: dict keyed by ``vlarl_cli.keys`` observation names, batch first
    step_chunk(actions) -> (obs, rewards [N, C] float, dones [N, C] bool, infos)
    infos               keys.SUCCESS / keys.TRUNCATED [N, C] bool, keys.EPISODE_DONE [N] bool and the
                        episode metrics (keys.EPISODE_METRICS, [N], valid where EPISODE_DONE), keys.ERRORS
    final observation   with auto-reset, when an episode was cut by the time limit (keys.TRUNCATED) in this
                        chunk, the returned obs of its row is the next episode's first; then
                        infos[keys.FINAL_OBSERVATION] is an obs batch whose truncated rows hold the cut
                        episode's last observation and whose other rows equal obs (:func:`final_observation`),
                        for the bootstrap r += gamma * V(final obs) (RLinf ``infos["final_observation"]``,
                        ``workers/env/env_worker.py``). Absent when no such row exists.
Pipelining (``stages > 1``): ``step_chunk_async(stage, actions)`` then ``wait(stage)`` for the envs
``stage_ids(stage)``; envs that run in-process may refuse it (``stage_ids`` raises).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

StepResult = tuple[dict[str, Any], torch.Tensor, torch.Tensor, dict[str, Any]]


class VectorEnv(Protocol):
    """``N`` envs stepped together one action chunk at a time."""

    @property
    def num_envs(self) -> int: ...

    @property
    def pool(self) -> np.ndarray:
        """Flat ids of the reset states (init states or goals) that ``reset`` accepts."""
        ...

    def reset(self, reset_state_ids: Any = None) -> dict[str, Any]: ...

    def step_chunk(self, actions: torch.Tensor) -> StepResult: ...

    def stage_ids(self, stage: int) -> list[int]: ...

    def episode_frames(self, env_id: int) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


def final_observation(obs: dict[str, Any], finals: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """``obs`` (a batch) with row ``e`` taken from the single observation ``finals[e]`` (unbatched values:
    a tensor or array row, or the task description string) for every ``e`` in ``finals``."""
    out: dict[str, Any] = {}
    for key, value in obs.items():
        if isinstance(value, list):
            out[key] = [finals[e][key] if e in finals else v for e, v in enumerate(value)]
        elif isinstance(value, torch.Tensor):
            out[key] = value.clone()
            for e, final in finals.items():
                out[key][e] = torch.as_tensor(final[key])
        else:  # not per env
            out[key] = value
    return out


class PipelinedVectorEnv(VectorEnv, Protocol):
    """A vector env whose pipeline stages step while the policy computes the next stage's actions."""

    def step_chunk_async(self, stage: int, actions: torch.Tensor) -> None: ...

    def wait(self, stage: int) -> StepResult: ...
