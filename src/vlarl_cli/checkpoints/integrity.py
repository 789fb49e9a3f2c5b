"""Checkpoint integrity: a sha256 per file, written last, verified before a checkpoint is used.

``checksums.json`` in a checkpoint folder lists ``{"sha256": {"<relative path>": "<hex>"}}`` for every
other file under it (the ``ema/`` sub-folder included). :func:`write_checksums` is the last write into
the folder before it is renamed into place, so a folder with a complete ``checksums.json`` was complete
when it was written. :func:`verify_checksums` reads every listed file again: a flipped byte, a truncated
or a missing file is a :class:`~vlarl_cli.errors.CheckpointError` naming the file (resume, eval and
convert all call it). ``latest`` pointers are read by :func:`follow_latest`, which refuses one that
leaves its folder.

No torch here: ``vlarl convert`` checks its arguments before importing it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from vlarl_cli.errors import CheckpointError

CHECKSUMS = "checksums.json"
LATEST = "latest"
_CHUNK = 1 << 22


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    out = []
    for dirpath, _dirs, names in os.walk(folder):
        out += [Path(dirpath) / n for n in names if not (n == CHECKSUMS and Path(dirpath) == folder)]
    return sorted(out)


def write_checksums(folder: Path) -> Path:
    """Hash every file under ``folder`` into ``folder/checksums.json`` (call it last)."""
    from vlarl_cli.checkpoints.atomic import atomic_write_json

    sums = {p.relative_to(folder).as_posix(): sha256_file(p) for p in _files(folder)}
    return atomic_write_json(folder / CHECKSUMS, {"sha256": sums})


def read_checksums(folder: Path) -> dict[str, str] | None:
    """The listed sha256 per relative path, or None when the folder has no ``checksums.json``."""
    path = folder / CHECKSUMS
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        sums = data["sha256"]
        if not (isinstance(sums, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in sums.items())):
            raise TypeError("not a map of file names to sha256 strings")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path} (the checkpoint's list of sha256 per file) is damaged: {err}.",
                              "Use another checkpoint of the run, or restore this one from a copy.") from None
    return sums


def verify_checksums(folder: Path) -> bool:
    """Refuse a file of ``folder`` whose sha256 differs from ``checksums.json`` (or is missing, or lies
    outside the folder). True when verified, False when the folder has no checksums to verify."""
    sums = read_checksums(folder)
    if sums is None:
        return False
    root = folder.resolve()
    for name, expected in sums.items():
        path = (folder / name).resolve()
        if not path.is_relative_to(root):
            raise CheckpointError(f"{folder / CHECKSUMS} lists {name}, which lies outside the checkpoint folder.",
                                  "Use another checkpoint of the run; this one was edited by hand.")
        if not path.is_file():
            raise CheckpointError(f"Checkpoint {folder} is missing {name} (listed in {CHECKSUMS}).",
                                  "Use another checkpoint of the run (see its checkpoints folder), or restore "
                                  "the file from a copy.")
        if sha256_file(path) != expected:
            raise CheckpointError(f"Checkpoint file {folder / name} is damaged: its sha256 differs from the one "
                                  f"written with it ({CHECKSUMS}); it changed after it was saved.",
                                  "Use another checkpoint of the run (see its checkpoints folder), or restore "
                                  "the file from a copy.")
    return True


def follow_latest(folder: Path) -> Path:
    """``folder/<name in folder/latest>``; a pointer that names anything but a folder inside ``folder``
    (``../x``, an absolute path, a symbolic link out) is refused."""
    pointer = folder / LATEST
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{pointer} cannot be read ({err}).",
                              "Pass the checkpoint folder itself, e.g. .../checkpoints/global_step_<k>.") from None
    target = folder / name
    plain = 0 < len(name) <= 255 and "\x00" not in name and Path(name).name == name and name not in (".", "..")
    if not plain or not target.resolve().is_relative_to(folder.resolve()):
        raise CheckpointError(f'{pointer} points at "{name}", which is not a checkpoint folder inside {folder}.',
                              "Pass the checkpoint folder itself (e.g. .../checkpoints/global_step_<k>), or "
                              "write that folder's name into the latest file.")
    return target


def contained(root: Path, relative: object, what: str) -> Path:
    """``root / relative`` for a path read from a file (an episode log, a dataset's metadata), refused when it
    is not a relative path that stays inside ``root`` (``../``, an absolute path). The check is on the name,
    not on where symbolic links lead: the hub's cache links every file of a snapshot into its ``blobs/``."""
    from vlarl_cli.errors import VlarlError

    name = str(relative)
    path = Path(root) / name
    norm = os.path.normpath(name) if name else ""
    if not isinstance(relative, str | os.PathLike) or not name or "\x00" in name or Path(name).is_absolute() or \
            norm == ".." or norm.startswith(".." + os.sep):
        raise VlarlError(f"{what} names {name[:200]!r}, which is not a path inside {root}; vlarl reads only files "
                         "inside the folder that lists them.",
                         "Fix or re-create the file that lists it (the dataset's metadata, the episode log).")
    return path
