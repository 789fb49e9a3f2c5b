"""Advantage estimators and the rollout-layout helpers around them (rewards, dones, loss masks).

Pure tensor functions: tensors and numbers in, tensors out, no config objects. Layout follows RLinf's
embodied runner (REFERENCE.md section 2):

* ``T`` chunk steps per env per rollout, ``B`` envs, ``C`` env steps per chunk (``num_action_chunks``).
* rewards ``[T, B]`` (``chunk_level``) or ``[T, B, C]`` (``action_level``), see :func:`aggregate_rewards`.
* dones ``[T+1, B]`` (or ``[T+1, B, C]``): row ``t+1`` says "the episode ended after step t"; row 0 is
  the flag carried in from the previous rollout. The step that ends an episode stays valid, every step
  after the first done is masked (:func:`loss_mask_from_dones`).
* values ``[T+1, B]`` (or ``[T+1, B, C]`` from a critic with one value per action, GAE at action level):
  ``values[T]`` is the bootstrap value of the observation after the last chunk.

Estimators are registered by name (``gae``, ``grpo``, ``drgrpo``, ``rloo``, ``reinpp``, ``raw``), each
name with its row in :data:`vlarl_cli.algorithm_types.ADVANTAGE_TYPES` (what it needs: a critic, groups,
whole-batch normalisation); :func:`get_advantage_fn` answers an unknown name with the known ones. Every
registered function has the signature of :data:`AdvantageFn` and returns an :class:`AdvantageResult`. The
group estimators (GRPO, Dr.GRPO, RLOO) share :func:`outcome_advantages`: each is a function of the ``[B]``
episode scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from vlarl_cli.algorithm_types import ADVANTAGE_TYPES
from vlarl_cli.algorithms.reduction import LOCAL, Reduce, masked_moments
from vlarl_cli.errors import ConfigError, did_you_mean

__all__ = [
    "ADVANTAGES",
    "REWARD_TYPES",
    "AdvantageFn",
    "AdvantageResult",
    "advantage_metrics",
    "aggregate_dones",
    "aggregate_rewards",
    "bootstrap_truncated",
    "compute_advantages",
    "drgrpo",
    "episode_scores",
    "filter_groups",
    "gae",
    "get_advantage_fn",
    "group_normalize",
    "grpo",
    "loss_mask_from_dones",
    "masked_normalize",
    "normalize_pieces",
    "outcome_advantages",
    "raw",
    "register_advantage",
    "reinpp",
    "rloo",
    "trajectory_valid_fraction",
]

REWARD_TYPES = ("chunk_level", "action_level")

# ---------------------------------------------------------------------------------------------------
# masked statistics


def masked_normalize(x: Tensor, mask: Tensor | None, eps: float = 1e-5, reduce: Reduce = LOCAL) -> Tensor:
    """``(x - mean) / (std + eps)`` with mean and UNBIASED std over valid entries; masked entries -> 0.

    RLinf's convention for GAE advantages (REFERENCE.md section 2). With one valid entry the std is
    taken as 0, so the entry becomes 0 instead of NaN. ``reduce`` takes the statistics over every
    process's part of the batch (:mod:`vlarl_cli.algorithms.reduction`).
    """
    return normalize_pieces([(x, mask)], eps, reduce)[0]


def normalize_pieces(pieces: list[tuple[Tensor, Tensor | None]], eps: float = 1e-5, reduce: Reduce = LOCAL
                     ) -> list[Tensor]:
    """:func:`masked_normalize` with one mean and std over several ``(x, mask)`` pieces (e.g. the
    rollout epochs of one iteration, on every process)."""
    count, mean, var = masked_moments(pieces, reduce)
    out = []
    for x, mask in pieces:
        m = torch.ones_like(x, dtype=torch.bool) if mask is None else mask.expand_as(x).bool()
        if count == 0:
            out.append(torch.zeros_like(x))
            continue
        std = var.sqrt().to(x.device)
        normed = ((x.double() - mean.to(x.device)) / (std + eps)).to(x.dtype)
        out.append(torch.where(m, normed, torch.zeros_like(x)))
    return out


# ---------------------------------------------------------------------------------------------------
# rollout layout


def _check_reward_type(reward_type: str) -> None:
    if reward_type not in REWARD_TYPES:
        raise ConfigError(f'Unknown reward_type "{reward_type}".{did_you_mean(reward_type, REWARD_TYPES)}',
                          f"Use one of {', '.join(REWARD_TYPES)}.")


def aggregate_rewards(rewards: Tensor, reward_type: str) -> Tensor:
    """Per-step rewards ``[T, B, C]`` -> ``[T, B]`` (``chunk_level``: undiscounted sum over the chunk)
    or unchanged ``[T, B, C]`` (``action_level``)."""
    _check_reward_type(reward_type)
    if rewards.dim() != 3:
        raise ValueError(f"rewards must be [T, B, C], got {tuple(rewards.shape)}")
    return rewards.sum(-1) if reward_type == "chunk_level" else rewards


def bootstrap_truncated(rewards: Tensor, truncated: Tensor, final_values: Tensor, gamma: float) -> Tensor:
    """A step where the time limit cut the episode keeps the value of what would have followed:
    ``r += gamma * V(final observation)`` (REFERENCE.md section 2; RLinf ``EnvWorker.compute_bootstrap_rewards``,
    ``bootstrap_type: standard``). Its done flag still stops GAE from reading the next row, which with
    auto-reset is the next episode's.

    Args:
        rewards: ``[T, B, C]`` per-step rewards.
        truncated: ``[T, B, C]`` bool, the step at which the time limit cut the episode.
        final_values: ``[T, B]`` V of the cut episode's final observation (any value where nothing was cut).

    Returns:
        ``[T, B, C]`` rewards with the bootstrap added at the cut steps.
    """
    if rewards.dim() != 3 or truncated.shape != rewards.shape or final_values.shape != rewards.shape[:2]:
        raise ValueError(f"rewards and truncated must be [T, B, C] and final_values [T, B], got "
                         f"{tuple(rewards.shape)}, {tuple(truncated.shape)}, {tuple(final_values.shape)}")
    return rewards + gamma * final_values.unsqueeze(-1).to(rewards.dtype) * truncated.to(rewards.dtype)


def aggregate_dones(dones: Tensor, reward_type: str) -> Tensor:
    """Per-step dones ``[T+1, B, C]`` -> ``[T+1, B]`` (``chunk_level``: a chunk is done if any step is)
    or unchanged (``action_level``)."""
    _check_reward_type(reward_type)
    if dones.dim() != 3:
        raise ValueError(f"dones must be [T+1, B, C], got {tuple(dones.shape)}")
    return dones.bool().any(-1) if reward_type == "chunk_level" else dones.bool()


def loss_mask_from_dones(dones: Tensor) -> Tensor:
    """Valid steps of the FIRST episode in each env column.

    Args:
        dones: ``[T+1, B]`` (chunk level) or ``[T+1, B, C]`` (action level), row 0 carried in. For the
            action-level form only the last entry of row 0 (the end of the previous chunk) is used.
    Returns:
        bool mask ``[T, B]`` or ``[T, B, C]``: step s is valid iff no done precedes it. The step that
        ends the episode (its done is stored one row later) stays valid.
    """
    d = dones.bool()
    if d.dim() == 2:
        return d.long().cumsum(0)[:-1] == 0
    if d.dim() != 3:
        raise ValueError(f"dones must be [T+1, B] or [T+1, B, C], got {tuple(dones.shape)}")
    t1, b, c = d.shape
    # time-major flat sequence: [carry-in, done after step 0, ..., done after step T*C - 1]
    flat = torch.cat([d[0, :, -1].unsqueeze(0), d[1:].permute(0, 2, 1).reshape((t1 - 1) * c, b)], dim=0)
    valid = flat.long().cumsum(0)[:-1] == 0  # [T*C, B]
    return valid.reshape(t1 - 1, c, b).permute(0, 2, 1)


def trajectory_valid_fraction(loss_mask: Tensor) -> Tensor:
    """Fraction of valid entries of each env column, broadcast over time: ``[T, B(, C)] -> [T, B]``.

    Used by ``seq-mean-token-mean``: weighting an entry by ``1 / valid_fraction`` and averaging over ALL
    entries makes each trajectory count once, whatever its length. RLinf's ``L * mask * max_episode_steps /
    valid_steps`` counts valid ENV STEPS instead, which differs for a ``[T, B]`` chunk mask whose episode
    ends inside a chunk (``algorithms/losses.py``, tested against RLinf in ``tests/conformance/rlinf_algos``).
    Columns with no valid entry get 1 (their entries are masked anyway).
    """
    m = loss_mask.float()
    per_col = m.reshape(m.shape[0], m.shape[1], -1).mean(dim=(0, 2))  # [B]
    per_col = torch.where(per_col > 0, per_col, torch.ones_like(per_col))
    return per_col.unsqueeze(0).expand(m.shape[0], m.shape[1]).contiguous()


def episode_scores(rewards: Tensor, loss_mask: Tensor | None) -> Tensor:
    """Return of the first episode of each env column: sum of rewards over valid steps.

    ``rewards [T, B]`` or ``[T, B, C]``, ``loss_mask`` the same shape (or ``[T, B]`` for ``[T, B, C]``
    rewards) -> ``[B]``.
    """
    r = rewards if loss_mask is None else rewards * _expand_mask(loss_mask, rewards).to(rewards.dtype)
    return r.reshape(r.shape[0], r.shape[1], -1).sum(dim=(0, 2))


def _expand_mask(mask: Tensor, like: Tensor) -> Tensor:
    """Explicit (never silent) broadcast of a ``[T, B]`` mask to ``[T, B, C]``."""
    if mask.shape == like.shape:
        return mask
    if mask.dim() == 2 and like.dim() == 3 and mask.shape == like.shape[:2]:
        return mask.unsqueeze(-1).expand_as(like)
    raise ValueError(f"loss_mask shape {tuple(mask.shape)} does not fit {tuple(like.shape)}")


def advantage_metrics(advantages: Tensor, loss_mask: Tensor | None, reduce: Reduce = LOCAL) -> dict[str, float]:
    """``advantages_mean/min/max`` over valid entries (the names the seed recipes log), over every
    process's part of the batch."""
    m = torch.ones_like(advantages, dtype=torch.bool) if loss_mask is None else _expand_mask(loss_mask, advantages)
    valid = advantages[m.bool()].double().cpu()
    big = torch.finfo(torch.float64).max
    local = torch.stack([valid.max() if valid.numel() else torch.tensor(-big, dtype=torch.float64),
                         -valid.min() if valid.numel() else torch.tensor(-big, dtype=torch.float64)])
    count, mean, _ = masked_moments([(valid, None)], reduce)
    if count == 0:
        return {"advantages_mean": 0.0, "advantages_min": 0.0, "advantages_max": 0.0}
    high, neg_low = reduce.max(local).tolist()
    return {"advantages_mean": float(mean), "advantages_min": -neg_low, "advantages_max": high}


