"""PPO losses, log-prob granularity, masked aggregation and the metrics that go with them.

Pure tensor functions (tensors and numbers in; never config objects or modules). Formulas in
REFERENCE.md section 2; names follow the paper / cleanrl (``pg_loss1``, ``pg_loss2``, ``clipfrac``).

Granularity ("unit"). Per-element log-probs are ``[N, C, A]`` (N samples = chunk steps, C env steps per
chunk, A action dims). ``logprob_type`` picks the unit of the PPO ratio:
``token_level`` -> ``[N, C, A]``, ``action_level`` -> ``[N, C]`` (sum over A), ``chunk_level`` -> ``[N]``
(sum over C and A). Advantages, masks and weights are brought to the same unit shape by
:func:`to_unit` / :func:`mask_to_unit`, with explicit shape checks instead of silent broadcasting.

Aggregation with a mask. A loss over units is ``sum(L * weight) / denominator`` where
:func:`loss_weights` builds ``weight`` and ``denominator`` for the ``loss_agg_func`` modes (a "sequence" is
one env's trajectory of ``T`` chunk steps in one rollout epoch):

* ``token-mean``: weight = mask, denominator = number of valid units (masked mean). RLinf's
  ``masked_mean`` (its embodied default, with auto-reset) up to a count (below).
* ``seq-mean-token-mean``: weight = mask / valid_fraction_of_its_trajectory, denominator = number of
  units: the mean over trajectories of each trajectory's mean over its valid units, so every trajectory
  counts once whatever its length. RLinf's embodied loss without auto-reset (``masked_mean_ratio``:
  ``mean(L * mask * max_episode_steps / valid_env_steps)``) is the same when episodes end on a chunk
  boundary and ``max_episode_steps`` equals the ``T * C`` steps of a rollout epoch. It differs, deliberately,
  when a chunk-level unit's episode ends inside the chunk: RLinf divides by the valid ENV STEPS, so such a
  trajectory weighs ``valid_chunks * C / valid_steps`` times more than one that ends on a boundary
  (``tests/conformance/rlinf_algos`` asserts the factor); here the valid fraction is counted in the units
  the loss runs over.
* ``seq-mean-token-sum``: weight = mask * steps_per_trajectory, denominator = number of samples (chunk
  steps): the sum over a trajectory's valid units, averaged over trajectories (verl's mode).
* ``seq-mean-token-sum-norm``: weight = mask, denominator = number of units: a trajectory's sum divided by
  the constant number of units in a trajectory, averaged over trajectories (Dr.GRPO, arXiv 2503.20783;
  verl's mode with ``loss_scale_factor`` = the horizon).

The denominator is passed in so that micro-batches can use the WHOLE mini-batch's denominator and their
gradients add up to exactly the full-batch gradient (``training/update.py``).

Counts. Metrics are masked means over valid units with a correct denominator; so is the ``token-mean`` loss.
RLinf divides token-level (and, with chunk-level rewards, action-level) sums by a count of ``[N, C, 1]`` or
``[N, 1]`` mask entries, so its clip fraction can exceed 1 and its ``masked_mean`` PPO loss VALUE (hence
gradient) is ``A``, ``C`` or ``C * A`` times ours in those layouts (``tests/conformance/rlinf_algos`` asserts
each factor). Kept deliberately: with Adam the update does not depend on a constant loss scale (up to its
epsilon and the gradient-norm clip), and a loss that is a mean keeps the policy and value terms on one
scale.

Policy losses are registered by name (:data:`POLICY_LOSSES`, each with its row in
``vlarl_cli.algorithm_types.POLICY_LOSSES``): ``vanilla`` (clipped PPO with the dual clip) and ``gspo``
(sequence-level ratio); both go through :func:`clipped_surrogate`, the one place the ratio is clipped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from vlarl_cli.algorithm_types import LOSS_AGGS
from vlarl_cli.algorithm_types import POLICY_LOSSES as POLICY_LOSS_TYPES
from vlarl_cli.algorithms.reduction import LOCAL, Reduce, masked_moments
from vlarl_cli.errors import ConfigError, did_you_mean

__all__ = [
    "KL_TYPES",
    "LOGPROB_LEVELS",
    "LOSS_AGGS",
    "POLICY_LOSSES",
    "aggregate_logprobs",
    "aggregate_loss",
    "clipped_surrogate",
    "expand_to_elements",
    "explained_variance",
    "get_policy_loss_fn",
    "gspo_actor_loss",
    "huber",
    "kl_penalty",
    "loss_weights",
    "mask_to_unit",
    "ppo_actor_loss",
    "register_policy_loss",
    "sequence_mean",
    "to_unit",
    "value_loss",
]

LOGPROB_LEVELS = ("token_level", "action_level", "chunk_level")
#: accepted KL estimator names -> canonical (Schulman, "Approximating KL Divergence", 2020)
KL_TYPES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def _check(value: str, known: tuple[str, ...] | list[str], what: str) -> None:
    if value not in known:
        raise ConfigError(f'Unknown {what} "{value}".{did_you_mean(value, list(known))}',
                          f"Use one of: {', '.join(known)}.")


# ---------------------------------------------------------------------------------------------------
# granularity


def aggregate_logprobs(logprobs: Tensor, level: str) -> Tensor:
    """Per-element log-probs ``[N, C, A]`` -> the unit of ``level`` (sum of log-probs = joint log-prob
    of independent elements). Entropies aggregate the same way."""
    _check(level, LOGPROB_LEVELS, "logprob_type")
    if logprobs.dim() != 3:
        raise ValueError(f"logprobs must be [N, C, A], got {tuple(logprobs.shape)}")
    if level == "token_level":
        return logprobs
    if level == "action_level":
        return logprobs.sum(-1)
    return logprobs.sum(dim=(-2, -1))


def expand_to_elements(x: Tensor, shape: torch.Size | tuple[int, ...]) -> Tensor:
    """``[N]``, ``[N, C]``, ``[N, C, 1]`` or ``[N, C, A]`` -> ``[N, C, A]``; anything else raises.

    The explicit version of broadcasting: a ``[N, 1]`` tensor against ``[N]`` would silently give an
    ``[N, N]`` product, so leading dimensions must match exactly.
    """
    n, c, a = shape
    if x.shape == (n,):
        return x.view(n, 1, 1).expand(n, c, a)
    if x.shape == (n, c):
        return x.view(n, c, 1).expand(n, c, a)
    if x.shape in ((n, c, 1), (n, c, a)):
        return x.expand(n, c, a)
    raise ValueError(f"cannot align a tensor of shape {tuple(x.shape)} with elements [N, C, A] = {tuple(shape)}; "
                     "expected [N], [N, C], [N, C, 1] or [N, C, A]")


def mask_to_unit(loss_mask: Tensor, level: str, shape: torch.Size | tuple[int, ...]) -> Tensor:
    """Valid-step mask ``[N, C]`` (or ``[N]``) -> bool mask of the unit of ``level``.

    A chunk-level unit is valid when any of its env steps is valid (the chunk's first step always is,
    if any is).
    """
    m = expand_to_elements(loss_mask.bool(), shape)
    if level == "token_level":
        return m
    if level == "action_level":
        return m[..., 0]
    _check(level, LOGPROB_LEVELS, "logprob_type")
    return m.any(dim=-1).any(dim=-1)


def to_unit(x: Tensor, level: str, shape: torch.Size | tuple[int, ...], loss_mask: Tensor | None = None
            ) -> Tensor:
    """Per-element quantity (e.g. advantages, ``[N]``/``[N, C]``/``[N, C, A]``) -> unit of ``level``.

    A unit's value is the mean over its valid elements, which for a quantity broadcast from a coarser
    shape (the usual case: chunk-level advantages) is the quantity itself.
    """
    e = expand_to_elements(x, shape)
    if level == "token_level":
        return e
    m = (torch.ones(shape, dtype=torch.bool, device=x.device) if loss_mask is None
         else expand_to_elements(loss_mask.bool(), shape)).to(e.dtype)
    dims = (-1,) if level == "action_level" else (-2, -1)
    _check(level, LOGPROB_LEVELS, "logprob_type")
    num = torch.where(m > 0, e, torch.zeros_like(e)).sum(dim=dims)  # a NaN at a masked element stays out
    den = m.sum(dim=dims)
    # fully-masked units: 0 (they carry weight 0 anyway)
    return torch.where(den > 0, num / den.clamp(min=1.0), torch.zeros_like(num))


def loss_weights(unit_mask: Tensor, agg: str, *, valid_fraction: Tensor | None = None,
                 steps_per_trajectory: int = 1) -> tuple[Tensor, Tensor]:
    """Per-unit weights and the denominator for ``agg`` over a (mini-)batch. See the module docstring.

    Args:
        unit_mask: bool ``[N]``, ``[N, C]`` or ``[N, C, A]``.
        valid_fraction: ``[N]`` valid fraction of each sample's trajectory (``seq-mean-token-mean``).
        steps_per_trajectory: chunk steps per trajectory ``T`` (``seq-mean-token-sum``).
    Returns:
        ``(weight like unit_mask, float32 denominator scalar)``.
    """
    _check(agg, LOSS_AGGS, "loss_agg_func")
    m = unit_mask.float()
    if agg == "token-mean":
        return m, m.sum().clamp(min=1.0)
    numel = torch.tensor(float(m.numel()), device=m.device)
    if agg == "seq-mean-token-mean":
        if valid_fraction is None:
            raise ValueError("loss_agg seq-mean-token-mean needs valid_fraction (the valid fraction of each "
                             "sample's trajectory, see advantages.trajectory_valid_fraction)")
        if valid_fraction.shape != unit_mask.shape[:1]:
            raise ValueError(f"valid_fraction must be [N={unit_mask.shape[0]}], got {tuple(valid_fraction.shape)}")
        vf = valid_fraction.float().view(-1, *([1] * (m.dim() - 1)))
        return m / vf.clamp(min=1e-8), numel
    if agg == "seq-mean-token-sum-norm":
        return m, numel
    return m * float(steps_per_trajectory), torch.tensor(float(m.shape[0]), device=m.device)


def aggregate_loss(loss: Tensor, weight: Tensor, denominator: Tensor | float) -> Tensor:
    """``sum(loss * weight) / denominator``; masked entries are zeroed with ``where`` so a NaN/Inf there
    cannot leak into the result (masked-value invariance)."""
    if loss.shape != weight.shape:
        raise ValueError(f"loss {tuple(loss.shape)} and weight {tuple(weight.shape)} must have the same shape")
    contrib = torch.where(weight != 0, loss * weight, torch.zeros_like(loss))
    return contrib.sum() / denominator


def _masked_mean(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(mean over valid, number valid) with where-masking; mean is 0 when nothing is valid."""
    count = mask.sum()
    total = torch.where(mask, x, torch.zeros_like(x)).sum()
    return total / count.clamp(min=1), count


