"""Evaluation throughput: episodes per minute of `vlarl eval` (1 and 2 env workers) vs a plain LIBERO loop,
and seconds per episode of evaluation vs training collection with the same envs and observation mode.

    python benchmarks/eval_throughput.py                      # 4 episodes x 60 steps each way
    python benchmarks/eval_throughput.py --episodes 8 --max-steps 220
    python benchmarks/eval_throughput.py --smoke              # seconds: the code path only (CI)

Every run uses the quickstart's policy (its shipped pi0 checkpoint, LIBERO ``obs_mode: state``: proprio plus
the goal objects' positions, no camera; deterministic, replans every 5 steps), libero_spatial tasks 0-1,
the standard protocol's 10 settle steps and env seed, and the same step limit. Wall times include
simulator construction, as a user sees them. With ``--config``/overrides an image policy runs instead
(e.g. ``--config quickstart actor.model.model_path=null``: the tiny pi0 with cameras); the observation mode
and cameras always follow the policy (``keys.policy_obs_mode`` / ``keys.policy_cameras``).

- ``plain``: what openpi's ``examples/libero/main.py`` does, in one process: ``OffScreenRenderEnv`` (the
  policy's cameras rendered on every step; none in state mode), seed -> reset -> set_init_state -> settle ->
  policy every 5 steps. It also times reading the full simulator state every step
  (``sim.get_state().flatten()``), the cost of recording states for re-simulation.
- ``vlarl_1w`` / ``vlarl_2w``: :func:`vlarl_cli.training.evaluation.run_episodes` with 2 envs in 1 or
  2 worker processes (rendering only at chunk boundaries).
- ``collect_2w``: :func:`vlarl_cli.training.rollout.collect` (what ``rl-train`` runs) on a 2-env, 2-worker
  vector env, soft resets to the same init states, episodes of the same length: the issue's target is
  ``eval_over_collect_s_per_episode`` <= 1.25.

Prints ONE JSON line (``benchmarks/_bench.py``: versions, cores, load average beside the figures).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from _bench import add_smoke, emit


def plain_loop(policy, keys_, max_steps: int, settle: int, seed: int, resolution: int) -> dict:
    import torch

    from vlarl_cli import keys
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.conventions import make_state, rotate_180
    from vlarl_cli.envs.libero.expert import goal_positions
    from vlarl_cli.envs.libero.setup import prepare_libero

    prepare_libero()
    from libero.libero.envs import OffScreenRenderEnv

    start = time.perf_counter()
    state_s, state_floats, steps_total = 0.0, 0, 0
    env, env_task = None, None
    chunk = policy.num_action_chunks
    state_mode = keys.policy_obs_mode(policy) == "state"
    cameras = {} if not state_mode else {"use_camera_obs": False, "has_offscreen_renderer": False}
    for k in keys_:
        task = suites.get_task(k.suite, k.task)
        if env_task != task.name:
            if env is not None:
                env.close()
            env = OffScreenRenderEnv(bddl_file_name=str(task.bddl_file), camera_heights=resolution,
                                     camera_widths=resolution, **cameras)
            env_task = task.name
        env.seed(seed)
        env.reset()
        obs = env.set_init_state(suites.init_states(k.suite, k.task)[k.trial])
        for _ in range(settle):
            obs, _, _, _ = env.step([0, 0, 0, 0, 0, 0, -1])
        plan: list[np.ndarray] = []
        for _ in range(max_steps):
            if not plan:
                state = make_state(obs["robot0_eef_pos"], obs["robot0_eef_quat"], obs["robot0_gripper_qpos"])
                batch = {keys.TASK_DESCRIPTIONS: [task.language]}
                if state_mode:  # envs/libero/env.py: LiberoEnv.observation in obs_mode state
                    state = np.concatenate([state, goal_positions(env.env)]).astype(np.float32)
                else:
                    batch[keys.MAIN_IMAGES] = torch.from_numpy(rotate_180(obs["agentview_image"])[None])
                    batch[keys.WRIST_IMAGES] = torch.from_numpy(rotate_180(obs["robot0_eye_in_hand_image"])[None])
                batch[keys.STATES] = torch.from_numpy(state[None])
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


def collect_run(policy, keys_, max_steps: int, workers: int, resolution: int) -> dict:
    """rl-train's collection on the same episodes: 2 envs, soft resets to the episodes' init states."""
    from vlarl_cli import keys
    from vlarl_cli.distributed.cpu_budget import decide
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec
    from vlarl_cli.training.rollout import collect

    chunk = policy.num_action_chunks
    spec = VectorEnvSpec(suite="libero_130", num_envs=2, num_workers=workers, resolution=resolution,
                         cameras=keys.policy_cameras(policy), obs_mode=keys.policy_obs_mode(policy),
                         max_episode_steps=max_steps, settle_steps=10, protocol="standard", auto_reset=False,
                         seeding="every_reset")
    ids = [k.libero130_reset_state_id for k in keys_]
    # rl-train collects under the rank's CPU budget (Trainer: `with self.cpu.inference()`); so does this, or
    # the policy's threads fight the env workers and the baseline is slower than rl-train's own collection
    budget = decide(device_type="cpu", num_envs=2, requested_workers=workers)
    start = time.perf_counter()
    vec = LiberoVectorEnv(spec)
    env_s = policy_s = 0.0
    try:
        for first in range(0, len(ids), 2):
            pair = (ids[first:first + 2] + ids[first:first + 1])[:2]  # an odd last episode: both envs run it
            with budget.inference():
                r = collect(policy, vec, -(-max_steps // chunk), deterministic=True, reset_state_ids=np.array(pair))
            env_s, policy_s = env_s + r.env_time, policy_s + r.inference_time
    finally:
        vec.close()
    wall = time.perf_counter() - start
    return {"wall_s": wall, "episodes_per_min": 60 * len(keys_) / wall, "env_s": env_s, "policy_s": policy_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=4, help="episodes per run (tasks 0-1, trials 0..)")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--config", default="quickstart", help="the policy's config (default: the quickstart's)")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of --config")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.episodes, args.max_steps = 2, 10

    from vlarl_cli import keys
    from vlarl_cli.envs.libero.protocol import get_protocol
    from vlarl_cli.training.evaluation import load_policy, plan_episodes

    # LIBERO and robosuite print to stdout (also in the spawned workers): send fd 1 to stderr while working
    # so that stdout carries only the JSON line
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    protocol = get_protocol("standard")
    per_task = (args.episodes + 1) // 2
    keys_ = plan_episodes("libero_spatial", (0, 1), per_task)[: args.episodes]
    policy, _, _ = load_policy(None, args.config, args.overrides)
    results = {
        "plain": plain_loop(policy, keys_, args.max_steps, protocol.settle_steps, protocol.seed, args.resolution),
        "vlarl_2w": vlarl_run(policy, keys_, args.max_steps, 2, args.resolution),
        "collect_2w": collect_run(policy, keys_, args.max_steps, 2, args.resolution),
    }
    if not args.smoke:
        results["vlarl_1w"] = vlarl_run(policy, keys_, args.max_steps, 1, args.resolution)
    plain = results["plain"]
    line = {
        "benchmark": "eval_throughput",
        "episodes": len(keys_), "max_steps": args.max_steps, "settle_steps": protocol.settle_steps,
        "resolution": args.resolution, "policy": f"{args.config} {' '.join(args.overrides)}".strip(),
        "obs_mode": keys.policy_obs_mode(policy), "cameras": list(keys.policy_cameras(policy)),
        **{f"{name}_episodes_per_min": round(r["episodes_per_min"], 2) for name, r in results.items()},
        **{f"{name}_wall_s": round(r["wall_s"], 1) for name, r in results.items()},
        **{f"{name}_{part}_s": round(r[part + "_s"], 1) for name, r in results.items() if name != "plain"
           for part in ("env", "policy")},
        **{f"speedup_{name[6:]}_vs_plain": round(r["episodes_per_min"] / plain["episodes_per_min"], 2)
           for name, r in results.items() if name.startswith("vlarl_")},
        "eval_s_per_episode": round(results["vlarl_2w"]["wall_s"] / len(keys_), 2),
        "collect_s_per_episode": round(results["collect_2w"]["wall_s"] / len(keys_), 2),
        "eval_over_collect_s_per_episode": round(results["collect_2w"]["episodes_per_min"]
                                                 / results["vlarl_2w"]["episodes_per_min"], 2),
        "target_eval_over_collect_s_per_episode": 1.25,
        "sim_state_floats_per_step": plain["sim_state_floats_per_step"],
        "sim_state_us_per_step": round(plain["sim_state_us_per_step"], 1),
        "sim_state_kib_per_520_steps_float64": round(plain["sim_state_floats_per_step"] * 8 * 520 / 1024, 1),
    }
    sys.stdout.flush()
    os.dup2(real_stdout, 1)
    emit(line, smoke=args.smoke)


if __name__ == "__main__":
    main()
