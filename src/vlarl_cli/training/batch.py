"""From rollouts to the update's batch: advantages and returns per rollout epoch, and the rollout metrics.

Shapes as in :mod:`vlarl_cli.training.rollout` (``T`` chunk steps, ``N`` envs, ``C`` steps per chunk). The
batch is flattened t-major like the replay: row ``(e * T + t) * N + n`` for rollout epoch ``e``, whose
trajectory (``RolloutBatch.trajectory``) is ``e * N + n``. What the estimator needs (values, groups,
whole-batch normalisation) is read from its row in :data:`vlarl_cli.algorithm_types.ADVANTAGE_TYPES`.
"""

from __future__ import annotations

import torch

from vlarl_cli import keys
from vlarl_cli.algorithm_types import ADVANTAGE_TYPES
from vlarl_cli.algorithms.advantages import (
    AdvantageResult,
    advantage_metrics,
    aggregate_dones,
    aggregate_rewards,
    bootstrap_truncated,
    compute_advantages,
    loss_mask_from_dones,
    normalize_pieces,
    trajectory_valid_fraction,
)
from vlarl_cli.algorithms.reduction import LOCAL, Reduce, masked_moments
from vlarl_cli.config.schema import VlarlConfig
from vlarl_cli.errors import ConfigError
from vlarl_cli.training.rollout import Rollout
from vlarl_cli.training.update import RolloutBatch


def rollout_metrics(rollouts: list[Rollout], reduce: Reduce = LOCAL) -> dict[str, float]:
    """``env/*`` means over the finished episodes and env steps of every process (``reduce``).

    RLinf's names (``envs/libero/libero_env.py``, ``utils/metric_utils.compute_evaluate_metrics``):
    ``env/success_once``, ``env/return``, ``env/episode_len``, ``env/reward`` (per episode: return / length)
    and ``env/num_trajectories``; ours besides: ``env/success_at_end``, ``env/mean_step_reward`` (over every
    env step of the rollout) and ``env/success_any_step`` (per env, unfinished episodes included)."""
    episodes: dict[str, list[float]] = {}
    for r in rollouts:
        for k, v in r.episodes.items():
            episodes.setdefault(k, []).extend(v)
    names = keys.EPISODE_METRICS
    per_step = [ret / max(1.0, n) for ret, n in zip(episodes.get(keys.RETURN, []), episodes.get(keys.EPISODE_LEN, []),
                                                    strict=True)]
    rewards = torch.cat([r.rewards.flatten() for r in rollouts]).double()
    # did an env succeed at some step of the rollout (incl. unfinished episodes)
    any_success = torch.cat([r.success.any(dim=(0, 2)).double() for r in rollouts])
    local = [float(sum(episodes.get(k, []))) for k in names] + [
        float(len(episodes.get(keys.SUCCESS_ONCE, []))), float(rewards.sum()), float(rewards.numel()),
        float(any_success.sum()), float(any_success.numel()), float(sum(per_step))]
    sums: list[float] = reduce.sum(torch.tensor(local, dtype=torch.float64)).tolist()
    count = sums[len(names)]
    out = {f"env/{k}": sums[i] / count for i, k in enumerate(names) if count > 0}
    if count > 0:
        out["env/reward"] = sums[-1] / count
    out["env/num_trajectories"] = count
    out["env/mean_step_reward"] = sums[-5] / max(1.0, sums[-4])
    out["env/success_any_step"] = sums[-3] / max(1.0, sums[-2])
    return out


def epoch_advantages(config: VlarlConfig, r: Rollout, *, critic: bool, normalize: bool) -> AdvantageResult:
    """The configured estimator over one rollout epoch (``[T, N]``, or ``[T, N, C]`` for action-level
    rewards); with auto-reset every step is valid, else the steps after an episode's first done are masked:
    whole chunks at chunk level, single action steps at action level (RLinf ``compute_loss_mask``,
    ``rlinf/utils/metric_utils.py``: the actions of the ending chunk after the done are masked)."""
    algo = config.algorithm
    t, n, c = r.rewards.shape
    kind = ADVANTAGE_TYPES[algo.adv_type]
    values = _critic_values(r.values, algo.reward_type) if critic and kind.critic else None
    step_rewards = r.rewards
    if values is not None and config.bootstrap_truncation:
        step_rewards = bootstrap_truncated(r.rewards, r.truncated, r.final_values, algo.gamma)
    rewards = aggregate_rewards(step_rewards, algo.reward_type)  # [T, N] or [T, N, C]
    dones = aggregate_dones(r.dones, algo.reward_type)  # [T+1, N] or [T+1, N, C]
    action_level = algo.reward_type == "action_level"
    if config.env.train.auto_reset:
        step_mask = torch.ones((t, n, c) if action_level else (t, n), dtype=torch.bool)
    else:  # from the action dones [T+1, N, C] or the chunk dones [T+1, N]
        step_mask = loss_mask_from_dones(r.dones if action_level else r.dones.any(dim=-1))
    bounds = (algo.rewards_lower_bound, algo.rewards_upper_bound) if algo.filter_rewards else None
    return compute_advantages(
        algo.adv_type, rewards, dones, step_mask, values=values, gamma=algo.gamma,
        gae_lambda=algo.gae_lambda, group_size=config.train_group_size, normalize=normalize,
        filter_bounds=bounds)


