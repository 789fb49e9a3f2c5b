"""Download a model repository from the Hugging Face Hub, verify it and tell what it is.

Every file is checked against the sha256 (LFS) or git sha1 the hub lists.

An interrupted download resumes where it stopped when you run the same command again.

Pickle files (.bin/.pt) are skipped unless --allow-pickle.

Honours HF_ENDPOINT (mirror), HF_TOKEN (gated/private repos) and HF_HUB_OFFLINE.

Examples:
  vlarl download RLinf/RLinf-Pi05-LIBERO-SFT --local-dir models/pi05-libero
  vlarl download nvidia/GR00T-N1.5-3B --revision main --exclude "*.md"
  vlarl download RLinf/RLinf-Pi05-LIBERO-SFT --include "*.json" --include "physical-intelligence/"
"""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    repo_id: str = typer.Argument(..., help="Repository id, organisation/name (e.g. RLinf/RLinf-Pi05-LIBERO-SFT)."),
    revision: str | None = typer.Option(None, "--revision", "-r", help="Branch, tag or commit (default: main)."),
    local_dir: Path | None = typer.Option(None, "--local-dir", "-d", help="Put the files in this folder "
                                          "instead of the huggingface_hub cache."),
    include: list[str] | None = typer.Option(None, "--include", help="Only paths matching this glob "
                                             "(repeatable; a trailing / means a folder)."),
    exclude: list[str] | None = typer.Option(None, "--exclude", help="Skip paths matching this glob "
                                             "(repeatable)."),
    allow_pickle: bool = typer.Option(False, "--allow-pickle", help="Also download pickle-based files "
                                      "(.bin/.pt/.pth/.ckpt); they are only ever loaded with weights_only=True."),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help="Cache root (default: HF_HUB_CACHE)."),
    retries: int = typer.Option(5, "--retries", min=0, help="Transport failures tolerated per file "
                                "without progress before giving up (the partial file is kept)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no summary."),
) -> None:
    """Download a model repository from the Hugging Face Hub, verify it and tell what it is."""
    from vlarl_cli.checkpoints.hub import download

    download(repo_id, revision=revision, local_dir=local_dir, include=include or None,
             exclude=exclude or None, allow_pickle=allow_pickle, cache_dir=cache_dir, retries=retries,
             quiet=quiet)
