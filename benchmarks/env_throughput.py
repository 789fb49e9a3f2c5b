"""LIBERO environment throughput: raw LIBERO vs vlarl's chunk-boundary rendering, in one JSON line.

Measures, on libero_spatial task 0 with the no-op-like random actions of a policy:
  * raw LIBERO (``OffScreenRenderEnv``, cameras rendered every step) in 1 and W processes: the baseline;
  * physics only (no cameras): the limit;
  * vlarl ``LiberoEnv`` (1 process) and ``LiberoVectorEnv`` (1 and W workers), chunk sizes C;
  * reset time (soft, vlarl default; hard, robosuite default);
  * with ``--rlinf``: RLinf 0.3.0's own ``LiberoEnv`` (training mode: every reset rebuilds the simulator
    process's env, both cameras rendered every control step) beside vlarl's vector env with the same
    task, image size, env count and chunk sizes: steps/s, reset time, RSS per env process, ours / RLinf.
    Needs ``bash scripts/reference/rlinf_env.sh``; the RLinf side runs in that interpreter.
Ratios against the targets: with C = 1 vlarl within 5 % of raw at the same process count;
with chunk C at least 0.8 x the bound C / (C x t_physics + cameras x t_render).

    python benchmarks/env_throughput.py                 # default: 128 px, C in {1, 5}, W = 2 (a few minutes)
    python benchmarks/env_throughput.py --full          # 128 and 224 px, C in {1, 5, 10}
    python benchmarks/env_throughput.py --resolutions 224 --chunks 1 5 10 --steps 40
    python benchmarks/env_throughput.py --rlinf --rlinf-only --chunks 1 5 --workers 2   # just the RLinf table

Numbers are wall-clock on a shared machine: the JSON includes the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _bench import add_smoke, emit

SUITE, TASK, TRIAL = "libero_spatial", 0, 0
ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / ".reference" / "rlinf_env"
SHIM_DIR = ROOT / "tests" / "conformance" / "rlinf_env"  # rlinf_shim: rlinf.utils.logging without ray


def _rss_mb(pid: int) -> float:
    """Resident set size of a process in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _actions(steps: int, seed: int = 0) -> np.ndarray:
    a = np.random.default_rng(seed).uniform(-0.3, 0.3, size=(steps, 7))
    a[:, -1] = -1.0
    return a


def _raw_env(resolution: int):
    """Plain LIBERO (both cameras rendered every step) at the benchmark's task and init state."""
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.setup import prepare_libero

    prepare_libero(check_assets=False)  # before importing libero: no prompt
    from libero.libero.envs import OffScreenRenderEnv

    task = suites.get_task(SUITE, TASK)
    env = OffScreenRenderEnv(
        bddl_file_name=str(task.bddl_file), camera_heights=resolution, camera_widths=resolution
    )
    env.seed(7)
    env.reset()
    env.set_init_state(suites.init_states(SUITE, TASK)[TRIAL])
    return env


def _raw_worker(args: tuple) -> tuple[float, float, int]:
    """Raw LIBERO: both cameras rendered on every step. Returns (start, end, steps) for aggregation."""
    resolution, steps, barrier = args
    env = _raw_env(resolution)
    actions = _actions(steps)
    if barrier is not None:
        barrier.wait()
    start = time.perf_counter()
    for a in actions:
        env.step(a)
    end = time.perf_counter()
    env.close()
    return start, end, steps


def raw_steps_per_s(resolution: int, steps: int, processes: int) -> float:
    if processes == 1:
        start, end, n = _raw_worker((resolution, steps, None))
        return n / (end - start)
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(processes)
        with ctx.Pool(processes) as pool:
            results = pool.map(_raw_worker, [(resolution, steps, barrier)] * processes)
    # time.perf_counter is system-wide monotonic on Linux, so spans across processes are comparable
    return sum(r[2] for r in results) / (max(r[1] for r in results) - min(r[0] for r in results))