# ---------------------------------------------------------------------------------------------------
# actor


#: fn(logprobs, old_logprobs, advantages, weight, denominator, *, clip_ratio_low, clip_ratio_high,
#: clip_ratio_c, log_ratio_min, log_ratio_max, trajectory) -> (loss, metrics with "count"); unit-shaped tensors
PolicyLossFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]
POLICY_LOSSES: dict[str, PolicyLossFn] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register a policy loss under ``name``, which must have its row in ``algorithm_types.POLICY_LOSSES``."""
    if name not in POLICY_LOSS_TYPES:
        raise ValueError(f'policy loss "{name}" has no row in vlarl_cli.algorithm_types.POLICY_LOSSES; add one '
                         "(docs/adding_an_algorithm.md)")

    def deco(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES[name] = fn
        return fn

    return deco


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The registered policy loss ``name``; an unknown name raises :class:`ConfigError` listing the known."""
    _check(name, sorted(POLICY_LOSSES), "policy loss (algorithm.policy_loss)")
    return POLICY_LOSSES[name]


def _check_actor_shapes(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, weight: Tensor) -> None:
    if not logprobs.shape == old_logprobs.shape == advantages.shape == weight.shape:
        raise ValueError(f"shapes differ: logprobs {tuple(logprobs.shape)}, old {tuple(old_logprobs.shape)}, "
                         f"advantages {tuple(advantages.shape)}, weight {tuple(weight.shape)}")


