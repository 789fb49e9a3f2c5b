"""Supervised fine-tuning (flow-matching loss on demonstrations). Not implemented yet."""

from __future__ import annotations

from pathlib import Path

from vlarl_cli.errors import VlarlError


def run_sft(*, config: str, demos: Path, overrides: list[str], steps: int, output: Path | None) -> None:
    from vlarl_cli.config.loading import load_config

    load_config(config, overrides)  # validate first: a broken config is reported as such
    raise VlarlError("`vlarl sft` is not implemented yet in this version of vlarl.",
                     "Start RL from a published SFT checkpoint (`vlarl download RLinf/RLinf-Pi05-SFT`) "
                     "with `vlarl rl-train`.")