def _critic_values(values: torch.Tensor, reward_type: str) -> torch.Tensor:
    """The rollout's values for GAE, checked against the reward granularity: ``[T+1, N]`` (one value per
    chunk) goes with ``chunk_level`` rewards, ``[T+1, N, C]`` (one per action) with ``action_level``."""
    per_action = values.dim() == 3
    if reward_type == "action_level" and not per_action:
        raise ConfigError("reward_type action_level with adv_type gae needs one value per executed action, but "
                          "this policy gives one value per chunk.",
                          "Set actor.model.value_type: action_level (OpenVLA-OFT, toy policies), or use "
                          "reward_type chunk_level (or adv_type grpo).")
    if reward_type == "chunk_level" and per_action:
        raise ConfigError("The policy gives one value per executed action (value_type action_level), but "
                          "reward_type chunk_level runs GAE over chunks.",
                          "Set algorithm.reward_type: action_level, or actor.model.value_type: chunk_level.")
    return values


def build_batch(config: VlarlConfig, rollouts: list[Rollout], *, critic: bool, reduce: Reduce = LOCAL
                ) -> tuple[RolloutBatch, dict[str, float]]:
    """Advantages and returns per rollout epoch, flattened into one ``RolloutBatch`` of E*T*N samples.
    Batch-wide normalisation and the metrics cover every rollout epoch and, through ``reduce``, every
    process."""
    algo = config.algorithm
    normalize_later = algo.normalize_advantages and ADVANTAGE_TYPES[algo.adv_type].batch_normalized
    results = [epoch_advantages(config, r, critic=critic, normalize=algo.normalize_advantages and not normalize_later)
               for r in rollouts]
    if normalize_later:  # one mean / std over all rollout epochs on all processes
        normalized = normalize_pieces([(x.advantages, x.loss_mask) for x in results], reduce=reduce)
        for x, a in zip(results, normalized, strict=True):
            x.advantages = a
    return _flatten(rollouts, results, critic=critic, reduce=reduce)


def _flatten(rollouts: list[Rollout], results: list[AdvantageResult], *, critic: bool, reduce: Reduce
             ) -> tuple[RolloutBatch, dict[str, float]]:
    t, n, c = rollouts[0].rewards.shape

    def flat(x: torch.Tensor) -> torch.Tensor:  # [T, N, ...] -> [T*N, ...] (t-major, like the replay)
        return x.reshape(t * n, *x.shape[2:])

    adv, ret, masks, fractions, old_values, metrics_adv = [], [], [], [], [], []
    # trajectory id of each row: epoch * N + env (rows are t-major within an epoch)
    trajectory = torch.cat([(e * n + torch.arange(n)).repeat(t) for e in range(len(rollouts))])
    for r, result in zip(rollouts, results, strict=True):
        per_action = result.loss_mask.dim() == 3  # [T, N, C] at action level, else [T, N]
        valid = result.loss_mask.any(-1) if per_action else result.loss_mask  # [T, N]
        adv.append(flat(result.advantages))
        masks.append(flat(result.loss_mask if per_action else valid.unsqueeze(-1).expand(t, n, c)))
        fractions.append(flat(trajectory_valid_fraction(result.loss_mask)))
        if critic and result.returns is not None:
            ret.append(flat(result.returns))
            old_values.append(flat(r.values[:-1]))
        metrics_adv.append((result.advantages, valid if result.advantages.dim() == 2 else result.loss_mask))
    batch = RolloutBatch(
        replay={k: torch.cat([r.replay[k] for r in rollouts]) for k in rollouts[0].replay},
        old_logprobs=torch.cat([flat(r.logprobs) for r in rollouts]).float(),
        advantages=torch.cat(adv).float(),
        loss_mask=torch.cat(masks),
        old_values=torch.cat(old_values).float() if ret else None,
        returns=torch.cat(ret).float() if ret else None,
        valid_fraction=torch.cat(fractions).float(),
        steps_per_trajectory=t,
        trajectory=trajectory,
    )
    metrics = _batch_metrics(rollouts, batch, metrics_adv, ret, old_values, reduce)
    return batch, metrics


def _batch_metrics(rollouts: list[Rollout], batch: RolloutBatch, metrics_adv: list[tuple[torch.Tensor, torch.Tensor]],
                   ret: list[torch.Tensor], old_values: list[torch.Tensor], reduce: Reduce) -> dict[str, float]:
    all_adv = torch.cat([a.flatten() for a, _ in metrics_adv])
    all_mask = torch.cat([m.flatten() for _, m in metrics_adv])
    metrics = {f"rollout/{k}": v for k, v in advantage_metrics(all_adv, all_mask, reduce).items()}

    def mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> float:
        count, value, _ = masked_moments([(x.float(), mask)], reduce)
        return float(value) if count else 0.0

    if ret:
        metrics["rollout/returns_mean"] = mean(torch.cat([x.flatten() for x in ret]), all_mask)
        metrics["rollout/values_mean"] = mean(torch.cat(old_values))
    metrics["rollout/rewards"] = mean(torch.cat([r.rewards.sum(-1).flatten() for r in rollouts]))
    metrics["rollout/valid_fraction"] = mean(batch.loss_mask)
    return metrics
