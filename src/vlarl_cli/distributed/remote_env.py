"""Envs on other ranks: a rollout rank drives the envs of its env ranks as if they were local.

With ``cluster.component_placement`` such as ``env: 0-3 / rollout: 4-7`` (:mod:`.placement`), a rollout rank
holds a :class:`RemoteVectorEnv` (the vector-env interface, so ``training.rollout.collect`` and its
pipelining run unchanged) and each env-only rank runs :func:`serve_env` in the same order of messages
(:func:`collect_schedule`). Messages are plain ``torch.distributed`` point-to-point sends
(:mod:`.transport`).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

from vlarl_cli import keys
from vlarl_cli.distributed.transport import isend_dict, recv_dict, send_dict
from vlarl_cli.envs.base import PipelinedVectorEnv, StepResult, VectorEnv


class RemoteVectorEnv:
    """The envs of several env ranks, driven from their rollout rank with the vector-env interface
    (``reset``, ``step_chunk``, ``step_chunk_async``/``wait`` per stage, ``stage_ids``, ``pool``), so that
    ``collect`` runs unchanged. Env rank ``p`` of this rollout rank holds rows ``[p n, (p+1) n)``.
    Pipelining: stage ``s``'s actions go to every env rank at once; while they step, the rollout rank
    computes the next stage's actions."""

    def __init__(self, env_ranks: list[int], setup: dict[str, Any]) -> None:
        self.env_ranks = env_ranks
        for r in env_ranks:  # what the env ranks cannot know without a policy (cameras, video)
            send_dict(setup, r)
        hello = [recv_dict(r) for r in env_ranks]
        self.sizes = [int(h["num_envs"]) for h in hello]
        self.offsets = np.cumsum([0, *self.sizes])[:-1].tolist()
        self.num_envs = sum(self.sizes)
        self.pool = np.asarray(hello[0]["pool"])
        self._local_stage_ids = [h["stage_ids"] for h in hello]
        self._pending: dict[int, list[Any]] = {}

    def stage_ids(self, stage: int) -> list[int]:
        return [off + i for off, ids in zip(self.offsets, self._local_stage_ids, strict=True) for i in ids[stage]]

    def reset(self, reset_state_ids: Any = None) -> dict[str, Any]:
        ids = None if reset_state_ids is None else torch.as_tensor(np.asarray(reset_state_ids))
        for r, off, n in zip(self.env_ranks, self.offsets, self.sizes, strict=True):
            send_dict({"op": "reset", "ids": None if ids is None else ids[off:off + n]}, r)
        return _cat_obs([recv_dict(r)["obs"] for r in self.env_ranks])

    def step_chunk_async(self, stage: int, actions: torch.Tensor) -> None:
        start, sends = 0, []
        for r, ids in zip(self.env_ranks, self._local_stage_ids, strict=True):
            count = len(ids[stage])
            sends.append(isend_dict({"op": "step", "stage": stage, "actions": actions[start:start + count]}, r))
            start += count
        self._pending[stage] = sends

    def wait(self, stage: int) -> StepResult:
        replies = [recv_dict(r) for r in self.env_ranks]
        for send in self._pending.pop(stage):
            send.wait()
        infos: dict[str, Any] = _merge_final([rep["obs"] for rep in replies],
                                             [rep["infos"].pop(keys.FINAL_OBSERVATION, None) for rep in replies])
        for key in replies[0]["infos"]:
            values = [rep["infos"][key] for rep in replies]
            if key == keys.ERRORS:
                infos[key] = {off + int(e): msg for off, v in zip(self.offsets, values, strict=True) for e, msg in v.items()}
            elif key == keys.ENV_IDS:
                infos[key] = [off + int(e) for off, v in zip(self.offsets, values, strict=True) for e in v]
            elif isinstance(values[0], torch.Tensor):
                infos[key] = torch.cat(values)
            else:
                infos[key] = values[0]
        return (_cat_obs([rep["obs"] for rep in replies]), torch.cat([rep["rewards"] for rep in replies]),
                torch.cat([rep["dones"] for rep in replies]), infos)

    def step_chunk(self, actions: torch.Tensor) -> StepResult:
        self.step_chunk_async(0, actions)
        return self.wait(0)

    def end_iteration(self, iteration: int) -> None:
        """Tell the env ranks that this iteration's collect is over (they write their videos)."""
        for r in self.env_ranks:
            send_dict({"op": "end", "iteration": iteration}, r)

    def episode_frames(self, env_id: int) -> list[dict[str, Any]]:
        return []  # videos are written by the env rank that records them

    def close(self) -> None:
        """Nothing to send: every rank runs the same number of iterations, and each env rank closes its own
        env after its last one (if a rank fails, the launcher stops the others)."""


