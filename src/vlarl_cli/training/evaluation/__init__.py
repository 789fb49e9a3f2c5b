"""LIBERO evaluation with the literature's protocol: success rates with Wilson intervals, resumable.

    vlarl eval --suite libero_10 --checkpoint runs/x/checkpoints/global_step_100
    vlarl eval --suite all --config quickstart --trials 5 --num-envs 2
    torchrun --nproc-per-node 2 -m vlarl_cli.cli.main eval --suite libero_90 --checkpoint PATH   # ranks

What one call does (:func:`evaluate`):
1. load the policy (a training checkpoint folder, or a config), hash its weights;
2. write the protocol card (``card.json``): protocol, step limits, settle steps, env seed, action mode,
   replan size, resolution, checkpoint hash, vlarl version. Resuming into a folder whose card differs in
   anything but the episode plan is refused, so every number in a folder comes from one setup;
3. plan the episodes ((suite, task, trial) for trial < ``trials``, trial i from LIBERO's fixed init
   state i), drop those already in ``episodes.jsonl``, split the rest over ranks (contiguous,
   task-major blocks) and over the envs of this rank's vector env (contiguous blocks again, so an env
   rarely switches task: a switch rebuilds the simulator, ~4 s);
4. run them in the ``num_envs`` envs, each env starting its next episode as soon as one ends (no waves;
   ``auto_reset`` off, the env renders only at chunk boundaries), appending each finished episode
   atomically (:mod:`vlarl_cli.video.episodes`);
5. rank 0 summarises: per task, per suite and overall success rate with a 95% Wilson interval, printed
   as a table and written as ``summary.json`` / ``summary.csv`` (every CSV row carries the card).

Statistics (:mod:`.stats`): Wilson score interval for one rate, Newcombe's hybrid score interval for the
difference of two (:func:`compare`). Sampling noise is seeded per episode (:mod:`.runner`).

The package, by concern (everything is re-exported here, so ``from vlarl_cli.training.evaluation import X``
works for every public name):

- :mod:`.stats`: Wilson and Newcombe intervals.
- :mod:`.plan`: :class:`EpisodeKey`, :func:`plan_episodes`, the block splits, :class:`EvalSettings`.
- :mod:`.source`: :func:`load_policy`, checkpoint-folder resolution, weight hashes (:class:`PolicyInfo`).
- :mod:`.card`: the protocol card and the resume check (:func:`make_card`, :func:`card_conflicts`).
- :mod:`.runner`: :func:`run_episodes`, the episode scheduler over the vector env.
- :mod:`.results`: :class:`EvalSummary` (rates per task / suite / overall), summary files and table.
- :mod:`.comparison`: :func:`compare` of two result folders.
- :mod:`.api`: :func:`evaluate` (``vlarl eval``) and :func:`evaluate_policy`.
- here: :func:`training_eval_metrics` (``rl-train``'s ``val_check_interval``). It lives in the package
  itself and calls ``evaluate_policy`` through this namespace, so patching
  ``vlarl_cli.training.evaluation.evaluate_policy`` reaches it (tests/eval/test_results.py does).

Heavy imports (torch, robosuite, LIBERO, transformers) stay inside the functions that need them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from vlarl_cli.envs.vector import workers_for
from vlarl_cli.training.evaluation.api import evaluate, evaluate_policy
from vlarl_cli.training.evaluation.card import batch_note, card_conflicts, compute_note, make_card
from vlarl_cli.training.evaluation.comparison import Comparison, DiffRow, compare, print_comparison
from vlarl_cli.training.evaluation.plan import (
    STANDARD_SUITES,
    EpisodeKey,
    EvalSettings,
    expand_suite,
    plan_episodes,
    split_blocks,
)
from vlarl_cli.training.evaluation.results import (
    CSV_CARD_COLUMNS,
    EvalSummary,
    RateRow,
    print_summary,
    summarize,
    write_summary,
)
from vlarl_cli.training.evaluation.runner import RunStats, run_episodes
from vlarl_cli.training.evaluation.source import (
    FAMILY_POLICY_MARKER,
    PolicyInfo,
    load_policy,
    resolve_checkpoint_folder,
    state_dict_sha256,
)
from vlarl_cli.training.evaluation.stats import Z95, newcombe_interval, wilson_interval

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CSV_CARD_COLUMNS",
    "FAMILY_POLICY_MARKER",
    "STANDARD_SUITES",
    "Z95",
    "Comparison",
    "DiffRow",
    "EpisodeKey",
    "EvalSettings",
    "EvalSummary",
    "PolicyInfo",
    "RateRow",
    "RunStats",
    "batch_note",
    "card_conflicts",
    "compare",
    "compute_note",
    "evaluate",
    "evaluate_policy",
    "expand_suite",
    "load_policy",
    "make_card",
    "newcombe_interval",
    "plan_episodes",
    "print_comparison",
    "print_summary",
    "resolve_checkpoint_folder",
    "run_episodes",
    "split_blocks",
    "state_dict_sha256",
    "summarize",
    "training_eval_metrics",
    "wilson_interval",
    "workers_for",
    "write_summary",
]


def training_eval_metrics(policy: Any, config: Any, *, rank: int = 0, world_size: int = 1,
                          out_dir: Path | None = None, group: Any = None, env: Any = None) -> dict[str, float]:
    """``eval/*`` metrics for ``rl-train``'s ``val_check_interval`` from ``config.env.eval``.

    Same protocol machinery as ``vlarl eval``; trials per task = enough episodes for every eval env to
    run ``rollout_epoch`` episodes (``ceil(total_num_envs * rollout_epoch / tasks)``, at most 50);
    deterministic actions. ``max_episode_steps`` / ``settle_steps`` of the split override the protocol.
    ``env``: this rank's training env; the evaluation runs in its simulators when they play the same episodes
    (``runner.reusable``: as many envs, the same protocol settings, no auto-reset), else in its own.
    """
    split = config.env.eval
    from vlarl_cli.envs.libero import suites as S
    from vlarl_cli.envs.libero.make import suite_of

    n_tasks = len(split.task_ids) if split.task_ids else S.num_tasks(suite_of(split))
    total = split.total_num_envs or 1
    trials = min(S.TRIALS_PER_TASK, max(1, math.ceil(total * split.rollout_epoch / n_tasks)))
    settings = EvalSettings(
        suite=suite_of(split), tasks=tuple(split.task_ids) if split.task_ids else None, trials=trials,
        protocol=split.protocol, deterministic=True, num_envs=max(1, total // world_size),
        num_workers=split.num_workers, resolution=split.resolution, max_steps=split.max_episode_steps,
        settle_steps=split.settle_steps, policy_seed=config.actor.seed, env_seed=split.seed,
        model_type=config.actor.model.model_type, render_quality=split.render_quality,
    )
    was_training = bool(getattr(policy, "training", False))
    policy.eval()
    try:
        summary = evaluate_policy(policy, settings, out_dir=out_dir, rank=rank, world_size=world_size, show=False,
                                  log_episodes=False, resume=False, group=group,
                                  cpu_budget=config.cluster.cpu_budget.model_dump(), env=env)
    finally:
        if was_training:
            policy.train()
    return summary.metrics("eval")
