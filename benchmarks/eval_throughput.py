"""Evaluation throughput: episodes per minute of `vlarl eval` (1 and 2 env workers) vs a plain LIBERO loop.

    python benchmarks/eval_throughput.py                      # 4 episodes x 60 steps each way
    python benchmarks/eval_throughput.py --episodes 8 --max-steps 220

All three runs use the tiny pi0 policy of the quickstart config (deterministic, replans every 5 steps),
libero_spatial tasks 0-1, the standard protocol's 10 settle steps and env seed, and the same step limit
(the random tiny policy never succeeds, so every episode runs to the limit). Wall times include
simulator construction, as a user sees them.

- ``plain``: what openpi's ``examples/libero/main.py`` does, in one process: ``OffScreenRenderEnv`` with
  both cameras rendered on every step, seed -> reset -> set_init_state -> settle -> policy every 5 steps.
  It also times reading the full simulator state every step (``sim.get_state().flatten()``), the cost of
  recording states for re-simulation.
- ``vlarl_1w`` / ``vlarl_2w``: :func:`vlarl_cli.training.evaluation.run_episodes` with 2 envs in 1 or
  2 worker processes (rendering only at chunk boundaries).

Prints ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def plain_loop(policy, keys_, max_steps: int, settle: int, seed: int, resolution: int) -> dict:
    import torch

    from vlarl_cli import keys
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.conventions import make_state, rotate_180
    from vlarl_cli.envs.libero.setup import prepare_libero

    prepare_libero()
    from libero.libero.envs import OffScreenRenderEnv

    start = time.perf_counter()
    state_s, state_floats, steps_total = 0.0, 0, 0
    env, env_task = None, None
    chunk = policy.num_action_chunks
    for k in keys_:
        task = suites.get_task(k.suite, k.task)
        if env_task != task.name:
            if env is not None:
                env.close()
            env = OffScreenRenderEnv(bddl_file_name=str(task.bddl_file), camera_heights=resolution,
                                     camera_widths=resolution)
            env_task = task.name
        env.seed(seed)
        env.reset()
        obs = env.set_init_state(suites.init_states(k.suite, k.task)[k.trial])
        for _ in range(settle):
            obs, _, _, _ = env.step([0, 0, 0, 0, 0, 0, -1])
        plan: list[np.ndarray] = []
        for _ in range(max_steps):
            if not plan:
                batch = {
                    keys.MAIN_IMAGES: torch.from_numpy(rotate_180(obs["agentview_image"])[None]),
                    keys.WRIST_IMAGES: torch.from_numpy(rotate_180(obs["robot0_eye_in_hand_image"])[None]),
                    keys.STATES: torch.from_numpy(make_state(obs["robot0_eef_pos"], obs["robot0_eef_quat"],
                                                             obs["robot0_gripper_qpos"])[None]),
                    keys.TASK_DESCRIPTIONS: [task.language],
                }
                plan = list(policy.sample(batch, deterministic=True).actions[0].numpy()[:chunk])
            obs, _, done, _ = env.step(np.clip(plan.pop(0), -1, 1))
            t0 = time.perf_counter()
            state = env.env.sim.get_state().flatten()
            state_s += time.perf_counter() - t0
            state_floats = state.size
            steps_total += 1
            if done:
                break
    if env is not None:
        env.close()
    wall = time.perf_counter() - start
    return {"wall_s": wall, "episodes_per_min": 60 * len(keys_) / wall, "sim_state_floats_per_step": state_floats,
            "sim_state_us_per_step": 1e6 * state_s / max(1, steps_total)}


def vlarl_run(policy, keys_, max_steps: int, workers: int, resolution: int) -> dict:
    from vlarl_cli.training.evaluation import EvalSettings, run_episodes

    settings = EvalSettings(suite="libero_spatial", num_envs=2, num_workers=workers, resolution=resolution,
                            max_steps=max_steps)
    start = time.perf_counter()
    records, stats = run_episodes(policy, settings, list(keys_), log=False)
    wall = time.perf_counter() - start
    assert len(records) == len(keys_)
    return {"wall_s": wall, "episodes_per_min": 60 * len(keys_) / wall, "env_s": stats.env_time_s,
            "policy_s": stats.policy_time_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=4, help="episodes per run (tasks 0-1, trials 0..)")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--resolution", type=int, default=128)
    args = parser.parse_args()

    from vlarl_cli.envs.libero.protocol import get_protocol
    from vlarl_cli.training.evaluation import load_policy, plan_episodes

    # LIBERO and robosuite print to stdout (also in the spawned workers): send fd 1 to stderr while working
    # so that stdout carries only the JSON line
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    protocol = get_protocol("standard")
    per_task = (args.episodes + 1) // 2
    keys_ = plan_episodes("libero_spatial", (0, 1), per_task)[: args.episodes]
    policy, _, _ = load_policy(None, "quickstart", [])
    results = {
        "plain": plain_loop(policy, keys_, args.max_steps, protocol.settle_steps, protocol.seed, args.resolution),
        "vlarl_1w": vlarl_run(policy, keys_, args.max_steps, 1, args.resolution),
        "vlarl_2w": vlarl_run(policy, keys_, args.max_steps, 2, args.resolution),
    }
    plain = results["plain"]
    line = {
        "benchmark": "eval_throughput",
        "episodes": len(keys_), "max_steps": args.max_steps, "settle_steps": protocol.settle_steps,
        "resolution": args.resolution, "policy": "pi0 tiny (quickstart), replan 5", "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        **{f"{name}_episodes_per_min": round(r["episodes_per_min"], 2) for name, r in results.items()},
        **{f"{name}_wall_s": round(r["wall_s"], 1) for name, r in results.items()},
        **{f"{name}_{part}_s": round(results[name][part + "_s"], 1) for name in ("vlarl_1w", "vlarl_2w")
           for part in ("env", "policy")},
        "speedup_1w_vs_plain": round(results["vlarl_1w"]["episodes_per_min"] / plain["episodes_per_min"], 2),
        "speedup_2w_vs_plain": round(results["vlarl_2w"]["episodes_per_min"] / plain["episodes_per_min"], 2),
        "sim_state_floats_per_step": plain["sim_state_floats_per_step"],
        "sim_state_us_per_step": round(plain["sim_state_us_per_step"], 1),
        "sim_state_kib_per_520_steps_float64": round(plain["sim_state_floats_per_step"] * 8 * 520 / 1024, 1),
    }
    sys.stdout.flush()
    os.dup2(real_stdout, 1)
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