def single_env(resolution: int, chunks: list[int], steps: int, cameras: tuple[str, ...]) -> dict:
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv

    env = LiberoEnv(SUITE, TASK, EnvOptions(resolution=resolution, cameras=cameras, max_episode_steps=10_000,
                                            hard_reset=False))
    out: dict = {"construct_s": round(env.timings["construct_s"], 2)}
    env.reset(TRIAL)
    out["reset_soft_s"] = round(env.timings["reset_s"], 2)
    for chunk in chunks:
        env.reset(TRIAL)
        n = max(steps // chunk, 1) * chunk
        actions = _actions(n).reshape(-1, chunk, 7)
        start = time.perf_counter()
        for a in actions:
            env.step_chunk(a)
        out[f"C{chunk}"] = round(n / (time.perf_counter() - start), 2)
    env.close()
    return out


def paired_c1(resolution: int, steps: int, block: int = 3) -> dict:
    """Raw LIBERO and vlarl (C = 1) in one process, timed in alternating blocks of ``block`` steps.

    Pairing puts both under the same machine load, which drifts on a shared machine; the ratio of the
    summed times is the overhead of vlarl at C = 1 (gating, rotation, state assembly, checks).
    """
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv, close_libero_env

    ours = LiberoEnv(SUITE, TASK, EnvOptions(resolution=resolution, max_episode_steps=10_000, hard_reset=False))
    raw = _raw_env(resolution)
    ours.reset(TRIAL)
    actions = _actions(steps)
    t_raw = t_ours = 0.0
    for i in range(0, steps, block):
        start = time.perf_counter()
        for a in actions[i : i + block]:
            raw.step(a)
        t_raw += time.perf_counter() - start
        start = time.perf_counter()
        for a in actions[i : i + block]:
            ours.step_chunk(a[None])
        t_ours += time.perf_counter() - start
    close_libero_env(raw)  # frees its GL objects in its own context
    ours.close()
    return {
        "raw_steps_per_s": round(steps / t_raw, 2),
        "vlarl_C1_steps_per_s": round(steps / t_ours, 2),
        "vlarl_vs_raw": round(t_raw / t_ours, 3),
    }


def hard_reset_s(resolution: int) -> float:
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv

    env = LiberoEnv(SUITE, TASK, EnvOptions(resolution=resolution, hard_reset=True))
    env.reset(TRIAL)
    seconds = env.timings["reset_s"]
    env.close()
    return round(seconds, 2)


def vector_env(resolution: int, chunks: list[int], steps: int, workers: int) -> dict:
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

    spec = VectorEnvSpec(
        suite=SUITE, task_ids=(TASK,), num_envs=workers, num_workers=workers, resolution=resolution,
        max_episode_steps=10_000, hard_reset=False,
    )  # fmt: skip
    out: dict = {}
    with LiberoVectorEnv(spec) as vec:
        start = time.perf_counter()
        vec.reset()
        out["first_reset_s"] = round(time.perf_counter() - start, 2)  # includes simulator construction
        for chunk in chunks:
            vec.reset()
            n = max(steps // chunk, 1) * chunk
            actions = np.broadcast_to(_actions(n).reshape(-1, 1, chunk, 7), (n // chunk, workers, chunk, 7))
            start = time.perf_counter()
            for a in actions:
                vec.step_chunk(np.ascontiguousarray(a))
            out[f"C{chunk}"] = round(workers * n / (time.perf_counter() - start), 2)
    return out


def vector_env_table(resolution: int, chunks: list[int], steps: int, envs: int) -> dict:
    """vlarl's vector env (rlinf protocol, one env per worker) measured like :func:`rlinf_side_table`."""
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec

    spec = VectorEnvSpec(suite=SUITE, task_ids=(TASK,), num_envs=envs, num_workers=envs, resolution=resolution,
                         protocol="rlinf", max_episode_steps=10_000, init_state_order="random")
    out: dict = {}
    with LiberoVectorEnv(spec) as vec:
        start = time.perf_counter()
        vec.reset()
        out["first_reset_s"] = round(time.perf_counter() - start, 2)  # includes simulator construction
        start = time.perf_counter()
        vec.reset()
        out["reset_s"] = round(time.perf_counter() - start, 2)
        for chunk in chunks:
            n = max(steps // chunk, 1) * chunk
            actions = np.broadcast_to(_actions(n).reshape(-1, 1, chunk, 7), (n // chunk, envs, chunk, 7))
            start = time.perf_counter()
            for a in actions:
                vec.step_chunk(np.ascontiguousarray(a))
            out[f"C{chunk}_steps_per_s"] = round(envs * n / (time.perf_counter() - start), 2)
        out["rss_per_env_process_mb"] = round(float(np.mean([_rss_mb(p) for p in vec.worker_pids()])), 0)
    return out


def rlinf_side_table(resolution: int, chunks: list[int], steps: int, envs: int) -> dict:
    """RLinf's LiberoEnv (training mode) with ``envs`` env processes; runs in the reference interpreter."""
    sys.path.insert(0, str(SHIM_DIR))
    import rlinf_shim  # noqa: F401
    from omegaconf import OmegaConf
    from rlinf.envs.libero.libero_env import LiberoEnv

    cfg = OmegaConf.create({
        "task_suite_name": SUITE, "task_id_filter": [TASK], "seed": 0, "group_size": 1,
        "use_fixed_reset_state_ids": True, "use_ordered_reset_state_ids": False, "specific_reset_id": None,
        "ignore_terminations": False, "auto_reset": False, "is_eval": False, "max_episode_steps": 10_000,
        "use_rel_reward": True, "use_step_penalty": False, "reward_coef": 1.0, "reset_gripper_open": True,
        "init_params": {"camera_heights": resolution, "camera_widths": resolution}, "video_cfg": {"save_video": False},
    })  # fmt: skip
    out: dict = {}
    start = time.perf_counter()
    env = LiberoEnv(cfg, num_envs=envs, seed_offset=0, total_num_processes=1, worker_info=None)
    env.reset()
    out["first_reset_s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    env.reset()  # training mode: rebuilds every env (ReconfigureSubprocEnv reconfigure), then 15 settle steps
    out["reset_s"] = round(time.perf_counter() - start, 2)
    for chunk in chunks:
        n = max(steps // chunk, 1) * chunk
        actions = np.broadcast_to(_actions(n).reshape(-1, 1, chunk, 7), (n // chunk, envs, chunk, 7))
        start = time.perf_counter()
        for a in actions:
            env.chunk_step(np.ascontiguousarray(a))
        out[f"C{chunk}_steps_per_s"] = round(envs * n / (time.perf_counter() - start), 2)
    out["rss_per_env_process_mb"] = round(float(np.mean([_rss_mb(w.process.pid) for w in env.env.workers])), 0)
    env.env.close()
    return out


def rlinf_table(resolution: int, chunks: list[int], steps: int, envs: int) -> dict:
    """RLinf's row (subprocess in .reference/rlinf_env) and vlarl's row, then ours / RLinf."""
    python = REF / "bin" / "python"
    if not python.is_file():
        return {"error": "RLinf reference env missing: run `bash scripts/reference/rlinf_env.sh`"}
    from vlarl_cli.envs.libero.setup import prepare_libero

    gl = prepare_libero(check_assets=False).mujoco_gl
    (package,) = REF.glob("lib/python3*/site-packages/libero/libero")
    with tempfile.TemporaryDirectory() as config:
        entries = {"benchmark_root": package, "bddl_files": package / "bddl_files",
                   "init_states": package / "init_files", "datasets": package.parent / "datasets",
                   "assets": package / "assets"}  # fmt: skip
        Path(config, "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in entries.items()))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.update(LIBERO_CONFIG_PATH=config, MUJOCO_GL=gl, OMP_NUM_THREADS="1")
        args = [str(python), __file__, "--rlinf-side", "--resolutions", str(resolution), "--steps", str(steps),
                "--workers", str(envs), "--chunks", *map(str, chunks)]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = vector_env_table(resolution, chunks, steps, envs)
    ratios = {f"C{c}_steps_per_s": round(ours[f"C{c}_steps_per_s"] / theirs[f"C{c}_steps_per_s"], 2) for c in chunks}
    ratios["reset_s"] = round(ours["reset_s"] / theirs["reset_s"], 3)
    ratios["rss_per_env_process"] = round(ours["rss_per_env_process_mb"] / theirs["rss_per_env_process_mb"], 3)
    return {"envs": envs, "rlinf": theirs, "vlarl": ours, "ours_over_rlinf": ratios}


def physics_steps_per_s(steps: int) -> float:
    res = single_env(128, [steps], steps * 4, cameras=())
    return res[f"C{steps}"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="128 and 224 px, chunks 1 5 10")
    parser.add_argument("--resolutions", type=int, nargs="+", default=None)
    parser.add_argument("--chunks", type=int, nargs="+", default=None)
    parser.add_argument("--steps", type=int, default=30, help="policy steps per measurement")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--skip-vector", action="store_true")
    parser.add_argument("--rlinf", action="store_true", help="add RLinf's LiberoEnv beside vlarl's vector env")
    parser.add_argument("--rlinf-only", action="store_true", help="with --rlinf: only that table")
    parser.add_argument("--rlinf-side", action="store_true", help=argparse.SUPPRESS)  # inside the reference env
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.chunks, args.workers, args.resolutions = 5, [5], 1, [128]
    if args.rlinf_side:
        res = (args.resolutions or [128])[0]
        print(json.dumps(rlinf_side_table(res, args.chunks or [1, 5], args.steps, args.workers)))
        return
    resolutions = args.resolutions or ([128, 224] if args.full else [128])
    chunks = args.chunks or ([1, 5, 10] if args.full else [1, 5])
    w = args.workers
    cams = 2
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()

    result: dict = {
        "benchmark": "env_throughput",
        "suite": SUITE,
        "task": TASK,
        "cameras": cams,
        "workers": w,
    }
    if args.rlinf:
        result["rlinf_vs_vlarl"] = {str(r): rlinf_table(r, chunks, args.steps, w) for r in resolutions}
    if args.rlinf_only:
        resolutions = []
    else:
        result["reset_hard_s"] = hard_reset_s(resolutions[0])
    per_res: dict = {}
    for res in resolutions:
        entry: dict = {}
        # Physics and the raw baseline are measured next to the vlarl figures they are compared with:
        # on a shared machine the load drifts within a run.
        phys = physics_steps_per_s(100)
        entry["physics_only_steps_per_s"] = phys
        raw1 = raw_steps_per_s(res, args.steps, 1)
        entry["raw_1proc_steps_per_s"] = round(raw1, 2)
        if w > 1:
            entry[f"raw_{w}proc_steps_per_s"] = round(raw_steps_per_s(res, args.steps, w), 2)
        entry["vlarl_single"] = single_env(res, chunks, args.steps, ("main", "wrist"))
        entry["paired_C1"] = paired_c1(res, args.steps)
        if not args.skip_vector:
            entry["vlarl_vector_1w"] = vector_env(res, chunks, args.steps, 1)
            if w > 1:
                entry[f"vlarl_vector_{w}w"] = vector_env(res, chunks, args.steps, w)
        # Targets. Render time per camera frame from the raw baseline: t_step = t_phys + cams * t_render.
        t_phys = 1.0 / phys
        t_render = max((1.0 / raw1 - t_phys) / cams, 1e-9)
        ratios: dict = {
            "t_physics_ms": round(1e3 * t_phys, 1),
            "t_render_per_camera_ms": round(1e3 * t_render, 1),
        }
        for chunk in chunks:
            bound = chunk / (chunk * t_phys + cams * t_render)
            ratios[f"C{chunk}_bound_steps_per_s"] = round(bound, 2)
            ratios[f"C{chunk}_single_vs_bound"] = round(entry["vlarl_single"][f"C{chunk}"] / bound, 3)
            ratios[f"C{chunk}_single_vs_raw"] = round(entry["vlarl_single"][f"C{chunk}"] / raw1, 3)
            if not args.skip_vector:
                ratios[f"C{chunk}_vector1w_vs_bound"] = round(
                    entry["vlarl_vector_1w"][f"C{chunk}"] / bound, 3
                )
                if w > 1:
                    raw_w = entry[f"raw_{w}proc_steps_per_s"]
                    ratios[f"C{chunk}_vector{w}w_vs_raw{w}"] = round(
                        entry[f"vlarl_vector_{w}w"][f"C{chunk}"] / raw_w, 3
                    )
        # C = 1 parity uses the paired measurement (same load for both); the unpaired ratios above drift.
        targets = {"C1_within_5pct_of_raw_paired": entry["paired_C1"]["vlarl_vs_raw"] >= 0.95}
        for chunk in chunks:
            if chunk > 1:
                targets[f"C{chunk}_at_least_0.8_bound"] = ratios[f"C{chunk}_single_vs_bound"] >= 0.8
        entry["ratios"] = ratios
        entry["targets_met"] = targets
        per_res[str(res)] = entry
    result["resolutions"] = per_res
    result["loadavg_start"] = round(load_start, 2)
    result["loadavg_end"] = round(os.getloadavg()[0], 2)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    emit(result, smoke=args.smoke)


if __name__ == "__main__":
    main()
