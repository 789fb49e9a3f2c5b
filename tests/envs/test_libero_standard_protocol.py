"""The ``standard`` protocol against openpi's LIBERO evaluator, rebuilt from the facts of its
``examples/libero/main.py`` (the client / server are not needed for the env side):

- one ``OffScreenRenderEnv`` per task at 256 px, ``env.seed(7)`` once right after building it;
- per trial i (in order, same env): ``env.reset()`` (hard), ``obs = env.set_init_state(init_states[i])``,
  ``num_steps_wait = 10`` steps of ``[0, 0, 0, 0, 0, 0, -1]``;
- then up to ``max_steps`` (220 on libero_spatial) policy steps; whenever the action plan is empty the
  policy sees ``img[::-1, ::-1]`` of both cameras, resized with padding to 224 (PIL bilinear), and the
  8-d state, and the first ``replan_steps = 5`` actions of its chunk are queued; ``done`` = success ends
  the episode.

The reference loop below drives the scripted expert on trial 0 (an episode that succeeds) and a fixed
random script on trial 1 (which starts from the random stream trial 0's reset left behind). vlarl's env
with the protocol's defaults (seed once per task, hard resets) and chunks of 5 must show the same
observations at every replan point, bit for bit, and end trial 0 at the same step with success; a
fresh simulator asked for trial 1 directly must replay the stream and show trial 1's observations too.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vlarl_cli import keys
from vlarl_cli.envs.libero import suites
from vlarl_cli.envs.libero.conventions import quat_to_axis_angle

pytestmark = pytest.mark.libero

DUMMY = [0.0] * 6 + [-1.0]
WAIT, REPLAN, MAX_STEPS, RES = 10, 5, 220, 256


def openpi_resize_with_pad(img: np.ndarray, size: int) -> np.ndarray:
    """openpi_client image_tools.resize_with_pad for one uint8 image: scale to fit, bilinear, zero pad."""
    h, w = img.shape[:2]
    if (h, w) == (size, size):
        return img
    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    resized = Image.fromarray(img).resize((rw, rh), resample=Image.BILINEAR)
    canvas = Image.new(resized.mode, (size, size), 0)
    canvas.paste(resized, (max(0, (size - rw) // 2), max(0, (size - rh) // 2)))
    return np.asarray(canvas)


def openpi_episode(env, init_state, act, max_steps: int) -> tuple[list[dict], list[np.ndarray], bool, int]:
    """openpi's loop with ``act()`` standing in for ``action_plan.popleft()`` of the policy's chunk."""
    env.reset()
    obs = env.set_init_state(init_state)
    seen, actions, plan_left, done, t = [], [], 0, False, 0
    while t < max_steps + WAIT:
        if t < WAIT:
            obs, _, done, _ = env.step(DUMMY)
            t += 1
            continue
        if plan_left == 0:  # the policy is queried: record what it sees
            img = np.ascontiguousarray(obs["agentview_image"][::-1, ::-1])
            wrist = np.ascontiguousarray(obs["robot0_eye_in_hand_image"][::-1, ::-1])
            state = np.concatenate([obs["robot0_eef_pos"], quat_to_axis_angle(obs["robot0_eef_quat"]),
                                    obs["robot0_gripper_qpos"]])
            seen.append({"main": img, "wrist": wrist, "state": state})
            plan_left = REPLAN
        action = act(len(actions))
        actions.append(action)
        plan_left -= 1
        obs, _, done, _ = env.step(action.tolist())
        if done:
            break
        t += 1
    return seen, actions, bool(done), len(actions)


def test_standard_protocol_equals_openpi_evaluator(libero_ready):
    from libero.libero.envs import OffScreenRenderEnv

    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv, close_libero_env
    from vlarl_cli.envs.libero.expert import PickPlaceExpert
    from vlarl_cli.policies.pi0.processing import resize_with_pad

    task = suites.get_task("libero_spatial", 0)
    init = suites.init_states("libero_spatial", 0)
    ref = OffScreenRenderEnv(bddl_file_name=str(task.bddl_file), camera_heights=RES, camera_widths=RES)
    try:
        ref.seed(7)  # once, right after building the task's env
        expert: list = []

        def expert_act(i: int) -> np.ndarray:
            if not expert:
                expert.append(PickPlaceExpert(ref.env))
            return np.asarray(expert[0].act(), np.float64)

        seen0, actions0, done0, steps0 = openpi_episode(ref, init[0], expert_act, MAX_STEPS)
        script = np.random.default_rng(1).uniform(-0.5, 0.5, size=(15, 7))
        seen1, actions1, done1, _ = openpi_episode(ref, init[1], lambda i: script[i], 15)
    finally:
        close_libero_env(ref)
    assert done0 and steps0 < MAX_STEPS and not done1

    env = LiberoEnv("libero_spatial", 0, EnvOptions(resolution=RES, protocol="standard"))
    try:
        assert (env.seeding, env.hard_reset, env.settle_steps, env.max_episode_steps) == (
            "once_per_task", True, WAIT, MAX_STEPS)
        for trial, seen, actions in ((0, seen0, np.array(actions0)), (1, seen1, np.array(actions1))):
            ours = [env.reset(trial)]
            results = []
            for k in range(len(seen) - 1 if trial == 0 else len(seen)):
                results.append(env.step_chunk(actions[REPLAN * k : REPLAN * (k + 1)]))
                ours.append(results[-1].obs)
            if trial == 0:  # the last (partial) chunk ends the episode with success at openpi's step
                last = env.step_chunk(actions[REPLAN * (len(seen) - 1) :])
                assert last.episode is not None and last.episode[keys.SUCCESS_ONCE]
                assert last.episode[keys.EPISODE_LEN] == steps0 and last.success[last.executed - 1]
                assert not any(r.success.any() for r in results)
            # trial 1 ran all 15 actions; openpi's policy saw the observations at steps 0, 5 and 10
            for k, (a, b) in enumerate(zip(ours[: len(seen)], seen, strict=True)):
                where = f"trial {trial}, replan point {k}"
                np.testing.assert_array_equal(a[keys.MAIN_IMAGES], b["main"], err_msg=where)
                np.testing.assert_array_equal(a[keys.WRIST_IMAGES], b["wrist"], err_msg=where)
                np.testing.assert_array_equal(a[keys.STATES], b["state"].astype(np.float32), err_msg=where)
                # what pi0 sees: our processing's resize-with-pad equals openpi's
                got = resize_with_pad(a[keys.MAIN_IMAGES][None], 224, 224)[0].numpy()
                np.testing.assert_array_equal(got, openpi_resize_with_pad(b["main"], 224), err_msg=where)
    finally:
        env.close()
    # out of order (a resumed evaluation, re-simulation): a fresh simulator replays the stream to trial 1
    fresh = LiberoEnv("libero_spatial", 0, EnvOptions(resolution=RES, protocol="standard"))
    try:
        got = fresh.reset(1)
        np.testing.assert_array_equal(got[keys.MAIN_IMAGES], seen1[0]["main"])
        np.testing.assert_array_equal(got[keys.WRIST_IMAGES], seen1[0]["wrist"])
        later = fresh.step_chunk(np.array(actions1[:REPLAN])).obs
        np.testing.assert_array_equal(later[keys.MAIN_IMAGES], seen1[1]["main"])
    finally:
        fresh.close()
