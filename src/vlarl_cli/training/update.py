"""The model-agnostic PPO / GRPO actor(-critic) update.

Used by the real runner (``training/rl.py``) and by the learning tests on the toy task. It knows
nothing about models: it calls ``policy.evaluate(replay)`` (``policies/base.py``) and the pure losses of
``vlarl_cli.algorithms.losses``.

One call = ``update_epoch`` passes over the rollout; each pass shuffles the samples and cuts them into
mini-batches of ``global_batch_size`` (one optimizer step each), each mini-batch into micro-batches of
``micro_batch_size`` (one forward/backward each). Every micro-batch loss is divided by the WHOLE
mini-batch's denominator, so the accumulated gradient equals the gradient of one big batch exactly.

Per optimizer step: backward over micro-batches -> ``grad_sync(policy)`` (multi-process all-reduce, if
given) -> clip the global grad norm -> skip the step (warning + ``actor/skipped_steps``) when the loss or
the grad norm is NaN/Inf, else ``optimizer.step()`` and ``scheduler.step()``.

Multi-process note: ``settings.global_batch_size`` is the PER-PROCESS mini-batch here (the runner divides
the configured global batch by the data-parallel size). With ``reduce`` (``distributed.dist.CrossRank``)
the denominators and the metrics are taken over every process's part of the mini-batch, and with
``env_columns`` every env contributes the same number of its chunk steps to each mini-batch, so W processes holding
1/W of the envs each form exactly the mini-batches of one process holding all of them: a W-process
update equals the 1-process update on the same global batch (tests/distributed). A non-finite local
loss poisons the local gradients with NaN before ``grad_sync`` so that every process sees a non-finite
norm and all of them skip the same step (replicas never diverge).

Train/eval mode is the caller's business: the first evaluation must reproduce the rollout log-probs
(ratio exactly 1), so dropout must be off in the policy.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, cast

import torch
from torch import Tensor, nn

from vlarl_cli.algorithm_types import POLICY_LOSSES
from vlarl_cli.algorithms.losses import (
    aggregate_logprobs,
    aggregate_loss,
    explained_variance,
    get_policy_loss_fn,
    kl_penalty,
    loss_weights,
    mask_to_unit,
    to_unit,
    value_loss,
)
from vlarl_cli.algorithms.reduction import LOCAL, Reduce
from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.base import Policy, Replay, index_replay

__all__ = ["RolloutBatch", "UpdateSettings", "ppo_update"]


@dataclass
class UpdateSettings:
    """Plain numbers, filled by the runner from the config (algorithms never see config objects)."""

    update_epoch: int
    global_batch_size: int  # samples per optimizer step in THIS process
    micro_batch_size: int
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float | None
    value_clip: float | None
    huber_delta: float
    entropy_bonus: float
    kl_beta: float
    kl_type: str  # k1/kl, abs, k2/mse, k3/low_var_kl
    logprob_type: str  # token_level, action_level, chunk_level
    loss_agg: str  # token-mean, seq-mean-token-mean, seq-mean-token-sum
    clip_grad: float  # <= 0: no clipping (the norm is still measured)
    critic_warmup_steps: int = 0  # optimizer steps (counted from step_offset) with the policy loss off
    value_coef: float = 1.0
    entropy_type: str | None = None  # granularity of the entropy term; None = logprob_type
    clip_log_ratio_min: float = -20.0
    clip_log_ratio_max: float = 20.0
    policy_loss: str = "vanilla"  # a name of algorithms.losses.POLICY_LOSSES

    def __post_init__(self) -> None:
        for f in ("update_epoch", "global_batch_size", "micro_batch_size"):
            if getattr(self, f) < 1:
                raise ConfigError(f"{f} must be >= 1, got {getattr(self, f)}.", f"Set {f} to a positive integer.")
        get_policy_loss_fn(self.policy_loss)  # an unknown name is refused with the known ones
        if self.global_batch_size % self.micro_batch_size:
            raise ConfigError(f"global_batch_size ({self.global_batch_size}) must be a multiple of "
                              f"micro_batch_size ({self.micro_batch_size}).",
                              "Change one of them so that the micro-batches tile the mini-batch.")


@dataclass
class RolloutBatch:
    """Flat per-sample training data (N samples = chunk steps of all envs), batch first everywhere.

    Attributes:
        replay: what ``policy.evaluate`` needs; every tensor ``[N, ...]``.
        old_logprobs: ``[N, C, A]`` per-element log-probs at rollout time.
        advantages: ``[N]``, ``[N, C]``, ``[N, C, 1]`` or ``[N, C, A]`` (explicitly expanded, never
            silently broadcast).
        loss_mask: ``[N, C]`` bool, valid env steps.
        old_values: ``[N]`` critic values at rollout time (None without a critic), or ``[N, C]`` from a
            critic with one value per executed action (``value_type: action_level``, GAE at action level).
        returns: value targets shaped like ``old_values`` (None without a critic: no value loss).
        valid_fraction: ``[N]`` valid fraction of each sample's trajectory (``seq-mean-token-mean``);
            ``algorithms.advantages.trajectory_valid_fraction`` computes it from the ``[T, B]`` mask.
        steps_per_trajectory: chunk steps T per env column (``seq-mean-token-sum``).
        trajectory: ``[N]`` int64 id of each sample's trajectory (one env column in one rollout epoch; the
            batch builder numbers them ``epoch * envs + env``). A policy loss on whole trajectories (GSPO,
            ``algorithm_types.POLICY_LOSSES[...].trajectory``) groups by it, and the update then shuffles
            trajectories, so that each mini- and micro-batch holds whole ones.
    """

    replay: Replay
    old_logprobs: Tensor
    advantages: Tensor
    loss_mask: Tensor
    old_values: Tensor | None = None
    returns: Tensor | None = None
    valid_fraction: Tensor | None = None
    steps_per_trajectory: int = 1
    trajectory: Tensor | None = None

    def __post_init__(self) -> None:
        if self.old_logprobs.dim() != 3:
            raise ValueError(f"old_logprobs must be [N, C, A], got {tuple(self.old_logprobs.shape)}")
        n, c, a = self.old_logprobs.shape
        if self.loss_mask.shape != (n, c):
            raise ValueError(f"loss_mask must be [N, C] = {(n, c)}, got {tuple(self.loss_mask.shape)}")
        if self.advantages.shape not in ((n,), (n, c), (n, c, 1), (n, c, a)):
            raise ValueError(f"advantages must be [N], [N, C], [N, C, 1] or [N, C, A] with (N, C, A) = {(n, c, a)}, "
                             f"got {tuple(self.advantages.shape)}")
        for name in ("valid_fraction", "trajectory"):
            t = getattr(self, name)
            if t is not None and t.shape != (n,):
                raise ValueError(f"{name} must be [N={n}], got {tuple(t.shape)}")
        for name in ("old_values", "returns"):
            t = getattr(self, name)
            if t is not None and t.shape not in ((n,), (n, c)):
                raise ValueError(f"{name} must be [N={n}] or [N, C] = {(n, c)}, got {tuple(t.shape)}")
        if (self.returns is None) != (self.old_values is None):
            raise ValueError("old_values and returns come together (both None without a critic)")
        if self.returns is not None and self.old_values is not None and self.returns.shape != self.old_values.shape:
            raise ValueError(f"returns {tuple(self.returns.shape)} and old_values {tuple(self.old_values.shape)} "
                             "must have one shape")
        for k, v in self.replay.items():
            if v.shape[0] != n:
                raise ValueError(f"replay[{k!r}] has {v.shape[0]} rows, expected N={n}")

    def __len__(self) -> int:
        return self.old_logprobs.shape[0]

    @property
    def value_mask(self) -> Tensor:
        """Valid value targets: ``[N, C]`` (the step mask) for per-action values, else ``[N]`` (a chunk step
        is valid when any of its env steps is)."""
        per_action = self.returns is not None and self.returns.dim() == 2
        return self.loss_mask if per_action else self.loss_mask.any(-1)

    def select(self, index: Tensor) -> RolloutBatch:
        """Rows ``index`` of every tensor (a mini- or micro-batch)."""
        kw: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "replay":
                kw[f.name] = index_replay(v, index)
            elif isinstance(v, Tensor):
                kw[f.name] = v[index.to(v.device)]
            else:
                kw[f.name] = v
        return RolloutBatch(**kw)

    def to(self, device: torch.device) -> RolloutBatch:
        """The training tensors on ``device``; the replay stays where it is (the policy moves its inputs)."""
        kw: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            kw[f.name] = v.to(device) if isinstance(v, Tensor) else v
        return RolloutBatch(**kw)


class _Mean:
    """Weighted running means of metrics."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, name: str, value: float | Tensor, weight: float | Tensor = 1.0) -> None:
        # a zero weight still records the name: every process then holds the same names (reduce())
        w = float(weight)
        self.sums[name] = self.sums.get(name, 0.0) + (float(value) * w if w > 0 else 0.0)
        self.weights[name] = self.weights.get(name, 0.0) + max(w, 0.0)

    def reduce(self, reduce: Reduce) -> None:
        """Sum the sums and weights over processes (same names everywhere: the same code ran)."""
        names = sorted(self.sums)
        vec = torch.tensor([self.sums[k] for k in names] + [self.weights[k] for k in names], dtype=torch.float64)
        vec = reduce.sum(vec)
        self.sums = dict(zip(names, vec[: len(names)].tolist(), strict=True))
        self.weights = dict(zip(names, vec[len(names):].tolist(), strict=True))

    def result(self) -> dict[str, float]:
        return {k: self.sums[k] / self.weights[k] for k in self.sums if self.weights[k] > 0}


