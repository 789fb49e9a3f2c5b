"""Learning curve of the RL core on the toy reach task (envs/toy.py): success rate vs iteration.

Runs the real pieces end to end: a policy from ``policies/toy.py`` (flow matching through the shared
sampler, Gaussian, or discrete tokens), ``algorithms.advantages`` (GAE / GRPO / ...), and
``training.update.ppo_update``. Writes ``<out>/learning_curve.png`` and ``<out>/learning_curve.json`` and
prints ONE JSON line (final and initial success per run, wall time).

    python benchmarks/learning_curve.py --out runs/learning_curve --iterations 60
    python benchmarks/learning_curve.py --runs flow_sde:gae,flow_sde:grpo,gaussian:gae --iterations 30

The training loop lives in ``vlarl_cli.training.toy`` (``tests/training/test_learning.py`` runs it too).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from _bench import add_smoke, emit
from vlarl_cli.training.toy import ToyRun, train_toy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/learning_curve")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--runs", default="flow_sde:gae,flow_sde:grpo,flow_noise:gae,gaussian:gae,token:gae",
                    help="comma-separated policy:adv_type pairs")
    ap.add_argument("--seed", type=int, default=0)
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:
        args.iterations, args.runs = 1, "flow_sde:gae,token:grpo"
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, object]] = {}
    t0 = time.perf_counter()
    for spec in args.runs.split(","):
        kind, adv = spec.split(":")
        start = time.perf_counter()
        # GRPO compares episodes within groups of 8 sharing a goal: 128 envs give 16 goals per iteration
        extra: dict[str, object] = {"num_envs": 128, "global_batch_size": 256} if adv == "grpo" else {}
        if kind == "flow_noise":  # ReinFlow scores the whole chain; one noisy step explores too little here
            extra["joint_logprob"] = True
        res = train_toy(ToyRun(policy=kind, adv_type=adv, iterations=args.iterations, seed=args.seed,
                               **extra))  # type: ignore[arg-type]
        res["seconds"] = time.perf_counter() - start
        results[spec] = res
    (out / "learning_curve.json").write_text(json.dumps(results, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for spec, res in results.items():
        ax.plot(res["iterations"], res["success"], marker="o", label=spec)
    ax.set_xlabel("iteration (64 envs, 128 for GRPO; 16 env steps each)")
    ax.set_ylabel("eval success rate (deterministic)")
    ax.set_ylim(0, 1.02)
    ax.set_title("toy reach task: PPO / GRPO on the vlarl RL core")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "learning_curve.png", dpi=100)
    summary = {"benchmark": "learning_curve", "iterations": args.iterations, "seed": args.seed,
               "seconds": round(time.perf_counter() - t0, 2), "out": str(out),
               "runs": {k: {"initial_success": v["success"][0], "final_success": v["success"][-1],  # type: ignore[index]
                            "seconds": round(float(v["seconds"]), 2)} for k, v in results.items()}}
    emit(summary, smoke=args.smoke)


if __name__ == "__main__":
    main()
