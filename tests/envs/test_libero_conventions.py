"""Pure-numpy checks of conventions, protocols and init-state assignment (no simulator)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vlarl_cli.envs.libero import conventions as conv
from vlarl_cli.envs.libero.protocol import PROTOCOLS, get_protocol
from vlarl_cli.envs.vector import VectorEnvSpec, draw_group_states, group_reset_state_ids
from vlarl_cli.errors import EnvError


def test_quat_to_axis_angle_hand_values():
    s = math.sin(math.pi / 4)
    # 90 degrees about z, quaternion (x, y, z, w)
    np.testing.assert_allclose(
        conv.quat_to_axis_angle(np.array([0, 0, s, s])), [0, 0, math.pi / 2], atol=1e-12
    )
    # 180 degrees about x (LIBERO's gripper-down orientation)
    np.testing.assert_allclose(conv.quat_to_axis_angle(np.array([1.0, 0, 0, 0])), [math.pi, 0, 0], atol=1e-12)
    # identity -> zero vector, no division by zero
    np.testing.assert_array_equal(conv.quat_to_axis_angle(np.array([0, 0, 0, 1.0])), [0, 0, 0])


def test_quat_to_axis_angle_matches_robosuite_loop():
    tu = pytest.importorskip("robosuite.utils.transform_utils")
    rng = np.random.default_rng(0)
    quats = rng.normal(size=(20, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    quats[quats[:, 3] < 0] *= -1  # robosuite's formula assumes w >= 0 for the short rotation
    vectorised = conv.quat_to_axis_angle(quats)
    loop = np.stack([tu.quat2axisangle(q.copy()) for q in quats])
    np.testing.assert_allclose(vectorised, loop, atol=1e-9)


def test_make_state_layout():
    state = conv.make_state(np.array([1.0, 2.0, 3.0]), np.array([0, 0, 0, 1.0]), np.array([0.04, -0.04]))
    assert state.dtype == np.float32 and state.shape == (8,)
    np.testing.assert_allclose(state, [1, 2, 3, 0, 0, 0, 0.04, -0.04], atol=1e-7)


def test_rotate_180_is_rot90_twice():
    img = np.arange(2 * 3 * 4 * 3, dtype=np.uint8).reshape(2, 3, 4, 3)
    out = conv.rotate_180(img)
    for b in range(2):
        np.testing.assert_array_equal(out[b], np.rot90(img[b], 2))
    assert out.flags["C_CONTIGUOUS"]
    assert out[0, 0, 0, 0] == img[0, -1, -1, 0]  # top-left pixel comes from bottom-right, channels kept


def test_protocol_tables():
    std, rlinf = get_protocol("standard"), get_protocol("rlinf")
    suites_ = ["libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"]
    assert [std.max_steps_for(s) for s in suites_] == [220, 280, 300, 520, 400]
    assert [rlinf.max_steps_for(s) for s in suites_] == [240, 240, 320, 512, 512]
    assert (std.settle_steps, rlinf.settle_steps, std.seed) == (10, 15, 7)
    assert std.settle_action == (0, 0, 0, 0, 0, 0, -1)
    assert set(PROTOCOLS) == {"standard", "rlinf"}
    with pytest.raises(EnvError, match='Did you mean "rlinf"'):
        get_protocol("rlnif")


def test_ordered_group_states_wrap_and_share():
    pool = np.array([0, 1, 2, 50, 51])
    ids, cursor = draw_group_states(pool, 3, "ordered", np.random.default_rng(0), 0)
    assert ids.tolist() == [0, 1, 2] and cursor == 3
    ids, cursor = draw_group_states(pool, 3, "ordered", np.random.default_rng(0), cursor)
    assert ids.tolist() == [50, 51, 0] and cursor == 1
    assert group_reset_state_ids(np.array([7, 9]), 3).tolist() == [7, 7, 7, 9, 9, 9]


def test_random_group_states_seeded():
    pool = np.arange(500)
    a, _ = draw_group_states(pool, 8, "random", np.random.default_rng(3), 0)
    b, _ = draw_group_states(pool, 8, "random", np.random.default_rng(3), 0)
    c, _ = draw_group_states(pool, 8, "random", np.random.default_rng(4), 0)
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    assert set(a.tolist()) <= set(pool.tolist())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_envs": 3, "num_workers": 2}, "num_workers"),
        ({"num_envs": 4, "group_size": 3}, "group_size"),
        ({"num_envs": 4, "stages": 3}, "stages"),
        ({"suite": "libero_spatail"}, 'Did you mean "libero_spatial"'),
        ({"task_ids": (10,)}, "out of range"),
        ({"resolution": 200}, "Resolution 200"),
        ({"cameras": ("front",)}, "Unknown camera"),
    ],
)
def test_spec_validation_messages(fields, message):
    spec = VectorEnvSpec(**{"suite": "libero_spatial", **fields})
    with pytest.raises(EnvError, match=message):
        spec.validate()


def test_protocol_facts_per_upstream():
    std, rlinf = get_protocol("standard"), get_protocol("rlinf")
    # openpi examples/libero/main.py: seed 7 once per task, replan 5, Pi0Config num_steps 10; OFT: seed 0, 8
    assert (std.seeding, std.hard_reset, std.eval_order, std.redraw_on_auto_reset) == (
        "once_per_task", True, "task_major", False)
    assert (std.seed_for("pi0"), std.seed_for("openpi"), std.seed_for("openvla_oft"), std.seed_for("gr00t")) == (7, 7, 0, 7)
    assert (std.family("pi05").replan_steps, std.family("pi05").denoising_steps) == (5, 10)
    assert std.family("openvla_oft").replan_steps == 8 and std.family("gr00t") is None
    # RLinf 0.3.0 LiberoEnv: seeded before every reset, trial-major eval, new ids on auto-reset
    assert (rlinf.seeding, rlinf.eval_order, rlinf.redraw_on_auto_reset, rlinf.seed) == (
        "every_reset", "trial_major", True, 0)


def test_rlinf_reset_seeds_and_reward_rule():
    from vlarl_cli.envs.libero.protocol import rlinf_reset_seeds, rlinf_step_reward

    # seed * len(env_idx) + i over the instance's envs (i = position, whichever envs reset)
    assert rlinf_reset_seeds(3, [0, 1, 2, 3], 4) == [12, 13, 14, 15]
    assert rlinf_reset_seeds(3, [1, 3], 2) == [7, 9]
    # use_step_penalty + use_rel_reward: -1 on the first step, then 0, +coef on success, 0 while it holds
    prev, got = 0.0, []
    for success in (False, False, True, True, False):
        r, prev = rlinf_step_reward(success, prev, reward_coef=5.0, step_penalty=1.0, use_rel_reward=True)
        got.append(r)
    assert got == [-1.0, 0.0, 5.0, 0.0, -5.0]
    # without rel reward: the level itself every step
    assert rlinf_step_reward(True, 0.0, reward_coef=5.0, step_penalty=1.0, use_rel_reward=False) == (4.0, 4.0)


def test_libero130_order_is_libero_benchmark_suites_order(libero_ready):
    """RLinf builds libero_130 from LIBERO's ``benchmark.libero_suites`` (de-duplicated by task name)."""
    from libero.libero import benchmark

    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.protocol import SUITE_ORDER

    assert tuple(benchmark.libero_suites[:5]) == SUITE_ORDER
    names = [t.name for s in benchmark.libero_suites for t in benchmark.task_maps[s].values()]
    assert len(dict.fromkeys(names)) == 130 == len(names)  # no duplicates: RLinf's de-duplication is a no-op
    assert [t.name for t in suites.suite_tasks("libero_130")] == names


def test_eval_plan_orders():
    from vlarl_cli.training.evaluation.plan import plan_episodes

    task_major = plan_episodes("libero_spatial", (0, 1), 2)
    trial_major = plan_episodes("libero_spatial", (0, 1), 2, "trial_major")
    assert [(k.task, k.trial) for k in task_major] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [(k.task, k.trial) for k in trial_major] == [(0, 0), (1, 0), (0, 1), (1, 1)]  # RLinf interleaved