# ---------------------------------------------------------------------------------------------------
# estimators


@dataclass
class AdvantageResult:
    """Output of every estimator. Shapes follow the rewards (``[T, B]`` or ``[T, B, C]``)."""

    advantages: Tensor
    returns: Tensor | None  # value targets (GAE only; None for critic-free estimators)
    loss_mask: Tensor  # bool; the input mask, with filtered-out GRPO groups removed


def gae(rewards: Tensor, values: Tensor, dones: Tensor, *, gamma: float, gae_lambda: float,
        loss_mask: Tensor | None = None, normalize: bool = True, eps: float = 1e-5) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation (Schulman et al., arXiv 1506.02438) over chunk or action steps.

    ``delta_t = r_t + gamma V_{t+1} (1 - d_{t+1}) - V_t``;
    ``A_t = delta_t + gamma lambda (1 - d_{t+1}) A_{t+1}``; returns ``R = A + V`` (un-normalised).

    Args:
        rewards: ``[T, B]`` (chunk level) or ``[T, B, C]`` (action level: GAE runs over the ``T*C`` action
            steps in time order, see :func:`_flatten_action_steps`).
        values: ``[T+1, B]`` / ``[T+1, B, C]`` (``values[T]`` bootstraps the step after the rollout; at
            action level only ``values[T, :, 0]``, the value of the observation after the last chunk, is used).
        dones: ``[T+1, B]`` / ``[T+1, B, C]`` bool, row ``t+1`` = done after step ``t``.
        loss_mask: valid steps shaped like ``rewards``, only used for the normalisation statistics.
        normalize: normalise advantages with mean / unbiased std + ``eps`` over valid entries.
    Returns:
        ``(advantages, returns)`` shaped like ``rewards``; masked advantages are 0 when normalised.
    """
    if rewards.dim() == 3:
        r, v, d = _flatten_action_steps(rewards, values, dones)
        adv_flat, ret_flat = _gae_steps(r, v, d, gamma, gae_lambda)
        t, b, c = rewards.shape
        advantages, returns = (x.reshape(t, c, b).permute(0, 2, 1) for x in (adv_flat, ret_flat))
    elif rewards.dim() == 2:
        t, b = rewards.shape
        if values.shape != (t + 1, b) or dones.shape != (t + 1, b):
            # guards the silent [B] vs [B, 1] broadcast (values [T+1, B, 1] would make a [T, B, B] product)
            raise ValueError(f"gae: rewards [T, B] = {tuple(rewards.shape)} needs values and dones [T+1, B] = "
                             f"{(t + 1, b)}, got values {tuple(values.shape)}, dones {tuple(dones.shape)}")
        advantages, returns = _gae_steps(rewards, values, dones, gamma, gae_lambda)
    else:
        raise ValueError(f"gae needs rewards [T, B] or [T, B, C], got {tuple(rewards.shape)}")
    if normalize:
        advantages = masked_normalize(advantages, loss_mask, eps)
    return advantages, returns


def _flatten_action_steps(rewards: Tensor, values: Tensor, dones: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Action-level ``[T, B, C]`` rewards, ``[T+1, B, C]`` values and dones -> the time-major sequences
    ``[T*C, B]``, ``[T*C+1, B]``, ``[T*C+1, B]`` of RLinf's ``preprocess_embodied_advantages_inputs``
    (``rlinf/algorithms/utils.py``): values keep their FIRST ``T*C+1`` flat entries (the bootstrap is
    ``values[T, :, 0]``), dones their LAST ``T*C+1`` (the carried-in flag is ``dones[0, :, C-1]``)."""
    t, b, c = rewards.shape
    if values.shape != (t + 1, b, c) or dones.shape != (t + 1, b, c):
        raise ValueError(f"action-level gae: rewards [T, B, C] = {tuple(rewards.shape)} needs values and dones "
                         f"[T+1, B, C] = {(t + 1, b, c)}, got values {tuple(values.shape)}, dones "
                         f"{tuple(dones.shape)}; a policy with one value per chunk needs reward_type chunk_level")
    n = t * c
    r = rewards.permute(0, 2, 1).reshape(n, b)
    v = values.permute(0, 2, 1).reshape(n + c, b)[: n + 1]
    d = dones.permute(0, 2, 1).reshape(n + c, b)[c - 1:]
    return r, v, d


