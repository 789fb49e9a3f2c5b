"""Does PPO learn a ManiSkill3 task from state on a CPU? Before / after numbers of one training run, JSON.

Runs the preset ``maniskill_pushcube_ppo_mlp`` (PushCube-v1, 35-d state observations, ManiSkill's
normalized dense reward, pd_ee_delta_pose, the cleanrl-style Gaussian MLP policy) through ``train()`` for
``--iterations`` iterations, and evaluates the policy before (the config's initial weights: the same
``actor.seed`` the run starts from) and after training with ``vlarl eval``'s ManiSkill path on held-out
episode seeds (training draws seeds 0..999; evaluation uses 1000.. by default), deterministic actions.

    python benchmarks/maniskill_learning.py                              # 80 iterations x 16 envs x 50 steps
    python benchmarks/maniskill_learning.py --iterations 10 --out /tmp/x.json

Prints one JSON object (and writes it to --out): eval success rate with its 95% Wilson interval and mean
return before / after, the training curve's first and last iterations, env steps, wall time, load average.
Numbers are wall-clock on a shared machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

from _bench import add_smoke, emit, skipped

PRESET = "maniskill_pushcube_ppo_mlp"
TASK = "PushCube-v1"


def _eval(checkpoint: Path | None, overrides: list[str], episodes: int, first_seed: int) -> dict:
    from vlarl_cli.training.evaluation.maniskill import ManiSkillEvalSettings, evaluate_maniskill

    settings = ManiSkillEvalSettings(task=TASK, episodes=episodes, num_envs=16, first_seed=first_seed)
    with tempfile.TemporaryDirectory() as tmp:
        r = evaluate_maniskill(checkpoint, None if checkpoint else PRESET, overrides, settings=settings,
                               out_dir=Path(tmp))
    return {"success_rate": r.success_rate, "successes": r.successes, "episodes": r.episodes,
            "wilson95": list(r.wilson95), "mean_return": r.mean_return, "mean_episode_len": r.mean_episode_len}


def _curve(rows: list[dict], k: int) -> dict:
    def mean(part: list[dict], key: str) -> float:
        return sum(r[key] for r in part) / len(part)

    first, last = rows[:k], rows[-k:]
    return {f"first_{k}_iterations": {"success_once": mean(first, "env/success_once"), "return": mean(first, "env/return")},
            f"last_{k}_iterations": {"success_once": mean(last, "env/success_once"), "return": mean(last, "env/return")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=80)
    parser.add_argument("--eval-episodes", type=int, default=64)
    parser.add_argument("--eval-first-seed", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    add_smoke(parser)
    args = parser.parse_args()
    if importlib.util.find_spec("mani_skill") is None:
        skipped("maniskill_learning", "mani_skill is not installed (pip install 'vlarl[maniskill]')", smoke=args.smoke)
        return
    if args.smoke:
        args.iterations, args.eval_episodes = 1, 2

    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.rl import train

    load_start = os.getloadavg()
    before = _eval(None, [], args.eval_episodes, args.eval_first_seed)
    with tempfile.TemporaryDirectory() as run_dir:
        overrides = [f"runner.max_epochs={args.iterations}", f"runner.save_interval={args.iterations}",
                     "runner.val_check_interval=-1", f"runner.logger.log_path={run_dir}"]
        t0 = time.perf_counter()
        result = train(load_config(PRESET, overrides))
        wall = time.perf_counter() - t0
        rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
        after = _eval(result.checkpoint, [], args.eval_episodes, args.eval_first_seed)
    # auto_reset is off and every env plays one episode per iteration: its length is the env steps it took
    env_steps = int(sum(r["env/episode_len"] * r["env/num_trajectories"] for r in rows))
    out = {"benchmark": "maniskill_learning", "preset": PRESET, "task": TASK, "obs": "state (35-d)",
           "policy": "toy_gaussian (MLP 2x64 tanh, learned log-std; MLP critic)", "algorithm": "PPO + GAE",
           "iterations": args.iterations, "env_steps": env_steps, "train_wall_s": round(wall, 1),
           "env_steps_per_s": round(env_steps / wall, 1),
           "eval": {"protocol": f"{args.eval_episodes} episodes, seeds {args.eval_first_seed}.., deterministic, "
                    "success at any step, 50-step limit", "before": before, "after": after},
           "train_curve": _curve(rows, min(5, len(rows))),
           "loadavg_start": [round(x, 2) for x in load_start], "loadavg_end": [round(x, 2) for x in os.getloadavg()],
           "cpus": os.cpu_count()}
    emit(out, smoke=args.smoke)
    if args.out is not None:
        from vlarl_cli.checkpoints.atomic import atomic_write_json

        atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
