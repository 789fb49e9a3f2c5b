"""Camera cost of each ``env.*.render_quality``: milliseconds per frame and the mean pixel difference to ``exact``.

    python benchmarks/render_quality.py                       # 128 px, 20 frames x 3 rounds per camera and mode
    python benchmarks/render_quality.py --resolution 224 --suite libero_goal --task 0
    python benchmarks/render_quality.py --smoke               # seconds of rendering: the code path only (CI)

Four vector envs (``envs/vector.py``, one simulator in one worker process each, as training runs them):
one per quality (``exact``, ``fast``: MuJoCo's reflection pass off, ``fast_noaa``: reflection and
multisampling off; ``envs/libero/env.py``) with both cameras, and one without cameras (physics only), all
reset to the same init state with the same seed, so they simulate the same scene. Timing: chunks of one
step (each renders both cameras), the envs interleaved in rounds of ``--frames`` steps (the load of other
jobs reaches all alike); ms per frame = (step time - the physics-only env's step time) / 2 cameras, the
median over rounds. Pixels: the reset observation's images of each quality against ``exact``'s: mean
absolute difference (0-255 scale, over pixels and channels) and the fraction of pixels that differ at all.
Prints ONE JSON line with the machine (``benchmarks/_bench.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from _bench import add_smoke, emit

QUALITIES = ("exact", "fast", "fast_noaa")


def _make(quality: str | None, args: argparse.Namespace) -> Any:
    """A 1-env vector env rendering both cameras at ``quality`` (None: physics only, no camera)."""
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

    return LiberoVectorEnv(VectorEnvSpec(
        suite=args.suite, task_ids=(args.task,), num_envs=1, num_workers=1, resolution=args.resolution,
        cameras=("main", "wrist") if quality else (), render_quality=quality or "exact", seeding="every_reset",
        auto_reset=False, max_episode_steps=10_000))


def _step_ms(vec: Any, frames: int) -> float:
    actions = np.zeros((1, 1, 7), np.float32)
    actions[..., -1] = -1.0
    start = time.perf_counter()
    for _ in range(frames):
        vec.step_chunk(actions)
    return 1e3 * (time.perf_counter() - start) / frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--frames", type=int, default=20, help="steps per env and round")
    parser.add_argument("--rounds", type=int, default=3)
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.frames, args.rounds = 2, 1

    from vlarl_cli import keys

    real_stdout = os.dup(1)  # LIBERO prints to stdout: keep it for the JSON line
    os.dup2(2, 1)
    envs = {q: _make(None if q == "physics" else q, args) for q in (*QUALITIES, "physics")}
    try:
        first = {q: vec.reset([0]) for q, vec in envs.items()}
        times: dict[str, list[float]] = {q: [] for q in envs}
        for _ in range(args.rounds):
            for q, vec in envs.items():
                times[q].append(_step_ms(vec, args.frames))
    finally:
        for vec in envs.values():
            vec.close()
    step = {q: statistics.median(v) for q, v in times.items()}
    ms = {q: round(max(step[q] - step["physics"], 0.0) / 2, 2) for q in QUALITIES}
    result: dict[str, Any] = {"benchmark": "render_quality", "suite": args.suite, "task": args.task,
                              "resolution": args.resolution, "frames": args.frames, "rounds": args.rounds,
                              "physics_ms_per_step": round(step["physics"], 2), "ms_per_frame": ms}
    for q in QUALITIES[1:]:
        result[f"{q}_speedup_per_frame"] = round(ms["exact"] / max(ms[q], 1e-9), 2)
        diffs = {}
        for key in (keys.MAIN_IMAGES, keys.WRIST_IMAGES):
            a, b = first["exact"][key][0].numpy().astype(np.int16), first[q][key][0].numpy().astype(np.int16)
            diffs[key] = {"mean_abs_diff_255": round(float(np.abs(a - b).mean()), 3),
                          "pixels_changed": round(float((a != b).any(axis=-1).mean()), 4)}
        result[f"{q}_vs_exact"] = diffs
    # rendering must not touch the physics
    result["states_identical"] = all(bool((first["exact"][keys.STATES] == first[q][keys.STATES]).all()) for q in envs)
    sys.stdout.flush()
    os.dup2(real_stdout, 1)
    emit(result, smoke=args.smoke)


if __name__ == "__main__":
    main()
