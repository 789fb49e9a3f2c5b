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
