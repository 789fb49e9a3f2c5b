"""DAPO's dynamic sampling (Yu et al., arXiv 2503.14476) for the group estimators (``algorithm.dynamic_sampling``).

A group whose episodes all score the same (all succeed or all fail) has zero advantage under GRPO, Dr.GRPO
and RLOO: it only dilutes the batch. Dynamic sampling keeps collecting (each draw a whole rollout epoch of
this rank's envs, from fresh init states) and keeps the groups whose scores differ, until the batch has as
many such groups as it has group slots (``envs / group_size``), or ``algorithm.max_sampling_draws``
collections were made. Then the slots still empty take groups without signal (zero advantage; they count in
the denominators as in a batch without dynamic sampling) and a warning says how many. verl's DAPO recipe
(``recipe/dapo``, ``filter_groups``) keeps the groups whose metric has a non-zero std and raises at its
``max_num_gen_batches``; here the run goes on, and says so.

Every rollout rank makes the same number of draws (the largest any of them needs: a sharded policy's forwards
and the env ranks' protocol take part in each), and fills its own slots from its own groups, so a run on W
processes does not repeat the 1-process run group for group (each rank pools only its own envs).

Logged per iteration (sums over the rollout epochs and ranks): ``rollout/sampling_draws`` (collections per
rank), ``rollout/drawn_trajectories`` (env trajectories collected, the sample budget),
``rollout/signal_groups`` (drawn groups whose scores differ), ``rollout/unfilled_groups`` (slots that
took a group without signal at the cap).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from vlarl_cli.algorithms.advantages import aggregate_rewards, episode_scores, loss_mask_from_dones
from vlarl_cli.algorithms.reduction import LOCAL, Reduce
from vlarl_cli.distributed.columns import join_columns, select_columns
from vlarl_cli.training.rollout import Rollout


def group_signal(rollout: Rollout, group_size: int, *, auto_reset: bool, reward_type: str) -> torch.Tensor:
    """``[N / group_size]`` bool: the group's first-episode scores (as the estimators compute them) differ."""
    rewards = aggregate_rewards(rollout.rewards, reward_type)
    action_level = reward_type == "action_level"
    if auto_reset:
        mask = torch.ones(rewards.shape, dtype=torch.bool)
    else:
        mask = loss_mask_from_dones(rollout.dones if action_level else rollout.dones.any(dim=-1))
    scores = episode_scores(rewards, mask).view(-1, group_size)
    return scores.max(dim=1).values > scores.min(dim=1).values


@dataclass
class SampledEpoch:
    """One rollout epoch assembled by dynamic sampling, and every draw it took (for the env metrics)."""

    rollout: Rollout
    draws: list[Rollout]
    stats: dict[str, float] = field(default_factory=dict)


def fill_with_signal(draw: Callable[[int], Rollout], signal: Callable[[Rollout], torch.Tensor], *,
                     group_size: int, max_draws: int, reduce: Reduce = LOCAL) -> SampledEpoch:
    """Draw rollouts (``draw(d)``, ``d = 0, 1, ...``) until this rank's group slots hold groups with signal
    (``signal(rollout) -> [G]`` bool) on every rank, or ``max_draws`` draws; groups keep their draw order."""
    draws: list[Rollout] = []
    kept: list[tuple[int, int]] = []  # (draw, group) with signal, in draw order
    slots = 0
    while len(draws) < max_draws:
        draws.append(draw(len(draws)))
        slots = draws[-1].rewards.shape[1] // group_size
        kept += [(len(draws) - 1, int(g)) for g in torch.nonzero(signal(draws[-1])).flatten()]
        missing = torch.tensor([float(max(0, slots - len(kept)))], dtype=torch.float64)
        if float(reduce.max(missing)[0]) == 0:  # every rank is full
            break
    signal_groups = len(kept)
    unfilled = max(0, slots - len(kept))
    if unfilled:  # at the cap: the first groups without signal fill the rest
        taken = set(kept)
        kept += [(d, g) for d in range(len(draws)) for g in range(slots) if (d, g) not in taken][:unfilled]
        warnings.warn(f"dynamic sampling: {unfilled} of {slots} group slots found no group whose scores differ in "
                      f"{len(draws)} draws (algorithm.max_sampling_draws); they hold groups without signal (zero "
                      "advantage).", RuntimeWarning, stacklevel=2)
    pieces = [select_columns(draws[d].columns(), range(g * group_size, (g + 1) * group_size))
              for d, g in kept[:slots]]
    rollout = Rollout.from_columns(join_columns(pieces))
    stats = {"rollout/sampling_draws": float(len(draws)),
             "rollout/drawn_trajectories": float(len(draws) * slots * group_size),
             "rollout/signal_groups": float(signal_groups), "rollout/unfilled_groups": float(unfilled)}
    return SampledEpoch(rollout, draws, stats)


def sampling_metrics(epochs: list[SampledEpoch], reduce: Reduce = LOCAL) -> dict[str, float]:
    """The ``rollout/*`` counts of dynamic sampling summed over rollout epochs and ranks (draws: per rank, the
    same on every rank)."""
    names = ["rollout/drawn_trajectories", "rollout/signal_groups", "rollout/unfilled_groups"]
    local = torch.tensor([sum(e.stats[k] for e in epochs) for k in names], dtype=torch.float64)
    out = dict(zip(names, reduce.sum(local).tolist(), strict=True))
    out["rollout/sampling_draws"] = sum(e.stats["rollout/sampling_draws"] for e in epochs)
    return out
