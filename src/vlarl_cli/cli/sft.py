"""Supervised fine-tuning (behaviour cloning) of a policy on demonstration episodes.

Examples:
  vlarl sft --config sft_toy_reach                           # record 100 toy expert demos, then train
  vlarl sft --config sft_quickstart --record 4 --steps 300   # LIBERO scripted-expert demos, tiny pi0
  vlarl sft --config sft_quickstart --demos runs/sft_quickstart/demos -o ckpt/pi0_sft
  vlarl rl-train --config quickstart actor.model.model_path=runs/sft_quickstart/checkpoints/global_step_300
"""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    config: str = typer.Option(..., "--config", "-c", help="A YAML file or a preset name from configs/."),
    demos: Path | None = typer.Option(None, "--demos", help="Demonstrations: a LeRobot dataset (v2.1 / v3.0), "
                                      "LIBERO .hdf5 file(s) or a folder of episode_*.npz. Default: record expert "
                                      "demos into <run>/demos first."),
    record: int | None = typer.Option(None, "--record", min=1, help="Record N successful expert episodes "
                                      "first (into --demos, or <run>/demos). Default without --demos: 100 on "
                                      "toy_reach, 2 on LIBERO."),
    overrides: list[str] | None = typer.Argument(None, help="KEY=VALUE config overrides.", show_default=False),
    steps: int | None = typer.Option(None, "--steps", min=1, help="Optimizer steps (default: runner.max_steps)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Checkpoint folder, which must not exist "
                                       "yet (default: <run>/checkpoints/global_step_<steps>)."),
    resume: str | None = typer.Option(None, "--resume", help="Continue from a checkpoint of this run: 'auto' "
                                      "(the latest) or a checkpoint folder."),
) -> None:
    """Supervised fine-tuning (behaviour cloning) of a policy on demonstration episodes."""
    from vlarl_cli.training.sft import run_sft

    run_sft(config=config, demos=demos, overrides=list(overrides or []), steps=steps, output=output, record=record,
            resume=resume)
