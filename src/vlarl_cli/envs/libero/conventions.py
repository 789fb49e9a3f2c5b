"""Observation and action conventions between policies and LIBERO.

LIBERO's action is 7-d: delta end-effector (x, y, z, roll, pitch, yaw) in [-1, 1] for robosuite's
OSC_POSE controller, plus a gripper command where -1 = open and +1 = close (REFERENCE.md section 1).
The env takes actions in that convention only: each policy family converts its own gripper output on the
policy side (``policies/gripper.py``, the one home of gripper conventions). Pure numpy, no simulator
import.
"""

from __future__ import annotations

import numpy as np

ACTION_DIM = 7
STATE_DIM = 8

#: The no-op action LIBERO evaluators send during settle steps: no motion, gripper open.
NOOP_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float32)


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """Axis-angle (3) of a unit quaternion given as (x, y, z, w), robosuite's order.

    Same formula as robosuite ``utils.transform_utils.quat2axisangle`` (used by openpi and RLinf for
    the LIBERO state): angle = 2 acos(w), axis = xyz / sqrt(1 - w^2), zero vector when the angle is ~0.
    Works on ``[..., 4]``.
    """
    q = np.asarray(quat, dtype=np.float64)
    w = np.clip(q[..., 3], -1.0, 1.0)
    den = np.sqrt(1.0 - w * w)
    angle = 2.0 * np.arccos(w)
    safe = den > 1e-8  # robosuite uses math.isclose(den, 0.0) -> zero rotation
    scale = np.where(safe, angle / np.where(safe, den, 1.0), 0.0)
    return q[..., :3] * scale[..., None]


def make_state(eef_pos: np.ndarray, eef_quat: np.ndarray, gripper_qpos: np.ndarray) -> np.ndarray:
    """The 8-d policy state: eef pos (3) + axis-angle of eef quat (3) + gripper qpos (2), float32.

    Shapes: ``[..., 3], [..., 4], [..., 2] -> [..., 8]``.
    """
    return np.concatenate(
        [np.asarray(eef_pos, np.float64), quat_to_axis_angle(eef_quat), np.asarray(gripper_qpos, np.float64)],
        axis=-1,
    ).astype(np.float32)


def rotate_180(image: np.ndarray) -> np.ndarray:
    """Rotate ``[..., H, W, C]`` images by 180 degrees (``img[::-1, ::-1]``), as every LIBERO evaluator does.

    Returns a contiguous copy (the raw render buffer is reused by robosuite).
    """
    return np.ascontiguousarray(np.asarray(image)[..., ::-1, ::-1, :])
