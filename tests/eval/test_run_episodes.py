"""The scheduler of run_episodes against a fake vector env (no simulator): every planned episode runs exactly
once, rows never get mixed up, an env starts its next episode as soon as one ends (no waves), episodes lost
to a worker crash rerun, and an episode's actions do not depend on which episodes share its chunks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.policies.base import PolicyOutput
from vlarl_cli.training.evaluation import EvalSettings, plan_episodes, run_episodes, split_blocks
from vlarl_cli.video.episodes import EpisodeLog

CHUNK = 5


class EchoPolicy:
    """Writes each row's reset-state id (read from its state) into every action: rows are traceable."""

    num_action_chunks = CHUNK
    cameras = ("main",)

    def sample(self, obs: dict[str, Any], deterministic: bool = False,
               generator: torch.Generator | None = None) -> PolicyOutput:
        ids = obs[keys.STATES][:, 0]
        actions = ids[:, None, None].expand(len(ids), CHUNK, 7).clone() / 10_000
        z = torch.zeros(len(ids), CHUNK, 7)
        return PolicyOutput(actions=actions, logprobs=z, values=torch.zeros(len(ids)))


class FakeVectorEnv:
    """Episodes of ``reset id % 13 + 1`` steps; success when that length is even. Optionally one worker death."""

    instances: ClassVar[list[FakeVectorEnv]] = []
    crash_on_step: ClassVar[int | None] = None

    check_rows: ClassVar[bool] = True

    def __init__(self, spec: Any) -> None:
        self.spec, self.n, self.num_envs = spec, spec.num_envs, spec.num_envs
        self.restarts, self.steps_sent, self.closed = 0, 0, False
        self.started: list[tuple[int, int]] = []  # (env, reset id) in start order
        self.ids = np.full(self.n, -1)
        self.elapsed = np.zeros(self.n, int)
        self.active = np.zeros(self.n, bool)
        self.received: dict[int, list[np.ndarray]] = {}
        FakeVectorEnv.instances.append(self)

    def _obs(self) -> dict[str, Any]:
        states = torch.zeros(self.n, 8)
        states[:, 0] = torch.from_numpy(self.ids.astype(np.float32))
        return {keys.STATES: states, "joint_pos": torch.zeros(self.n, 7), keys.TASK_DESCRIPTIONS: ["x"] * self.n}

    def reset(self, ids: list[int]) -> dict[str, Any]:
        return self.restart(list(range(self.n)), ids)

    def restart(self, env_ids: list[int], ids: list[int]) -> dict[str, Any]:
        for e, i in zip(env_ids, ids, strict=True):
            self.ids[e], self.elapsed[e], self.active[e] = i, 0, True
            self.started.append((e, int(i)))
        return self._obs()

    def step_chunk(self, actions: np.ndarray) -> tuple:
        from vlarl_cli.envs.vector import EPISODE_DONE, ERRORS

        self.steps_sent += 1
        done = np.zeros(self.n, bool)
        success = np.zeros(self.n, bool)
        length = np.zeros(self.n, int)
        errors = {}
        for e in range(self.n):
            if not self.active[e]:
                continue
            a = actions[e]
            if np.isnan(a).any():
                done[e], errors[e] = True, "invalid action chunk"
            elif FakeVectorEnv.crash_on_step == self.steps_sent and e == 0:
                self.restarts += 1
                done[e], errors[e] = True, "worker 0 died; its episodes were restarted"
            else:
                assert not self.check_rows or np.allclose(a, self.ids[e] / 10_000), "actions of another env's row"
                self.received.setdefault(int(self.ids[e]), []).append(a)
                limit = int(self.ids[e]) % 13 + 1
                self.elapsed[e] = min(limit, self.elapsed[e] + CHUNK)
                if self.elapsed[e] >= limit:
                    done[e], success[e] = True, limit % 2 == 0
            length[e] = self.elapsed[e]
            self.active[e] &= ~done[e]
        info = {EPISODE_DONE: torch.from_numpy(done), keys.SUCCESS_ONCE: torch.from_numpy(success),
                keys.EPISODE_LEN: torch.from_numpy(length), ERRORS: errors}
        return self._obs(), torch.zeros(self.n, CHUNK), torch.zeros(self.n, CHUNK, dtype=torch.bool), info

    def episode_frames(self, e: int) -> list:
        return []

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch) -> type[FakeVectorEnv]:
    import vlarl_cli.envs.vector as vector

    FakeVectorEnv.instances, FakeVectorEnv.crash_on_step, FakeVectorEnv.check_rows = [], None, True
    monkeypatch.setattr(vector, "LiberoVectorEnv", FakeVectorEnv)
    return FakeVectorEnv


