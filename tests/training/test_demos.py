"""Demonstration episodes: exact file round trips, clear errors, chunk cutting and the toy expert."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.errors import VlarlError
from vlarl_cli.training.demos import (
    ChunkDataset,
    Episode,
    episode_paths,
    load_episode,
    load_episodes,
    record_toy_demos,
    save_episode,
    toy_expert_actions,
)


def _episode(t: int = 5, a: int = 7, s: int = 8, size: int = 16, seed: int = 0, success: bool = True) -> Episode:
    rng = np.random.default_rng(seed)
    return Episode(
        states=rng.normal(size=(t, s)).astype(np.float32),
        actions=rng.uniform(-1, 1, size=(t, a)).astype(np.float32),
        task_description="put the bowl on the plate",
        success=success,
        images={keys.MAIN_IMAGES: rng.integers(0, 256, (t, size, size, 3), dtype=np.uint8),
                keys.WRIST_IMAGES: rng.integers(0, 256, (t, size, size, 3), dtype=np.uint8)},
        meta={"suite": "libero_spatial", "task_id": 0, "trial_id": 3},
    )


def test_episode_file_round_trip_is_exact(tmp_path):
    ep = _episode()
    path = save_episode(tmp_path / "episode_00000.npz", ep)
    back = load_episode(path)
    np.testing.assert_array_equal(back.states, ep.states)
    np.testing.assert_array_equal(back.actions, ep.actions)
    for cam in (keys.MAIN_IMAGES, keys.WRIST_IMAGES):
        assert back.images[cam].dtype == np.uint8
        np.testing.assert_array_equal(back.images[cam], ep.images[cam])
    assert back.task_description == ep.task_description and back.success is True
    assert back.meta == {"format_version": 1, **ep.meta}
    assert [p.name for p in tmp_path.iterdir()] == ["episode_00000.npz"]  # no temporary file left behind


def test_unreadable_and_foreign_files_raise_clear_errors(tmp_path):
    path = save_episode(tmp_path / "episode_00000.npz", _episode())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a torn write (what atomic writing prevents)
    with pytest.raises(VlarlError, match="Cannot read demonstration episode"):
        load_episode(path)
    np.savez(tmp_path / "episode_00001.npz", foo=np.zeros(3))
    with pytest.raises(VlarlError, match="not a vlarl demonstration episode") as err:
        load_episode(tmp_path / "episode_00001.npz")
    assert "vlarl sft --record" in err.value.fix


def test_load_episodes_errors_name_the_folder_and_the_fix(tmp_path):
    with pytest.raises(VlarlError, match="does not exist"):
        load_episodes(tmp_path / "missing")
    with pytest.raises(VlarlError, match=r"no episode_\*\.npz files") as err:
        load_episodes(tmp_path)
    assert "--record" in err.value.fix
    save_episode(tmp_path / "episode_00000.npz", _episode(success=False))
    with pytest.raises(VlarlError, match="no successful episode among 1 files"):
        load_episodes(tmp_path)
    assert len(load_episodes(tmp_path, successful_only=False)) == 1
    save_episode(tmp_path / "episode_00001.npz", _episode(seed=1))
    assert len(load_episodes(tmp_path)) == 1


def test_invalid_episodes_are_refused_when_saving(tmp_path):
    ep = _episode()
    ep.images[keys.MAIN_IMAGES] = ep.images[keys.MAIN_IMAGES][:-1]  # one frame short
    with pytest.raises(VlarlError, match="main_images must be uint8"):
        save_episode(tmp_path / "episode_00000.npz", ep)
    bad = _episode()
    bad.actions[2, 1] = np.nan
    with pytest.raises(VlarlError, match="NaN"):
        save_episode(tmp_path / "episode_00000.npz", bad)
    assert episode_paths(tmp_path) == []


def test_chunks_pad_by_repeating_the_last_action():
    # hand example: actions 0, 1, 2 (1-d), chunk 2 -> [0, 1], [1, 2], [2, 2]
    ep = Episode(states=np.arange(3, dtype=np.float32)[:, None] * 10, actions=np.arange(3, dtype=np.float32)[:, None])
    data = ChunkDataset([ep], chunk=2)
    assert len(data) == 3
    chunks = [data[i][1][:, 0].tolist() for i in range(3)]
    assert chunks == [[0.0, 1.0], [1.0, 2.0], [2.0, 2.0]]
    assert [data[i][0][keys.STATES].item() for i in range(3)] == [0.0, 10.0, 20.0]
    long = ChunkDataset([ep], chunk=5)
    assert long[1][1][:, 0].tolist() == [1.0, 2.0, 2.0, 2.0, 2.0]


def test_batch_equals_stacked_samples():
    data = ChunkDataset([_episode(t=4, seed=0), _episode(t=6, seed=1)], chunk=3)
    assert len(data) == 10
    ids = [9, 0, 4, 3]  # crosses the episode boundary (4 = episode 1, step 0)
    obs, actions = data.batch(ids)
    assert actions.shape == (4, 3, 7) and obs[keys.STATES].shape == (4, 8)
    assert obs[keys.MAIN_IMAGES].shape == (4, 16, 16, 3) and obs[keys.MAIN_IMAGES].dtype == torch.uint8
    for row, i in enumerate(ids):
        o, a = data[i]
        torch.testing.assert_close(actions[row], a, rtol=0, atol=0)
        for k in (keys.STATES, keys.MAIN_IMAGES, keys.WRIST_IMAGES):
            torch.testing.assert_close(obs[k][row], o[k], rtol=0, atol=0)
        assert obs[keys.TASK_DESCRIPTIONS][row] == o[keys.TASK_DESCRIPTIONS]
    np.testing.assert_array_equal(actions[2].numpy(), data.episodes[1].actions[0:3])


def test_mixed_episodes_are_refused():
    with pytest.raises(VlarlError, match="2-d actions"):
        ChunkDataset([_episode(a=7), _episode(a=2)], chunk=2)
    no_wrist = _episode()
    del no_wrist.images[keys.WRIST_IMAGES]
    with pytest.raises(VlarlError, match="cameras"):
        ChunkDataset([_episode(), no_wrist], chunk=2)


def test_toy_expert_moves_straight_at_the_goal():
    states = torch.tensor([[0.0, 0.0, 0.1, 0.0], [0.0, 0.0, 1.0, 0.5], [0.5, 0.5, 0.0, -0.5]])
    expected = torch.tensor([[0.4, 0.0], [1.0, 0.5], [-0.5, -1.0]])  # (goal - pos) / 0.25, max |component| 1
    torch.testing.assert_close(toy_expert_actions(states, 0.25), expected)


def test_recorded_toy_demos_replay_the_env_dynamics(tmp_path):
    paths = record_toy_demos(tmp_path, 8, seed=3)
    assert [p.name for p in paths] == [f"episode_{i:05d}.npz" for i in range(8)]
    for ep in load_episodes(tmp_path):
        assert ep.success and 1 <= len(ep) <= 16 and ep.images == {}
        pos, goal = ep.states[:, :2], ep.states[:, 2:]
        np.testing.assert_array_equal(goal, np.repeat(goal[:1], len(ep), axis=0))  # the goal never moves
        np.testing.assert_allclose(pos[1:], pos[:-1] + 0.25 * ep.actions[:-1], atol=1e-6)
        final = pos[-1] + 0.25 * ep.actions[-1]
        assert np.linalg.norm(final - goal[0]) < 0.2  # the last action reaches the goal
        assert np.linalg.norm(pos[-1] - goal[0]) >= 0.2  # ... and not earlier
    more = record_toy_demos(tmp_path, 2, seed=4)  # recording appends
    assert [p.name for p in more] == ["episode_00008.npz", "episode_00009.npz"]


class _FakeLiberoEnv:
    """Stands in for LiberoEnv in the recording loop: the state counts steps; task 1 never succeeds."""

    instances: ClassVar[list[_FakeLiberoEnv]] = []

    def __init__(self, suite: str, task_id: int, options: object) -> None:
        self.task_id, self.options, self.closed = task_id, options, False
        self.raw_env = type("Raw", (), {"env": self})()
        _FakeLiberoEnv.instances.append(self)

    def set_task(self, task_id: int) -> None:
        self.task_id = task_id

    def reset(self, trial: int) -> dict:
        self.t, self.trial, self.episode_active = 0, trial, True
        return self._obs()

    def _obs(self) -> dict:
        img = np.full((8, 8, 3), self.t, np.uint8)
        return {keys.MAIN_IMAGES: img, keys.STATES: np.full(8, self.t, np.float32),
                keys.TASK_DESCRIPTIONS: f"task {self.task_id}"}

    def step_chunk(self, actions: np.ndarray):
        assert actions.shape == (1, 7)
        self.t += 1
        end = self.t == 3 + self.trial
        self.episode_active = not end
        episode = {keys.SUCCESS_ONCE: self.task_id != 1} if end else None
        return type("R", (), {"obs": self._obs(), "episode": episode})()

    def close(self) -> None:
        self.closed = True


class _FakeExpert:
    def __init__(self, env: _FakeLiberoEnv) -> None:
        from vlarl_cli.errors import EnvError

        if env.task_id == 2:
            raise EnvError("The scripted expert handles one on/in goal, this task has [('open', 'drawer')].")
        self.env = env

    def act(self) -> np.ndarray:
        return np.full(7, 0.5 * self.env.t - 0.2)  # step t -> action 0.5 t - 0.2 (clipped to [-1, 1])


def test_expert_recording_keeps_successes_aligns_steps_and_skips_unscripted_tasks(tmp_path, monkeypatch):
    from vlarl_cli.envs.libero import env as env_mod
    from vlarl_cli.envs.libero import expert as expert_mod
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.training.demos import record_expert_demos

    monkeypatch.setattr(env_mod, "LiberoEnv", _FakeLiberoEnv)
    monkeypatch.setattr(expert_mod, "PickPlaceExpert", _FakeExpert)
    monkeypatch.setattr(suites, "init_states", lambda suite, task: np.zeros((50, 3)))
    messages: list[str] = []
    paths = record_expert_demos(tmp_path, 3, suite="libero_spatial", task_ids=[0, 1, 2], cameras=("main",),
                                progress=messages.append)
    # rotation 0, 1 (fails), 2 (unscriptable: dropped), then 0, 1, 0 with trials 0, 0, -, 1, 1, 2
    assert len(paths) == 3 and _FakeLiberoEnv.instances[-1].closed
    assert any("skipping libero_spatial task 2" in m for m in messages)
    episodes = [load_episode(p) for p in paths]
    assert [(e.meta["task_id"], e.meta["trial_id"]) for e in episodes] == [(0, 0), (0, 1), (0, 2)]
    for e in episodes:
        t = len(e)
        assert t == 3 + e.meta["trial_id"] and e.task_description == "task 0"
        # observation t (state = t, image = t) goes with the action taken after seeing it
        np.testing.assert_array_equal(e.states[:, 0], np.arange(t))
        np.testing.assert_array_equal(e.images[keys.MAIN_IMAGES][:, 0, 0, 0], np.arange(t))
        np.testing.assert_allclose(e.actions[:, 0], np.clip(0.5 * np.arange(t) - 0.2, -1, 1))
    with pytest.raises(VlarlError, match="succeeded in only 0 of 4 episodes"):
        record_expert_demos(tmp_path / "fail", 1, task_ids=[1], max_attempts=4)
    with pytest.raises(VlarlError, match="handles none of the tasks"):
        record_expert_demos(tmp_path / "none", 1, task_ids=[2])


class _FakeLiberoEnv16(_FakeLiberoEnv):
    """16 px frames (the AV1 encoder of the LeRobot writer needs more than 8 px)."""

    def _obs(self) -> dict:
        obs = super()._obs()
        obs[keys.MAIN_IMAGES] = np.full((16, 16, 3), 20 * self.t, np.uint8)
        return obs


def test_expert_dataset_is_lerobot_with_the_experts_success_rate(tmp_path, monkeypatch):
    """record_expert_dataset: attempts round robin over the tasks, failures dropped (or kept when asked),
    unscripted tasks skipped, the expert's success rate reported, the result a LeRobot v3.0 dataset."""
    from vlarl_cli.datasets import load_demonstrations
    from vlarl_cli.envs.libero import env as env_mod
    from vlarl_cli.envs.libero import expert as expert_mod
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.training.demos import record_expert_dataset

    monkeypatch.setattr(env_mod, "LiberoEnv", _FakeLiberoEnv16)
    monkeypatch.setattr(expert_mod, "PickPlaceExpert", _FakeExpert)
    monkeypatch.setattr(suites, "init_states", lambda suite, task: np.zeros((50, 3)))
    report = record_expert_dataset(tmp_path / "ds", 3, task_ids=[0, 1, 2], cameras=("main",), fps=20)
    # attempts 0 (task 0 ok), 1 (task 1 fails), 2 (task 2 unscripted), 3 (0 ok), 4 (1 fails), 6 (0 ok)
    assert (report.attempts, report.successes, report.kept, report.unscripted_tasks) == (5, 3, 3, [2])
    assert report.success_rate == pytest.approx(3 / 5)
    from vlarl_cli.training.demos import read_recording_report

    assert read_recording_report(tmp_path / "ds") == report  # kept in the dataset's meta/ folder
    assert not (tmp_path / "ds.staging").exists()  # the staging folder is the recorder's own, removed at the end
    episodes, fmt = load_demonstrations(tmp_path / "ds")
    assert fmt == "lerobot" and [len(e) for e in episodes] == [3, 4, 5]  # trials 0, 1, 2 of task 0
    for e in episodes:
        np.testing.assert_array_equal(e.states[:, 0], np.arange(len(e)))
        np.testing.assert_allclose(e.actions[:, 0], np.clip(0.5 * np.arange(len(e)) - 0.2, -1, 1))
        means = e.images[keys.MAIN_IMAGES].reshape(len(e), -1).mean(1)
        np.testing.assert_allclose(means, 20 * np.arange(len(e)), atol=4)  # frame t is frame t after AV1
    kept = record_expert_dataset(tmp_path / "all", 2, task_ids=[0, 1], cameras=("main",), keep_failures=True)
    everything, _ = load_demonstrations(tmp_path / "all")
    assert kept.kept == 3 and [e.success for e in everything] == [True, False, True]  # stops at 2 successes
    with pytest.raises(VlarlError, match="already exists"):
        record_expert_dataset(tmp_path / "ds", 1, task_ids=[0])
    with pytest.raises(VlarlError, match="handles none of the tasks"):
        record_expert_dataset(tmp_path / "none", 1, task_ids=[2])
