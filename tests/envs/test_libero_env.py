"""One real LIBERO env (libero_spatial task 0, two cameras at 128 px): protocol, rendering, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from vlarl_cli import keys
from vlarl_cli.envs.libero import suites
from vlarl_cli.envs.libero.conventions import make_state

pytestmark = pytest.mark.libero


def noop_chunk(chunk: int) -> np.ndarray:
    """``[chunk, 7]`` no-op actions (no motion, gripper open)."""
    a = np.zeros((chunk, 7))
    a[:, -1] = -1.0
    return a


def random_chunks(seed: int, steps: int) -> np.ndarray:
    """``[steps, 7]`` reproducible random actions in [-1, 1] with the gripper open."""
    a = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(steps, 7))
    a[:, -1] = -1.0
    return a


def test_noop_policy_never_succeeds(spatial_env):
    env = spatial_env
    obs = env.reset(0)
    assert obs[keys.MAIN_IMAGES].shape == (128, 128, 3) and obs[keys.MAIN_IMAGES].dtype == np.uint8
    assert obs[keys.WRIST_IMAGES].shape == (128, 128, 3)
    assert obs[keys.STATES].shape == (8,) and obs[keys.STATES].dtype == np.float32
    assert obs[keys.TASK_DESCRIPTIONS] == suites.get_task("libero_spatial", 0).language
    renders_before = env.render_count
    chunks = 0
    while env.episode_active:
        result = env.step_chunk(noop_chunk(20))
        chunks += 1
        assert not result.success.any()
    assert chunks == 11  # the standard protocol's 220 steps, in chunks of 20
    episode = result.episode
    assert episode[keys.EPISODE_LEN] == 220
    assert episode[keys.SUCCESS_ONCE] is False and episode[keys.SUCCESS_AT_END] is False
    assert episode[keys.RETURN] == 0.0
    assert result.truncated[-1] and result.dones[-1] and not result.dones[:-1].any()
    # Only chunk boundaries render: the last step of each chunk renders the 2 cameras (the final chunk
    # ends the episode on its last step, which renders too).
    assert env.render_count - renders_before == 2 * chunks


def test_observation_state_matches_raw_parts(spatial_env):
    obs = spatial_env.reset(1)
    # The raw parts are float32 copies of the float64 simulator values, so agreement is to float32 precision.
    np.testing.assert_allclose(
        obs[keys.STATES], make_state(obs["eef_pos"], obs["eef_quat"], obs["gripper_qpos"]), atol=2e-6
    )
    assert obs["joint_pos"].shape == (7,)


def test_replaying_an_init_state_is_bit_identical(spatial_env):
    actions = random_chunks(seed=1, steps=10)
    runs = []
    for _ in range(2):
        obs0 = spatial_env.reset(7)
        r1 = spatial_env.step_chunk(actions[:5])
        r2 = spatial_env.step_chunk(actions[5:])
        runs.append([obs0, r1.obs, r2.obs])
    for a, b in zip(runs[0], runs[1], strict=True):
        for key in (keys.MAIN_IMAGES, keys.WRIST_IMAGES, keys.STATES):
            np.testing.assert_array_equal(a[key], b[key])
    # a different init state gives a different scene
    other = spatial_env.reset(8)
    assert not np.array_equal(other[keys.MAIN_IMAGES], runs[0][0][keys.MAIN_IMAGES])


def test_images_are_raw_render_rotated_180(spatial_env):
    env = spatial_env
    env.reset(2)
    inner = env.raw_env.env
    # Force a fresh sample of every observable at the current state (gate open) and render directly.
    env._gate.open = True
    raw = inner._get_observations(force_update=True)
    inner.sim._render_context_offscreen.gl_ctx.make_current()  # robosuite's render does not
    direct = inner.sim.render(camera_name="agentview", width=128, height=128)
    env._gate.open = False
    np.testing.assert_array_equal(raw["agentview_image"], direct)
    env._raw_obs = raw
    obs = env.observation()
    np.testing.assert_array_equal(obs[keys.MAIN_IMAGES], np.rot90(direct, 2))
    np.testing.assert_array_equal(obs[keys.WRIST_IMAGES], np.rot90(raw["robot0_eye_in_hand_image"], 2))
    # Upright check: MuJoCo's offscreen buffer starts at the bottom row, so the raw image's first row is
    # the bottom of the view (the table, close to the camera); after rotation the table is at the bottom:
    # the robot base and table edge in the lower part differ from the wall/floor at the top, and the
    # rotated bottom row equals the raw top row reversed.
    np.testing.assert_array_equal(obs[keys.MAIN_IMAGES][-1], direct[0][::-1])


def test_chunk_boundary_rendering_equals_raw_libero_every_step(spatial_env):
    """vlarl (soft reset, cameras gated) vs LIBERO's OffScreenRenderEnv (hard reset, renders every step)."""
    from libero.libero.envs import OffScreenRenderEnv

    from vlarl_cli.envs.libero.env import close_libero_env

    actions = random_chunks(seed=2, steps=15)
    trial = 3
    # A previous episode with the gripper closing first: a soft reset must not carry anything over
    # (robosuite keeps the gripper's speed-limited command across soft resets; env.py clears it).
    spatial_env.reset(5)
    closing = random_chunks(seed=9, steps=8)
    closing[:, -1] = 1.0
    spatial_env.step_chunk(closing)
    ours = [spatial_env.reset(trial)]
    for k in range(3):
        ours.append(spatial_env.step_chunk(actions[5 * k : 5 * k + 5]).obs)

    task = suites.get_task("libero_spatial", 0)
    ref = OffScreenRenderEnv(bddl_file_name=str(task.bddl_file), camera_heights=128, camera_widths=128)
    try:
        ref.seed(7)
        ref.reset()
        o = ref.set_init_state(suites.init_states("libero_spatial", 0)[trial])
        for _ in range(10):
            o, _, _, _ = ref.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))
        theirs = [o]
        for i in range(15):
            o, _, _, _ = ref.step(actions[i])
            if i % 5 == 4:
                theirs.append(o)
    finally:
        close_libero_env(ref)  # frees its GL objects in its own context, not in spatial_env's
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a[keys.MAIN_IMAGES], b["agentview_image"][::-1, ::-1])
        np.testing.assert_array_equal(a[keys.WRIST_IMAGES], b["robot0_eye_in_hand_image"][::-1, ::-1])
        np.testing.assert_array_equal(
            a[keys.STATES], make_state(b["robot0_eef_pos"], b["robot0_eef_quat"], b["robot0_gripper_qpos"])
        )


