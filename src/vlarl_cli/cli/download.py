"""Download a model repository (or a dataset repository of simulator assets) from the Hugging Face Hub,
verify it and tell what it is.

Every file is checked against the sha256 (LFS) or git sha1 the hub lists.

An interrupted download resumes where it stopped when you run the same command again.

Pickle files (.bin/.pt) are skipped unless --allow-pickle.

RLinf's ManiSkill assets (dataset repos RLinf/maniskill_assets and, its custom_assets/ only,
RLinf/RLCo-maniskill-assets) go straight to the folder RLinf's task code reads ($MANISKILL_ASSET_DIR,
default ~/.maniskill/data/rlinf_maniskill_assets); ManiSkill's bridge_v2_real2sim zip (haosulab/ManiSkill_bridge_v2_real2sim) is unpacked where ManiSkill looks
($MS_ASSET_DIR/data/tasks/bridge_v2_real2sim_dataset). LIBERO-Plus's assets.zip (dataset Sylvest/LIBERO-plus)
is unpacked into $VLARL_CACHE/libero_plus/assets and linked into LIBERO-Plus's environment (vlarl setup-sim
libero_plus links it too when it builds the environment later).

Honours HF_ENDPOINT (mirror), HF_TOKEN (gated/private repos) and HF_HUB_OFFLINE.

Examples:
  vlarl download RLinf/RLinf-Pi05-LIBERO-SFT --local-dir models/pi05-libero
  vlarl download nvidia/GR00T-N1.5-3B --revision main --exclude "*.md"
  vlarl download RLinf/RLinf-Pi05-LIBERO-SFT --include "*.json" --include "physical-intelligence/"
  vlarl download RLinf/maniskill_assets
  vlarl download haosulab/ManiSkill_bridge_v2_real2sim
  vlarl download Sylvest/LIBERO-plus --repo-type dataset --include assets.zip
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from vlarl_cli.checkpoints.hub import DownloadResult
    from vlarl_cli.envs.maniskill.assets import AssetSet


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
    retries: int = typer.Option(5, "--retries", min=0, max=100, help="Transport failures tolerated per file "
                                "without progress before giving up (the partial file is kept; a rerun resumes it)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no summary."),
    repo_type: str | None = typer.Option(None, "--repo-type", help="model or dataset (default: dataset for "
                                         "the ManiSkill and LIBERO-Plus asset repos, model otherwise)."),
) -> None:
    """Download a model repository from the Hugging Face Hub, verify it and tell what it is."""
    from vlarl_cli.checkpoints.hub import download
    from vlarl_cli.config.presets import configs_using
    from vlarl_cli.envs.libero_plus import assets as plus_assets
    from vlarl_cli.envs.maniskill.assets import asset_archive, asset_default_include, asset_download_dir

    asset_dir = asset_download_dir(repo_id)
    archive = asset_archive(repo_id)
    plus = repo_id.lower() == plus_assets.REPO.lower()
    if plus:  # LIBERO-Plus's assets.zip: fetched (to the cache unless --local-dir), then installed
        repo_type = repo_type or "dataset"
        include = include or [plus_assets.ARCHIVE]
    if asset_dir is not None:  # simulator assets: a dataset repo, into the folder the simulator reads
        repo_type = repo_type or "dataset"
        if local_dir is None and cache_dir is not None:
            from vlarl_cli.errors import HubError

            raise HubError(f"{repo_id} is downloaded into the folder ManiSkill reads ({asset_dir}), not into a "
                           f"cache, so --cache-dir {cache_dir} would have no effect.",
                           fix="Drop --cache-dir, or pass --local-dir to put the files elsewhere.")
        local_dir = local_dir or asset_dir
        include = include or asset_default_include(repo_id)
    if archive is not None:  # a zip: fetched (to the cache unless --local-dir), then unpacked in place
        repo_type = repo_type or "dataset"
        include = include or [archive[0]]
    result = download(repo_id, revision=revision, local_dir=local_dir, include=include or None,
                      exclude=exclude or None, allow_pickle=allow_pickle, cache_dir=cache_dir, retries=retries,
                      quiet=quiet, repo_type=repo_type or "model", presets=configs_using)
    if asset_dir is not None and not quiet:
        _asset_note(repo_id, result.path, asset_dir)
    if plus:
        _install_libero_plus(result, quiet)
    if archive is not None:
        record = next((f for f in result.files if f.path == archive[0]), None)
        sha256 = record.hash if record is not None and record.hash_kind == "sha256" else ""
        _unpack(result.path / archive[0], archive[1], sha256, quiet)


def _unpack(zip_path: Path, assets: AssetSet, sha256: str, quiet: bool) -> None:
    """Unpack the verified zip where ManiSkill reads it; say whether it is the zip mani-skill pins."""
    from rich.console import Console

    from vlarl_cli.envs.maniskill.assets import MANISKILL_BRIDGE_SHA256, unpack_archive

    if not zip_path.is_file():
        from vlarl_cli.errors import HubError

        raise HubError(f"{zip_path.name} was not downloaded (left out by --include / --exclude), so there is "
                       f"nothing to unpack into {assets.folder}.", fix="Run the command without the filters.")
    what = unpack_archive(zip_path, assets)
    if quiet:
        return
    if not sha256:
        pin = "not compared with mani-skill's checksum (an offline re-run)"
    elif sha256 == MANISKILL_BRIDGE_SHA256:
        pin = "the zip mani-skill 3.0.1 pins (same sha256)"
    else:
        pin = "not the zip mani-skill 3.0.1 pins (another sha256): ManiSkill's own downloader would refuse it"
    Console(highlight=False, soft_wrap=True).print(f"  assets:      {what}\n  note:        {pin}", markup=False)


def _install_libero_plus(result: DownloadResult, quiet: bool) -> None:
    """Install the verified assets.zip where LIBERO-Plus's environment reads it (envs/libero_plus/assets.py)."""
    from rich.console import Console

    from vlarl_cli.envs.libero_plus import assets
    from vlarl_cli.envs.libero_plus.install import link_installed_assets

    record = next((f for f in result.files if f.path == assets.ARCHIVE), None)
    console = Console(highlight=False, soft_wrap=True)
    if record is None:
        console.print(f"  note:        {assets.ARCHIVE} was left out by --include / --exclude: nothing installed "
                      "for LIBERO-Plus", markup=False)
        return
    sha256 = record.hash if record.hash_kind == "sha256" else ""
    say = None if quiet else (lambda line: console.print(f"  assets:      {line}", markup=False))
    what = assets.install(result.path / assets.ARCHIVE, sha256, say)
    linked = link_installed_assets()
    if not quiet:
        console.print(f"  assets:      LIBERO-Plus's {assets.ARCHIVE}: {what}\n  environment: {linked}\n"
                      f"  note:        the light, background and layout categories can run; the benchmark does not "
                      f"read the archive itself ({result.path / assets.ARCHIVE}): deleting it frees its space (this "
                      "command would then fetch it again)", markup=False)


def _asset_note(repo_id: str, path: Path, default: Path) -> None:
    from rich.console import Console

    from vlarl_cli.envs.maniskill.assets import (
        RLCO_ASSETS_REPO,
        RLINF_ASSET_ENV,
        AssetSet,
        rlco_assets,
        rlinf_assets,
    )

    expected = rlco_assets() if repo_id == RLCO_ASSETS_REPO else rlinf_assets()
    missing = AssetSet(expected.name, path, expected.required, expected.command).missing()
    lines = [f"  assets:      RLinf's ManiSkill digital-twin assets in {path}"
             + (f" (default folder {default})" if path != default else ""),
             f"  note:        RLinf's task code reads them from ${RLINF_ASSET_ENV}: export {RLINF_ASSET_ENV}={path}"]
    if missing:
        lines.append(f"  missing:     {', '.join(missing)} (the tasks read these; was the download filtered?)")
    Console(highlight=False, soft_wrap=True).print("\n".join(lines), markup=False)
