"""Supervised flow-matching fine-tuning of a policy on demonstrations.

Examples:
  vlarl sft --config quickstart --demos demos/libero_spatial
"""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    config: str = typer.Option(..., "--config", "-c", help="A YAML file or a preset name from configs/."),
    demos: Path = typer.Option(..., "--demos", help="Folder of demonstration episodes."),
    overrides: list[str] | None = typer.Argument(None, help="KEY=VALUE config overrides.", show_default=False),
    steps: int = typer.Option(1000, "--steps", min=1, help="Optimizer steps."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Checkpoint folder (default: the run dir)."),
) -> None:
    """Supervised flow-matching fine-tuning of a policy on demonstrations."""
    from vlarl_cli.training.sft import run_sft

    run_sft(config=config, demos=demos, overrides=list(overrides or []), steps=steps, output=output)
