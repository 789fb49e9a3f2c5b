"""Learning curve of the RL core on the toy reach task (envs/toy.py): success rate vs iteration.

Runs the real pieces end to end: a policy from ``policies/toy.py`` (flow matching through the shared
sampler, Gaussian, or discrete tokens), ``algorithms.advantages`` (GAE / GRPO / ...), and
``training.update.ppo_update``. Writes ``<out>/learning_curve.png`` and ``<out>/learning_curve.json`` and
prints ONE JSON line (final and initial success per run, wall time).

    python benchmarks/learning_curve.py --out runs/learning_curve --iterations 60
    python benchmarks/learning_curve.py --runs flow_sde:gae,flow_sde:grpo,gaussian:gae --iterations 30

``train_toy`` is also what ``tests/training/test_learning.py`` runs (with fewer iterations).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from vlarl_cli.algorithms.advantages import (
    aggregate_dones,
    aggregate_rewards,
    compute_advantages,
    loss_mask_from_dones,
    trajectory_valid_fraction,
)
from vlarl_cli.envs.toy import ReachEnv, collect_rollout
from vlarl_cli.policies.flow_matching import FlowConfig
from vlarl_cli.policies.toy import ToyFlowPolicy, ToyGaussianPolicy, ToyTokenPolicy
from vlarl_cli.training.update import RolloutBatch, UpdateSettings, ppo_update

POLICY_KINDS = ("flow_sde", "flow_cps", "flow_noise", "gaussian", "token")


@dataclass
class ToyRun:
    """Settings of one toy training run (plain numbers)."""

    policy: str = "flow_sde"  # one of POLICY_KINDS
    adv_type: str = "gae"
    iterations: int = 30
    num_envs: int = 64
    group_size: int = 8  # GRPO only
    eval_envs: int = 256
    lr: float = 5e-3
    seed: int = 0
    update_epoch: int = 4
    global_batch_size: int = 128
    micro_batch_size: int = 64
    logprob_type: str = "chunk_level"
    joint_logprob: bool = False
    denoising_steps: int = 4
    noise_level: float = 1.0
    entropy_bonus: float = 0.0
    # flow_noise std bounds: ReinFlow's [0.08, 0.16] suits fine-tuning a pretrained policy; training the toy
    # from scratch needs exploration on the scale of the initial noise
    noise_std_min: float = 0.3
    noise_std_max: float = 1.0
    eval_every: int = 5
    extra: dict[str, float] = field(default_factory=dict)


def make_policy(run: ToyRun, env: ReachEnv) -> torch.nn.Module:
    kw = {"state_dim": env.state_dim, "action_dim": env.action_dim, "chunk": env.chunk, "seed": run.seed}
    if run.policy.startswith("flow_"):
        flow = FlowConfig(num_steps=run.denoising_steps, method=run.policy, noise_level=run.noise_level,
                          joint_logprob=run.joint_logprob, logvar_min=2 * math.log(run.noise_std_min),
                          logvar_max=2 * math.log(run.noise_std_max))
        return ToyFlowPolicy(flow=flow, **kw)
    if run.policy == "gaussian":
        return ToyGaussianPolicy(**kw)
    if run.policy == "token":
        return ToyTokenPolicy(**kw)
    raise ValueError(f"unknown toy policy {run.policy!r}; known: {POLICY_KINDS}")


@torch.no_grad()
def evaluate_success(policy: torch.nn.Module, goals: torch.Tensor) -> float:
    """Success rate of the deterministic policy on fixed goals."""
    env = ReachEnv(goals.shape[0])
    return collect_rollout(env, policy, deterministic=True, goals=goals).success.float().mean().item()


def train_toy(run: ToyRun) -> dict[str, object]:
    """Train a toy policy; return ``{"iterations": [...], "success": [...], "train_success": [...],
    "metrics": last update metrics}``. Deterministic for a fixed ``run.seed``."""
    torch.manual_seed(run.seed)
    env = ReachEnv(run.num_envs)
    policy = make_policy(run, env)
    optimizer = torch.optim.Adam(policy.parameters(), lr=run.lr)
    gen = torch.Generator().manual_seed(run.seed + 100)
    eval_goals = env.sample_goals(run.eval_envs, torch.Generator().manual_seed(12345))
    grpo = run.adv_type == "grpo"
    settings = UpdateSettings(
        update_epoch=run.update_epoch, global_batch_size=run.global_batch_size,
        micro_batch_size=run.micro_batch_size, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0,
        value_clip=None, huber_delta=10.0, entropy_bonus=run.entropy_bonus, kl_beta=0.0, kl_type="k3",
        logprob_type=run.logprob_type, loss_agg="token-mean", clip_grad=1.0, value_coef=0.5)
    its, succ, train_succ = [0], [evaluate_success(policy, eval_goals)], []
    metrics: dict[str, float] = {}
    steps = 0
    for it in range(1, run.iterations + 1):
        ro = collect_rollout(env, policy, group_size=run.group_size if grpo else 1, generator=gen)
        train_succ.append(ro.success.float().mean().item())
        rewards = aggregate_rewards(ro.rewards, "chunk_level")  # [T, B]
        dones = aggregate_dones(ro.dones, "chunk_level")  # [T+1, B]
        chunk_mask = loss_mask_from_dones(dones)  # [T, B]
        step_mask = loss_mask_from_dones(ro.dones)  # [T, B, C]
        res = compute_advantages(run.adv_type, rewards, dones, chunk_mask, values=ro.values, gamma=0.99,
                                 gae_lambda=0.95, group_size=run.group_size, normalize=True)
        t, b = rewards.shape
        step_mask = step_mask & res.loss_mask.unsqueeze(-1)  # GRPO filtering, if any
        batch = RolloutBatch(
            replay=ro.replay, old_logprobs=ro.logprobs.reshape(t * b, *ro.logprobs.shape[2:]),
            advantages=res.advantages.reshape(t * b), loss_mask=step_mask.reshape(t * b, -1),
            old_values=None if grpo else ro.values[:-1].reshape(t * b),
            returns=None if res.returns is None else res.returns.reshape(t * b),
            valid_fraction=trajectory_valid_fraction(step_mask).reshape(t * b), steps_per_trajectory=t)
        metrics = ppo_update(policy, optimizer, batch, settings, generator=gen, step_offset=steps)
        steps += int(metrics["actor/optimizer_steps"])
        if it % run.eval_every == 0 or it == run.iterations:
            its.append(it)
            succ.append(evaluate_success(policy, eval_goals))
    return {"iterations": its, "success": succ, "train_success": train_succ, "metrics": metrics}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/learning_curve")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--runs", default="flow_sde:gae,flow_sde:grpo,flow_noise:gae,gaussian:gae,token:gae",
                    help="comma-separated policy:adv_type pairs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
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
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
