"""RLinf's own side of the conformance test: run by ``.reference/rlinf_env/bin/python`` (never imports vlarl).

    python rlinf_side.py <scenario.npz> <out.npz>

The scenario holds the settings (``seed``, ``max_steps``, ``res``, ``task_ids``) and one action array per run:
``on`` [K, N, C, 7] and ``off`` [K', N', C, 7]. For each run this builds RLinf 0.3.0's ``LiberoEnv``
(libero_spatial, ``task_id_filter`` = ``task_ids``, N envs in one env object, training mode:
``use_fixed_reset_state_ids``, random reset-state ids, ``use_rel_reward``, ``use_step_penalty``,
``reward_coef`` 5, gripper open while settling), ``auto_reset`` True for ``on`` and False for ``off``, resets it
once and feeds it the chunks with ``chunk_step``. Both runs happen in this one process (one interpreter start,
one import of torch and LIBERO), one after the other.

Saved per run (keys prefixed ``on_`` / ``off_``), per chunk and env: the last observation (images, state),
its task description, per-step rewards, the raw per-step success flags (``infos['episode']['success_once']``
of the episode before any auto-reset), RLinf's chunk terminations / truncations, the episode metrics after
the chunk, the env's ``reset_state_ids`` entry and the (task, trial) it actually runs (``task_ids``,
``trial_ids``); and the same for the first reset (``*0``).
"""

import sys
import time

import numpy as np
from omegaconf import OmegaConf


def _config(scenario: dict, auto_reset: bool) -> "OmegaConf":
    res = int(scenario["res"])
    return OmegaConf.create({
        "task_suite_name": "libero_spatial", "task_id_filter": [int(t) for t in scenario["task_ids"]],
        "seed": int(scenario["seed"]), "group_size": 1, "use_fixed_reset_state_ids": True,
        "use_ordered_reset_state_ids": False, "specific_reset_id": None, "ignore_terminations": False,
        "auto_reset": auto_reset, "is_eval": False, "max_episode_steps": int(scenario["max_steps"]),
        "use_rel_reward": True, "use_step_penalty": True, "reward_coef": 5.0, "reset_gripper_open": True,
        "init_params": {"camera_heights": res, "camera_widths": res}, "video_cfg": {"save_video": False},
    })


def _where(env) -> dict:
    return {"ids": np.array(env.reset_state_ids), "task_ids": np.array(env.task_ids),
            "trial_ids": np.array(env.trial_ids)}


def _obs(obs: dict) -> dict:
    return {"main": obs["main_images"].numpy(), "wrist": obs["wrist_images"].numpy(),
            "state": obs["states"].numpy(), "task": np.array(obs["task_descriptions"])}


def run(env_cls, cfg, chunks: np.ndarray) -> dict:
    """One env object: reset, then every chunk; returns the arrays to save (unprefixed)."""
    start = time.perf_counter()
    env = env_cls(cfg, num_envs=chunks.shape[1], seed_offset=0, total_num_processes=1, worker_info=None)
    print(f"auto_reset={cfg.auto_reset}: built in {time.perf_counter() - start:.1f} s", flush=True)
    out: dict[str, list] = {}

    def keep(**values) -> None:
        for k, v in values.items():
            out.setdefault(k, []).append(np.asarray(v))

    try:
        obs, _ = env.reset()
        first = {k + "0": v for k, v in {**_obs(obs), **_where(env)}.items()}
        print(f"reset at {time.perf_counter() - start:.1f} s", flush=True)
        for k, chunk in enumerate(chunks):
            obs_list, rewards, terms, truncs, infos = env.chunk_step(chunk)
            # per-step metrics of the episode before any auto-reset (final_info holds them after one)
            step_infos = [i.get("final_info", i) for i in infos]
            episode = step_infos[-1]["episode"]
            keep(**_obs(obs_list[-1]), **_where(env), rewards=rewards.numpy(), terminations=terms.numpy(),
                 truncations=truncs.numpy(),
                 success=np.stack([i["episode"]["success_once"].numpy() for i in step_infos], axis=1),
                 ep_success_once=episode["success_once"].numpy(), ep_return=episode["return"].numpy(),
                 ep_len=episode["episode_len"].numpy())
            print(f"chunk {k} at {time.perf_counter() - start:.1f} s", flush=True)
    finally:
        env.env.close()
    return {**first, **{k: np.stack(v) for k, v in out.items()}}


def main() -> None:
    scenario_path, out_path = sys.argv[1], sys.argv[2]
    scenario = dict(np.load(scenario_path))
    import rlinf_shim  # noqa: F401  (rlinf.utils.logging without ray)
    from rlinf.envs.libero.libero_env import LiberoEnv

    saved = {}
    for name, auto_reset in (("on", True), ("off", False)):
        result = run(LiberoEnv, _config(scenario, auto_reset), scenario[name])
        saved.update({f"{name}_{k}": v for k, v in result.items()})
    np.savez(out_path, **saved)


if __name__ == "__main__":
    main()
