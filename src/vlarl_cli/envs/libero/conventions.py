"""Observation and action conventions between policies and LIBERO.

LIBERO's action is 7-d: delta end-effector (x, y, z, roll, pitch, yaw) in [-1, 1] for robosuite's
OSC_POSE controller, plus a gripper command where -1 = open and +1 = close (REFERENCE.md section 1).
Model families were trained on datasets that store the gripper differently; the helpers below convert
both ways. Pure numpy, no simulator import.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from vlarl_cli.errors import EnvError, did_you_mean

ACTION_DIM = 7
STATE_DIM = 8

GripperConvention = Literal["libero", "unit_open1", "unit_close1", "signed_open1"]

#: What each convention means (values the POLICY emits for the gripper dimension).
GRIPPER_CONVENTIONS: dict[str, str] = {
    "libero": "[-1, 1], -1 = open, +1 = close (LIBERO native; no conversion)",
    "unit_open1": "[0, 1], 1 = open, 0 = close",
    "unit_close1": "[0, 1], 1 = close, 0 = open",
    "signed_open1": "[-1, 1], +1 = open, -1 = close",
}

#: Default gripper convention per model family, from each family's LIBERO evaluator:
#: - pi0 / pi0.5 (openpi examples/libero/main.py): actions are sent to env.step unchanged.
#: - OpenVLA-OFT (openvla-oft experiments/robot/libero/run_libero_eval.py): normalize_gripper_action
#:   ([0,1] -> [-1,1], binarised) then invert_gripper_action (x -1), i.e. the model emits 1 = open.
#: - GR00T N1.5 / N1.6 as RLinf runs them on LIBERO (rlinf/models/embodiment/gr00t/simulation_io.py,
#:   normalize_gripper_action): y = sign(1 - 2g), i.e. the model emits [0, 1] with 1 = open. (vlarl's GR00T
#:   policy applies this itself and already returns LIBERO's convention.)
FAMILY_GRIPPER_CONVENTION: dict[str, GripperConvention] = {
    "pi0": "libero",
    "pi05": "libero",
    "openvla_oft": "unit_open1",
    "gr00t": "unit_open1",
}

#: The no-op action LIBERO evaluators send during settle steps: no motion, gripper open.
NOOP_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float32)


def _check_convention(convention: str) -> None:
    if convention not in GRIPPER_CONVENTIONS:
        raise EnvError(
            f'Unknown gripper convention "{convention}".{did_you_mean(convention, list(GRIPPER_CONVENTIONS))}',
            fix=f"Use one of {sorted(GRIPPER_CONVENTIONS)}.",
        )


def gripper_to_libero(values: np.ndarray, convention: str, *, binarize: bool = False) -> np.ndarray:
    """Convert gripper commands from a policy's convention to LIBERO's (-1 open, +1 close).

    Args:
        values: gripper commands, any shape (e.g. ``[batch, chunk]``).
        convention: one of :data:`GRIPPER_CONVENTIONS`.
        binarize: snap to {-1, +1} by sign after conversion, as OpenVLA/GR00T evaluators do
            (an exact 0 maps to +1 = close, matching ``np.sign`` followed by their ``>= 0`` handling).

    Returns:
        float32 array of the same shape in LIBERO's convention.
    """
    _check_convention(convention)
    v = np.asarray(values, dtype=np.float32)
    if convention == "libero":
        out = v.copy()
    elif convention == "unit_open1":
        out = 1.0 - 2.0 * v  # 1 (open) -> -1, 0 (close) -> +1
    elif convention == "unit_close1":
        out = 2.0 * v - 1.0
    else:  # signed_open1
        out = -v
    if binarize:
        out = np.where(out >= 0, 1.0, -1.0).astype(np.float32)
    return out.astype(np.float32)


def gripper_from_libero(values: np.ndarray, convention: str) -> np.ndarray:
    """Inverse of :func:`gripper_to_libero` (without binarisation): LIBERO's gripper -> a policy's."""
    _check_convention(convention)
    v = np.asarray(values, dtype=np.float32)
    if convention == "libero":
        return v.copy()
    if convention == "unit_open1":
        return ((1.0 - v) / 2.0).astype(np.float32)
    if convention == "unit_close1":
        return ((v + 1.0) / 2.0).astype(np.float32)
    return (-v).astype(np.float32)


def actions_to_libero(
    actions: np.ndarray, convention: str = "libero", *, binarize_gripper: bool = False, clip: bool = True
) -> np.ndarray:
    """Convert policy actions ``[..., 7]`` to LIBERO actions: gripper convention, then clip to [-1, 1].

    Clipping mirrors robosuite's OSC controller, which clips its input to the action limits anyway; doing
    it here makes the logged action the executed one.
    """
    a = np.asarray(actions, dtype=np.float32)
    if a.shape[-1] != ACTION_DIM:
        raise EnvError(
            f"Actions have last dimension {a.shape[-1]}, LIBERO needs {ACTION_DIM} "
            "(dx, dy, dz, droll, dpitch, dyaw, gripper).",
            fix="Check the policy's action head / un-normalisation.",
        )
    out = a.copy()
    out[..., -1] = gripper_to_libero(a[..., -1], convention, binarize=binarize_gripper)
    if clip:
        out = np.clip(out, -1.0, 1.0)
    return out


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
