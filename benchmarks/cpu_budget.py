"""The CPU budget's effect: the quickstart's iteration and `vlarl eval`, with and without the budget, side by side.

    python benchmarks/cpu_budget.py                       # 2 rounds: 16 envs x 100 steps x 2 iterations, 4 eval episodes
    python benchmarks/cpu_budget.py --rounds 3 --steps 220
    python benchmarks/cpu_budget.py --smoke               # seconds of work per arm: the code path only (CI)

Two arms, interleaved round by round (budget, none, budget, none, ...) so that the load of other jobs
reaches both alike:

- ``budget``: what ``distributed/cpu_budget.py`` decides on this machine (printed in the JSON);
- ``none``: what ran before the budget existed: torch's default thread count (``torch.get_num_threads()``
  of a fresh process) for the inference and the update alike (``cluster.cpu_budget.inference_threads`` /
  ``trainer_threads`` set to it).

Both arms use the same env workers (the quickstart's ``num_workers: 2``), so only the threads differ.
Quickstart: ``vlarl rl-train --config quickstart`` with evaluation off, ``--envs`` envs in GRPO groups of
4, ``--steps`` steps per episode, ``--iterations`` iterations; the figures are the last iteration's
(``time/step``, ``time/rollout/predict``, ``time/env/env_interact_step``, ``time/actor_training``).
Eval: :func:`vlarl_cli.training.evaluation.run_episodes` (what ``vlarl eval`` runs) with the quickstart's
policy, ``--eval-episodes`` episodes of libero_spatial task 0, 2 envs, ``--steps`` steps each.

Prints ONE JSON line: each arm's median figures and ``none_over_budget`` ratios (> 1: the budget is faster),
with the machine (``benchmarks/_bench.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from _bench import add_smoke, emit

DEFAULT_THREADS = torch.get_num_threads()  # before anything sets it: what every process used to run with


def _arm_overrides(arm: str) -> list[str]:
    if arm == "budget":
        return []
    return [f"cluster.cpu_budget.inference_threads={DEFAULT_THREADS}",
            f"cluster.cpu_budget.trainer_threads={DEFAULT_THREADS}"]


def iteration(arm: str, args: argparse.Namespace, root: Path) -> dict[str, float]:
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.rl import train

    group = 4 if args.envs % 4 == 0 else 1
    overrides = [
        f"runner.max_epochs={args.iterations}", f"runner.logger.log_path={root / arm / str(time.time_ns())}",
        "runner.save_interval=-1", "runner.val_before_train=false", "runner.val_check_interval=-1",
        f"env.train.total_num_envs={args.envs}", f"env.train.group_size={group}", f"algorithm.group_size={group}",
        f"env.train.max_episode_steps={args.steps}", f"env.train.max_steps_per_rollout_epoch={args.steps}",
        f"actor.global_batch_size={args.envs * args.steps // 5}", f"actor.micro_batch_size={args.envs * args.steps // 10}",
        *_arm_overrides(arm),
    ]
    m = train(load_config("quickstart", overrides)).last_metrics
    return {"iteration_s": m["time/step"], "inference_s": m["time/rollout/predict"],
            "env_s": m["time/env/env_interact_step"], "actor_s": m["time/actor_training"]}


def evaluation(arm: str, args: argparse.Namespace, policy: Any, config: Any) -> dict[str, float]:
    from vlarl_cli.training.evaluation import EvalSettings, plan_episodes, run_episodes

    budget = config.cluster.cpu_budget.model_dump()
    if arm == "none":
        budget.update(inference_threads=DEFAULT_THREADS, trainer_threads=DEFAULT_THREADS)
    settings = EvalSettings(suite="libero_spatial", tasks=(0,), trials=args.eval_episodes, num_envs=2,
                            num_workers=2, resolution=128, max_steps=args.steps, deterministic=True)
    keys = plan_episodes("libero_spatial", (0,), args.eval_episodes)
    _, stats = run_episodes(policy, settings, keys, log=False, cpu_budget=budget)
    return {"eval_s_per_episode": stats.wall_s / max(1, stats.episodes), "eval_inference_s": stats.policy_time_s,
            "eval_env_s": stats.env_time_s}


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of both arms (medians)")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100, help="env steps per episode (training and eval)")
    parser.add_argument("--iterations", type=int, default=2, help="rl-train iterations; the last one is timed")
    parser.add_argument("--eval-episodes", type=int, default=4)
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.envs, args.steps, args.iterations, args.eval_episodes = 1, 4, 10, 1, 2

    from vlarl_cli.training.envs import rank_budget
    from vlarl_cli.training.evaluation import load_policy

    real_stdout = os.dup(1)  # LIBERO and robosuite print to stdout: keep it for the JSON line
    os.dup2(2, 1)
    policy, _, config = load_policy(None, "quickstart", [])
    rows: dict[str, list[dict[str, float]]] = {"budget": [], "none": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for arm in rows:
                rows[arm].append({**iteration(arm, args, Path(tmp)), **evaluation(arm, args, policy, config)})
    arms = {arm: _median(r) for arm, r in rows.items()}
    budget = rank_budget(config, "cpu", args.envs)
    sys.stdout.flush()
    os.dup2(real_stdout, 1)
    emit({"benchmark": "cpu_budget", "rounds": args.rounds, "envs": args.envs, "steps": args.steps,
          "iterations": args.iterations, "eval_episodes": args.eval_episodes,
          "budget_plan": budget.describe(), "torch_default_threads": DEFAULT_THREADS, **arms,
          "none_over_budget": {k: round(arms["none"][k] / max(arms["budget"][k], 1e-9), 2) for k in arms["none"]}},
         smoke=args.smoke)


if __name__ == "__main__":
    main()