@pytest.mark.parametrize("num_envs", [1, 2, 3, 4])
def test_each_episode_exactly_once(fake_env: type[FakeVectorEnv], num_envs: int, tmp_path: Path) -> None:
    plan = plan_episodes("libero_goal", (2, 5), 5)  # 10 episodes: waves leave some envs idle
    settings = EvalSettings(suite="libero_goal", tasks=(2, 5), trials=5, num_envs=num_envs, num_workers=1,
                            max_steps=13)
    log = EpisodeLog(tmp_path / "episodes.jsonl")
    records, stats = run_episodes(EchoPolicy(), settings, plan, out_dir=tmp_path, on_episode=log.append, log=False)
    assert sorted(r.key for r in records) == sorted((k.suite, k.task, k.trial) for k in plan)
    assert [r.key for r in log.read()] == [r.key for r in records]
    env = fake_env.instances[0]
    for r in records:
        rid = (20 + r.task) * 50 + r.trial  # libero_goal task t is libero_130 task 20 + t
        limit = rid % 13 + 1
        assert (r.steps, r.success) == (limit, limit % 2 == 0)
        data = r.load_data()
        assert np.array_equal(data.actions, np.stack(env.received[rid]))  # the log holds what was sent
        assert data.robot_states.shape == (len(data.actions) + 1, 8)
    # no waves: every env is stepped without pause until its last episode, so the chunks sent are the
    # busiest env's chunks
    per_env = [sum(-(-(i % 13 + 1) // CHUNK) for e2, i in env.started if e2 == e) for e in range(env.n)]
    assert env.steps_sent == stats.chunks == max(per_env)
    # each env starts with its own contiguous block, in plan (task-major) order
    ids = [k.libero130_reset_state_id for k in plan]
    for e in range(env.n):
        mine = [i for e2, i in env.started if e2 == e]
        assert mine[0] == ids[sum(len(b) for b in split_blocks(ids, env.n)[:e])]


def test_worker_crash_reruns_lost_episodes(fake_env: type[FakeVectorEnv]) -> None:
    fake_env.crash_on_step = 1  # env 0's first episode is lost with its worker
    plan = plan_episodes("libero_10", (0,), 4)
    settings = EvalSettings(suite="libero_10", tasks=(0,), trials=4, num_envs=2, num_workers=1, max_steps=13)
    records, stats = run_episodes(EchoPolicy(), settings, plan, log=False)
    assert sorted(r.trial for r in records) == [0, 1, 2, 3] and all(r.error == "" for r in records)
    assert stats.worker_restarts == 1
    # trial 0 ran again, in env 0 right away; libero_10 task 0 is libero_130 task 120 (RLinf order)
    assert fake_env.instances[0].started[:3] == [(0, 120 * 50), (1, 120 * 50 + 2), (0, 120 * 50)]


class NoisePolicy:
    """Actions are the policy's sampling noise: what an episode is sent shows which stream it drew from."""

    num_action_chunks = CHUNK
    cameras = ("main",)

    def sample(self, obs: dict[str, Any], deterministic: bool = False, generator: Any = None) -> PolicyOutput:
        from vlarl_cli.policies.noise import randn

        actions = randn((len(obs[keys.STATES]), CHUNK, 7), generator)
        z = torch.zeros(len(actions), CHUNK, 7)
        return PolicyOutput(actions=actions, logprobs=z, values=torch.zeros(len(actions)))


def test_an_episode_draws_the_same_noise_whatever_runs_beside_it(fake_env: type[FakeVectorEnv]) -> None:
    fake_env.check_rows = False
    plan = plan_episodes("libero_goal", (2, 5), 5)
    settings = EvalSettings(suite="libero_goal", tasks=(2, 5), trials=5, num_envs=3, num_workers=1, max_steps=13)
    run_episodes(NoisePolicy(), settings, plan, log=False)
    # a resumed run: four episodes already finished, the rest in other envs beside other episodes
    resumed, _ = run_episodes(NoisePolicy(), settings, plan[4:], log=False)
    assert len(resumed) == 6
    for r in resumed:
        rid = (20 + r.task) * 50 + r.trial
        first, second = fake_env.instances[0].received[rid], fake_env.instances[1].received[rid]
        assert np.array_equal(np.stack(first), np.stack(second)), f"{r.key}: other noise when resumed"



def _training_env(settings: EvalSettings, **changes: Any) -> FakeVectorEnv:
    """A vector env as rl-train builds it for training: its own suite and task pool, RLinf's reward and seed
    fields, the protocol's reset mode left to the protocol (None), and ``changes``."""
    import dataclasses

    from vlarl_cli.training.evaluation.runner import _vector_spec

    spec = _vector_spec(EchoPolicy(), settings, settings.num_envs)
    fields = {"suite": "libero_goal", "task_ids": (2, 5), "group_size": 2, "seed": 3, "rank": 0, "reward_coef": 5.0,
              "hard_reset": None, "init_state_order": "random"}
    spec = dataclasses.replace(spec, **{**fields, **changes})
    return FakeVectorEnv(spec)


def test_the_evaluation_runs_in_a_training_env_that_plays_the_same_episodes(fake_env: type[FakeVectorEnv]) -> None:
    """rl-train hands its training env over: when it plays the evaluation's episodes alike (as many envs, the
    same protocol settings once the protocol's defaults are filled in; rewards, seeds of the state draws and
    task pools aside), the episodes run in it (in its suite's reset-state ids) and it stays open; otherwise the
    evaluation builds its own env and leaves the training env alone."""
    settings = EvalSettings(suite="libero_goal", tasks=(2, 5), trials=3, num_envs=2, num_workers=1, max_steps=13)
    plan = plan_episodes("libero_goal", (2, 5), 3)
    train = _training_env(settings, auto_reset=False)
    records, _ = run_episodes(EchoPolicy(), settings, plan, log=False, env=train)
    assert fake_env.instances == [train] and not train.closed
    assert sorted(i for _, i in train.started) == sorted(t * 50 + i for t in (2, 5) for i in range(3))
    assert sorted(r.key for r in records) == sorted((k.suite, k.task, k.trial) for k in plan)
    for changes in ({"auto_reset": True}, {"max_episode_steps": 12}, {"num_envs": 4}, {"hard_reset": False},
                    {"env_seed": 1}):
        fake_env.instances = []
        other = _training_env(settings, **changes)
        again, _ = run_episodes(EchoPolicy(), settings, plan, log=False, env=other)
        built = fake_env.instances[1]
        assert not other.started and built.closed and built.spec.suite == "libero_all", changes
        assert sorted(r.key for r in again) == sorted(r.key for r in records)


def test_where_every_reset_is_seeded_the_rank_and_stages_decide_the_episodes(fake_env: type[FakeVectorEnv]) -> None:
    """RLinf's protocol seeds every reset from the env's rank and pipeline stage: a training env of another rank
    or with other stages would play other episodes; under the standard protocol (seeded once per task) they
    do not matter."""
    from vlarl_cli.training.evaluation.runner import _vector_spec, reusable

    plan = plan_episodes("libero_goal", (2, 5), 3)
    for protocol, rank_matters in (("rlinf", True), ("standard", False)):
        settings = EvalSettings(suite="libero_goal", tasks=(2, 5), trials=3, num_envs=2, num_workers=1,
                                max_steps=13, protocol=protocol)
        spec = _vector_spec(EchoPolicy(), settings, 2)
        assert reusable(_training_env(settings, auto_reset=False, hard_reset=spec.hard_reset), spec, plan)
        for other in ({"rank": 1}, {"stages": 2}):
            train = _training_env(settings, auto_reset=False, hard_reset=spec.hard_reset, **other)
            assert reusable(train, spec, plan) is not rank_matters, (protocol, other)
