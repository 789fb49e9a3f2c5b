"""LIBERO vector-env throughput with its workers in this interpreter vs in the simulator's own environment
(`vlarl setup-sim libero`, ``env.<split>.python``): env steps per second of each and their ratio (target
split / in-process >= 0.97), in one JSON line.

Both envs run the same spec (libero_spatial task 0, 128 px, both cameras, N envs over W workers, chunks of C
random actions); the two are measured in alternating blocks (A B A B ...) so a change of machine load hits
both alike; each figure is the median block.

    python benchmarks/sim_split.py                     # 2 envs, 2 workers, C = 5, 5 blocks of 6 chunks
    python benchmarks/sim_split.py --envs 4 --workers 2 --blocks 9
    python benchmarks/sim_split.py --smoke             # the same path at a size of seconds (not a measurement)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from _bench import add_smoke, emit, skipped

NAME = "sim_split"


def _block(env: object, chunks: int, chunk: int, rng: np.random.Generator) -> float:
    """Env steps per second over ``chunks`` chunks (the reset is outside the timing)."""
    env.reset()  # type: ignore[attr-defined]
    n = env.num_envs  # type: ignore[attr-defined]
    actions = [rng.uniform(-0.3, 0.3, (n, chunk, 7)) for _ in range(chunks)]
    start = time.perf_counter()
    for a in actions:
        env.step_chunk(a)  # type: ignore[attr-defined]
    return n * chunks * chunk / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=6, help="chunks per block")
    parser.add_argument("--blocks", type=int, default=5, help="blocks per side (alternating)")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.envs, args.workers, args.chunks, args.blocks = 1, 1, 1, 1

    from vlarl_cli.envs import interpreter
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

    if not interpreter.finished("libero"):
        skipped(NAME, f"no LIBERO environment of its own at {interpreter.resolve('libero')}: build it with "
                "`vlarl setup-sim libero`", smoke=args.smoke)
        return
    specs = {side: VectorEnvSpec(suite="libero_spatial", task_ids=(0,), num_envs=args.envs, num_workers=args.workers,
                                 max_episode_steps=10_000, python=python)
             for side, python in (("in_process", None), ("split", "libero"))}
    envs = {side: LiberoVectorEnv(spec) for side, spec in specs.items()}
    try:
        rng = np.random.default_rng(0)
        rates: dict[str, list[float]] = {side: [] for side in envs}
        for _ in range(args.blocks):
            for side, env in envs.items():
                rates[side].append(_block(env, args.chunks, args.chunk, rng))
    finally:
        for env in envs.values():
            env.close()
    median = {side: statistics.median(r) for side, r in rates.items()}
    emit({"benchmark": NAME, "envs": args.envs, "workers": args.workers, "chunk": args.chunk, "chunks": args.chunks,
          "blocks": args.blocks, "steps_per_s": {k: round(v, 2) for k, v in median.items()},
          "blocks_steps_per_s": {k: [round(x, 2) for x in v] for k, v in rates.items()},
          "ratio_split_over_in_process": round(median["split"] / median["in_process"], 4),
          "split_python": str(interpreter.resolve("libero"))}, smoke=args.smoke)


if __name__ == "__main__":
    main()
