"""Component placement: which ranks step the envs, run the rollout (inference) and train the actor.

``cluster.component_placement`` (RLinf's syntax) gives each component a set of ranks:

    env,rollout,actor: all                    every rank does everything (collocated, the default)
    env,rollout: 0-3 / actor: 4-7             rollout next to its envs, training on other devices
    env: 0-3 / rollout: 4-7 / actor: 0-7      env ranks talk to rollout ranks every chunk step

Rules (checked by :func:`roles_for`, with the fix in the message): every rank has a component; the env
and rollout sets are equal or disjoint, and then the env ranks split evenly over the rollout ranks (env
rank ``E[i]`` is served by ``R[i // k]``, ``k = |E| / |R|``); envs split evenly over env ranks and over
actor ranks, in whole GRPO groups.

Data flow of one iteration (all of it plain torch.distributed point-to-point and collectives):
1. weight sync: actor rank ``A[0]`` broadcasts the weights to the rollout-only ranks
   (``distributed.weight_sync.WeightSync``: bucketed, and skipped when no optimizer step happened);
2. collect: a rollout rank drives the envs of its env ranks through :class:`RemoteVectorEnv` (the vector
   env interface, so ``training.rollout.collect`` and its pipelining run unchanged); env-only ranks run
   :func:`serve_env`;
3. the rollouts move to the actor ranks by env columns: actor ``A[i]`` gets envs
   ``[i N/|A|, (i+1) N/|A|)`` from whichever rollout ranks hold them (:func:`redistribute`);
4. advantages and the update on the actor ranks, with their own process group.
Env ``g`` (global id) has the same reset state and sampling stream under any placement, so a separated run
reproduces the collocated one (tests/distributed/test_placement.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.training.rollout import Rollout

_FIX = "Use e.g. {env,rollout,actor: all}, {env,rollout: 0, actor: 1} or {env: 0-1, rollout: 2, actor: 0-2}."


@dataclass(frozen=True)
class Roles:
    """This rank's view of the placement. Env ids are global: env rank ``E[i]`` holds ``[i n, (i+1) n)``."""

    rank: int
    world: int
    env: tuple[int, ...]
    rollout: tuple[int, ...]
    actor: tuple[int, ...]
    num_envs: int

    @property
    def collocated(self) -> bool:
        return self.env == self.rollout == self.actor == tuple(range(self.world))

    @property
    def is_env(self) -> bool:
        return self.rank in self.env

    @property
    def is_rollout(self) -> bool:
        return self.rank in self.rollout

    @property
    def is_actor(self) -> bool:
        return self.rank in self.actor

    @property
    def envs_per_env_rank(self) -> int:
        return self.num_envs // len(self.env)

    def env_ranks_of(self, rollout_rank: int) -> list[int]:
        k = len(self.env) // len(self.rollout)
        j = self.rollout.index(rollout_rank)
        return list(self.env[j * k:(j + 1) * k])

    def rollout_of_env(self, env_rank: int) -> int:
        k = len(self.env) // len(self.rollout)
        return self.rollout[self.env.index(env_rank) // k]

    def rollout_columns(self, rollout_rank: int) -> range:
        """Global env ids driven by ``rollout_rank``."""
        ranks = self.env_ranks_of(rollout_rank)
        n = self.envs_per_env_rank
        first = self.env.index(ranks[0]) * n
        return range(first, first + n * len(ranks))

    def actor_columns(self, actor_rank: int) -> range:
        n = self.num_envs // len(self.actor)
        i = self.actor.index(actor_rank)
        return range(i * n, (i + 1) * n)


def roles_for(placement: dict[str, list[int]], *, rank: int, world: int, num_envs: int, group_size: int) -> Roles:
    """Check the placement against the rules in the module docstring; this rank's :class:`Roles`."""
    env, rollout, actor = (tuple(sorted(placement[k])) for k in ("env", "rollout", "actor"))
    idle = sorted(set(range(world)) - set(env) - set(rollout) - set(actor))
    if idle:
        raise ConfigError(f"Ranks {idle} have no component in cluster.component_placement "
                          f"(env {list(env)}, rollout {list(rollout)}, actor {list(actor)}).", _FIX)
    if env != rollout and set(env) & set(rollout):
        raise ConfigError(f"The env ranks {list(env)} and rollout ranks {list(rollout)} overlap without being "
                          "equal; a rollout rank must either host its envs or serve env ranks of its own.", _FIX)
    if len(env) % len(rollout):
        raise ConfigError(f"{len(env)} env ranks do not split evenly over {len(rollout)} rollout ranks.", _FIX)
    for name, ranks in (("env", env), ("actor", actor)):
        if num_envs % (len(ranks) * group_size):
            raise ConfigError(f"env.train.total_num_envs = {num_envs} does not split into whole groups of "
                              f"{group_size} over the {len(ranks)} {name} ranks.",
                              f"Make total_num_envs a multiple of {len(ranks) * group_size}.")
    return Roles(rank=rank, world=world, env=env, rollout=rollout, actor=actor, num_envs=num_envs)


def rollout_copy_ranks(placement: dict[str, list[int]], world: int, actor_sharded: bool) -> list[int]:
    """Rollout ranks that sample with their own unsharded copy of the policy. None when every rank does
    everything (the rollout samples with the actor module); all rollout ranks when the actor is sharded
    over ranks that do not all sample (FSDP's gathers need every actor rank); else the rollout ranks that
    are not actor ranks."""
    everything = list(range(world))
    if sorted(placement["env"]) == sorted(placement["rollout"]) == sorted(placement["actor"]) == everything:
        return []
    if actor_sharded:
        return sorted(placement["rollout"])
    return sorted(r for r in placement["rollout"] if r not in placement["actor"])


# --------------------------------------------------------------------------------------------------
# env ranks <-> rollout rank


class RemoteVectorEnv:
    """The envs of several env ranks, driven from their rollout rank with the vector-env interface
    (``reset``, ``step_chunk``, ``step_chunk_async``/``wait`` per stage, ``stage_ids``, ``pool``), so that
    ``collect`` runs unchanged. Env rank ``p`` of this rollout rank holds rows ``[p n, (p+1) n)``.
    Pipelining: stage ``s``'s actions go to every env rank at once; while they step, the rollout rank
    computes the next stage's actions."""

    def __init__(self, env_ranks: list[int], setup: dict[str, Any]) -> None:
        from vlarl_cli.distributed.transport import recv_dict, send_dict

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
        from vlarl_cli.distributed.transport import recv_dict, send_dict

        ids = None if reset_state_ids is None else torch.as_tensor(np.asarray(reset_state_ids))
        for r, off, n in zip(self.env_ranks, self.offsets, self.sizes, strict=True):
            send_dict({"op": "reset", "ids": None if ids is None else ids[off:off + n]}, r)
        return _cat_obs([recv_dict(r)["obs"] for r in self.env_ranks])

    def step_chunk_async(self, stage: int, actions: torch.Tensor) -> None:
        from vlarl_cli.distributed.transport import isend_dict

        start, sends = 0, []
        for r, ids in zip(self.env_ranks, self._local_stage_ids, strict=True):
            count = len(ids[stage])
            sends.append(isend_dict({"op": "step", "stage": stage, "actions": actions[start:start + count]}, r))
            start += count
        self._pending[stage] = sends

    def wait(self, stage: int) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor, dict[str, Any]]:
        from vlarl_cli.distributed.transport import recv_dict

        replies = [recv_dict(r) for r in self.env_ranks]
        for send in self._pending.pop(stage):
            send.wait()
        infos: dict[str, Any] = {}
        for key in replies[0]["infos"]:
            values = [rep["infos"][key] for rep in replies]
            if key == "errors":
                infos[key] = {off + int(e): msg for off, v in zip(self.offsets, values, strict=True) for e, msg in v.items()}
            elif key == "env_ids":
                infos[key] = [off + int(e) for off, v in zip(self.offsets, values, strict=True) for e in v]
            elif isinstance(values[0], torch.Tensor):
                infos[key] = torch.cat(values)
            else:
                infos[key] = values[0]
        return (_cat_obs([rep["obs"] for rep in replies]), torch.cat([rep["rewards"] for rep in replies]),
                torch.cat([rep["dones"] for rep in replies]), infos)

    def step_chunk(self, actions: torch.Tensor) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.step_chunk_async(0, actions)
        return self.wait(0)

    def end_iteration(self, iteration: int) -> None:
        """Tell the env ranks that this iteration's collect is over (they write their videos)."""
        from vlarl_cli.distributed.transport import send_dict

        for r in self.env_ranks:
            send_dict({"op": "end", "iteration": iteration}, r)

    def episode_frames(self, env_id: int) -> list[dict[str, Any]]:
        return []  # videos are written by the env rank that records them

    def close(self) -> None:
        """Nothing to send: every rank runs the same number of iterations, and each env rank closes its own
        env after its last one (if a rank fails, the launcher stops the others)."""


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
    from vlarl_cli.distributed.transport import recv_dict

    return recv_dict(rollout_rank)


