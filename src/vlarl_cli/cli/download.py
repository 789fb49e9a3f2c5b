"""Download a model repository (or a dataset repository of simulator assets) from the Hugging Face Hub,
verify it and tell what it is.

Every file is checked against the sha256 (LFS) or git sha1 the hub lists.

An interrupted download resumes where it stopped when you run the same command again.

Pickle files (.bin/.pt) are skipped unless --allow-pickle.

RLinf's ManiSkill assets (RLinf/maniskill_assets, a dataset repo) go straight to the folder RLinf's task
code reads ($MANISKILL_ASSET_DIR, default ~/.maniskill/data/rlinf_maniskill_assets).

Honours HF_ENDPOINT (mirror), HF_TOKEN (gated/private repos) and HF_HUB_OFFLINE.

Examples:
  vlarl download RLinf/RLinf-Pi05-LIBERO-SFT --local-dir models/pi05-libero
  vlarl download nvidia/GR00T-N1.5-3B --revision main --exclude "*.md"
  vlarl download RLinf/RLinf-Pi05-LIBERO-SFT --include "*.json" --include "physical-intelligence/"
  vlarl download RLinf/maniskill_assets
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
    repo_type: str | None = typer.Option(None, "--repo-type", help="model or dataset (default: dataset for "
                                         "RLinf/maniskill_assets, model otherwise)."),
) -> None:
    """Download a model repository from the Hugging Face Hub, verify it and tell what it is."""
    from vlarl_cli.checkpoints.hub import download
    from vlarl_cli.envs.maniskill.assets import asset_download_dir

    asset_dir = asset_download_dir(repo_id)
    if asset_dir is not None:  # simulator assets: a dataset repo, into the folder the simulator reads
        repo_type = repo_type or "dataset"
        local_dir = local_dir or asset_dir
    result = download(repo_id, revision=revision, local_dir=local_dir, include=include or None,
                      exclude=exclude or None, allow_pickle=allow_pickle, cache_dir=cache_dir, retries=retries,
                      quiet=quiet, repo_type=repo_type or "model")
    if asset_dir is not None and not quiet:
        _asset_note(result.path, asset_dir)


def _asset_note(path: Path, default: Path) -> None:
    from rich.console import Console

    from vlarl_cli.envs.maniskill.assets import RLINF_ASSET_ENV, AssetSet, rlinf_assets

    expected = rlinf_assets()
    missing = AssetSet(expected.name, path, expected.required, expected.command).missing()
    lines = [f"  assets:      RLinf's ManiSkill digital-twin assets in {path}"
             + (f" (default folder {default})" if path != default else ""),
             f"  note:        RLinf's task code reads them from ${RLINF_ASSET_ENV}: export {RLINF_ASSET_ENV}={path}"]
    if missing:
        lines.append(f"  missing:     {', '.join(missing)} (the tasks read these; was the download filtered?)")
    Console(highlight=False, soft_wrap=True).print("\n".join(lines), markup=False)
