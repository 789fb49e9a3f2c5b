"""RLinf's own side of the conformance test: run by ``.reference/rlinf_env/bin/python`` (never imports vlarl).

    python rlinf_side.py <actions.npz> <out.npz> <seed> <max_episode_steps> <resolution> [<auto_reset 1|0>]

Builds RLinf 0.3.0's ``LiberoEnv`` (libero_spatial, ``task_id_filter`` [0], one env, training mode:
``auto_reset``, ``use_fixed_reset_state_ids``, random reset-state ids, ``use_rel_reward``,
``use_step_penalty``, ``reward_coef`` 5) and feeds it the action chunks ``chunks`` [K, C, 7] with
``chunk_step``. Saves per chunk: the last observation (images, state), per-step rewards, the raw
per-step success flags (``infos['episode']['success_once']``), RLinf's chunk terminations / truncations,
the episode metrics after the chunk, and the env's reset-state id after the chunk.
"""

import sys

import numpy as np
from omegaconf import OmegaConf


def main() -> None:
    actions_path, out_path, seed, max_steps, res = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    auto_reset = len(sys.argv) < 7 or sys.argv[6] == "1"
    import rlinf_shim  # noqa: F401  (rlinf.utils.logging without ray)
    from rlinf.envs.libero.libero_env import LiberoEnv

    cfg = OmegaConf.create({
        "task_suite_name": "libero_spatial", "task_id_filter": [0], "seed": seed, "group_size": 1,
        "use_fixed_reset_state_ids": True, "use_ordered_reset_state_ids": False, "specific_reset_id": None,
        "ignore_terminations": False, "auto_reset": auto_reset, "is_eval": False, "max_episode_steps": max_steps,
        "use_rel_reward": True, "use_step_penalty": True, "reward_coef": 5.0, "reset_gripper_open": True,
        "init_params": {"camera_heights": res, "camera_widths": res}, "video_cfg": {"save_video": False},
    })
    env = LiberoEnv(cfg, num_envs=1, seed_offset=0, total_num_processes=1, worker_info=None)
    chunks = np.load(actions_path)["chunks"]
    out: dict[str, list] = {k: [] for k in ("main", "wrist", "state", "rewards", "success", "terminations",
                                            "truncations", "ep_success_once", "ep_return", "ep_len", "ids")}
    try:
        obs, _ = env.reset()
        first = {"main0": obs["main_images"][0].numpy(), "wrist0": obs["wrist_images"][0].numpy(),
                 "state0": obs["states"][0].numpy(), "id0": int(env.reset_state_ids[0])}
        for chunk in chunks:
            obs_list, rewards, terms, truncs, infos = env.chunk_step(chunk[None])
            out["main"].append(obs_list[-1]["main_images"][0].numpy())
            out["wrist"].append(obs_list[-1]["wrist_images"][0].numpy())
            out["state"].append(obs_list[-1]["states"][0].numpy())
            out["rewards"].append(rewards[0].numpy())
            # per-step success flags of the episode before any auto-reset (final_info holds them after one)
            step_infos = [i.get("final_info", i) for i in infos[:-1]] + [infos[-1].get("final_info", infos[-1])]
            out["success"].append(np.array([bool(i["episode"]["success_once"][0]) for i in step_infos]))
            out["terminations"].append(terms[0].numpy())
            out["truncations"].append(truncs[0].numpy())
            last = step_infos[-1]["episode"]
            out["ep_success_once"].append(bool(last["success_once"][0]))
            out["ep_return"].append(float(last["return"][0]))
            out["ep_len"].append(int(last["episode_len"][0]))
            out["ids"].append(int(env.reset_state_ids[0]))
    finally:
        env.env.close()
    np.savez(out_path, **first, **{k: np.stack([np.asarray(x) for x in v]) for k, v in out.items()})


if __name__ == "__main__":
    main()
