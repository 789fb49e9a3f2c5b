"""ManiSkill3 throughput: raw ManiSkill stepping vs vlarl's ManiSkillVectorEnv, in the same run, one JSON line.

Both sides run PickCube-v1 on the CPU backend, controller pd_ee_delta_pose, the same random actions in
[-1, 1], N single-env ManiSkill objects in this process (ManiSkill 3.0.1 refuses num_envs > 1 on the CPU
backend). Raw: ``env.step`` on each object, its own TimeLimit auto-reset off (we reset on truncation).
vlarl: ``step_chunk`` with chunks of C steps (episode bookkeeping, reward, auto-reset, tensor batching).
The ratio vlarl / raw is the wrapper's overhead; obs modes ``state`` and (with --rgb) ``rgb`` at 128 px.

    python benchmarks/maniskill_throughput.py                       # state, N=4, C=5, 200 steps per env
    python benchmarks/maniskill_throughput.py --rgb --steps 40      # also RGB observations (slow: rendering)

Numbers are wall-clock on a shared machine: the JSON includes the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

TASK = "PickCube-v1"


def raw_steps_per_s(obs_mode: str, num_envs: int, steps: int, episode: int, actions: np.ndarray) -> float:
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401

    kw = {"num_envs": 1, "obs_mode": obs_mode, "control_mode": "pd_ee_delta_pose", "sim_backend": "cpu",
          "max_episode_steps": episode + 1}
    if obs_mode == "rgb":
        kw["sensor_configs"] = {"width": 128, "height": 128}
    sims = [gym.make(TASK, **kw) for _ in range(num_envs)]
    for e, sim in enumerate(sims):
        sim.reset(seed=e)
    start = time.perf_counter()
    for t in range(steps):
        for e, sim in enumerate(sims):
            sim.step(torch.from_numpy(actions[e, t][None]))
            if (t + 1) % episode == 0:
                sim.reset(seed=e)
    elapsed = time.perf_counter() - start
    for sim in sims:
        sim.close()
    return num_envs * steps / elapsed


def vlarl_steps_per_s(obs_mode: str, num_envs: int, steps: int, episode: int, chunk: int,
                      actions: np.ndarray) -> float:
    from vlarl_cli.envs.maniskill.vector import ManiSkillSpec, ManiSkillVectorEnv

    spec = ManiSkillSpec(task=TASK, num_envs=num_envs, cameras=("main",) if obs_mode == "rgb" else (),
                         max_episode_steps=episode, auto_reset=True)
    with ManiSkillVectorEnv(spec) as env:
        env.reset(np.arange(num_envs))
        start = time.perf_counter()
        for t in range(0, steps, chunk):
            env.step_chunk(torch.from_numpy(actions[:, t:t + chunk]))
        elapsed = time.perf_counter() - start
    return num_envs * steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200, help="env steps per env (a multiple of --chunk)")
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--episode", type=int, default=50, help="episode length (PickCube's RLinf budget)")
    parser.add_argument("--rgb", action="store_true", help="also measure rgb observations")
    args = parser.parse_args()
    if args.steps % args.chunk or args.episode % args.chunk:
        parser.error("--steps and --episode must be multiples of --chunk")
    torch.set_num_threads(1)
    actions = np.random.default_rng(0).uniform(-1, 1, (args.envs, args.steps, 7)).astype(np.float32)
    result: dict[str, object] = {"task": TASK, "envs": args.envs, "steps_per_env": args.steps,
                                 "chunk": args.chunk, "load_start": os.getloadavg()[0]}
    for mode in ("state", "rgb") if args.rgb else ("state",):
        raw = raw_steps_per_s(mode, args.envs, args.steps, args.episode, actions)
        ours = vlarl_steps_per_s(mode, args.envs, args.steps, args.episode, args.chunk, actions)
        result[mode] = {"raw_steps_per_s": round(raw, 1), "vlarl_steps_per_s": round(ours, 1),
                        "ratio": round(ours / raw, 3)}
    result["load_end"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
