"""LIBERO-Plus's ``assets.zip``: where it is installed, how it is unpacked, whether it is there.

Facts (sylvestf/LIBERO-plus at 4976dc3; docs/benchmarks/libero_pro_plus.md):

* The README: download ``assets.zip`` from the hub dataset ``Sylvest/LIBERO-plus`` and unzip it so that
  ``libero/libero/assets/`` holds ``articulated_objects, new_objects, scenes, stable_hope_objects,
  stable_scanned_objects, textures, turbosquid_objects, serving_region.xml, wall_frames.stl, wall.xml``
  (:data:`LAYOUT`): LIBERO's own asset tree plus the new objects, scenes and textures.
* The code reads that folder relative to the package, not through ``get_libero_path("assets")``:
  ``envs/bddl_base_domain.py`` (``custom_asset_dir = DIR_PATH/../assets``, scene XMLs ``scenes/...``),
  ``envs/objects/custom_objects.py`` (``<libero/libero>/assets/new_objects/...``) and LIBERO's object classes.
* The archive's members do not start with ``assets/``: several public install scripts (not the README) move
  ``inspire/hdd/project/embodied-multimodality/public/syfei/libero_new/release/dataset/LIBERO-plus-0/assets``
  into place after unzipping. :func:`install` therefore takes the one folder named ``assets`` that holds every
  member, whatever its prefix. Size and sha256 of the real archive are not checked here (the hub lists the
  sha256 of the LFS file and ``vlarl download`` verifies it); a third-party script pins 6,395,849,578 bytes,
  sha256 ``96764a4b...27b3cf`` at dataset revision dd2bd61 -- not seen by vlarl.

vlarl installs the tree once into ``$VLARL_CACHE/libero_plus/assets`` (:func:`assets_dir`: it survives a
rebuild of LIBERO-Plus's environment, which replaces its source folder) with a stamp holding the archive's
sha256; the environment's ``source/libero/libero/assets`` is a link to it (``install.link_assets``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from vlarl_cli.errors import EnvError, HubError

REPO = "Sylvest/LIBERO-plus"
ARCHIVE = "assets.zip"
#: the top level of ``libero/libero/assets`` after unzipping, as LIBERO-Plus's README lists it
LAYOUT = ("articulated_objects", "new_objects", "scenes", "stable_hope_objects", "stable_scanned_objects",
          "textures", "turbosquid_objects", "serving_region.xml", "wall_frames.stl", "wall.xml")
#: written into the installed folder, last, before it is moved into place: present = installed whole
STAMP = ".vlarl-libero-plus-assets.json"


def assets_dir() -> Path:
    """``$VLARL_CACHE/libero_plus/assets``: the unpacked tree LIBERO-Plus's environment links to."""
    from vlarl_cli.envs.libero.setup import default_cache_dir

    return default_cache_dir() / "libero_plus" / "assets"


def download_command() -> str:
    return f"vlarl download {REPO} --repo-type dataset --include {ARCHIVE}"


@dataclass(frozen=True)
class Installed:
    """An installed tree: its folder and the sha256 of the archive it came from (from the stamp)."""

    folder: Path
    sha256: str
    files: int


def installed(folder: Path | None = None) -> Installed | None:
    """The installed tree when its stamp and :data:`LAYOUT` are there, else None (absent or incomplete)."""
    folder = folder or assets_dir()
    try:
        record = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not record.get("sha256") or any(
            not (folder / name).exists() for name in LAYOUT):
        return None
    return Installed(folder, str(record["sha256"]), int(record.get("files", 0)))


def missing_reason() -> str:
    """Why the asset categories cannot run here, in words (the folder and what it lacks)."""
    folder = assets_dir()
    if not folder.exists():
        return f"LIBERO-Plus's assets.zip is not installed ({folder} does not exist)"
    if not (folder / STAMP).is_file():
        return f"{folder} has no {STAMP} (not installed by vlarl download, or its install did not finish)"
    lacking = [name for name in LAYOUT if not (folder / name).exists()]
    return f"{folder} lacks {', '.join(lacking)}" if lacking else f"{folder / STAMP} is unreadable"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _member_error(name: str, why: str) -> HubError:
    return HubError(f"{ARCHIVE} holds the member {name!r} ({why}); vlarl unpacks nothing from it.",
                    fix=f"The archive is not the one {REPO} publishes; delete it and download it again.")


def _checked(info: zipfile.ZipInfo) -> PurePosixPath:
    """A member's name as a relative path; absolute names, ``..``, backslashes and links are refused."""
    name = info.filename
    if not name or "\x00" in name or "\\" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _member_error(name, "an absolute or malformed name")
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise _member_error(name, "a '..', '.' or empty path segment")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise _member_error(name, "a symbolic link")
    return PurePosixPath(*parts)


