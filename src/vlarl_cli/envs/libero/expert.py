"""A small scripted pick-and-place expert for LIBERO tasks whose goal is ``on``/``in`` one object.

Used by the tests to prove that the success and reward path works end to end (a policy that never
succeeds cannot tell a broken reward from a bad policy). Approach from REFERENCE.md section 1: read the
goal predicate from ``env.env.parsed_problem['goal_state']``, read object poses from the simulator, and
drive the end effector with proportional control, gripper pointing down. Bowls and plates are grasped at
the rim, with the fingers straddling it; the grasp side is the one farthest from neighbouring objects.

Only single ``on``/``in`` goals are handled (libero_spatial, most of libero_object); anything else raises
EnvError. Actions are in LIBERO's convention (gripper -1 = open, +1 = close).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vlarl_cli.envs.libero.conventions import quat_to_axis_angle
from vlarl_cli.errors import EnvError

# Control gains: robosuite's OSC_POSE maps an action of 1.0 to 5 cm / 0.5 rad per control step.
_POS_GAIN = 12.0  # action per metre of error (saturates at ~8 cm)
_ROT_GAIN = 2.0  # action per radian of error
_OPEN, _CLOSE = -1.0, 1.0


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of (x, y, z, w) quaternions."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ]
    )


def _quat_conj(q: np.ndarray) -> np.ndarray:
    return np.array([-q[0], -q[1], -q[2], q[3]])


def goal_positions(inner_env: Any) -> np.ndarray:
    """World positions of the single on/in goal's object and target, ``[6]`` float32 (``obs_mode: state``).

    The target is a body (plate, basket) or a region site (``basket_1_contain_region``), as in the expert.
    """
    goals = inner_env.parsed_problem["goal_state"]
    if len(goals) != 1 or goals[0][0].lower() not in ("on", "in"):
        raise EnvError(f"obs_mode state needs one on/in goal (an object and its target); this task has {goals}.",
                       fix="Use obs_mode rgb for this task (libero_spatial and libero_object tasks have one).")
    _, obj, target = goals[0]
    return np.concatenate([named_position(inner_env, obj), named_position(inner_env, target)]).astype(np.float32)


def named_position(inner_env: Any, name: str) -> np.ndarray:
    """World position of an object or fixture body, or else of an object site (a region such as
    ``basket_1_contain_region``), from the simulator."""
    sim = inner_env.sim
    registry = {**inner_env.objects_dict, **inner_env.fixtures_dict}
    if name in registry:
        return np.array(sim.data.body_xpos[sim.model.body_name2id(registry[name].root_body)])
    site = inner_env.object_sites_dict[name]
    return np.array(sim.data.site_xpos[sim.model.site_name2id(site.name)])


class PickPlaceExpert:
    """Closed-loop scripted expert; call :meth:`act` once per control step.

    Args:
        inner_env: the robosuite/LIBERO problem env (``LiberoEnv.raw_env.env``), after reset + init state.
    """

    def __init__(self, inner_env: Any) -> None:
        self.env = inner_env
        goals = inner_env.parsed_problem["goal_state"]
        if len(goals) != 1 or goals[0][0].lower() not in ("on", "in"):
            raise EnvError(f"The scripted expert handles one on/in goal, this task has {goals}.")
        _, self.obj, self.target = goals[0]
        self.sim = inner_env.sim
        self.phase = "above"
        self.phase_steps = 0
        self.hold_quat = self._eef_quat()
        self.grasp_offset = self._choose_grasp_offset()

    # ------------------------------------------------------------------ poses

    def _body_pos(self, name: str) -> np.ndarray:
        return named_position(self.env, name)

    def _target_pos(self) -> np.ndarray:
        return named_position(self.env, self.target)

    def _eef_pos(self) -> np.ndarray:
        return np.array(self.sim.data.site_xpos[self.sim.model.site_name2id("gripper0_grip_site")])

    def _eef_quat(self) -> np.ndarray:
        return np.array(self.env._eef_xquat)  # (x, y, z, w), robosuite's property

    def _obj_radius(self) -> float:
        # Horizontal half-size of the object's geoms; bowls/plates are grasped at the rim.
        model = self.sim.model
        bid = model.body_name2id(self.env.objects_dict[self.obj].root_body)
        sizes = [model.geom_size[g][1] for g in range(model.ngeom) if model.geom_bodyid[g] == bid]
        return float(max(sizes)) if sizes else 0.0

    def _choose_grasp_offset(self) -> np.ndarray:
        """Offset from the object's centre along world y (Panda fingers close along y when pointing down)."""
        radius = self._obj_radius()
        if radius < 0.035:  # small objects: grasp at the centre
            return np.zeros(3)
        rim = radius - 0.012
        obj = self._body_pos(self.obj)
        others = [
            self._body_pos(n) for n in self.env.objects_dict if n not in (self.obj,) and n != self.target
        ]
        best, best_clear = np.zeros(3), -1.0
        for sign in (1.0, -1.0):
            offset = np.array([0.0, sign * rim, 0.0])
            point = obj + offset
            clear = float(min((np.linalg.norm((point - o)[:2]) for o in others), default=1.0))
            if clear > best_clear:
                best, best_clear = offset, clear
        return best

    # ------------------------------------------------------------------ control

    def _move(self, target: np.ndarray, gripper: float) -> np.ndarray:
        err = target - self._eef_pos()
        rot_err = quat_to_axis_angle(_quat_mul(self.hold_quat, _quat_conj(self._eef_quat())))
        action = np.zeros(7)
        action[:3] = np.clip(_POS_GAIN * err, -1.0, 1.0)
        action[3:6] = np.clip(_ROT_GAIN * rot_err, -1.0, 1.0)
        action[6] = gripper
        return action

    def _next(self, phase: str) -> None:
        self.phase, self.phase_steps = phase, 0

    def act(self) -> np.ndarray:
        """The next 7-d action (LIBERO convention)."""
        self.phase_steps += 1
        obj = self._body_pos(self.obj)
        grasp = obj + self.grasp_offset
        eef = self._eef_pos()
        if self.phase == "above":
            target = grasp + np.array([0, 0, 0.12])
            if np.linalg.norm(target - eef) < 0.02 or self.phase_steps > 40:
                self._next("descend")
            return self._move(target, _OPEN)
        if self.phase == "descend":
            target = grasp + np.array([0, 0, 0.01])
            if abs(target[2] - eef[2]) < 0.015 or self.phase_steps > 30:
                self._next("close")
            return self._move(target, _OPEN)
        if self.phase == "close":
            if self.phase_steps > 10:
                self._next("lift")
            return self._move(eef, _CLOSE)
        goal = self._target_pos()
        carry_z = max(goal[2], obj[2]) + 0.20
        if self.phase == "lift":
            target = np.array([eef[0], eef[1], carry_z])
            if abs(target[2] - eef[2]) < 0.03 or self.phase_steps > 30:
                self._next("carry")
            return self._move(target, _CLOSE)
        # Place the grasped object's centre over the goal: the eef keeps the grasp offset.
        place = goal + (eef - obj) * np.array([1, 1, 0])
        if self.phase == "carry":
            target = np.array([place[0], place[1], carry_z])
            if np.linalg.norm((target - eef)[:2]) < 0.02 or self.phase_steps > 50:
                self._next("lower")
            return self._move(target, _CLOSE)
        if self.phase == "lower":
            target = np.array([place[0], place[1], goal[2] + (eef[2] - obj[2]) + 0.04])
            if abs(target[2] - eef[2]) < 0.02 or self.phase_steps > 30:
                self._next("release")
            return self._move(target, _CLOSE)
        if self.phase == "release":
            if self.phase_steps > 8:
                self._next("retreat")
            return self._move(eef, _OPEN)
        return self._move(np.array([eef[0], eef[1], carry_z]), _OPEN)


def sample_init_state(env: Any, seed: int) -> np.ndarray:
    """A fresh initial simulator state of ``env``'s current task (a :class:`LiberoEnv`), drawn by the task's
    own placement sampler under ``seed``: LIBERO's reset places the objects by sampling their BDDL regions
    (the 50 shipped init states were drawn the same way), so these states come from the same distribution
    but are not the evaluation's. The flattened MuJoCo state is what ``LiberoEnv.reset(init_state=...)`` takes.
    """
    raw = env.raw_env
    raw.seed(int(seed))
    raw.reset()
    return np.asarray(raw.get_sim_state(), dtype=np.float64).copy()