def _clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> float:
    """Clip in place, return the pre-clip global norm as a float (FSDP2 returns a DTensor norm)."""
    if not params:
        return 0.0
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    full = getattr(norm, "full_tensor", None)
    return float(full() if callable(full) else norm)


def _denominators(mb: RolloutBatch, s: UpdateSettings, entropy_level: str, reduce: Reduce) -> dict[str, Tensor]:
    """Loss denominators of the whole mini-batch (all processes), divided by the number of processes:
    the gradient average over processes then equals the gradient of the whole mini-batch."""
    shape = mb.old_logprobs.shape
    masks = {"policy": mask_to_unit(mb.loss_mask, s.logprob_type, shape),
             "entropy": mask_to_unit(mb.loss_mask, entropy_level, shape), "value": mb.value_mask}
    raw = []
    for mask in masks.values():
        _, den = loss_weights(mask, s.loss_agg, valid_fraction=mb.valid_fraction,
                              steps_per_trajectory=mb.steps_per_trajectory)
        # token-mean counts valid units (clamped to >= 1 only after summing over processes)
        raw.append(mask.sum().double() if s.loss_agg == "token-mean" else den.double())
    total = reduce.sum(torch.stack(raw).cpu())
    if s.loss_agg == "token-mean":
        total = total.clamp(min=1.0)
    return {k: (v / reduce.world).float() for k, v in zip(masks, total, strict=True)}