def clipped_surrogate(log_ratio: Tensor, advantages: Tensor, weight: Tensor, denominator: Tensor | float, *,
                      clip_ratio_low: float, clip_ratio_high: float, clip_ratio_c: float | None,
                      kl_log_ratio: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """The clipped surrogate every policy loss shares, given its (already clamped) log-ratio.

    ``ratio = exp(log_ratio)``; ``pg_loss = max(-A ratio, -A clip(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high))``;
    dual clip (Ye et al., arXiv 1912.09729) for ``A < 0``: ``pg_loss = min(pg_loss, -clip_ratio_c A)``.

    Returns:
        ``(loss, metrics)``; metrics are masked means over units with ``weight > 0`` plus the ``count`` of
        such units (to average across micro-batches): ``approx_kl`` (= mean(-kl_log_ratio), the CLAMPED
        log-ratio as RLinf's ``compute_ppo_actor_loss`` and verl's ``ppo_kl`` take it), ``clipfrac``
        (fraction where the clipped branch is taken, in [0, 1]), ``dual_clipfrac``, ``ratio``,
        ``clipped_ratio`` (mean of the clipped ratio).
    """
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ConfigError(f"clip_ratio_c must be > 1 for the dual clip, got {clip_ratio_c}.",
                          "Set it to e.g. 3.0, or null to disable the dual clip.")
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    # --- clipped surrogate ---
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * clipped
    pg_loss = torch.maximum(pg_loss1, pg_loss2)
    # --- dual clip: bound the loss of negative advantages when the ratio explodes ---
    dual = torch.zeros_like(pg_loss, dtype=torch.bool)
    if clip_ratio_c is not None:
        pg_loss3 = -clip_ratio_c * advantages
        dual = (advantages < 0) & (pg_loss3 < pg_loss)
        pg_loss = torch.where(advantages < 0, torch.minimum(pg_loss, pg_loss3), pg_loss)
    loss = aggregate_loss(pg_loss, weight, denominator)

    valid = weight != 0
    with torch.no_grad():
        approx_kl, count = _masked_mean(-kl_log_ratio, valid)
        metrics = {
            "approx_kl": approx_kl,
            "clipfrac": _masked_mean((pg_loss2 > pg_loss1).to(ratio.dtype), valid)[0],
            "dual_clipfrac": _masked_mean(dual.to(ratio.dtype), valid)[0],
            "ratio": _masked_mean(ratio, valid)[0],
            "clipped_ratio": _masked_mean(clipped, valid)[0],
            "count": count.to(ratio.dtype),
        }
    return loss, metrics


@register_policy_loss("vanilla")
def ppo_actor_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, weight: Tensor,
                   denominator: Tensor | float, *, clip_ratio_low: float, clip_ratio_high: float,
                   clip_ratio_c: float | None = None, log_ratio_min: float = -20.0,
                   log_ratio_max: float = 20.0, **_: object) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped PPO surrogate (arXiv 1707.06347) with asymmetric clip and optional dual clip, on the
    per-unit ratio ``exp(clamp(logp - logp_old, log_ratio_min, log_ratio_max))`` (:func:`clipped_surrogate`).

    All tensors have the same unit shape; ``weight``/``denominator`` from :func:`loss_weights`.
    """
    _check_actor_shapes(logprobs, old_logprobs, advantages, weight)
    log_ratio = (logprobs - old_logprobs).clamp(log_ratio_min, log_ratio_max)
    return clipped_surrogate(log_ratio, advantages, weight, denominator, clip_ratio_low=clip_ratio_low,
                             clip_ratio_high=clip_ratio_high, clip_ratio_c=clip_ratio_c, kl_log_ratio=log_ratio)


def sequence_mean(x: Tensor, valid: Tensor, trajectory: Tensor) -> Tensor:
    """Mean of ``x`` over the valid units of each trajectory, broadcast back to every unit.

    Args:
        x, valid: ``[N, ...]`` unit-shaped (``valid`` bool).
        trajectory: ``[N]`` trajectory id of each sample; every trajectory must be whole in ``x``.
    """
    if trajectory.shape != x.shape[:1]:
        raise ValueError(f"trajectory must be [N={x.shape[0]}], got {tuple(trajectory.shape)}")
    _, inverse = torch.unique(trajectory, return_inverse=True)
    index = inverse.view(-1, *([1] * (x.dim() - 1))).expand_as(x).reshape(-1)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    total = torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(
        0, index, torch.where(valid, x, torch.zeros_like(x)).reshape(-1))
    count = torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, index, valid.reshape(-1).to(x.dtype))
    return (total / count.clamp(min=1.0))[index].view_as(x)


@register_policy_loss("gspo")
def gspo_actor_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, weight: Tensor,
                    denominator: Tensor | float, *, clip_ratio_low: float, clip_ratio_high: float,
                    trajectory: Tensor | None = None, log_ratio_min: float = -20.0, log_ratio_max: float = 20.0,
                    **_: object) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO (Zheng et al., arXiv 2507.18071): the clipped surrogate on the SEQUENCE ratio of each unit's
    trajectory, ``s = exp(mean over the trajectory's valid units of (logp - logp_old))``, in the token form
    ``log s_t = logp_t - sg(logp_t) + sg(log s)`` whose gradient is the sequence ratio's (verl
    ``compute_policy_loss_gspo``); no dual clip. ``trajectory`` ``[N]`` (every trajectory whole in the
    micro-batch: the update shuffles trajectories for this loss). verl clamps ``log s_t`` at 10 from above only;
    here ``[log_ratio_min, log_ratio_max]`` (``algorithm.clip_log_ratio_*``) as for the vanilla loss.
    """
    _check_actor_shapes(logprobs, old_logprobs, advantages, weight)
    if trajectory is None:
        raise ValueError("the gspo policy loss needs the trajectory id of every sample (RolloutBatch.trajectory)")
    token_log_ratio = logprobs - old_logprobs
    seq_log_ratio = sequence_mean(token_log_ratio.detach(), weight != 0, trajectory)
    log_ratio = (logprobs - logprobs.detach() + seq_log_ratio).clamp(log_ratio_min, log_ratio_max)
    # approx_kl from the unclamped per-unit log-ratio, as verl's gspo reports ppo_kl
    return clipped_surrogate(log_ratio, advantages, weight, denominator, clip_ratio_low=clip_ratio_low,
                             clip_ratio_high=clip_ratio_high, clip_ratio_c=None, kl_log_ratio=token_log_ratio.detach())


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, kl_type: str) -> Tensor:
    """Element-wise KL(pi || pi_ref) estimators on samples from pi (http://joschu.net/blog/kl-approx.html).

    ``k1``/``kl``: ``logp - logp_ref``; ``abs``: ``|logp - logp_ref|``; ``k2``/``mse``:
    ``0.5 (logp - logp_ref)^2``; ``k3``/``low_var_kl``: ``exp(r) - r - 1`` with ``r = logp_ref - logp``,
    clamped to [-10, 10] like verl/RLinf.
    """
    _check(kl_type, list(KL_TYPES), "KL estimator (kl_penalty)")
    kind = KL_TYPES[kl_type]
    diff = logprobs - ref_logprobs
    if kind == "k1":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "k2":
        return 0.5 * diff**2
    r = (-diff).clamp(-20.0, 20.0)
    return (torch.exp(r) - r - 1.0).clamp(-10.0, 10.0)


