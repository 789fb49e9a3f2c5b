"""Placement rules and the env-column moves between rollout and actor ranks (no processes needed)."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli.distributed.columns import join_columns, select_columns
from vlarl_cli.distributed.placement import roles_for
from vlarl_cli.errors import ConfigError
from vlarl_cli.training.rollout import Rollout


def _roles(placement: dict[str, list[int]], rank: int = 0, world: int = 8, num_envs: int = 16, group: int = 1):
    return roles_for(placement, rank=rank, world=world, num_envs=num_envs, group_size=group)


def test_rlinf_style_split_maps_env_ranks_to_rollout_ranks() -> None:
    roles = _roles({"env": [0, 1, 2, 3], "rollout": [4, 5], "actor": list(range(8))}, rank=5)
    assert roles.is_rollout and roles.is_actor and not roles.is_env and not roles.collocated
    assert roles.env_ranks_of(5) == [2, 3] and roles.rollout_of_env(1) == 4
    assert roles.rollout_columns(5) == range(8, 16)  # env ranks 2, 3 hold envs 8-11, 12-15
    assert roles.actor_columns(5) == range(10, 12)
    assert _roles({k: list(range(8)) for k in ("env", "rollout", "actor")}).collocated


@pytest.mark.parametrize(("placement", "world", "message"), [
    ({"env": [0], "rollout": [1], "actor": [1]}, 4, "Ranks \\[2, 3\\] have no component"),
    ({"env": [0, 1], "rollout": [1, 2], "actor": [0, 1, 2, 3]}, 4, "overlap without being equal"),
    ({"env": [0, 1, 2], "rollout": [3, 4], "actor": list(range(8))}, 8, "do not split evenly"),
    ({"env": [0, 1, 2], "rollout": [0, 1, 2], "actor": list(range(8))}, 8, "whole groups of 1 over the 3 env"),
])
def test_bad_placements_say_what_is_wrong(placement: dict[str, list[int]], world: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _roles(placement, world=world)


def test_grpo_groups_may_not_straddle_ranks() -> None:
    with pytest.raises(ConfigError, match="groups of 4"):
        _roles({"env": [0, 1], "rollout": [0, 1], "actor": [0, 1, 2, 3]}, world=4, num_envs=8, group=4)


def _rollout(t: int = 3, n: int = 6, c: int = 2, a: int = 7) -> Rollout:
    g = torch.Generator().manual_seed(0)
    return Rollout(replay={"obs": torch.randn(t * n, 5, generator=g), "index": torch.arange(t * n)},
                   logprobs=torch.randn(t, n, c, a, generator=g), values=torch.randn(t + 1, n, generator=g),
                   rewards=torch.randn(t, n, c, generator=g), dones=torch.rand(t + 1, n, c, generator=g) > 0.5,
                   truncated=torch.rand(t, n, c, generator=g) > 0.5, final_values=torch.randn(t, n, generator=g),
                   success=torch.rand(t, n, c, generator=g) > 0.5)


def test_columns_split_and_join_back_exactly() -> None:
    r = _rollout()
    cols = r.columns()
    parts = [select_columns(cols, range(0, 2)), select_columns(cols, range(2, 5)), select_columns(cols, range(5, 6))]
    back = Rollout.from_columns(join_columns(parts))
    for name in ("logprobs", "values", "rewards", "dones", "truncated", "final_values", "success"):
        assert torch.equal(getattr(back, name), getattr(r, name)), name
    for k in r.replay:
        assert torch.equal(back.replay[k], r.replay[k]), k
    # a piece holds its envs at every step: replay row t * n + env of the original
    piece = Rollout.from_columns(join_columns([select_columns(cols, range(2, 5))]))
    assert piece.replay["index"].tolist() == [t * 6 + e for t in range(3) for e in (2, 3, 4)]


class _RecordingEnv:
    """A 4-env stand-in that records the order of collect's stage calls."""

    def __init__(self, stages: int) -> None:
        self.num_envs, self.stages, self.calls = 4, stages, []

    def stage_ids(self, s: int) -> list[int]:
        return list(range(s, self.num_envs, self.stages))

    def reset(self, ids=None):
        return {"states": torch.zeros(self.num_envs, 4)}

    def _result(self, n: int):
        infos = {"success": torch.zeros(n, 2, dtype=torch.bool), "truncated": torch.zeros(n, 2, dtype=torch.bool),
                 "episode_done": torch.zeros(n, dtype=torch.bool)}
        infos.update({k: torch.zeros(n) for k in ("success_once", "success_at_end", "return", "episode_len")})
        return {"states": torch.zeros(n, 4)}, torch.zeros(n, 2), torch.zeros(n, 2, dtype=torch.bool), infos

    def step_chunk_async(self, s: int, actions) -> None:
        self.calls.append(("send", s))

    def wait(self, s: int):
        self.calls.append(("wait", s))
        return self._result(len(self.stage_ids(s)))

    def step_chunk(self, actions):
        self.calls += [("send", 0), ("wait", 0)]
        return self._result(self.num_envs)


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_env_ranks_follow_collects_exact_schedule(stages: int) -> None:
    """serve_env replays collect_schedule; if collect's order changed, an env rank would deadlock."""
    from vlarl_cli.distributed.remote_env import collect_schedule
    from vlarl_cli.policies.toy import ToyFlowPolicy
    from vlarl_cli.training.rollout import collect

    env = _RecordingEnv(stages)
    collect(ToyFlowPolicy(chunk=2), env, 3, stages=stages)
    assert env.calls == collect_schedule(stages, 3)


def _cluster(placement: dict[str, list[int]], rank: int, world: int, sharded: bool):
    from vlarl_cli.distributed.dist import DistContext
    from vlarl_cli.distributed.placement import Cluster

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, device=torch.device("cpu"))
    return Cluster(ctx, _roles(placement, rank=rank, world=world), actor_sharded=sharded)


@pytest.mark.parametrize(("placement", "sharded", "copies"), [
    # training on its own rank: the rollout rank samples with a copy that the actor keeps current
    ({"env": [0], "rollout": [0], "actor": [1]}, False, [0]),
    # an FSDP actor over ranks that do not all sample: every rollout rank needs its own unsharded copy
    ({"env": [0], "rollout": [1], "actor": [0, 1]}, True, [1]),
    # an unsharded actor on a rollout rank samples with the actor module itself
    ({"env": [0, 1], "rollout": [0, 1], "actor": [0]}, False, [1]),
])
def test_cluster_answers_who_holds_a_rollout_copy(placement: dict[str, list[int]], sharded: bool,
                                                   copies: list[int]) -> None:
    for rank in range(2):
        c = _cluster(placement, rank, 2, sharded)
        assert c.rollout_copy_ranks == copies and c.owns_rollout_copy == (rank in copies)
        assert c.sync_ranks == sorted({placement["actor"][0], *copies})
        assert c.is_actor_source == (rank == placement["actor"][0]) and not c.collocated
        assert c.is_env_only == (rank in placement["env"] and rank not in placement["rollout"])
        assert c.rollout_columns == (c.roles.rollout_columns(rank) if rank in placement["rollout"] else range(0))


def test_collocated_cluster_has_no_copies_and_combines_nothing() -> None:
    c = _cluster({k: [0, 1] for k in ("env", "rollout", "actor")}, 1, 2, sharded=True)
    assert c.collocated and c.rollout_copy_ranks == [] and c.sync_ranks == [0] and not c.is_actor_source
    assert c.combine_metrics({"time/step": 1.0}) == {"time/step": 1.0}  # one process: nothing to gather
