"""The algorithm vocabulary: every advantage estimator and policy loss vlarl knows, and what each needs from
the rest of the run. The one table the config schema (which keys go together), the batch builder
(:mod:`vlarl_cli.training.batch`: values, groups, whole-batch normalisation) and the update
(:mod:`vlarl_cli.training.update`: trajectory-level mini-batches) read; plain data, no imports, so config
validation stays instant. The formulas live in :mod:`vlarl_cli.algorithms` (registered by the same names,
checked by ``tests/algorithms/test_registry.py``).

Adding an estimator is one function in ``algorithms/advantages.py`` and one row here; adding a policy loss is
one function in ``algorithms/losses.py`` and one row here (``docs/adding_an_algorithm.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ADVANTAGE_TYPES", "LOSS_AGGS", "POLICY_LOSSES", "AdvantageType", "PolicyLossType"]


@dataclass(frozen=True)
class AdvantageType:
    """What one ``algorithm.adv_type`` needs.

    Attributes:
        critic: reads value estimates (the model needs a value head; the batch builder passes the rollout's
            values; a time-limit cut with auto-reset bootstraps ``gamma * V(final observation)``).
        groups: compares the episodes of a group of ``algorithm.group_size`` envs that share an init state
            (``group_size >= 2``; the envs are built in groups; ``filter_rewards`` and dynamic sampling, which
            drop or redraw groups, apply).
        batch_normalized: ``normalize_advantages`` standardises over the WHOLE batch (every rollout epoch, every
            process), so the batch builder normalises once all pieces are there; False: the estimator's own
            normalisation (within groups, or none) is applied per rollout epoch.
        source: the paper or upstream function the estimator follows.
    """

    critic: bool = False
    groups: bool = False
    batch_normalized: bool = False
    source: str = ""


ADVANTAGE_TYPES: dict[str, AdvantageType] = {
    "gae": AdvantageType(critic=True, batch_normalized=True, source="arXiv 1506.02438; RLinf gae"),
    "grpo": AdvantageType(groups=True, source="arXiv 2402.03300; RLinf / verl grpo"),
    "drgrpo": AdvantageType(groups=True, source="arXiv 2503.20783; verl grpo, norm_adv_by_std_in_grpo False"),
    "rloo": AdvantageType(groups=True, batch_normalized=True, source="arXiv 2402.14740; verl rloo"),
    "reinpp": AdvantageType(batch_normalized=True, source="arXiv 2501.03262; RLinf reinpp"),
    "raw": AdvantageType(batch_normalized=True, source="RLinf raw"),
}


@dataclass(frozen=True)
class PolicyLossType:
    """What one ``algorithm.policy_loss`` needs.

    Attributes:
        trajectory: a sequence-level quantity (e.g. GSPO's ratio over a whole trajectory): every micro-batch
            must hold whole trajectories, so the update shuffles trajectories instead of chunk steps.
        dual_clip: ``algorithm.clip_ratio_c`` applies (the dual clip of negative advantages).
        source: the paper or upstream function the loss follows.
    """

    trajectory: bool = False
    dual_clip: bool = True
    source: str = ""


POLICY_LOSSES: dict[str, PolicyLossType] = {
    "vanilla": PolicyLossType(source="arXiv 1707.06347 + dual clip 1912.09729; RLinf ppo actor, verl vanilla"),
    "gspo": PolicyLossType(trajectory=True, dual_clip=False, source="arXiv 2507.18071; verl gspo"),
}

#: ``algorithm.loss_agg_func``: how per-unit losses become one number (``algorithms.losses.loss_weights``)
LOSS_AGGS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