def _permutation(n: int, batch_size: int, env_columns: range | None, generator: torch.Generator) -> Tensor:
    """Order of ``n`` units for one update epoch (consecutive ``batch_size`` units form a mini-batch).

    With ``env_columns`` (the global ids of this process's envs; units are ``slot * len(env_columns) + env``)
    and mini-batches that hold the same number of slots of every env: each env column draws its own order
    of slots from a stream seeded by (one shared draw of ``generator``, global env id), and mini-batch j
    takes slots ``[j m, (j+1) m)`` of every column. Mini-batches mix units across envs, and the
    union over W processes of their mini-batch j is exactly the 1-process mini-batch j. Otherwise units
    are shuffled."""
    k = len(env_columns) if env_columns is not None else 0
    if env_columns is not None and k and n % k == 0 and batch_size % k == 0:
        slots, per_batch = n // k, batch_size // k
        base = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        orders = torch.stack([torch.randperm(slots, generator=torch.Generator().manual_seed(base * 1_000_003 + g))
                              for g in env_columns])  # [k, slots]: column c's slots in order
        by_batch = orders.view(k, slots // per_batch, per_batch).permute(1, 0, 2)  # [batches, k, per_batch]
        return (by_batch * k + torch.arange(k).view(1, k, 1)).reshape(-1)
    return torch.randperm(n, generator=generator)


def _row_order(batch: RolloutBatch, s: UpdateSettings, env_columns: range | None,
               generator: torch.Generator) -> Tensor:
    """Row order of one update epoch: chunk steps shuffled (units = rows), or, for a policy loss on whole
    trajectories, trajectories shuffled and each kept in one piece (units = trajectories, ``T`` rows each, in
    time order). The batch builder's rows are ``(epoch * T + t) * envs + env``, so trajectories sorted by id
    are ``slot * envs + env`` units as :func:`_permutation` expects."""
    if not POLICY_LOSSES[s.policy_loss].trajectory:
        return _permutation(len(batch), s.global_batch_size, env_columns, generator)
    assert batch.trajectory is not None  # _check_update
    t = batch.steps_per_trajectory
    _, inverse = torch.unique(batch.trajectory, return_inverse=True)
    rows = torch.sort(inverse * len(batch) + torch.arange(len(batch))).indices.view(-1, t)  # [trajectories, T]
    return rows[_permutation(rows.shape[0], s.global_batch_size // t, env_columns, generator)].reshape(-1)


def ppo_update(policy: nn.Module, optimizer: torch.optim.Optimizer, batch: RolloutBatch, settings: UpdateSettings,
               *, generator: torch.Generator, scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
               ref_policy: nn.Module | None = None, grad_sync: Callable[[nn.Module], None] | None = None,
               step_offset: int = 0, reduce: Reduce = LOCAL, env_columns: range | None = None) -> dict[str, float]:
    """Run ``update_epoch`` passes of clipped-PPO mini-batch updates; return averaged metrics.

    Args:
        policy: implements ``evaluate(replay) -> EvaluateOutput`` (``policies/base.py``).
        batch: the flat rollout (see :class:`RolloutBatch`).
        generator: CPU generator for the shuffling (reproducible runs).
        ref_policy: frozen reference for the KL penalty (required when ``kl_beta > 0``).
        grad_sync: called on ``policy`` after backward, before clipping (data-parallel all-reduce).
        step_offset: optimizer steps already taken (for ``critic_warmup_steps``).
        reduce: reductions over the data-parallel processes (denominators, metrics); LOCAL in one process.
        env_columns: global ids of this process's envs when rows are laid out ``slot * len(env_columns) + env``
            (the runner's layout): the shuffle then keeps mini-batches independent of how the envs are split
            over processes (see ``_permutation``).
    Returns:
        RLinf's names (``runner/embodied_runner.py`` logs the actor's metrics under ``train/``):
        ``train/actor/policy_loss``, ``train/actor/approx_kl``, ``train/actor/clip_fraction``,
        ``train/actor/ratio``, ``train/actor/clipped_ratio``, ``train/actor/dual_clip_fraction``,
        ``train/actor/entropy_loss`` (the mean entropy, absent when the policy defines none),
        ``train/actor/kl_loss`` (when ``kl_beta > 0``), ``train/actor/grad_norm``, ``train/actor/lr``,
        ``train/actor/total_loss`` (the whole mini-batch's loss), ``train/critic/value_loss``,
        ``train/critic/value_clip_ratio``, ``train/critic/explained_variance`` (absent without a critic, or
        when undefined: constant returns), ``train/critic/lr`` (a value head with its own group); and ours:
        ``train/actor/skipped_steps``, ``train/actor/optimizer_steps``.
    """
    s = settings
    _check_update(batch, s, ref_policy)
    update = _Update(policy, s, ref_policy, has_critic=batch.returns is not None, reduce=reduce)
    steps = skipped = 0
    for _epoch in range(s.update_epoch):
        perm = _row_order(batch, s, env_columns, generator)
        for start in range(0, len(batch), s.global_batch_size):
            mb = batch.select(perm[start:start + s.global_batch_size])
            optimizer.zero_grad(set_to_none=True)
            total = update.accumulate(mb, actor_on=step_offset + steps + skipped >= s.critic_warmup_steps)
            if update.step(optimizer, scheduler, total, grad_sync):
                steps += 1
            else:
                skipped += 1
    return update.metrics(optimizer, batch, skipped=skipped, steps=steps)


def _check_update(batch: RolloutBatch, s: UpdateSettings, ref_policy: nn.Module | None) -> None:
    n = len(batch)
    if POLICY_LOSSES[s.policy_loss].trajectory:
        _check_whole_trajectories(batch, s)
    if n % s.global_batch_size:
        raise ConfigError(f"The rollout has {n} samples, not a multiple of global_batch_size "
                          f"({s.global_batch_size}); the remainder would be silently dropped.",
                          "Choose global_batch_size to divide envs x chunk steps (per process).")
    if s.kl_beta > 0 and ref_policy is None:
        raise ConfigError(f"kl_beta = {s.kl_beta} > 0 needs a frozen reference policy, but none was given.",
                          "Keep a reference copy of the initial weights, or set kl_beta to 0.")


def _check_whole_trajectories(batch: RolloutBatch, s: UpdateSettings) -> None:
    t = batch.steps_per_trajectory
    if batch.trajectory is None:
        raise ValueError(f"policy loss {s.policy_loss} needs RolloutBatch.trajectory (the trajectory id of every sample)")
    counts = torch.unique(batch.trajectory, return_counts=True)[1]
    if not bool((counts == t).all()):
        raise ValueError(f"policy loss {s.policy_loss} needs whole trajectories of steps_per_trajectory = {t} rows "
                         f"each; the batch has trajectories of {sorted(set(counts.tolist()))} rows")
    if s.global_batch_size % t or s.micro_batch_size % t:
        raise ConfigError(f"policy loss {s.policy_loss} takes a ratio over whole trajectories, so each micro-batch "
                          f"holds whole ones: micro_batch_size ({s.micro_batch_size}) and the per-process "
                          f"global_batch_size ({s.global_batch_size}) must be multiples of the {t} chunk steps of "
                          "a trajectory.", "Change actor.micro_batch_size / actor.global_batch_size.")


# our internal metric name -> RLinf's (rlinf/algorithms/losses.py, workers/actor/fsdp_actor_worker.py)
_RLINF_NAMES = {
    "policy_loss": "train/actor/policy_loss", "approx_kl": "train/actor/approx_kl",
    "clipfrac": "train/actor/clip_fraction", "dual_clipfrac": "train/actor/dual_clip_fraction",
    "ratio": "train/actor/ratio", "clipped_ratio": "train/actor/clipped_ratio",
    "entropy": "train/actor/entropy_loss", "kl_ref": "train/actor/kl_loss", "grad_norm": "train/actor/grad_norm",
    "loss": "train/actor/total_loss", "value_loss": "train/critic/value_loss",
    "value_clip_ratio": "train/critic/value_clip_ratio",
}


class _Update:
    """One ``ppo_update`` call: the losses of micro-batches, optimizer steps and running metrics."""

    def __init__(self, policy: nn.Module, s: UpdateSettings, ref_policy: nn.Module | None, *, has_critic: bool,
                 reduce: Reduce) -> None:
        self.policy, self.s, self.ref_policy, self.has_critic, self.reduce = policy, s, ref_policy, has_critic, reduce
        self.entropy_level = s.entropy_type or s.logprob_type
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.m = _Mean()

    def accumulate(self, mb: RolloutBatch, *, actor_on: bool) -> dict[str, float]:
        """Backward over the micro-batches of ``mb``; the summed losses (``loss``, ``policy_loss``,
        ``value_loss``). A non-finite loss poisons the gradients so that every process skips this step."""
        s = self.s
        den = _denominators(mb, s, self.entropy_level, self.reduce)
        total = {"loss": 0.0, "policy_loss": 0.0, "value_loss": 0.0}
        for mstart in range(0, s.global_batch_size, s.micro_batch_size):
            micro = mb.select(torch.arange(mstart, mstart + s.micro_batch_size))
            loss = self.micro_loss(micro, den, actor_on, total)
            if loss.requires_grad:  # critic warm-up without a critic has nothing to train
                loss.backward()
            total["loss"] += float(loss.detach())
        if not math.isfinite(total["loss"]):
            # make every process see a non-finite norm after grad_sync, so all skip this step
            for p in self.params:
                if p.grad is not None:
                    p.grad.fill_(float("nan"))
        return total

    def step(self, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler | None,
             total: dict[str, float], grad_sync: Callable[[nn.Module], None] | None) -> bool:
        """Sync, clip and step; False (gradients discarded, with a warning) when the loss or norm is not finite."""
        if grad_sync is not None:
            grad_sync(self.policy)
        max_norm = self.s.clip_grad if self.s.clip_grad > 0 else float("inf")
        grad_norm = _clip_grad_norm(self.params, max_norm)
        if not (math.isfinite(grad_norm) and math.isfinite(total["loss"])):
            warnings.warn(f"ppo_update: skipping an optimizer step (loss {total['loss']}, grad norm "
                          f"{grad_norm}); the gradients were discarded.", RuntimeWarning, stacklevel=3)
            optimizer.zero_grad(set_to_none=True)
            return False
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        self.m.add("grad_norm", grad_norm)
        self.m.add("loss", total["loss"])
        self.m.add("policy_loss", total["policy_loss"])
        if self.has_critic:
            self.m.add("value_loss", total["value_loss"])
        return True

    def metrics(self, optimizer: torch.optim.Optimizer, batch: RolloutBatch, *, skipped: int, steps: int
                ) -> dict[str, float]:
        self.m.reduce(self.reduce)
        out = {_RLINF_NAMES[k]: v for k, v in self.m.result().items()}
        out["train/actor/skipped_steps"] = float(skipped)
        out["train/actor/optimizer_steps"] = float(steps)
        lrs = {g.get("name", "policy"): float(g["lr"]) for g in optimizer.param_groups}
        out["train/actor/lr"] = float(optimizer.param_groups[0]["lr"])
        if "value_head" in lrs:
            out["train/critic/lr"] = lrs["value_head"]
        if self.has_critic:
            assert batch.old_values is not None and batch.returns is not None
            ev = explained_variance(batch.old_values, batch.returns, batch.value_mask, self.reduce)
            if math.isfinite(ev):
                out["train/critic/explained_variance"] = ev
        return out

    def micro_loss(self, micro: RolloutBatch, den: dict[str, Tensor], actor_on: bool, total: dict[str, float]
                   ) -> Tensor:
        """Loss of one micro-batch, already divided by the mini-batch denominators."""
        ev = cast(Policy, self.policy).evaluate(micro.replay)
        # the rollout usually lives on the CPU, the policy's outputs on its device
        device = ev.logprobs.device
        micro = micro.to(device)
        den = {k: v.to(device) for k, v in den.items()}
        if ev.logprobs.shape != micro.old_logprobs.shape:
            raise ValueError(f"policy.evaluate returned logprobs {tuple(ev.logprobs.shape)}, expected "
                             f"{tuple(micro.old_logprobs.shape)} like the rollout's")
        terms = _PolicyTerms(self.s, micro, ev.logprobs)
        pg_loss = terms.pg_loss(den["policy"], self.m)
        loss = torch.zeros((), device=device)
        if actor_on:
            loss = loss + pg_loss
            total["policy_loss"] += float(pg_loss.detach())
        loss = loss - self._entropy_term(micro, ev.entropy, den["entropy"], actor_on)
        if self.s.kl_beta > 0 and actor_on:
            loss = loss + self._kl_term(micro, terms, den["policy"])
        if self.has_critic:
            vl = self._value_term(micro, ev.values, den["value"])
            loss = loss + self.s.value_coef * vl
            total["value_loss"] += float(vl.detach())
        return loss

    def _entropy_term(self, micro: RolloutBatch, entropy: Tensor | None, den: Tensor, actor_on: bool) -> Tensor:
        """``entropy_bonus * H`` (to subtract from the loss); records the mean entropy."""
        s, level, shape = self.s, self.entropy_level, micro.old_logprobs.shape
        if entropy is None:
            if s.entropy_bonus > 0:
                raise ConfigError(f"entropy_bonus = {s.entropy_bonus} > 0, but this policy defines no entropy "
                                  "(e.g. flow_sde / flow_cps have a fixed noise schedule).",
                                  "Set entropy_bonus to 0, or use a policy with an entropy (flow_noise, token, "
                                  "Gaussian).")
            return torch.zeros((), device=micro.old_logprobs.device)
        ent_mask = mask_to_unit(micro.loss_mask, level, shape)
        ent = aggregate_logprobs(entropy.float(), level)
        ew, _ = loss_weights(ent_mask, s.loss_agg, valid_fraction=micro.valid_fraction,
                             steps_per_trajectory=micro.steps_per_trajectory)
        with torch.no_grad():
            self.m.add("entropy", torch.where(ent_mask, ent, 0.0).sum() / ent_mask.sum().clamp(min=1), ent_mask.sum())
        if s.entropy_bonus > 0 and actor_on:
            return s.entropy_bonus * aggregate_loss(ent, ew, den)
        return torch.zeros((), device=ent.device)

    def _kl_term(self, micro: RolloutBatch, terms: _PolicyTerms, den: Tensor) -> Tensor:
        """``kl_beta * KL(policy || reference)``; records the mean KL."""
        assert self.ref_policy is not None
        with torch.no_grad():
            ref = cast(Policy, self.ref_policy).evaluate(micro.replay)
        kl = kl_penalty(terms.logp, aggregate_logprobs(ref.logprobs.float(), self.s.logprob_type), self.s.kl_type)
        with torch.no_grad():
            mask = terms.unit_mask
            self.m.add("kl_ref", torch.where(mask, kl, 0.0).sum() / mask.sum().clamp(min=1), mask.sum())
        return self.s.kl_beta * aggregate_loss(kl, terms.weight, den)

    def _value_term(self, micro: RolloutBatch, values_new: Tensor, den: Tensor) -> Tensor:
        """The clipped Huber value loss; records the value-clip ratio."""
        assert micro.old_values is not None and micro.returns is not None
        s = self.s
        v_mask = micro.value_mask
        vw, _ = loss_weights(v_mask, s.loss_agg, valid_fraction=micro.valid_fraction,
                             steps_per_trajectory=micro.steps_per_trajectory)
        if values_new.shape != micro.returns.shape:
            raise ValueError(f"policy.evaluate returned values {tuple(values_new.shape)}, expected "
                             f"{tuple(micro.returns.shape)} (like the rollout's values: [B], or [B, C] "
                             "with value_type action_level)")
        values = values_new.float()
        old_values = torch.where(v_mask, micro.old_values.float(), values.detach())
        returns = torch.where(v_mask, micro.returns.float(), values.detach())
        vl, vm = value_loss(values, old_values, returns, vw, den, value_clip=s.value_clip, huber_delta=s.huber_delta)
        self.m.add("value_clip_ratio", vm["value_clip_ratio"], vm["count"])
        return vl


class _PolicyTerms:
    """The micro-batch at the ``logprob_type`` granularity: log-probs, advantages, mask and loss weights."""

    def __init__(self, s: UpdateSettings, micro: RolloutBatch, logprobs: Tensor) -> None:
        self.s = s
        level, shape = s.logprob_type, micro.old_logprobs.shape
        self.unit_mask = mask_to_unit(micro.loss_mask, level, shape)
        self.weight, _ = loss_weights(self.unit_mask, s.loss_agg, valid_fraction=micro.valid_fraction,
                                      steps_per_trajectory=micro.steps_per_trajectory)
        self.logp = aggregate_logprobs(logprobs.float(), level)
        old = aggregate_logprobs(micro.old_logprobs.float(), level)
        adv = to_unit(micro.advantages.float(), level, shape, micro.loss_mask)
        # masked units must not reach the gradient even through 0 * NaN: neutral values there
        self.adv = torch.where(self.unit_mask, adv, 0.0)
        self.old = torch.where(self.unit_mask, old, self.logp.detach())
        self.trajectory = micro.trajectory

    def pg_loss(self, den: Tensor, m: _Mean) -> Tensor:
        s = self.s
        loss_fn = get_policy_loss_fn(s.policy_loss)
        loss, pm = loss_fn(self.logp, self.old, self.adv, self.weight, den, clip_ratio_low=s.clip_ratio_low,
                           clip_ratio_high=s.clip_ratio_high, clip_ratio_c=s.clip_ratio_c,
                           log_ratio_min=s.clip_log_ratio_min, log_ratio_max=s.clip_log_ratio_max,
                           trajectory=self.trajectory)
        count = pm.pop("count")
        for k, v in pm.items():
            m.add(k, v, count)
        return loss
