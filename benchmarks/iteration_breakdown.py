"""Time per phase of a training iteration (env, rollout inference, weight sync, actor update) for the
CPU quickstart, with pipeline_stage_num 1 and 2, in one run. Prints one JSON line.

    python benchmarks/iteration_breakdown.py [--envs 4] [--steps 40] [--iterations 2]
    python benchmarks/iteration_breakdown.py --smoke        # seconds: the code path only (CI)

GRPO groups are the largest size of 2-4 that divides the envs and, with the separated run, leaves whole
groups for each of its 2 actor ranks (4 envs: groups of 2; the quickstart's 4 does not fit); evaluation is off
(the quickstart evaluates 20 episodes before training), so only iterations are timed. The first iteration
builds the simulators, so the figures are taken from the last one. With 2 stages the
simulator stepping of one half of the envs overlaps the policy inference of the other half; the target is
collect(2 stages) <= 1.15 x max(env time, inference time) of the 1-stage run. Rollout and actor share one
module in the collocated placement, so weight sync costs nothing there (reported as 0).

A third run (skip with --no-separated) uses 2 processes with the RLinf-style separated placement
``{env: 0, rollout: 1, actor: 0-1}`` and 2 stages: the env rank steps one stage while the rollout rank infers
the other, in parallel processes, and the actor weights reach the rollout copy through WeightSync
(``sync_s``); ``transfer_s`` moves the rollout to the actor ranks.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _bench import add_smoke, emit


def group_size(envs: int, separated: bool) -> int | None:
    """GRPO group size for ``envs`` envs (None: none fits)."""
    fits = [g for g in (4, 3, 2) if envs % g == 0 and (not separated or (envs // g) % 2 == 0)]
    return fits[0] if fits else None


def _overrides(stages: int, args: argparse.Namespace, log_path: Path) -> list[str]:
    group = group_size(args.envs, not args.no_separated)
    return [
        f"env.train.group_size={group}", f"algorithm.group_size={group}",
        "runner.val_before_train=false", "runner.val_check_interval=-1",
        f"rollout.pipeline_stage_num={stages}", f"runner.max_epochs={args.iterations}",
        f"runner.logger.log_path={log_path}", "runner.save_interval=-1",
        f"env.train.total_num_envs={args.envs}", f"env.train.num_workers={args.envs}",
        f"env.train.max_episode_steps={args.steps}", f"env.train.max_steps_per_rollout_epoch={args.steps}",
        "env.train.video_cfg.save_video=false",
        f"actor.global_batch_size={args.envs * args.steps // 5}", f"actor.micro_batch_size={args.envs * args.steps // 10}",
        f"actor.model.preset={args.preset}",
    ]


def _phases(m: dict[str, float]) -> dict[str, float]:
    return {"collect_s": m["time/generate_rollouts"], "env_s": m["time/env/env_interact_step"], "inference_s": m["time/rollout/predict"],
            "sync_s": m.get("time/sync_weights", 0.0), "transfer_s": m.get("time/transfer", 0.0),
            "actor_s": m["time/actor_training"], "iteration_s": m["time/step"],
            "env_steps_per_s": m["time/env_steps_per_s"]}


def run(stages: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.rl import train

    result = train(load_config("quickstart", _overrides(stages, args, root / f"stages{stages}")))
    return _phases(result.last_metrics)


def run_separated(args: argparse.Namespace, root: Path) -> dict[str, float]:
    """2 processes through the CLI launcher (env on rank 0, rollout on rank 1, actor on both), 2 stages."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = root / "separated"
    overrides = _overrides(2, args, log)  # same env workers as the collocated runs
    cmd = [sys.executable, "-m", "vlarl_cli.cli.main", "rl-train", "--config", "quickstart", *overrides,
           "cluster.component_placement={env: 0, rollout: 1, actor: 0-1}", "--nproc-per-node", "2",
           "--master-port", str(port)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode:
        raise SystemExit(out.stdout[-2000:] + out.stderr[-2000:])
    rows = [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]
    return _phases(rows[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--preset", default="tiny", help="pi0 preset: tiny (the quickstart's) or small, whose "
                        "inference time is comparable to the simulator's, so the overlap shows")
    parser.add_argument("--no-separated", action="store_true", help="skip the 2-process separated run")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.envs, args.steps, args.iterations, args.no_separated = 2, 10, 1, True
    if group_size(args.envs, not args.no_separated) is None:
        parser.error(f"--envs {args.envs} makes no GRPO groups of 2-4 envs"
                     + ("" if args.no_separated else " with whole groups on each of the separated run's 2 actor ranks")
                     + ": use --envs 4 or 8" + ("" if args.no_separated else ", or --no-separated"))
    with tempfile.TemporaryDirectory() as tmp:
        one = run(1, args, Path(tmp))
        two = run(2, args, Path(tmp))
        separated = None if args.no_separated else run_separated(args, Path(tmp))
    bound = max(one["env_s"], one["inference_s"])
    result = {
        "benchmark": "iteration_breakdown", "preset": args.preset, "envs": args.envs, "steps_per_episode": args.steps,
        "stages_1": one, "stages_2": two,
        "collect_2_over_max_parts_1": two["collect_s"] / bound,
        "target_collect_2_over_max_parts_1": 1.15,
        "pipeline_speedup_collect": one["collect_s"] / two["collect_s"],
    }
    if separated is not None:
        result.update({"separated_stages_2": separated,
                       "separated_collect_over_max_parts_1": separated["collect_s"] / bound,
                       "separated_speedup_collect": one["collect_s"] / separated["collect_s"]})
    emit(result, smoke=args.smoke)


if __name__ == "__main__":
    main()