def send_hello(env: Any, rollout_rank: int, stages: int) -> None:
    from vlarl_cli.distributed.transport import send_dict

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


def serve_env(env: Any, rollout_rank: int, stages: int, chunk_steps: int) -> dict[str, Any]:
    """On an env-only rank: serve the rollout rank's collects (a ``reset``, then :func:`collect_schedule`)
    until ``end`` (returned)."""
    from vlarl_cli.distributed.transport import recv_dict, send_dict

    asynchronous = hasattr(env, "step_chunk_async")  # the in-process toy env only steps synchronously
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
                if asynchronous:
                    env.step_chunk_async(stage, cmd["actions"])
                else:
                    queued[stage] = cmd["actions"]
            else:
                obs, rewards, dones, infos = (env.wait(stage) if asynchronous
                                              else env.step_chunk(queued.pop(stage)))
                send_dict({"obs": obs, "rewards": rewards, "dones": dones, "infos": infos}, rollout_rank)


# --------------------------------------------------------------------------------------------------
# rollout ranks -> actor ranks


def _env_axis_views(r: Rollout) -> dict[str, Any]:
    """The rollout's tensors with envs on dim 1 (replay rows ``t * N + n`` -> ``[T, N, ...]``)."""
    t, n = r.rewards.shape[:2]
    out: dict[str, Any] = {f.name: getattr(r, f.name) for f in fields(r) if isinstance(getattr(r, f.name), torch.Tensor)}
    out["replay"] = {k: v.reshape(t, n, *v.shape[1:]) for k, v in r.replay.items()}
    return out