def _gae_steps(rewards: Tensor, values: Tensor, dones: Tensor, gamma: float, gae_lambda: float
               ) -> tuple[Tensor, Tensor]:
    """The GAE recursion over ``[S, B]`` rewards with ``[S+1, B]`` values and dones -> (advantages, returns)."""
    s, b = rewards.shape
    not_done = (~dones.bool()).to(rewards.dtype)
    values = values.to(rewards.dtype)
    advantages = torch.zeros_like(rewards)
    last = torch.zeros(b, dtype=rewards.dtype, device=rewards.device)
    for step in reversed(range(s)):
        delta = rewards[step] + gamma * values[step + 1] * not_done[step + 1] - values[step]
        last = delta + gamma * gae_lambda * not_done[step + 1] * last
        advantages[step] = last
    return advantages, advantages + values[:-1]


def _groups(scores: Tensor, group_size: int, name: str) -> Tensor:
    """``[B]`` scores -> ``[B / group_size, group_size]``; the group rules stated once for every estimator."""
    if scores.dim() != 1:
        raise ValueError(f"scores must be [B], got {tuple(scores.shape)}")
    if group_size < 2:
        raise ConfigError(f"{name} needs group_size >= 2 (got {group_size}): a group of one has no baseline.",
                          "Set algorithm.group_size to 2 or more.")
    if scores.numel() % group_size:
        raise ConfigError(f"{scores.numel()} envs cannot be split into groups of {group_size}.",
                          "Make the number of training envs a multiple of group_size.")
    return scores.view(-1, group_size)


