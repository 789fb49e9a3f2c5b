"""ManiSkill vector env: episode semantics against a scripted double (no Vulkan needed), and the real
PickCube-v1 scene (reset states, GRPO groups, truncation, auto-reset, observation layout)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.envs.maniskill.sims import axis_angle as _axis_angle
from vlarl_cli.envs.maniskill.tasks import check_task
from vlarl_cli.envs.maniskill.vector import ManiSkillSpec, ManiSkillVectorEnv
from vlarl_cli.errors import EnvError

pytestmark = pytest.mark.usefixtures("one_thread")


class ScriptedSim:
    """A gymnasium-style single env whose success follows a script, one entry per step after reset."""

    def __init__(self, script: list[bool]) -> None:
        self.script, self.t, self.seeds = script, 0, []

    def reset(self, seed: int) -> tuple[torch.Tensor, dict]:
        self.seeds.append(seed)
        self.t = 0
        return torch.full((1, 3), float(seed)), {}

    def step(self, action: torch.Tensor) -> tuple:
        succ = self.script[self.t]
        self.t += 1
        return torch.full((1, 3), float(self.t)), None, None, None, {"success": torch.tensor([succ])}

    def close(self) -> None:
        pass


def _env(scripts: list[list[bool]], **kw) -> tuple[ManiSkillVectorEnv, list[ScriptedSim]]:
    sims = [ScriptedSim(s) for s in scripts]
    return ManiSkillVectorEnv(ManiSkillSpec(num_envs=len(sims), **kw), sims=sims), sims


def test_digital_twin_tasks_are_refused_with_the_download_reason() -> None:
    with pytest.raises(EnvError, match="vlarl download"):
        check_task("PutOnPlateInScene25Main-v3")
    with pytest.raises(EnvError, match="PickCube-v1"):
        check_task("PickCub-v1")
    assert "cube" in check_task("PickCube-v1")


def test_axis_angle_hand_examples() -> None:
    c = math.cos(math.pi / 4)
    q = np.array([[1.0, 0, 0, 0], [c, 0, 0, c], [-c, 0, 0, -c], [0.0, 1, 0, 0]])
    out = _axis_angle(q)
    np.testing.assert_allclose(out, [[0, 0, 0], [0, 0, math.pi / 2], [0, 0, math.pi / 2], [math.pi, 0, 0]],
                               atol=1e-7)


def test_success_terminates_mid_chunk_with_the_relative_reward() -> None:
    # env 0 succeeds at its 3rd step: reward +2 (coef 2, change of success), the rest of the chunk is not run
    env, sims = _env([[False, False, True, True], [False] * 8], reward_coef=2.0, max_episode_steps=8,
                     auto_reset=False)
    env.reset([3, 4])
    _, rewards, dones, info = env.step_chunk(torch.zeros(2, 4, 7))
    assert rewards[0].tolist() == [0.0, 0.0, 2.0, 0.0] and rewards[1].tolist() == [0.0] * 4
    assert dones[0].tolist() == [False, False, True, True] and not dones[1].any()
    assert sims[0].t == 3 and sims[1].t == 4
    assert info["episode_done"].tolist() == [True, False]
    assert info[keys.SUCCESS_ONCE][0] and info[keys.RETURN][0] == 2.0 and info[keys.EPISODE_LEN][0] == 3
    assert not info[keys.TRUNCATED].any()
    # no auto-reset: the finished env stays done and is not stepped
    _, _, dones, info = env.step_chunk(torch.zeros(2, 4, 7))
    assert dones[0].all() and sims[0].t == 3 and info["active"].tolist() == [False, False]
    assert info[keys.TRUNCATED][1].tolist() == [False, False, False, True]  # env 1 hits the 8-step limit


def test_ignore_terminations_level_reward_and_step_penalty() -> None:
    env, _ = _env([[False, True, True, False]], use_rel_reward=False, ignore_terminations=True,
                  step_penalty=0.25, max_episode_steps=4)
    env.reset([0])
    _, rewards, dones, info = env.step_chunk(torch.zeros(1, 4, 7))
    assert rewards[0].tolist() == [-0.25, 0.75, 0.75, -0.25]
    assert dones[0].tolist() == [False, False, False, True] and info[keys.TRUNCATED][0, 3]
    assert info[keys.SUCCESS_ONCE][0] and not info[keys.SUCCESS_AT_END][0] and info[keys.RETURN][0] == 1.0


def test_auto_reset_restarts_from_the_same_seed_and_groups_share_seeds() -> None:
    env, sims = _env([[True] * 8] * 4, group_size=2, auto_reset=True, seed=5)
    env.reset()
    seeds = [s.seeds[0] for s in sims]
    assert seeds[0] == seeds[1] and seeds[2] == seeds[3]
    _, _, dones, info = env.step_chunk(torch.zeros(4, 2, 7))
    assert dones.all() and info["episode_done"].all() and info["active"].all()
    assert [s.seeds for s in sims] == [[x, x] for x in seeds]


def test_bad_actions_are_refused() -> None:
    env, _ = _env([[False] * 4])
    env.reset([0])
    with pytest.raises(EnvError, match="expected"):
        env.step_chunk(torch.zeros(1, 4, 2))


@pytest.mark.usefixtures("maniskill_ready")
def test_pickcube_state_observations_groups_and_truncation() -> None:
    with ManiSkillVectorEnv(ManiSkillSpec(num_envs=3, max_episode_steps=6, auto_reset=True)) as env:
        obs = env.reset([5, 5, 7])
        assert obs[keys.STATES].shape == (3, 42) and obs[keys.STATES].dtype == torch.float32
        assert keys.MAIN_IMAGES not in obs and len(obs[keys.TASK_DESCRIPTIONS]) == 3
        assert torch.equal(obs[keys.STATES][0], obs[keys.STATES][1])  # same seed, same scene
        assert not torch.equal(obs[keys.STATES][0], obs[keys.STATES][2])
        first = obs[keys.STATES].clone()
        env.step_chunk(torch.zeros(3, 4, 7))
        obs, rewards, dones, info = env.step_chunk(torch.zeros(3, 4, 7))
        assert dones[:, 1:].all() and not dones[:, 0].any() and info[keys.TRUNCATED][:, 1].all()
        assert info[keys.EPISODE_LEN].tolist() == [6, 6, 6] and (rewards == 0).all()
        assert torch.equal(obs[keys.STATES], first)  # auto-reset: the next episode starts from the same seed


@pytest.mark.usefixtures("maniskill_ready")
def test_pickcube_rgb_observations() -> None:
    with ManiSkillVectorEnv(ManiSkillSpec(num_envs=1, cameras=("main",), resolution=64)) as env:
        obs = env.reset([0])
        assert obs[keys.MAIN_IMAGES].shape == (1, 64, 64, 3) and obs[keys.MAIN_IMAGES].dtype == torch.uint8
        assert obs[keys.MAIN_IMAGES].float().std() > 0  # a rendered scene, not a blank frame
        state = obs[keys.STATES]
        assert state.shape == (1, 8)
        assert 0.0 <= float(state[0, 6]) <= 0.05 and 0.0 <= float(state[0, 7]) <= 0.05  # panda finger joints (m)


@pytest.mark.usefixtures("maniskill_ready")
def test_stackcube_hand_camera_is_the_wrist_image() -> None:
    spec = ManiSkillSpec(task="StackCube-v1", num_envs=1, cameras=("main", "wrist"), resolution=32)
    with ManiSkillVectorEnv(spec) as env:
        obs = env.reset([0])
        assert obs[keys.MAIN_IMAGES].shape == obs[keys.WRIST_IMAGES].shape == (1, 32, 32, 3)
        assert not torch.equal(obs[keys.MAIN_IMAGES], obs[keys.WRIST_IMAGES])


def test_the_check_names_the_missing_vulkan_packages(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from vlarl_cli.envs.maniskill import setup

    monkeypatch.setattr(setup.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(setup, "_ICD_DIRS", (str(tmp_path),))
    missing = " ".join(setup.missing_parts())
    assert "libvulkan1" in missing and "mesa-vulkan-drivers" in missing and "bookworm-backports" in missing
    setup.probe.cache_clear()
    try:
        with pytest.raises(EnvError, match="libvulkan1") as err:
            setup.check_maniskill()
        assert "setup_maniskill.sh" in str(err.value)
    finally:
        setup.probe.cache_clear()