def _assets_prefix(files: list[PurePosixPath]) -> PurePosixPath:
    """The folder named ``assets`` holding every file (``assets`` or the build machine's long prefix)."""
    common = list(files[0].parent.parts) if files else []
    for path in files[1:]:
        parts = path.parent.parts
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    if "assets" not in common:
        raise HubError(f"{ARCHIVE} has no folder named assets holding all of its files (common folder: "
                       f"{'/'.join(common) or 'none'}), so it is not LIBERO-Plus's asset archive.",
                       fix=f"Check the file; {REPO}'s assets.zip unpacks to a folder assets/ with "
                           f"{', '.join(LAYOUT[:3])}, ...")
    last = len(common) - 1 - common[::-1].index("assets")
    return PurePosixPath(*common[: last + 1])


def _members(archive: zipfile.ZipFile) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """Every file member with its name below the ``assets`` folder, all names checked first."""
    files = [(info, _checked(info)) for info in archive.infolist()]
    files = [(info, path) for info, path in files if not info.is_dir()]
    prefix = _assets_prefix([path for _, path in files])
    return [(info, path.relative_to(prefix)) for info, path in files]


def _check_space(members: list[tuple[zipfile.ZipInfo, PurePosixPath]], parent: Path) -> None:
    needed = sum(info.file_size for info, _ in members)
    free = shutil.disk_usage(parent).free
    if needed > free:
        raise EnvError(f"{ARCHIVE} unpacks to {needed / 1e9:.1f} GB and {parent} has {free / 1e9:.1f} GB free.",
                       fix="Free some space there, or set VLARL_CACHE to a larger disk, and run the same command "
                           "again.")


def _extract(archive: zipfile.ZipFile, members: list[tuple[zipfile.ZipInfo, PurePosixPath]], root: Path) -> None:
    from vlarl_cli.checkpoints.safety import safe_join

    for info, rel in members:
        target = safe_join(root, rel.as_posix())
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def _refuse_existing(target: Path, sha256: str) -> str | None:
    """``already installed`` for the same archive; an error naming the folder for anything else there."""
    present = installed(target)
    if present is not None and present.sha256 == sha256:
        return f"already installed in {target} (the same archive, sha256 {sha256[:12]}...)"
    if present is not None:
        raise EnvError(f"{target} already holds LIBERO-Plus assets from another archive (sha256 "
                       f"{present.sha256[:12]}..., this one {sha256[:12]}...); vlarl does not replace them.",
                       fix=f"Move {target} away (or delete it) yourself, then run the same command again.")
    if target.exists() or target.is_symlink():
        raise EnvError(f"{target} exists and is not a whole install by vlarl ({missing_reason()}); vlarl does "
                       "not delete or merge into it.",
                       fix=f"Move {target} away (or delete it) yourself, then run the same command again.")
    return None


def install(zip_path: Path, sha256: str = "", say: Callable[[str], None] | None = None) -> str:
    """Unpack the (already verified) archive into :func:`assets_dir`: built beside it under a temporary name,
    :data:`LAYOUT` checked, the stamp written, flushed to disk, then renamed into place. ``sha256``: the hub's,
    or computed here when empty (an offline re-run). ``say`` hears what starts (the unpack takes minutes).
    Returns what happened, in words."""
    target = assets_dir()
    sha256 = sha256 or file_sha256(zip_path)
    done = _refuse_existing(target, sha256)
    if done is not None:
        return done
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(zip_path) as archive:
            members = _members(archive)
            _check_space(members, target.parent)
            if say is not None:
                say(f"unpacking {len(members)} files ({sum(i.file_size for i, _ in members) / 1e9:.1f} GB) into "
                    f"{target}")
            _build(archive, members, target, {"sha256": sha256, "repo": REPO, "archive": str(zip_path),
                                              "files": len(members)})
    except zipfile.BadZipFile as err:
        raise HubError(f"{zip_path} is not a readable zip archive ({err}).",
                       fix="Delete it and run the download again.") from None
    return f"unpacked {len(members)} files into {target}"


def _build(archive: zipfile.ZipFile, members: list[tuple[zipfile.ZipInfo, PurePosixPath]], target: Path,
           stamp: dict[str, object]) -> None:
    """The tree under a temporary name beside ``target``, then renamed to it. One ``os.sync`` rather than
    ``atomic_directory``'s fsync per file: the real archive holds some 457k files. An error or Ctrl-C removes
    the temporary folder; ``target`` is never seen half-written."""
    from vlarl_cli.checkpoints.atomic import TMP_PREFIX, fsync_directory

    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{target.name}.", dir=target.parent))
    try:
        _extract(archive, members, tmp)
        lacking = [name for name in LAYOUT if not (tmp / name).exists()]
        if lacking:
            raise HubError(f"{ARCHIVE} unpacks no {', '.join(lacking)} into assets/, which LIBERO-Plus's README "
                           "lists.", fix=f"The archive is not the one {REPO} publishes; check the file.")
        (tmp / STAMP).write_text(json.dumps(stamp, indent=1))
        os.sync()
        os.rename(tmp, target)  # an existing non-empty target (appeared meanwhile) raises: nothing replaced
        fsync_directory(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
