"""ManiSkill3 throughput: raw ManiSkill stepping vs vlarl's ManiSkillVectorEnv, in the same run, one JSON line.

Both sides run PickCube-v1 on the CPU backend, controller pd_ee_delta_pose, the same random actions in
[-1, 1], N single-env ManiSkill objects in this process (ManiSkill 3.0.1 refuses num_envs > 1 on the CPU
backend). Raw: ``env.step`` on each object, its own TimeLimit auto-reset off (we reset on truncation).
vlarl: ``step_chunk`` with chunks of C steps (episode bookkeeping, reward, auto-reset, tensor batching).
Each side steps once untimed first (the first
render builds lavapipe's pipelines). The ratio vlarl / raw is the wrapper's overhead; obs modes ``state`` and (with --rgb) ``rgb`` at 128 px.

    python benchmarks/maniskill_throughput.py                       # state, N=4, C=5, 200 steps, 3 rounds
    python benchmarks/maniskill_throughput.py --rgb --steps 40      # also RGB observations (slow: rendering)

Numbers are wall-clock on a shared machine: the JSON includes the load average at start and end.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

import numpy as np
import torch

from _bench import add_smoke, emit, skipped

TASK = "PickCube-v1"


def _raw_sims(obs_mode: str, num_envs: int, episode: int) -> list:
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401

    kw = {"num_envs": 1, "obs_mode": obs_mode, "control_mode": "pd_ee_delta_pose", "sim_backend": "cpu",
          "max_episode_steps": episode + 1}
    if obs_mode == "rgb":
        kw["sensor_configs"] = {"width": 128, "height": 128}
    sims = [gym.make(TASK, **kw) for _ in range(num_envs)]
    for sim in sims:
        sim.reset(seed=0)
        sim.step(torch.zeros(1, 7))  # warm-up outside the timing: the first render builds the pipelines
    return sims


def time_raw(sims: list, episode: int, actions: np.ndarray) -> float:
    """Steps/s of plain ``env.step`` on each object (reset on our episode boundary)."""
    for e, sim in enumerate(sims):
        sim.reset(seed=e)
    steps = actions.shape[1]
    start = time.perf_counter()
    for t in range(steps):
        for e, sim in enumerate(sims):
            sim.step(torch.from_numpy(actions[e, t][None]))
            if (t + 1) % episode == 0:
                sim.reset(seed=e)
    return len(sims) * steps / (time.perf_counter() - start)


def time_vlarl(env: object, chunk: int, actions: np.ndarray) -> float:
    """Steps/s of ``ManiSkillVectorEnv.step_chunk`` (episode bookkeeping, rewards, auto-reset, batching)."""
    n, steps = actions.shape[:2]
    env.reset(np.arange(n))  # type: ignore[attr-defined]
    start = time.perf_counter()
    for t in range(0, steps, chunk):
        env.step_chunk(torch.from_numpy(actions[:, t:t + chunk]))  # type: ignore[attr-defined]
    return n * steps / (time.perf_counter() - start)


def measure(obs_mode: str, args: argparse.Namespace, actions: np.ndarray) -> dict[str, float]:
    """Alternate raw and vlarl rounds (the machine's load drifts) and keep the medians."""
    from vlarl_cli.envs.maniskill.vector import ManiSkillSpec, ManiSkillVectorEnv

    sims = _raw_sims(obs_mode, args.envs, args.episode)
    spec = ManiSkillSpec(task=TASK, num_envs=args.envs, cameras=("main",) if obs_mode == "rgb" else (),
                         max_episode_steps=args.episode, auto_reset=True)
    raw, ours = [], []
    with ManiSkillVectorEnv(spec) as env:
        env.reset(np.arange(args.envs))
        env.step_chunk(torch.zeros(args.envs, 1, 7))  # warm-up, as on the raw side
        for _ in range(args.repeats):
            raw.append(time_raw(sims, args.episode, actions))
            ours.append(time_vlarl(env, args.chunk, actions))
    for sim in sims:
        sim.close()
    r, o = float(np.median(raw)), float(np.median(ours))
    return {"raw_steps_per_s": round(r, 1), "vlarl_steps_per_s": round(o, 1), "ratio": round(o / r, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200, help="env steps per env (a multiple of --chunk)")
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--episode", type=int, default=50, help="episode length (PickCube's RLinf budget)")
    parser.add_argument("--rgb", action="store_true", help="also measure rgb observations")
    parser.add_argument("--repeats", type=int, default=3, help="alternating raw / vlarl rounds (medians)")
    add_smoke(parser)
    args = parser.parse_args()
    if importlib.util.find_spec("mani_skill") is None:
        skipped("maniskill_throughput", "mani_skill is not installed (pip install 'vlarl[maniskill]')",
                smoke=args.smoke)
        return
    if args.smoke:
        args.envs, args.steps, args.episode, args.repeats = 1, 5, 5, 1
    if args.steps % args.chunk or args.episode % args.chunk:
        parser.error("--steps and --episode must be multiples of --chunk")
    torch.set_num_threads(1)
    actions = np.random.default_rng(0).uniform(-1, 1, (args.envs, args.steps, 7)).astype(np.float32)
    result: dict[str, object] = {"benchmark": "maniskill_throughput", "task": TASK, "envs": args.envs, "steps_per_env": args.steps,
                                 "chunk": args.chunk, "repeats": args.repeats, "load_start": os.getloadavg()[0]}
    for mode in ("state", "rgb") if args.rgb else ("state",):
        result[mode] = measure(mode, args, actions)
    result["load_end"] = os.getloadavg()[0]
    emit(result, smoke=args.smoke)


if __name__ == "__main__":
    main()