def select_columns(r: Rollout, cols: range) -> dict[str, Any]:
    """Envs ``cols`` (positions in ``r``) of a rollout, as a plain dict (episodes and timings stay)."""
    views = _env_axis_views(r)
    sl = slice(cols.start, cols.stop)
    out = {k: v[:, sl] for k, v in views.items() if k != "replay"}
    out["replay"] = {k: v[:, sl] for k, v in views["replay"].items()}
    return out


def join_columns(parts: list[dict[str, Any]]) -> Rollout:
    """Concatenate column pieces (in env order) back into a :class:`Rollout` (replay flattened t-major)."""
    cat = {k: torch.cat([p[k] for p in parts], dim=1) for k in parts[0] if k != "replay"}
    replay = {}
    for k in parts[0]["replay"]:
        v = torch.cat([p["replay"][k] for p in parts], dim=1)
        replay[k] = v.reshape(v.shape[0] * v.shape[1], *v.shape[2:])
    return Rollout(replay=replay, logprobs=cat["logprobs"], values=cat["values"], rewards=cat["rewards"],
                   dones=cat["dones"], success=cat["success"])


def redistribute(rollouts: list[Rollout] | None, roles: Roles) -> list[Rollout] | None:
    """Move every rollout epoch's env columns from the rollout ranks to the actor ranks that train on them.
    Called on every rank; returns the actor's rollouts (None on ranks that are not actors)."""
    from vlarl_cli.distributed.transport import isend_dict, recv_dict

    sends = []
    mine: dict[int, dict[str, Any]] = {}
    if roles.is_rollout:
        assert rollouts is not None
        have = roles.rollout_columns(roles.rank)
        for a in roles.actor:
            want = roles.actor_columns(a)
            lo, hi = max(have.start, want.start), min(have.stop, want.stop)
            if lo >= hi:
                continue
            piece = {"epochs": [select_columns(r, range(lo - have.start, hi - have.start)) for r in rollouts]}
            if a == roles.rank:
                mine[lo] = piece
            else:
                sends.append(isend_dict(piece, a))
    out = None
    if roles.is_actor:
        want = roles.actor_columns(roles.rank)
        for src in roles.rollout:
            have = roles.rollout_columns(src)
            lo, hi = max(have.start, want.start), min(have.stop, want.stop)
            if lo < hi and src != roles.rank:
                mine[lo] = recv_dict(src)
        pieces = [mine[k] for k in sorted(mine)]
        epochs = len(pieces[0]["epochs"])
        out = [join_columns([p["epochs"][e] for p in pieces]) for e in range(epochs)]
    for s in sends:
        s.wait()
    return out