def group_normalize(scores: Tensor, group_size: int, *, normalize: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO (arXiv 2402.03300) score -> advantage: ``(s - mean_group) / (std_group + eps)``, unbiased std.

    ``scores [B]``, groups are consecutive blocks of ``group_size`` envs. ``normalize=False`` keeps
    only the mean subtraction (RLinf ignores the flag for GRPO, a defect we do not repeat).
    """
    g = _groups(scores, group_size, "GRPO")
    adv = g - g.mean(dim=1, keepdim=True)
    if normalize:
        adv = adv / (g.std(dim=1, unbiased=True, keepdim=True) + eps)
    return adv.reshape(-1)


def drgrpo(scores: Tensor, group_size: int) -> Tensor:
    """Dr.GRPO (Liu et al., arXiv 2503.20783): ``s - mean_group``, never divided by the group's std (the std
    favours groups that are almost all success or all failure). verl: ``grpo`` with
    ``norm_adv_by_std_in_grpo: False``. The paper's length-unbiased loss is ``loss_agg_func:
    seq-mean-token-sum-norm``."""
    g = _groups(scores, group_size, "Dr.GRPO")
    return (g - g.mean(dim=1, keepdim=True)).reshape(-1)


def rloo(scores: Tensor, group_size: int) -> Tensor:
    """RLOO (Ahmadian et al., arXiv 2402.14740): ``s_i - mean_{j != i} s_j``, the leave-one-out baseline of the
    other episodes of the group; equal to ``n / (n - 1) * (s_i - mean_group)`` (verl ``compute_rloo_outcome_advantage``)."""
    g = _groups(scores, group_size, "RLOO")
    n = g.shape[1]
    return ((g - g.mean(dim=1, keepdim=True)) * (n / (n - 1))).reshape(-1)


def filter_groups(scores: Tensor, group_size: int, lower: float, upper: float) -> Tensor:
    """``filter_rewards``: keep groups whose MEAN score lies in ``[lower, upper]``. ``[B] -> [B]`` bool.

    All-fail and all-success groups have zero advantage and only dilute the batch.
    """
    if scores.numel() % group_size:
        raise ConfigError(f"{scores.numel()} envs cannot be split into groups of {group_size}.",
                          "Make the number of training envs a multiple of group_size.")
    mean = scores.view(-1, group_size).mean(dim=1)
    keep = (mean >= lower) & (mean <= upper)
    return keep.repeat_interleave(group_size)


def _broadcast_over_time(per_env: Tensor, like: Tensor) -> Tensor:
    """``[B]`` -> shape of ``like`` (``[T, B]`` or ``[T, B, C]``), explicitly."""
    view = per_env.view(1, -1) if like.dim() == 2 else per_env.view(1, -1, 1)
    return view.expand_as(like)


def outcome_advantages(rewards: Tensor, loss_mask: Tensor, score_to_advantage: Callable[[Tensor], Tensor]
                       ) -> tuple[Tensor, Tensor]:
    """An outcome estimator: ``score_to_advantage`` maps the ``[B]`` first-episode scores to ``[B]`` advantages,
    broadcast to every valid step.

    Args:
        rewards: ``[T, B]`` or ``[T, B, C]``.
        loss_mask: same shape as rewards (or ``[T, B]``), valid steps of the first episode.
    Returns:
        ``(advantages, loss_mask)`` both shaped like ``rewards``; masked entries are 0.
    """
    mask = _expand_mask(loss_mask, rewards).bool()
    adv_env = score_to_advantage(episode_scores(rewards, mask))
    if adv_env.shape != (rewards.shape[1],):
        raise ValueError(f"an outcome estimator must give one advantage per env [B={rewards.shape[1]}], got "
                         f"{tuple(adv_env.shape)}")
    adv = _broadcast_over_time(adv_env.to(rewards.dtype), rewards) * mask.to(rewards.dtype)
    return adv, mask


def grpo(rewards: Tensor, loss_mask: Tensor, *, group_size: int, normalize: bool = True, eps: float = 1e-6
         ) -> tuple[Tensor, Tensor]:
    """GRPO advantages: the group-normalised first-episode score broadcast to every valid step (shapes as
    :func:`outcome_advantages`)."""
    return outcome_advantages(rewards, loss_mask,
                              lambda s: group_normalize(s, group_size, normalize=normalize, eps=eps))


def reinpp(rewards: Tensor, dones: Tensor, loss_mask: Tensor, *, gamma: float = 1.0, group_size: int = 1,
           baseline: bool = True, normalize: bool = True, eps: float = 1e-5) -> Tensor:
    """REINFORCE++ (arXiv 2501.03262): discounted return-to-go, optional group-mean baseline, global
    normalisation over valid entries.

    ``G_t = r_t + gamma (1 - d_{t+1}) G_{t+1}`` over the valid steps (per action step for ``[T, B, C]``
    rewards); with ``baseline`` and ``group_size > 1``, the group mean of the episode scores is
    subtracted from every ``G_t`` of the group (RLinf's "reinforce++ baseline", which subtracts it from
    the terminal reward, equals this for gamma = 1). Deliberately not RLinf's embodied ``reinpp``, which does
    not discount, gives every step the whole episode score, and standardises with the population std and no
    epsilon (the exact relation is asserted in ``tests/conformance/rlinf_algos``).
    """
    mask = _expand_mask(loss_mask, rewards).bool()
    r = rewards * mask.to(rewards.dtype)
    if rewards.dim() == 3:  # action level: run over the flat time axis
        t, b, c = rewards.shape
        r_flat = r.permute(0, 2, 1).reshape(t * c, b)
        nd = (~dones.bool()).to(rewards.dtype)
        if nd.shape != (t + 1, b, c):
            raise ValueError(f"action-level rewards {tuple(rewards.shape)} need dones [T+1, B, C], got "
                             f"{tuple(dones.shape)}")
        nd_flat = nd[1:].permute(0, 2, 1).reshape(t * c, b)
    else:
        r_flat = r
        if dones.shape != (rewards.shape[0] + 1, rewards.shape[1]):
            raise ValueError(f"rewards {tuple(rewards.shape)} need dones [T+1, B], got {tuple(dones.shape)}")
        nd_flat = (~dones.bool()).to(rewards.dtype)[1:]
    g = torch.zeros_like(r_flat)
    run = torch.zeros_like(r_flat[0])
    for s in reversed(range(r_flat.shape[0])):
        run = r_flat[s] + gamma * nd_flat[s] * run
        g[s] = run
    if rewards.dim() == 3:
        g = g.reshape(rewards.shape[0], rewards.shape[2], rewards.shape[1]).permute(0, 2, 1)
    if baseline and group_size > 1:
        scores = episode_scores(rewards, mask)
        if scores.numel() % group_size:
            raise ConfigError(f"{scores.numel()} envs cannot be split into groups of {group_size}.",
                              "Make the number of training envs a multiple of group_size.")
        base = scores.view(-1, group_size).mean(dim=1).repeat_interleave(group_size)
        g = g - _broadcast_over_time(base.to(g.dtype), g)
    if normalize:
        return masked_normalize(g, mask, eps)
    return g * mask.to(g.dtype)


def raw(rewards: Tensor, loss_mask: Tensor, *, normalize: bool = False, eps: float = 1e-5) -> Tensor:
    """The first-episode score itself as the advantage of every valid step (optionally normalised)."""
    mask = _expand_mask(loss_mask, rewards).bool()
    scores = episode_scores(rewards, mask)
    adv = _broadcast_over_time(scores.to(rewards.dtype), rewards) * mask.to(rewards.dtype)
    return masked_normalize(adv, mask, eps) if normalize else adv


# ---------------------------------------------------------------------------------------------------
# registry

#: fn(rewards, dones, loss_mask, *, values, gamma, gae_lambda, group_size, normalize) -> AdvantageResult;
#: every function takes the whole keyword set (``**_`` for what it does not use)
AdvantageFn = Callable[..., AdvantageResult]
ADVANTAGES: dict[str, AdvantageFn] = {}


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an estimator under ``name``, which must have its row in ``algorithm_types.ADVANTAGE_TYPES``
    (what the config, the batch builder and the update need to know of it)."""
    if name not in ADVANTAGE_TYPES:
        raise ValueError(f'advantage estimator "{name}" has no row in vlarl_cli.algorithm_types.ADVANTAGE_TYPES; '
                         "add one (docs/adding_an_algorithm.md)")

    def deco(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGES[name] = fn
        return fn

    return deco


def get_advantage_fn(name: str) -> AdvantageFn:
    """The registered estimator ``name``; an unknown name raises :class:`ConfigError` listing the known."""
    if name not in ADVANTAGES:
        known = sorted(ADVANTAGES)
        raise ConfigError(f'Unknown advantage estimator "{name}".{did_you_mean(name, known)}',
                          f"Use one of: {', '.join(known)}.")
    return ADVANTAGES[name]


@register_advantage("gae")
def _gae_entry(rewards: Tensor, dones: Tensor, loss_mask: Tensor, *, values: Tensor | None = None,
               gamma: float = 0.99, gae_lambda: float = 0.95, normalize: bool = True, **_: object
               ) -> AdvantageResult:
    if values is None:
        raise ConfigError("adv_type gae needs value estimates, but the policy returned none.",
                          "Enable the model's value head (add_value_head: true) or use adv_type grpo.")
    adv, ret = gae(rewards, values, dones, gamma=gamma, gae_lambda=gae_lambda, loss_mask=loss_mask,
                   normalize=normalize)
    return AdvantageResult(adv, ret, loss_mask.bool())


@register_advantage("grpo")
def _grpo_entry(rewards: Tensor, dones: Tensor, loss_mask: Tensor, *, group_size: int = 1,
                normalize: bool = True, **_: object) -> AdvantageResult:
    adv, mask = grpo(rewards, loss_mask, group_size=group_size, normalize=normalize)
    return AdvantageResult(adv, None, mask)


@register_advantage("drgrpo")
def _drgrpo_entry(rewards: Tensor, dones: Tensor, loss_mask: Tensor, *, group_size: int = 1, **_: object
                  ) -> AdvantageResult:
    adv, mask = outcome_advantages(rewards, loss_mask, lambda s: drgrpo(s, group_size))
    return AdvantageResult(adv, None, mask)


@register_advantage("rloo")
def _rloo_entry(rewards: Tensor, dones: Tensor, loss_mask: Tensor, *, group_size: int = 1, normalize: bool = False,
                **_: object) -> AdvantageResult:
    # ``normalize``: standardised over the valid entries (the batch builder does it over the whole batch instead)
    adv, mask = outcome_advantages(rewards, loss_mask, lambda s: rloo(s, group_size))
    return AdvantageResult(masked_normalize(adv, mask) if normalize else adv, None, mask)


@register_advantage("reinpp")
def _reinpp_entry(rewards: Tensor, dones: Tensor, loss_mask: Tensor, *, gamma: float = 1.0,
                  group_size: int = 1, normalize: bool = True, **_: object) -> AdvantageResult:
    adv = reinpp(rewards, dones, loss_mask, gamma=gamma, group_size=group_size, normalize=normalize)
    return AdvantageResult(adv, None, _expand_mask(loss_mask, rewards).bool())


@register_advantage("raw")
def _raw_entry(rewards: Tensor, dones: Tensor, loss_mask: Tensor, *, normalize: bool = False,
               **_: object) -> AdvantageResult:
    return AdvantageResult(raw(rewards, loss_mask, normalize=normalize), None,
                           _expand_mask(loss_mask, rewards).bool())


def compute_advantages(name: str, rewards: Tensor, dones: Tensor, loss_mask: Tensor | None = None, *,
                       values: Tensor | None = None, gamma: float = 0.99, gae_lambda: float = 0.95,
                       group_size: int = 1, normalize: bool = True,
                       filter_bounds: tuple[float, float] | None = None) -> AdvantageResult:
    """Run the estimator ``name`` with the shared keyword set (each uses what it needs).

    ``loss_mask`` defaults to :func:`loss_mask_from_dones` (first episode of each column valid).
    ``filter_bounds`` (``filter_rewards``, group estimators only): ``(lower, upper)`` on a group's mean
    score; the groups outside are masked out (their advantages 0).
    """
    fn = get_advantage_fn(name)
    if loss_mask is None:
        loss_mask = loss_mask_from_dones(dones)
    result = fn(rewards, dones, loss_mask, values=values, gamma=gamma, gae_lambda=gae_lambda,
                group_size=group_size, normalize=normalize)
    if filter_bounds is not None:
        if not ADVANTAGE_TYPES[name].groups:
            raise ConfigError(f"filter_rewards drops groups, but adv_type {name} has none.",
                              "Use a group estimator (grpo, drgrpo, rloo) or set filter_rewards false.")
        scores = episode_scores(rewards, _expand_mask(loss_mask, rewards).bool())
        keep = _broadcast_over_time(filter_groups(scores, group_size, *filter_bounds), result.loss_mask)
        result = AdvantageResult(result.advantages * keep.to(result.advantages.dtype), result.returns,
                                 result.loss_mask & keep)
    return result