def _merge_final(obs: list[dict[str, Any]], finals: list[dict[str, Any] | None]) -> dict[str, Any]:
    """``{keys.FINAL_OBSERVATION: batch}`` when any env rank returned one (the others' rows: their obs),
    else ``{}`` (envs/base.py)."""
    if all(f is None for f in finals):
        return {}
    return {keys.FINAL_OBSERVATION: _cat_obs([o if f is None else f for o, f in zip(obs, finals, strict=True)])}


def _cat_obs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in parts[0]:
        values = [p[key] for p in parts]
        if isinstance(values[0], torch.Tensor):
            out[key] = torch.cat(values)
        elif isinstance(values[0], list):
            out[key] = [x for v in values for x in v]
        else:
            out[key] = values[0]
    return out


def receive_setup(rollout_rank: int) -> dict[str, Any]:
    """On an env-only rank: the setup its rollout rank sends first (see :class:`RemoteVectorEnv`)."""
    return recv_dict(rollout_rank)


def send_hello(env: VectorEnv, rollout_rank: int, stages: int) -> None:
    send_dict({"num_envs": env.num_envs, "pool": torch.as_tensor(np.asarray(env.pool)),
               "stage_ids": [list(env.stage_ids(s)) if stages > 1 else list(range(env.num_envs))
                             for s in range(stages)]}, rollout_rank)


def collect_schedule(stages: int, chunk_steps: int) -> list[tuple[str, int]]:
    """The order in which ``training.rollout.collect`` sends a stage's actions (``send``) and waits for
    its results (``wait``): every stage's first chunk, then per later chunk step ``wait s, send s`` for each
    stage, then the last results. An env rank that follows the same schedule keeps every stage that the
    rollout has already sent in flight: with 2 stages both halves of the envs simulate while the rollout
    infers (blocking per command would simulate one stage at a time)."""
    events = [("send", s) for s in range(stages)]
    for _ in range(chunk_steps - 1):
        for s in range(stages):
            events += [("wait", s), ("send", s)]
    return events + [("wait", s) for s in range(stages)]


def serve_env(env: VectorEnv, rollout_rank: int, stages: int, chunk_steps: int) -> dict[str, Any]:
    """On an env-only rank: serve the rollout rank's collects (a ``reset``, then :func:`collect_schedule`)
    until ``end`` (returned)."""
    # the in-process toy env only steps synchronously
    pipelined = cast(PipelinedVectorEnv, env) if hasattr(env, "step_chunk_async") else None
    while True:
        msg = recv_dict(rollout_rank)
        if msg["op"] == "end":
            return msg
        if msg["op"] != "reset":
            raise RuntimeError(f"env rank expected reset or end, got {msg['op']!r}")
        ids = msg["ids"]
        send_dict({"obs": env.reset(None if ids is None else ids.numpy())}, rollout_rank)
        queued: dict[int, Any] = {}
        for kind, stage in collect_schedule(stages, chunk_steps):
            if kind == "send":
                cmd = recv_dict(rollout_rank)
                if cmd["op"] != "step" or cmd["stage"] != stage:
                    raise RuntimeError(f"env rank expected the actions of stage {stage}, got {cmd['op']!r} "
                                       f"for stage {cmd.get('stage')}")
                if pipelined is not None:
                    pipelined.step_chunk_async(stage, cmd["actions"])
                else:
                    queued[stage] = cmd["actions"]
            else:
                obs, rewards, dones, infos = (pipelined.wait(stage) if pipelined is not None
                                              else env.step_chunk(queued.pop(stage)))
                send_dict({"obs": obs, "rewards": rewards, "dones": dones, "infos": infos}, rollout_rank)