def test_nan_or_bad_shape_fails_episode_and_env_survives(spatial_env):
    env = spatial_env
    env.reset(4)
    env.step_chunk(noop_chunk(3))
    bad = noop_chunk(5)
    bad[2, 1] = np.nan
    result = env.step_chunk(bad)
    assert result.dones.all() and result.executed == 0
    assert "NaN" in result.episode["error"] and "chunk step 2" in result.episode["error"]
    assert result.episode[keys.EPISODE_LEN] == 3 and result.episode[keys.SUCCESS_ONCE] is False
    assert not env.episode_active
    env.reset(4)
    result = env.step_chunk(np.zeros((4, 6)))
    assert "shape [4, 6]" in result.episode["error"]
    env.reset(4)  # still usable
    assert env.step_chunk(noop_chunk(2)).executed == 2


def test_step_before_reset_is_a_clear_error(spatial_env):
    from vlarl_cli.errors import EnvError

    spatial_env.reset(0)
    spatial_env.step_chunk(np.full((1, 7), np.nan))  # ends the episode
    with pytest.raises(EnvError, match="reset"):
        spatial_env.step_chunk(noop_chunk(1))


def test_video_capture_records_both_cameras_every_step(spatial_env):
    """Also: a second simulator in the same process must not disturb the first one's rendering
    (robosuite renders into whichever GL context is current; env.py makes its own current)."""
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv

    before = spatial_env.reset(0)
    env = LiberoEnv(
        "libero_spatial", 0, EnvOptions(cameras=("main",), record_video=True, max_episode_steps=6)
    )
    try:
        obs = env.reset(0)
        assert keys.WRIST_IMAGES not in obs  # the policy asked for the main camera only
        results = [env.step_chunk(noop_chunk(3)) for _ in range(2)]
        frames = env.pop_frames()
        assert set(frames) == {"main", "wrist"}
        assert frames["main"].shape == (7, 128, 128, 3) == frames["wrist"].shape  # first obs + 6 steps
        np.testing.assert_array_equal(frames["main"][0], obs[keys.MAIN_IMAGES])
        np.testing.assert_array_equal(frames["main"][3], results[0].obs[keys.MAIN_IMAGES])
        assert env.pop_frames() == {}
        during = spatial_env.reset(0)  # the other env's GL context was the current one here
    finally:
        env.close()
    after = spatial_env.reset(0)  # ... and here it has been freed
    for obs in (during, after):
        np.testing.assert_array_equal(obs[keys.MAIN_IMAGES], before[keys.MAIN_IMAGES])
        np.testing.assert_array_equal(obs[keys.WRIST_IMAGES], before[keys.WRIST_IMAGES])


def test_no_frames_kept_when_not_recording(spatial_env):
    spatial_env.reset(0)
    spatial_env.step_chunk(noop_chunk(2))
    assert spatial_env.pop_frames() == {}


def test_truncation_inside_a_chunk_renders_the_final_observation(spatial_env):
    import dataclasses

    env = spatial_env
    env.options = dataclasses.replace(env.options, max_episode_steps=4)
    try:
        env.reset(6)
        renders = env.render_count
        result = env.step_chunk(noop_chunk(6))  # the limit is reached at step 4 of 6
        assert result.executed == 4 and result.truncated[3] and result.dones[3:].all()
        assert env.render_count - renders == 2  # one control step rendered, two cameras
        # same final observation as a chunk that ends exactly at the limit (rendered as a chunk boundary)
        env.reset(6)
        exact = env.step_chunk(noop_chunk(4))
        assert exact.executed == 4
        for key in (keys.MAIN_IMAGES, keys.WRIST_IMAGES, keys.STATES):
            np.testing.assert_array_equal(result.obs[key], exact.obs[key])
    finally:
        env.options = dataclasses.replace(env.options, max_episode_steps=None)
