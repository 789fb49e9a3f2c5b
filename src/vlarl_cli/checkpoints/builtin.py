"""Checkpoints that ship inside the package (``actor.model.model_path: builtin:<name>``).

A few small policies trained by vlarl itself, each a folder under ``vlarl_cli/assets/checkpoints/`` with the
same layout as any checkpoint vlarl writes (``vlarl_config.json``, ``model.safetensors``, norm stats) and a
``PROVENANCE.md`` saying how it was made. They let the quickstart start from a policy that already
succeeds sometimes, without a download.
"""

from __future__ import annotations

from pathlib import Path

from vlarl_cli.errors import CheckpointError, did_you_mean

PREFIX = "builtin:"
ROOT = Path(__file__).resolve().parents[1] / "assets" / "checkpoints"


def available() -> list[str]:
    """Names of the shipped checkpoints."""
    return sorted(p.name for p in ROOT.iterdir() if (p / "vlarl_config.json").is_file()) if ROOT.is_dir() else []


def builtin_checkpoint(reference: str) -> Path:
    """The folder of ``builtin:<name>``; a :class:`CheckpointError` naming the shipped ones otherwise."""
    name = reference[len(PREFIX):] if reference.startswith(PREFIX) else reference
    folder = ROOT / name
    if not (folder / "vlarl_config.json").is_file():
        names = available()
        raise CheckpointError(f'There is no built-in checkpoint "{name}".{did_you_mean(name, names)}',
                              f"Use one of: {', '.join(PREFIX + n for n in names) or '(none shipped)'}.")
    return folder