# ---------------------------------------------------------------------------------------------------
# critic


def huber(x: Tensor, delta: float) -> Tensor:
    """Huber loss: ``x^2 / 2`` for ``|x| <= delta``, ``delta (|x| - delta / 2)`` beyond."""
    a = x.abs()
    return torch.where(a <= delta, 0.5 * x**2, delta * (a - 0.5 * delta))


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, weight: Tensor, denominator: Tensor | float,
               *, value_clip: float | None, huber_delta: float) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped Huber value loss: ``max(huber(R - V), huber(R - V_clip))`` with
    ``V_clip = V_old + clip(V - V_old, -value_clip, value_clip)`` (no clipping when ``value_clip`` is None).

    All tensors ``[N]``. ``value_clip_ratio`` is the fraction of valid samples with
    ``|V - V_old| > value_clip``, measured BEFORE clamping (RLinf measures after and always logs ~0).
    """
    if not values.shape == old_values.shape == returns.shape == weight.shape:
        raise ValueError(f"shapes differ: values {tuple(values.shape)}, old_values {tuple(old_values.shape)}, "
                         f"returns {tuple(returns.shape)}, weight {tuple(weight.shape)}")
    values = values.to(torch.promote_types(values.dtype, torch.float32))  # never a bf16 value loss
    loss_unclipped = huber(returns - values, huber_delta)
    valid = weight != 0
    if value_clip is None:
        per_sample = loss_unclipped
        clip_ratio = torch.zeros((), device=values.device)
    else:
        diff = values - old_values
        v_clipped = old_values + diff.clamp(-value_clip, value_clip)
        per_sample = torch.maximum(loss_unclipped, huber(returns - v_clipped, huber_delta))
        with torch.no_grad():
            clip_ratio = _masked_mean((diff.abs() > value_clip).float(), valid)[0]
    loss = aggregate_loss(per_sample, weight, denominator)
    with torch.no_grad():
        count = valid.sum().float()
        metrics = {"value_clip_ratio": clip_ratio, "count": count,
                   "values": _masked_mean(values, valid)[0]}
    return loss, metrics


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor | None = None, reduce: Reduce = LOCAL) -> float:
    """``1 - Var(R - V) / Var(R)`` over valid entries (cleanrl's definition), over every process's part
    of the batch; NaN when Var(R) == 0 or fewer than 2 entries."""
    if values.shape != returns.shape:
        raise ValueError(f"values {tuple(values.shape)} and returns {tuple(returns.shape)} must match")
    count, _, var_r = masked_moments([(returns.float(), mask)], reduce)
    _, _, var_e = masked_moments([(returns.float() - values.float(), mask)], reduce)
    if count < 2 or var_r == 0:
        return float("nan")
    return float(1.0 - var_e / var_r)
