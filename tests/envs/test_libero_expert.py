"""Scripted success (proves the success and reward path) and one task of every suite constructing.

Physics-only envs (``cameras=()``): the expert runs closed loop with chunk size 1, which would render
every step otherwise.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vlarl_cli import keys
from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv
from vlarl_cli.envs.libero.expert import PickPlaceExpert

pytestmark = pytest.mark.libero


def _run_expert(env: LiberoEnv, trial: int) -> tuple[np.ndarray, np.ndarray, dict]:
    env.reset(trial)
    expert = PickPlaceExpert(env.raw_env.env)
    rewards, success = [], []
    while env.episode_active:
        result = env.step_chunk(expert.act()[None])
        rewards.append(result.rewards[0])
        success.append(result.success[0])
    return np.array(rewards), np.array(success), result.episode


@pytest.fixture(scope="module")
def physics_env(libero_ready):
    env = LiberoEnv("libero_spatial", 0, EnvOptions(cameras=(), reward_coef=5.0, seeding="every_reset", hard_reset=False))
    yield env
    env.close()


def test_expert_succeeds_and_sparse_reward_pays(physics_env):
    rewards, success, episode = _run_expert(physics_env, trial=0)
    assert episode[keys.SUCCESS_ONCE] is True and episode[keys.SUCCESS_AT_END] is True
    assert success[-1] and not success[:-1].any()  # terminates at the first success
    assert episode[keys.EPISODE_LEN] == len(rewards) <= 220
    np.testing.assert_array_equal(rewards, 5.0 * success)  # reward_coef * success
    assert episode[keys.RETURN] == pytest.approx(5.0)


def test_relative_reward_with_step_penalty_ignoring_terminations(physics_env):
    physics_env.options = dataclasses.replace(
        physics_env.options,
        use_rel_reward=True,
        step_penalty=0.01,
        ignore_terminations=True,
        max_episode_steps=200,
    )
    try:
        rewards, success, episode = _run_expert(physics_env, trial=1)
    finally:
        physics_env.options = dataclasses.replace(
            physics_env.options, use_rel_reward=False, step_penalty=0.0, ignore_terminations=False,
            max_episode_steps=None,
        )  # fmt: skip
    assert len(rewards) == 200  # ran to the limit despite succeeding
    assert episode[keys.SUCCESS_ONCE] is True
    assert episode[keys.SUCCESS_AT_END] == bool(success[-1])
    # hand formula (RLinf _calc_step_reward): level_t = 5 * s_t - penalty, r_t = level_t - level_{t-1}
    # (level_{-1} = 0): the penalty shows only on the first step
    level = 5.0 * success.astype(np.float64) - 0.01
    expected = np.diff(np.concatenate([[0.0], level]))
    assert expected[0] == pytest.approx(-0.01) and not np.any(np.isclose(expected[1:], -0.01))
    np.testing.assert_allclose(rewards, expected, atol=1e-6)
    # RLinf _record_metrics: the return accumulates up to and including the first success step
    first = int(np.argmax(success))
    assert episode[keys.RETURN] == pytest.approx(expected[: first + 1].sum(), abs=1e-4)


def test_one_task_of_every_suite_constructs_resets_and_steps(libero_ready):
    env = None
    try:
        for suite, task_id in [
            ("libero_object", 0),
            ("libero_goal", 9),
            ("libero_10", 0),
            ("libero_90", 89),
            ("libero_130", 129),  # libero_10 task 9 (libero_130 order: spatial, object, goal, 90, 10)
        ]:
            if env is not None:
                env.close()
            env = LiberoEnv(suite, task_id, EnvOptions(cameras=(), settle_steps=2, hard_reset=False))
            obs = env.reset(49)
            result = env.step_chunk(np.zeros((2, 7)))
            assert result.executed == 2 and not result.dones.any()
            assert np.isfinite(result.obs[keys.STATES]).all()
            assert isinstance(obs[keys.TASK_DESCRIPTIONS], str) and obs[keys.TASK_DESCRIPTIONS]
            assert env.max_episode_steps == {
                "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400, "libero_130": 520,
            }[suite]  # fmt: skip
    finally:
        if env is not None:
            env.close()


def test_unstable_physics_fails_episode_and_rebuild_recovers(physics_env):
    env = physics_env
    env.reset(2)
    env.step_chunk(np.zeros((1, 7)))
    # Blow up the arm's velocities: MuJoCo flags bad accelerations and resets its state.
    env.raw_env.env.sim.data.qvel[:] = 1e12
    result = env.step_chunk(np.zeros((3, 7)))
    assert result.dones.all()
    assert result.episode["unstable"] is True and "unstable" in result.episode["error"]
    assert result.episode[keys.SUCCESS_ONCE] is False
    env.rebuild()
    env.reset(2)
    ok = env.step_chunk(np.zeros((2, 7)))
    assert ok.executed == 2 and ok.episode is None


def test_state_obs_mode_appends_the_goal_positions(libero_ready):
    """``obs_mode: state``: 8-d proprio + the bowl's and the plate's world positions (libero_spatial task 0),
    read from the simulator, no image; cameras with it are refused."""
    from vlarl_cli.errors import EnvError

    env = LiberoEnv("libero_spatial", 0, EnvOptions(cameras=(), obs_mode="state", hard_reset=False))
    try:
        obs = env.reset(0)
        state = obs[keys.STATES]
        assert state.shape == (14,) and state.dtype == np.float32
        assert not any(k in obs for k in (keys.MAIN_IMAGES, keys.WRIST_IMAGES))
        raw = env._raw_obs  # robosuite's own object sensors name the same bodies
        np.testing.assert_allclose(state[:3], raw["robot0_eef_pos"], atol=1e-6)
        np.testing.assert_allclose(state[8:11], raw["akita_black_bowl_1_pos"], atol=1e-6)
        np.testing.assert_allclose(state[11:14], raw["plate_1_pos"], atol=1e-6)
        moved = env.step_chunk(np.array([[0, 0, 0, 0, 0, 0, -1.0]] * 3, dtype=np.float32)).obs[keys.STATES]
        np.testing.assert_allclose(moved[8:], state[8:], atol=2e-3)  # the objects rest while the arm idles
    finally:
        env.close()
    with pytest.raises(EnvError, match="renders no camera"):
        EnvOptions(cameras=("main",), obs_mode="state").validate()
    with pytest.raises(EnvError, match="obs_mode"):
        EnvOptions(obs_mode="pixels").validate()
