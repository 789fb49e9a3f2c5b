"""Record the scripted expert's actions for the RLinf conformance test (run once; the npz is committed).

    PYTHONPATH=src python tests/conformance/rlinf_env/record_expert.py

The episode is the one RLinf's LiberoEnv starts first in env 0 with ``seed`` = SEED and ``task_id_filter`` =
TASKS on libero_spatial, N_ENVS envs: the reset-state ids ``valid[default_rng(SEED).integers(0, len(valid), (N,))]``
(``_get_random_reset_state_ids``; ``valid`` = the filter's tasks' ids, task-major, sorted), env 0's env seed
``SEED * N + 0`` (``_reconfigure``: ``env.seed(seed * len(env_idx))``, ``+ i`` per env), 15 settle steps with the
gripper open. Physics only (no cameras): actions do not depend on images.

The expert is vlarl's PickPlaceExpert with shorter, faster moves (``QuickExpert``: three times the position gain,
a lower, fixed carry height, looser tolerances, the bowl set down until it touches the plate): it succeeds at
step 52 instead of about 160, so the conformance episodes (and the test) are short.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SEED = 1
TASKS = (0, 1)
N_ENVS = 2  # in each of the test's env objects (with and without auto-reset)
TRIALS = 50
# the expert keeps acting after its success (it presses the bowl onto the plate; holding still, with the gripper
# open or closed, lost the contact a step later), up to the test's step limit, and the success must persist
RECORD_UNTIL = 64
HERE = Path(__file__).parent


def first_rlinf_ids(seed: int, tasks: tuple[int, ...], num_envs: int) -> np.ndarray:
    valid = np.array([t * TRIALS + i for t in sorted(set(tasks)) for i in range(TRIALS)])
    return valid[np.random.default_rng(seed).integers(low=0, high=len(valid), size=(num_envs,))]


def quick_expert(inner_env: Any) -> Any:
    from vlarl_cli.envs.libero.expert import _CLOSE, _OPEN, PickPlaceExpert

    class QuickExpert(PickPlaceExpert):
        def _move(self, target: np.ndarray, gripper: float) -> np.ndarray:
            action = super()._move(target, gripper)
            if self.phase != "lower":  # the bowl is set down gently (a fast one bounces: the success flickers)
                action[:3] = np.clip(3.0 * action[:3], -1.0, 1.0)  # saturates at ~3 cm of error instead of ~8
            return action

        def act(self) -> np.ndarray:
            self.phase_steps += 1
            obj = self._body_pos(self.obj)
            grasp, eef = obj + self.grasp_offset, self._eef_pos()
            if self.phase == "above":
                target = grasp + np.array([0, 0, 0.06])
                if np.linalg.norm(target - eef) < 0.03 or self.phase_steps > 40:
                    self._next("descend")
                return self._move(target, _OPEN)
            if self.phase == "descend":
                target = grasp + np.array([0, 0, 0.01])
                if abs(target[2] - eef[2]) < 0.015 or self.phase_steps > 30:
                    self._next("close")
                return self._move(target, _OPEN)
            if self.phase == "close":
                if self.phase_steps > 6:
                    self._next("lift")
                    self.carry_z = max(self._target_pos()[2], obj[2]) + 0.08
                return self._move(eef, _CLOSE)
            place = self._target_pos() + (eef - obj) * np.array([1, 1, 0])
            if self.phase == "lift":
                if abs(self.carry_z - eef[2]) < 0.04 or self.phase_steps > 30:
                    self._next("carry")
                return self._move(np.array([eef[0], eef[1], self.carry_z]), _CLOSE)
            if self.phase == "carry":
                target = np.array([place[0], place[1], self.carry_z])
                if np.linalg.norm((target - eef)[:2]) < 0.03 or self.phase_steps > 50:
                    self._next("lower")
                return self._move(target, _CLOSE)
            return self._move(np.array([place[0], place[1], place[2] + (eef[2] - obj[2]) - 0.01]), _CLOSE)

    return QuickExpert(inner_env)




def main() -> None:
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv

    ids = first_rlinf_ids(SEED, TASKS, N_ENVS)
    task, trial = divmod(int(ids[0]), TRIALS)
    # ignore_terminations: the episode goes on after the success, to check that it persists
    options = EnvOptions(cameras=(), protocol="rlinf", seed=SEED, max_episode_steps=RECORD_UNTIL,
                         ignore_terminations=True)
    env = LiberoEnv("libero_spatial", task, options)
    try:
        env.reset(trial, seed=SEED * N_ENVS)
        expert = quick_expert(env.raw_env.env)
        actions, success = [], []
        for _ in range(RECORD_UNTIL):
            actions.append(expert.act())
            success.append(bool(env.step_chunk(actions[-1][None]).success[0]))
    finally:
        env.close()
    first = success.index(True) + 1
    assert all(success[first - 1:]), f"the success at step {first} did not persist: {success}"
    np.savez(HERE / "expert_actions.npz", actions=np.asarray(actions, np.float64), success_step=first, seed=SEED,
             task_ids=np.array(TASKS), first_ids=ids)
    print(f"env 0 (task {task}, trial {trial}) of first ids {ids.tolist()}: success at step {first}, kept to "
          f"step {RECORD_UNTIL}")


if __name__ == "__main__":
    main()
