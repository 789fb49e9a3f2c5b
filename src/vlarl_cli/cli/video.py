"""Render LIBERO episodes to MP4: both cameras side by side, task text, step, action and success.

Recorded episodes are re-simulated from the evaluation's episode log (actions + init state + seed), so
an evaluation never pays for video. Several episodes also give a montage.

With no episodes file and no --checkpoint/--config it takes the newest evaluation's episodes.jsonl
(under eval/, or rl-train's under runs/) and prints which.

Examples:
  vlarl video --failures                                           # the newest evaluation's failures
  vlarl video eval/x/episodes.jsonl --episode 0
  vlarl video eval/x/episodes.jsonl --failures --task 3          # every failure of task 3 + a montage
  vlarl video eval/a/episodes.jsonl --task 3 --against eval/b     # A and B on the same init states
  vlarl video --checkpoint runs/x --suite libero_10 --task 3 --trial 0                 # live rollout
  vlarl video --checkpoint runs/a --compare-checkpoint runs/b --suite libero_10 --task 3 --trial 7
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from vlarl_cli.cli.eval import MAX_STEPS


def command(
    episodes: Path | None = typer.Argument(None, help="episodes.jsonl (or the results folder) of `vlarl eval`. "
                                           "Default: the newest one under eval/ or runs/.",
                                           show_default=False),
    episode: int | None = typer.Option(None, "--episode", "-e", min=0, help="Line index (0-based) of one episode."),
    failures: bool = typer.Option(False, "--failures", help="Every failed episode (of --task if given)."),
    task: int | None = typer.Option(None, "--task", "-t", min=0, help="Task id (recorded: filter; live: the task)."),
    suite: str | None = typer.Option(None, "--suite", "-s", help="Suite (recorded: filter; live: the suite)."),
    trial: int = typer.Option(0, "--trial", min=0, max=49, help="Live rollout: init state index."),
    against: Path | None = typer.Option(None, "--against", help="Another results folder: render its episode "
                                        "with the same (suite, task, trial) side by side."),
    checkpoint: Path | None = typer.Option(None, "--checkpoint", help="Live rollout of this checkpoint."),
    config: str | None = typer.Option(None, "--config", "-c", help="Live rollout of the policy of this config."),
    overrides: list[str] | None = typer.Option(None, "--set", help="KEY=VALUE config override (repeatable)."),
    compare_checkpoint: Path | None = typer.Option(None, "--compare-checkpoint", help="Live: a second "
                                                   "checkpoint on the same init state, side by side."),
    protocol: str = typer.Option("standard", "--protocol", help="Live: standard or rlinf."),
    max_steps: int | None = typer.Option(None, "--max-steps", min=1, max=MAX_STEPS, help="Live: override the step limit."),
    resolution: int | None = typer.Option(None, "--resolution", help="Render size (default: the evaluation's, "
                                          "256 live)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output folder (default <results>/videos)."),
    fps: int = typer.Option(20, "--fps", min=1, help="Frames per second (LIBERO runs at 20 Hz)."),
) -> None:
    """Render LIBERO episodes to MP4 (re-simulated or live)."""
    from vlarl_cli.video.api import Selection, render_videos

    if out is not None:  # checked before any simulator is built (rendering can take minutes)
        from vlarl_cli.checkpoints.atomic import check_writable_folder

        check_writable_folder(out, "The video folder (--out)")
    load_policy: Any = None
    if checkpoint is not None or config is not None:  # a live rollout: the training side builds the policy
        from vlarl_cli.training.evaluation import load_policy
    elif episodes is None:
        from vlarl_cli.training.runs import newest_episodes

        episodes = newest_episodes()
        print(f"Rendering from the newest evaluation: {episodes}", flush=True)
    render_videos(episodes, selection=Selection(episode, failures, task, suite), against=against,
                  checkpoint=checkpoint, config=config, overrides=list(overrides or []),
                  compare_checkpoint=compare_checkpoint, suite=suite, task=task, trial=trial, protocol=protocol,
                  max_steps=max_steps, resolution=resolution, out=out, fps=fps, load_policy=load_policy)
