"""The wave scheduler of run_episodes against a fake vector env (no simulator): every planned episode runs
exactly once, rows never get mixed up, filler envs leave no record, episodes lost to a worker crash rerun."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.policies.base import PolicyOutput
from vlarl_cli.training.evaluation import EvalSettings, plan_episodes, run_episodes
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

    def __init__(self, spec: Any) -> None:
        self.spec, self.n = spec, spec.num_envs
        self.restarts, self.steps_sent, self.resets = 0, 0, []
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
        self.ids[:] = ids
        self.resets.append(list(ids))
        self.elapsed[:] = 0
        self.active[:] = True
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
                assert np.allclose(a, self.ids[e] / 10_000), "actions of another env's row"
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
        pass


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch) -> type[FakeVectorEnv]:
    import vlarl_cli.envs.vector as vector

    FakeVectorEnv.instances, FakeVectorEnv.crash_on_step = [], None
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
    # an env only switches task when its block does: contiguous blocks, task-major
    waves = np.array(env.resets)
    assert stats.waves == len(waves) == -(-len(plan) // min(num_envs, len(plan)))
    switches = sum(int(a // 50 != b // 50) for col in waves.T for a, b in itertools.pairwise(col))
    assert switches <= 1


def test_worker_crash_reruns_lost_episodes(fake_env: type[FakeVectorEnv]) -> None:
    fake_env.crash_on_step = 1  # env 0's first episode is lost with its worker
    plan = plan_episodes("libero_10", (0,), 4)
    settings = EvalSettings(suite="libero_10", tasks=(0,), trials=4, num_envs=2, num_workers=1, max_steps=13)
    records, stats = run_episodes(EchoPolicy(), settings, plan, log=False)
    assert sorted(r.trial for r in records) == [0, 1, 2, 3] and all(r.error == "" for r in records)
    assert stats.worker_restarts == 1
    # trial 0 ran again in a final wave; libero_10 task 0 is libero_130 task 120 (RLinf order)
    assert fake_env.instances[0].resets[-1][0] == 120 * 50 + 0
