"""Time per phase of a training iteration (env, rollout inference, weight sync, actor update) for the
CPU quickstart, with pipeline_stage_num 1 and 2, in one run. Prints one JSON line.

    python benchmarks/iteration_breakdown.py [--envs 2] [--steps 40] [--iterations 2]

The first iteration builds the simulators, so the figures are taken from the last one. With 2 stages the
simulator stepping of one half of the envs overlaps the policy inference of the other half; the target is
collect(2 stages) <= 1.15 x max(env time, inference time) of the 1-stage run. Rollout and actor share one
module in this placement, so weight sync costs nothing (reported as 0).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def run(stages: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.rl import train

    overrides = [
        f"rollout.pipeline_stage_num={stages}", f"runner.max_epochs={args.iterations}",
        f"runner.logger.log_path={root / f'stages{stages}'}", "runner.save_interval=-1",
        f"env.train.total_num_envs={args.envs}", f"env.train.num_workers={args.envs}",
        f"env.train.max_episode_steps={args.steps}", f"env.train.max_steps_per_rollout_epoch={args.steps}",
        "env.train.video_cfg.save_video=false",
        f"actor.global_batch_size={args.envs * args.steps // 5}", f"actor.micro_batch_size={args.envs * args.steps // 10}",
        f"actor.model.preset={args.preset}",
    ]
    result = train(load_config("quickstart", overrides))
    m = result.last_metrics
    return {"collect_s": m["time/collect"], "env_s": m["time/env"], "inference_s": m["time/rollout"],
            "sync_s": 0.0, "actor_s": m["time/actor"], "iteration_s": m["time/iteration"],
            "env_steps_per_s": m["time/env_steps_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--preset", default="tiny", help="pi0 preset: tiny (the quickstart's) or small, whose "
                        "inference time is comparable to the simulator's, so the overlap shows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one = run(1, args, Path(tmp))
        two = run(2, args, Path(tmp))
    bound = max(one["env_s"], one["inference_s"])
    print(json.dumps({
        "benchmark": "iteration_breakdown", "preset": args.preset, "envs": args.envs, "steps_per_episode": args.steps,
        "stages_1": one, "stages_2": two,
        "collect_2_over_max_parts_1": two["collect_s"] / bound,
        "target_collect_2_over_max_parts_1": 1.15,
        "pipeline_speedup_collect": one["collect_s"] / two["collect_s"],
    }))


if __name__ == "__main__":
    main()
