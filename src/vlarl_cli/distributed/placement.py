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
2. collect: a rollout rank drives the envs of its env ranks through ``remote_env.RemoteVectorEnv`` (the
   vector env interface, so ``training.rollout.collect`` and its pipelining run unchanged); env-only ranks
   run ``remote_env.serve_env``;
3. the rollouts move to the actor ranks by env columns: actor ``A[i]`` gets envs
   ``[i N/|A|, (i+1) N/|A|)`` from whichever rollout ranks hold them (``columns.redistribute``);
4. advantages and the update on the actor ranks, with their own process group.
Env ``g`` (global id) has the same reset state and sampling stream under any placement, so a separated run
reproduces the collocated one (tests/distributed/test_rl_equivalence.py).

:class:`Cluster` is this process's view of all of it: its context, its roles and the process groups, and
every question the trainer asks about ranks ("do I collect?", "do I hold my own rollout copy?").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from vlarl_cli.distributed import dist
from vlarl_cli.errors import ConfigError

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
# this process in the placement


@dataclass
class Cluster:
    """This process's context, roles and process groups; the only place the trainer asks about ranks.

    ``actor_sharded``: the actor is FSDP-sharded over several actor ranks. ``groups`` (separated placements
    only): ``actor``, ``rollout`` and ``sync`` sub-groups (None where the group is the whole world) and the
    actor's device ``mesh``.
    """

    ctx: dist.DistContext
    roles: Roles
    actor_sharded: bool
    groups: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, ctx: dist.DistContext, placement: dict[str, list[int]], *, num_envs: int, group_size: int,
               shard_actor: bool) -> Cluster:
        """Check ``placement`` and create the process groups (``shard_actor``: the FSDP strategy shards)."""
        roles = roles_for(placement, rank=ctx.rank, world=ctx.world_size, num_envs=num_envs, group_size=group_size)
        cluster = cls(ctx, roles, actor_sharded=len(roles.actor) > 1 and shard_actor)
        cluster.groups = cluster._process_groups()
        return cluster

    def _process_groups(self) -> dict[str, Any]:
        """Sub-groups for a separated placement (``new_group`` is collective: every rank creates every group)."""
        roles = self.roles
        if roles.collocated or not torch.distributed.is_initialized():
            return {}
        world = list(range(roles.world))
        out: dict[str, Any] = {}
        for name, ranks in (("actor", list(roles.actor)), ("rollout", list(roles.rollout)), ("sync", self.sync_ranks)):
            out[name] = None if ranks == world else torch.distributed.new_group(ranks)
        if len(roles.actor) > 1:
            from torch.distributed.device_mesh import DeviceMesh

            from vlarl_cli.distributed.device import default_device

            out["mesh"] = DeviceMesh(default_device().type, list(roles.actor))
        return out

    # ---- who am I
    @property
    def rank(self) -> int:
        return self.ctx.rank

    @property
    def device(self) -> torch.device:
        return self.ctx.device

    @property
    def is_env(self) -> bool:
        return self.roles.is_env

    @property
    def is_rollout(self) -> bool:
        return self.roles.is_rollout

    @property
    def is_actor(self) -> bool:
        return self.roles.is_actor

    @property
    def is_env_only(self) -> bool:
        """Steps envs for a rollout rank elsewhere (``remote_env.serve_env``)."""
        return self.is_env and not self.is_rollout

    @property
    def is_actor_source(self) -> bool:
        """The actor's first rank: it writes checkpoints, prints the plan and sends the weights."""
        return self.rank == self.roles.actor[0]

    @property
    def is_first_env(self) -> bool:
        """The env rank that records videos."""
        return self.rank == self.roles.env[0]

    @property
    def collocated(self) -> bool:
        return self.roles.collocated

    @property
    def rollout_copy_ranks(self) -> list[int]:
        roles = self.roles
        return rollout_copy_ranks({"env": list(roles.env), "rollout": list(roles.rollout), "actor": list(roles.actor)},
                                  roles.world, self.actor_sharded)

    @property
    def owns_rollout_copy(self) -> bool:
        """This rank samples with its own unsharded copy of the policy (kept current by the weight sync)."""
        return self.rank in self.rollout_copy_ranks

    @property
    def sync_ranks(self) -> list[int]:
        """WeightSync participants: the actor's rank A[0] and every other rank with its own rollout copy."""
        return sorted({self.roles.actor[0], *self.rollout_copy_ranks})

    @property
    def rollout_columns(self) -> range:
        """Global env ids this rank collects (empty off the rollout ranks)."""
        return self.roles.rollout_columns(self.rank) if self.is_rollout else range(0)

    @property
    def actor_columns(self) -> range:
        return self.roles.actor_columns(self.rank)

    # ---- talking to the others
    @staticmethod
    def from_rank(obj: Any, src: int) -> Any:
        """``obj`` as rank ``src`` has it (a broadcast of a picklable object to every rank)."""
        return dist.broadcast_object(obj, src=src)

    def from_actor(self, obj: Any) -> Any:
        """``obj`` as the actor's first rank has it (a broadcast of a picklable object to every rank)."""
        return dist.broadcast_object(obj, src=self.roles.actor[0])

    def combine_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Combine the ranks' metrics: ``time/*`` phase durations are the slowest reporting rank's (a phase
        ends when its last rank does), ``time/env_steps_per_s`` adds up, everything else is averaged over
        the ranks that report it.

        The whole-batch metrics are already reduced on every rank that reports them (``CrossRank``). Ranks
        report different keys (only rollout ranks collect, only actor ranks train), so the dicts are
        gathered as objects rather than reduced as one fixed-length tensor.
        """
        if not torch.distributed.is_initialized():
            return metrics
        gathered: list[dict[str, float]] = [{} for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather_object(gathered, metrics)
        out: dict[str, float] = {}
        for key in sorted({k for m in gathered for k in m}):
            values = [float(m[key]) for m in gathered if key in m]
            if key == "time/env_steps_per_s":
                out[key] = sum(values)
            elif key.startswith("time/"):
                out[key] = max(values)
            else:
                out[key] = sum(values) / len(values)
        return out
