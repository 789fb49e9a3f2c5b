"""Atomic file and directory writes.

A crash (OOM kill, pre-emption, Ctrl-C) in the middle of writing a checkpoint or a result file must
never leave a half-written file under the final name: a resume would then load garbage. Every helper
here follows the same recipe:

1. write to a temporary name *in the same folder* (``os.replace`` is only atomic within one
   filesystem, and the same folder guarantees that),
2. flush and ``fsync`` the data so it is on disk before the rename is,
3. ``os.replace`` the temporary name onto the final name (atomic on POSIX and Windows),
4. ``fsync`` the parent folder so the rename itself survives a power cut (POSIX only).

Readers therefore see either the old complete file or the new complete file, never a mix.

Usage::

    from vlarl_cli.checkpoints.atomic import atomic_write_json, atomic_directory

    atomic_write_json(run_dir / "metrics.json", {"success_rate": 0.93})
    with atomic_directory(run_dir / "checkpoints" / "global_step_100") as tmp:
        atomic_save_safetensors(state_dict, tmp / "model.safetensors")  # plain writes are fine too
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "atomic_directory",
    "atomic_open",
    "atomic_save_safetensors",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "check_writable_folder",
    "fsync_directory",
]

# Prefix of every temporary name we create; lets cleanup code and .gitignore recognise leftovers.
TMP_PREFIX = ".vlarl-tmp-"


def _read_umask() -> int:
    # tempfile creates 0600 files / 0700 folders; final files should get the usual umask-derived mode
    # (0644 / 0755 typically) so other users and containers can read checkpoints. Read once at import
    # (os.umask can only be read by setting it, which is not thread-safe later on).
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()
_FILE_MODE = 0o666 & ~_UMASK
_DIR_MODE = 0o777 & ~_UMASK


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Flush a directory entry table to disk so renames/creations in it are durable.

    A no-op where directories cannot be opened (Windows) or the filesystem refuses (some network FS).
    """
    if os.name == "nt":  # pragma: no cover - directories cannot be fsync'ed on Windows
        return
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_writable_folder(path: str | os.PathLike[str], what: str) -> None:
    """Raise a VlarlError unless ``path`` is (or can be created as) a folder this process can write.

    Checks an existing file in the way (``path`` or an ancestor), then creates and removes an empty
    probe folder in the nearest existing ancestor: permission bits alone miss a read-only mount, and root
    passes every ``os.access`` test.
    """
    from vlarl_cli.errors import VlarlError

    target = Path(path).expanduser().absolute()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == target else f"would be inside {existing}, which is a file"
        raise VlarlError(f"{what} {target} {where}, not a folder.", "Choose a folder path (or move the file away).")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}probe-", dir=existing))
    except OSError as err:
        raise VlarlError(f"{what} {target} cannot be written: creating anything in {existing} fails "
                         f"({err.strerror or err}).",
                         "Choose a folder on a writable file system that you own.") from None


def _tmp_path_for(path: Path) -> Path:
    """A fresh, unique temporary file name next to ``path`` (same folder, same filesystem)."""
    fd, name = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
    except (AttributeError, OSError):  # pragma: no cover - no fchmod on Windows
        pass
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", *,
                encoding: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file for writing that replaces ``path`` atomically when the block succeeds.

    On an exception the temporary file is removed and ``path`` is untouched. Parent folders are
    created. ``mode`` must be a write mode (``"w"``, ``"wb"``, ``"wt"``; no append or read).
    """
    if mode not in ("w", "wb", "wt"):
        raise ValueError(f"atomic_open supports modes 'w', 'wt' and 'wb', got {mode!r}")
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path_for(final)
    try:
        with open(tmp, mode, encoding=encoding if "b" not in mode else None) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_directory(final.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path`` as a Path."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path`` as a Path."""
    with atomic_open(path, "w", encoding=encoding) as fh:
        fh.write(text)
    return Path(path)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2,
                      sort_keys: bool = False) -> Path:
    """Serialise ``obj`` to JSON and write it atomically (UTF-8, trailing newline).

    The object is serialised *before* the file is opened, so an unserialisable value raises
    ``TypeError`` without creating any file.
    """
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=False) + "\n"
    return atomic_write_text(path, text)


def atomic_save_safetensors(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike[str],
                            metadata: Mapping[str, str] | None = None) -> Path:
    """Save a flat ``{name: tensor}`` dict as a ``.safetensors`` file atomically.

    Tensors are made contiguous; tensors sharing storage (tied embeddings) must be de-duplicated by
    the caller (safetensors refuses shared storage, which is the right call for a portable file).
    ``metadata`` values must be strings (a safetensors format rule).
    """
    from safetensors.torch import save_file

    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path_for(final)
    try:
        contiguous = {k: v.contiguous() for k, v in tensors.items()}
        save_file(contiguous, os.fspath(tmp), metadata=dict(metadata) if metadata else None)
        with contextlib.suppress(OSError):
            os.chmod(tmp, _FILE_MODE)  # save_file may recreate the file with its own mode
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_directory(final.parent)
    return final


def _fsync_tree(root: Path) -> None:
    """fsync every regular file and every folder under ``root`` (files first, then folders)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(dirpath)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str], *, overwrite: bool = True) -> Iterator[Path]:
    """Build a folder under a temporary name and move it to ``path`` when the block succeeds.

    Yields the temporary folder (same parent as ``path``); write anything into it. On success every
    file in it is fsync'ed and it is renamed to ``path``. On an exception the temporary folder is
    deleted and ``path`` is untouched.

    If ``path`` already exists and ``overwrite`` is True, the old folder is first renamed aside and
    deleted after the new one is in place: there is a window of a few microseconds in which ``path``
    does not exist (POSIX cannot atomically swap two non-empty folders), but never one in which it
    holds a partial folder. With ``overwrite=False`` an existing ``path`` raises FileExistsError
    before the block runs.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists")
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}.", dir=final.parent))
    with contextlib.suppress(OSError):
        os.chmod(tmp, _DIR_MODE)
    old: Path | None = None
    try:
        yield tmp
        _fsync_tree(tmp)
        if final.exists() or final.is_symlink():
            if not overwrite:
                raise FileExistsError(f"{final} appeared while it was being written")
            old = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}.old.", dir=final.parent))
            os.rmdir(old)  # mkdtemp only reserved a unique name; rename needs it absent
            os.replace(final, old)
        os.replace(tmp, final)
        fsync_directory(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not final.exists():  # the swap failed half-way: put the old one back
            os.replace(old, final)
        raise
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()
