"""Entry points: :func:`evaluate` (``vlarl eval``: load the policy, spread over this launch's ranks) and
:func:`evaluate_policy` (an already built policy), plus the result folder's preparation (card check,
resume or discard) and the gathering of records over ranks when nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from vlarl_cli.training.evaluation.card import batch_note, card_conflicts, compute_note, make_card
from vlarl_cli.training.evaluation.plan import EvalSettings, plan_episodes, split_blocks
from vlarl_cli.training.evaluation.results import EvalSummary, print_summary, summarize, write_summary
from vlarl_cli.training.evaluation.runner import run_episodes
from vlarl_cli.training.evaluation.source import PolicyInfo, load_policy
from vlarl_cli.video.episodes import CARD, EPISODES, EpisodeLog, EpisodeRecord, ResultsError, load_card


def evaluate_policy(policy: Any, settings: EvalSettings, *, info: PolicyInfo | None = None,
                    out_dir: Path | None = None, resume: bool = True, rank: int = 0, world_size: int = 1,
                    show: bool = True, log_episodes: bool = True, group: Any = None,
                    cpu_budget: dict[str, Any] | None = None, env: Any = None) -> EvalSummary:
    """Evaluate an already built policy (what ``rl-train``'s ``val_check_interval`` calls).

    ``rank`` / ``world_size`` index the evaluating ranks, which form the process ``group`` (default: all
    ranks; rl-train with a separated placement evaluates on its rollout ranks).

    ``cpu_budget``: the config's ``cluster.cpu_budget`` overrides (``distributed.cpu_budget``).
    ``env``: a vector env to evaluate in when it plays the same episodes (``runner.reusable``; rl-train's
    training env), instead of building one.

    With ``out_dir``: card, crash-safe episode log, resume, summary files (written by rank 0).
    Without: nothing is written; with several ranks the counts are summed over ranks, so every rank
    returns the same summary.
    """
    from vlarl_cli.checkpoints.atomic import atomic_write_json
    from vlarl_cli.distributed import dist
    from vlarl_cli.envs.libero.protocol import get_protocol

    settings.validate()
    if hasattr(policy, "configure_eval"):  # OpenVLA-OFT: rlinf samples at temperature 1.6, standard takes argmax
        policy.configure_eval(settings.protocol)
    plan = plan_episodes(settings.suite, settings.tasks, settings.trials, get_protocol(settings.protocol).eval_order,
                         settings.categories)
    card = make_card(settings, policy, info, plan)
    log = EpisodeLog(out_dir / EPISODES) if out_dir is not None else None
    if out_dir is not None and rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        _prepare_folder(out_dir, card, resume)
    dist.barrier(group)
    finished = {r.key for r in log.read()} if log is not None else set()
    todo = [k for k in plan if (k.suite, k.task, k.trial) not in finished]
    mine = split_blocks(todo, world_size)[rank]
    if show and rank == 0:
        print(f"vlarl eval: {len(plan)} episodes planned, {len(plan) - len(todo)} already finished, "
              f"{len(todo)} to run on {world_size} rank(s)" + (f" -> {out_dir}" if out_dir else ""), flush=True)
    records, stats = run_episodes(policy, settings, mine, on_episode=log.append if log else None, rank=rank,
                                  out_dir=out_dir, log=log_episodes, cpu_budget=cpu_budget, env=env)
    dist.barrier(group)
    if log is not None:
        summary = summarize(log.read(), card, plan)
    else:
        summary = summarize(records if world_size <= 1 else [
            EpisodeRecord.from_dict(json.loads(line))
            for line in dist.all_gather_lists([r.to_json() for r in records], world_size, group)], card, plan)
    summary.run_now, summary.skipped, summary.out_dir, summary.stats = len(records), len(plan) - len(todo), out_dir, stats
    if rank == 0:
        if out_dir is not None:
            write_summary(out_dir, summary)
            atomic_write_json(out_dir / CARD, card)  # the plan part follows the latest call
        if show:
            print_summary(summary)
    return summary


def _check_libero_policy(config: Any, info: PolicyInfo) -> None:
    """A toy policy (toy_reach's 2-d actions, a state-only observation) cannot act in LIBERO: refused before the
    first simulator step, not a shape error inside it."""
    from vlarl_cli.errors import ConfigError
    from vlarl_cli.model_types import MODEL_TYPES

    model_type = config.actor.model.model_type
    if MODEL_TYPES[model_type].family == "toy":
        raise ConfigError(f"{info.path} is a {model_type} policy for the {config.env.train.env_type} toy env; "
                          "`vlarl eval --suite` evaluates in LIBERO, where it cannot act.",
                          "Evaluate a LIBERO policy (pi0, pi0.5, OpenVLA-OFT, GR00T checkpoint or config); a toy "
                          "run's own evaluation is runner.val_check_interval during rl-train.")


def _claim(out_dir: Path, rank: int) -> Any:
    """One writer per results folder: two evals into one folder would run (and log) episodes twice."""
    from vlarl_cli.training import run_folder

    return run_folder.claim(out_dir, command="eval", main=rank == 0, what="The results folder", writes=())


def _prepare_folder(out_dir: Path, card: dict[str, Any], resume: bool) -> None:
    import shutil

    from vlarl_cli.checkpoints.atomic import atomic_write_json

    card_path, log = out_dir / CARD, EpisodeLog(out_dir / EPISODES)
    if card_path.is_file() and log.path.is_file():
        if resume:
            old = load_card(card_path)
            conflicts = card_conflicts(old, card)
            if conflicts:
                raise ResultsError(
                    f"{out_dir} holds results produced under a different setup ({', '.join(conflicts)} differ: "
                    + "; ".join(f"{c}: {old.get(c.split('.')[0])!s:.80} -> {card.get(c.split('.')[0])!s:.80}"
                                for c in conflicts[:3]) + ").",
                    "Write to another folder with --out, or pass --no-resume to discard the old results.")
            for note in (batch_note(old, card), compute_note(old, card)):
                if note:
                    print(f"vlarl eval: {note}", flush=True)
            cut = log.repair()
            if cut:
                print(f"vlarl eval: removed a torn last line ({cut} bytes) from {log.path}", flush=True)
        else:
            log.path.unlink()
            for sub in ("episodes", "frames"):
                shutil.rmtree(out_dir / sub, ignore_errors=True)
    atomic_write_json(card_path, card)


def evaluate(checkpoint: Path | None = None, config: str | None = None, overrides: list[str] | None = None, *,
             settings: EvalSettings, out_dir: Path | None = None, resume: bool = True) -> EvalSummary:
    """``vlarl eval``: load the policy, evaluate it (spread over this launch's ranks), write the results.

    ``out_dir`` defaults to ``eval/<checkpoint or config name>/<suite>_<protocol>``.
    """
    import contextlib

    from vlarl_cli.distributed import dist

    settings.validate()
    held = contextlib.ExitStack()
    if out_dir is not None:  # before the policy is built (seconds to minutes): a file in the way, read-only, in use
        from vlarl_cli.checkpoints.atomic import check_writable_folder

        check_writable_folder(out_dir, "The results folder (--out)")
        held.enter_context(_claim(out_dir, dist.env_world()[0]))
    ctx = dist.init_distributed()
    try:
        policy, info, loaded = load_policy(checkpoint, config, overrides or [], ctx.device)
        _check_libero_policy(loaded, info)
        if settings.model_type is None:
            settings = dataclasses.replace(settings, model_type=info.model_type)
        if out_dir is None:
            path = Path(info.path)
            # runs/<run>/checkpoints/global_step_<k> -> <run>_global_step_<k>
            name = (f"{path.parent.parent.name}_{path.name}" if path.parent.name == "checkpoints" else path.name) \
                if info.source == "checkpoint" else Path(info.config).stem
            out_dir = Path("eval") / name / f"{settings.suite}_{settings.protocol}"
            held.enter_context(_claim(out_dir, ctx.rank))
        return evaluate_policy(policy, settings, info=info, out_dir=Path(out_dir), resume=resume,
                               rank=ctx.rank, world_size=ctx.world_size,
                               cpu_budget=loaded.cluster.cpu_budget.model_dump())
    finally:
        held.close()
        dist.shutdown()
