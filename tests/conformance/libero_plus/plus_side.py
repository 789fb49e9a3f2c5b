"""Run LIBERO-Plus's own env the README's way and dump what an evaluator sees, for the conformance test beside
vlarl's worker. Runs in LIBERO-Plus's environment (``vlarl setup-sim libero_plus``; no vlarl, no torch).

    .../sims/libero_plus/bin/python tests/conformance/libero_plus/plus_side.py OUT.npz --bddl FILE \
        --init FILE.pruned_init --actions ACTIONS.npy --resolution 128

The sequence is LIBERO's evaluation loop that LIBERO-Plus's README keeps (openpi examples/libero/main.py):
``OffScreenRenderEnv(bddl_file_name=...)`` (LIBERO-Plus's, which decodes the camera, robot and noise from the
file name), ``env.seed(7)`` once, ``reset()``, ``set_init_state(init_states[0])``, 10 settle steps of
``[0,0,0,0,0,0,-1]``, then the given actions. The init states are the base task's ``.pruned_init`` (a
``torch.save`` zip of one numpy array), unpickled with numpy alone since this environment has no torch.
"""

from __future__ import annotations

import argparse
import io
import pickle
import zipfile

import numpy as np


def load_states(path: str) -> np.ndarray:
    with zipfile.ZipFile(path) as archive:
        data = archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))
    return np.asarray(pickle.load(io.BytesIO(data)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--bddl", required=True)
    parser.add_argument("--init", required=True)
    parser.add_argument("--actions", required=True)
    parser.add_argument("--resolution", type=int, default=128)
    args = parser.parse_args()

    from libero.libero.envs import OffScreenRenderEnv

    env = OffScreenRenderEnv(bddl_file_name=args.bddl, camera_heights=args.resolution, camera_widths=args.resolution)
    env.seed(7)
    env.reset()
    obs = env.set_init_state(load_states(args.init)[0])
    for _ in range(10):
        obs, _, _, _ = env.step([0, 0, 0, 0, 0, 0, -1])
    out = {"first_main": obs["agentview_image"], "first_wrist": obs["robot0_eye_in_hand_image"],
           "language": np.asarray(env.language_instruction), "robot": np.asarray(type(env.robots[0].robot_model).__name__)}
    rewards, successes = [], []
    for action in np.load(args.actions):
        obs, reward, _, _ = env.step(action.tolist())
        rewards.append(reward)
        successes.append(env.check_success())
    out.update(last_main=obs["agentview_image"], last_wrist=obs["robot0_eye_in_hand_image"],
               rewards=np.asarray(rewards), successes=np.asarray(successes))
    env.close()
    np.savez_compressed(args.out, **out)


if __name__ == "__main__":
    main()
