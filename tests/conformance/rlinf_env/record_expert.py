"""Record the scripted expert's actions for the RLinf conformance test (run once; the npz is committed).

    PYTHONPATH=src python tests/conformance/rlinf_env/record_expert.py

The episode is the one RLinf's LiberoEnv starts first with ``seed`` = SEED and ``task_id_filter`` = [0]
on libero_spatial: reset-state id ``default_rng(SEED).integers(0, 50, (1,))[0]`` (its
``_get_random_reset_state_ids``), env seed SEED (``seed * 1 + 0``), 15 settle steps with the gripper open.
Physics only (no cameras): actions do not depend on images.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SEED = 1
HERE = Path(__file__).parent


def first_rlinf_trial(seed: int) -> int:
    return int(np.random.default_rng(seed).integers(low=0, high=50, size=(1,))[0])


def main() -> None:
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv
    from vlarl_cli.envs.libero.expert import PickPlaceExpert

    trial = first_rlinf_trial(SEED)
    env = LiberoEnv("libero_spatial", 0, EnvOptions(cameras=(), protocol="rlinf", seed=SEED, max_episode_steps=240))
    try:
        env.reset(trial, seed=SEED)
        expert = PickPlaceExpert(env.raw_env.env)
        actions = []
        while env.episode_active:
            a = expert.act()
            actions.append(a)
            result = env.step_chunk(a[None])
        assert result.episode is not None and result.episode["success_once"], "the expert failed"
    finally:
        env.close()
    np.savez(HERE / "expert_actions.npz", actions=np.asarray(actions, np.float64), seed=SEED, trial=trial)
    print(f"trial {trial}: {len(actions)} actions, success")


if __name__ == "__main__":
    main()
