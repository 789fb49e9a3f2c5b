"""Byte transfer, verification and on-disk layout for :mod:`vlarl_cli.checkpoints.hub`.

Why our own transfer (REFERENCE.md section 6, huggingface_hub 2.4.0): the client checks sizes but never
hashes, deletes partial files after a failure and never reuses the ``.incomplete`` file a killed process
leaves. Here:

* **Verification.** Every byte is hashed while it streams: sha256 for LFS files (the ``lfs.oid`` of the
  tree listing) and the git blob sha1 (``sha1(b"blob <size>\\0" + content)``, the listing's ``oid``) for
  small files. A mismatch deletes the bytes and raises HubError; nothing unverified is ever published.
* **Resume across runs.** Partial bytes live under a name of our own (``<local-dir>/.cache/vlarl/partial/
  <path>.part`` or ``blobs/<sha>.vlarl-partial`` in the hub cache), written unbuffered so a SIGKILL keeps
  what arrived. The next run re-hashes them and continues with ``Range: bytes=<n>-``; a 200 (range
  ignored) restarts from the whole body, a 206 for other bytes is dropped. A resumed file that fails its
  hash is fetched once more from byte 0 (stale bytes from a power cut).
* **Layouts.** ``LocalDirTarget`` (plain tree) and ``CacheTarget`` (huggingface_hub cache: content-addressed
  ``blobs/<hash>``, relative symlinks in ``snapshots/<commit>``), a manifest of verified files so a re-run
  does not re-hash gigabytes, one writer per folder (``flock``) and a free-space check.

The HTTP side still goes through huggingface_hub: ``get_hf_file_metadata`` (HEAD /resolve, Hub redirect
rules), ``build_hf_headers`` (token, user agent), ``get_session`` and ``hf_raise_for_status``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from vlarl_cli.checkpoints.atomic import atomic_write_json
from vlarl_cli.checkpoints.safety import safe_join
from vlarl_cli.errors import HubError

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = [
    "CHUNK",
    "STATE_DIR",
    "CacheTarget",
    "FileTransfer",
    "LocalDirTarget",
    "Manifest",
    "RemoteFile",
    "Target",
    "check_free_space",
    "exclusive_lock",
    "git_blob_sha1",
    "hash_file",
    "new_hasher",
    "range_starts_at",
    "repo_cache_folder",
]

CHUNK = 1024 * 1024  # read size when hashing files already on disk
# Answers worth retrying with back-off (timeouts, rate limit, overloaded or restarting servers); the
# same set huggingface_hub's http_backoff retries on.
_TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)


class _TransientStatus(Exception):
    """A transient HTTP status during a file transfer (retried like a dropped connection)."""
STATE_DIR = (".cache", "vlarl")  # bookkeeping folder inside a --local-dir


@dataclass(frozen=True)
class RemoteFile:
    """One file of the repository listing at a fixed commit.

    Attributes:
        path: repository-relative POSIX name (already validated by ``check_relative_name``).
        size: size in bytes the Hub reports.
        sha256: LFS object id (sha256 of the content) or None for files stored in git.
        git_sha1: git blob id (sha1 of ``b"blob <size>\\0" + content``).
    """

    path: str
    size: int
    sha256: str | None
    git_sha1: str

    @property
    def expected_hash(self) -> str:
        """The hash we verify against: sha256 for LFS files, the git blob sha1 otherwise."""
        return self.sha256 if self.sha256 else self.git_sha1

    @property
    def hash_kind(self) -> str:
        return "sha256" if self.sha256 else "git-sha1"


# --------------------------------------------------------------------------------------------------
# Hashing
# --------------------------------------------------------------------------------------------------
def git_blob_sha1(data: bytes) -> str:
    """Git's object id of a blob: ``sha1(b"blob " + str(len) + b"\\0" + data)`` (git-scm.com, "Git
    Objects"). The Hub reports this as ``oid`` for files not stored in LFS."""
    h = hashlib.sha1(b"blob %d\x00" % len(data))
    h.update(data)
    return h.hexdigest()


def new_hasher(entry: RemoteFile) -> Any:
    if entry.sha256:
        return hashlib.sha256()
    return hashlib.sha1(b"blob %d\x00" % entry.size)  # header needs the final size: known from listing


def hash_file(path: Path, entry: RemoteFile, hasher: Any | None = None,
               on_bytes: Any | None = None) -> Any:
    h = hasher if hasher is not None else new_hasher(entry)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return h


# --------------------------------------------------------------------------------------------------
# Where files go
# --------------------------------------------------------------------------------------------------
class Target(Protocol):
    root: Path
    state_dir: Path

    def complete_path(self, entry: RemoteFile) -> Path: ...
    def partial_path(self, entry: RemoteFile) -> Path: ...
    def publish(self, entry: RemoteFile) -> None: ...


class LocalDirTarget:
    """Plain tree in a user folder; partials and bookkeeping under ``.cache/vlarl`` inside it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_dir = root.joinpath(*STATE_DIR)

    def complete_path(self, entry: RemoteFile) -> Path:
        return safe_join(self.root, entry.path)

    def partial_path(self, entry: RemoteFile) -> Path:
        return safe_join(self.state_dir / "partial", entry.path + ".part")

    def publish(self, entry: RemoteFile) -> None:  # complete_path is already the final name
        return None


class CacheTarget:
    """huggingface_hub cache layout: content-addressed ``blobs/<hash>``, ``snapshots/<commit>/<path>``
    relative symlinks, ``refs/<revision>`` holding the commit (huggingface_hub file_download.py)."""

    def __init__(self, repo_folder: Path, commit: str) -> None:
        self.repo_folder = repo_folder
        self.root = repo_folder / "snapshots" / commit
        self.state_dir = repo_folder / ".vlarl"

    def complete_path(self, entry: RemoteFile) -> Path:
        return self.repo_folder / "blobs" / entry.expected_hash

    def partial_path(self, entry: RemoteFile) -> Path:
        return self.repo_folder / "blobs" / f"{entry.expected_hash}.vlarl-partial"

    def publish(self, entry: RemoteFile) -> None:
        link = safe_join(self.root, entry.path)
        blob = self.complete_path(entry)
        link.parent.mkdir(parents=True, exist_ok=True)
        rel = os.path.relpath(blob, link.parent)
        if link.is_symlink() and os.readlink(link) == rel:
            return
        tmp = link.with_name(f".{link.name}.vlarl-link")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        try:
            os.symlink(rel, tmp)
        except OSError:  # no symlink support (some Windows setups): fall back to a copy
            shutil.copyfile(blob, tmp)
        os.replace(tmp, link)


def repo_cache_folder(cache_dir: Path, repo_id: str, repo_type: str = "model") -> Path:
    """huggingface_hub's cache folder of a repository (``models--org--name``, ``datasets--org--name``)."""
    return cache_dir / (f"{repo_type}s--" + repo_id.replace("/", "--"))


# --------------------------------------------------------------------------------------------------
# Manifest of verified files (lets a re-run skip re-hashing multi-GB files)
# --------------------------------------------------------------------------------------------------
class Manifest:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, dict[str, Any]] = {}
        if path.is_file():
            with contextlib.suppress(OSError, ValueError):
                loaded = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(loaded, dict):
                    self.data = loaded

    def is_verified(self, key: str, file: Path, entry: RemoteFile) -> bool:
        rec = self.data.get(key)
        if rec is None or rec.get("hash") != entry.expected_hash:
            return False
        try:
            st = file.stat()
        except OSError:
            return False
        return st.st_size == entry.size and rec.get("mtime_ns") == st.st_mtime_ns

    def mark(self, key: str, file: Path, entry: RemoteFile) -> None:
        st = file.stat()
        self.data[key] = {"hash": entry.expected_hash, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        atomic_write_json(self.path, self.data, indent=1, sort_keys=True)


def range_starts_at(resp: Any, offset: int) -> bool:
    """True for a 206 whose ``Content-Range: bytes <offset>-...`` starts where our partial file ends."""
    if resp.status_code != 206:
        return False
    m = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
    return m is not None and int(m.group(1)) == offset


# --------------------------------------------------------------------------------------------------
# Transfer of one file
# --------------------------------------------------------------------------------------------------
class FileTransfer:
    """Downloads one file into its partial name with Range resume, hashing as bytes arrive."""

    def __init__(self, *, repo_id: str, commit: str, endpoint: str, token: str | bool | None,
                 retries: int, retry_wait: float, progress: Progress | None, repo_type: str = "model") -> None:
        self.repo_id, self.commit, self.endpoint, self.token = repo_id, commit, endpoint, token
        self.repo_type = repo_type
        self.retries, self.retry_wait, self.progress = retries, retry_wait, progress
        self.overall: TaskID | None = None  # the "all files" bar
        self.base = 0  # bytes of the files before the current one (for the overall bar)

    def _show(self, task: TaskID | None, offset: int) -> None:
        if self.progress is None or task is None:
            return
        self.progress.update(task, completed=offset)
        if self.overall is not None:
            self.progress.update(self.overall, completed=self.base + offset)

    def _url_and_headers(self, entry: RemoteFile) -> tuple[str, dict[str, str]]:
        from huggingface_hub import constants
        from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.utils import build_hf_headers
        from huggingface_hub.utils._http import _is_same_or_hub_host

        url = hf_hub_url(self.repo_id, entry.path, revision=self.commit, endpoint=self.endpoint,
                         repo_type=self.repo_type)
        # HEAD /resolve: follows redirects that stay on the hub, stops at a CDN redirect (Location).
        meta = get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint,
                                    timeout=constants.HF_HUB_ETAG_TIMEOUT,
                                    retry_on_errors=self.retries > 0)
        headers = build_hf_headers(token=self.token, library_name="vlarl")
        headers["Accept-Encoding"] = "identity"  # byte ranges and hashes refer to the raw content
        location = meta.location or url
        if not _is_same_or_hub_host(url, location):
            headers.pop("authorization", None)  # never send the token to a CDN / storage host
        return location, headers

    def run(self, entry: RemoteFile, partial: Path, task: TaskID | None) -> tuple[int, bool]:
        """Fetch ``entry`` into ``partial``; returns (bytes transferred now, resumed?).

        The partial file is verified (size + hash) before returning. A mismatch after a *resumed*
        transfer may come from stale bytes of an earlier run, so the file is fetched once more from
        byte 0; a mismatch on a fresh transfer deletes the bytes and raises HubError. On a transfer
        failure the partial bytes are kept for the next run.
        """
        transferred, resumed, digest = self._fetch(entry, partial, task)
        if digest != entry.expected_hash and resumed:
            partial.unlink()
            more, _, digest = self._fetch(entry, partial, task)
            transferred += more
            resumed = False
        if digest != entry.expected_hash:
            partial.unlink()
            raise HubError(
                f"{entry.path} arrived corrupted: its {entry.hash_kind} is {digest} but the hub lists "
                f"{entry.expected_hash} (size {entry.size} bytes matched). The bad copy was deleted.",
                fix="Run the command again to download it afresh; if it fails again the hub or the "
                "HF_ENDPOINT mirror serves a damaged file.",
            )
        return transferred, resumed

    def _fetch(self, entry: RemoteFile, partial: Path, task: TaskID | None) -> tuple[int, bool, str]:
        """Append the missing bytes of ``entry`` to ``partial``; (bytes now, resumed?, hex digest)."""
        import httpx2

        part = _Partial.open(entry, partial)
        self._show(task, part.offset)
        url: str | None = None
        headers: dict[str, str] = {}
        failures = 0
        while part.offset < entry.size:
            before = part.offset
            try:
                if url is None:  # (re-)resolve after a failure: CDN URLs are signed and expire
                    url, headers = self._url_and_headers(entry)
                if not self._get(part, url, headers, failures, task):
                    continue  # the partial bytes were dropped: ask again from byte 0
                if part.offset < entry.size:
                    raise httpx2.RemoteProtocolError("connection closed before the end of the file")
            except (httpx2.TransportError, _TransientStatus) as err:
                url = None
                failures = 0 if part.offset > before else failures + 1  # progress resets the budget
                if failures > self.retries:
                    raise self._interrupted(part, err) from err
                time.sleep(min(self.retry_wait * 2 ** max(failures - 1, 0), 8.0))
        return part.transferred, part.resumed, part.hasher.hexdigest()

    def _get(self, part: _Partial, url: str, headers: dict[str, str], failures: int,
             task: TaskID | None) -> bool:
        """One ranged GET appended to ``part``; False when the answer only told us to start over."""
        from huggingface_hub import constants
        from huggingface_hub.utils import get_session, hf_raise_for_status

        req = dict(headers)
        if part.offset:
            req["Range"] = f"bytes={part.offset}-"
        with get_session().stream("GET", url, headers=req, follow_redirects=True,
                                  timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as resp:
            if resp.status_code == 416 and part.offset:  # our partial no longer matches: start over
                part.restart()
                return False
            if resp.status_code >= 400:
                resp.read()
            if resp.status_code in _TRANSIENT_STATUS and failures < self.retries:
                raise _TransientStatus(f"HTTP {resp.status_code} from {url}")
            hf_raise_for_status(resp)
            if part.offset and not range_starts_at(resp, part.offset):
                # Range ignored (200: the body is the whole file, take it from byte 0) or
                # answered for other bytes (206 elsewhere: drop it and ask again without Range).
                part.restart()
                part.resumed = False
                self._show(task, 0)
                if resp.status_code != 200:
                    return False
            self._append_body(part, resp, task)
        return True

    def _append_body(self, part: _Partial, resp: Any, task: TaskID | None) -> None:
        """Stream the response body onto the partial file, hashing it; more bytes than listed is an error."""
        entry = part.entry
        with open(part.path, "ab", buffering=0) as fh:  # unbuffered: a SIGKILL keeps what arrived
            for chunk in resp.iter_bytes():  # as received: a cut loses nothing
                if part.offset + len(chunk) > entry.size:
                    raise HubError(
                        f"The server sent more than the {entry.size} bytes the listing gives "
                        f"for {entry.path}.",
                        fix="The hub or HF_ENDPOINT mirror is inconsistent; try again later.")
                fh.write(chunk)
                part.add(chunk)
                self._show(task, part.offset)
            fh.flush()
            os.fsync(fh.fileno())

    def _interrupted(self, part: _Partial, err: Exception) -> HubError:
        entry, offset = part.entry, part.offset
        return HubError(
            f"The transfer of {entry.path} from {self.endpoint} was interrupted after {offset} of "
            f"{entry.size} bytes ({type(err).__name__}: {err}). The {offset} bytes received are "
            f"kept in {part.path}.",
            fix="Run the same command again: it resumes from there. If the hub stays "
            "unreachable, check HF_ENDPOINT / your network, or use --local-dir with a copy of "
            "the model (HF_HUB_OFFLINE=1 skips the hub).",
        )


@dataclass
class _Partial:
    """The bytes of one file received so far: their file, how many, their running hash."""

    entry: RemoteFile
    path: Path
    offset: int
    resumed: bool  # bytes of an earlier run were reused
    hasher: Any
    transferred: int = 0  # bytes received by this run, restarts included

    @classmethod
    def open(cls, entry: RemoteFile, path: Path) -> _Partial:
        """The partial file of ``entry``, created empty or re-hashed (dropped when longer than the file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()  # exists even for an empty file (no request is made for 0 bytes)
        offset = path.stat().st_size
        if offset > entry.size:
            path.unlink()
            offset = 0
        hasher = new_hasher(entry)
        if offset:
            hash_file(path, entry, hasher)
        return cls(entry, path, offset, offset > 0, hasher)

    def restart(self) -> None:
        """Drop the bytes on disk and start from byte 0 (``resumed`` is the caller's to reset)."""
        self.path.unlink()
        self.offset, self.hasher = 0, new_hasher(self.entry)

    def add(self, chunk: bytes) -> None:
        self.hasher.update(chunk)
        self.offset += len(chunk)
        self.transferred += len(chunk)


@contextlib.contextmanager
def exclusive_lock(lock_file: Path, root: Path) -> Iterator[None]:
    """One writer per target folder: two downloads appending to the same partial file would waste
    the transfer (the hash check would catch it, but only at the end). POSIX ``flock``; the lock dies
    with the process, so a killed download never leaves a stale lock behind."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks, accept the risk
        yield
        return
    with open(lock_file, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise HubError(f"Another vlarl download (pid {holder}) is writing into {root} right now.",
                           fix="Wait for it to finish, or download into a different --local-dir.") from err
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def check_free_space(wanted: list[RemoteFile], target: Target) -> None:
    """Refuse to start when the disk cannot hold the missing bytes (partial bytes count as present)."""
    needed = 0
    for f in wanted:
        final, partial = target.complete_path(f), target.partial_path(f)
        if final.is_file() and final.stat().st_size == f.size:
            continue
        needed += f.size - (partial.stat().st_size if partial.is_file() else 0)
    free = shutil.disk_usage(target.root).free
    if needed > free:
        raise HubError(
            f"Not enough disk space in {target.root}: the download needs {needed:,} bytes "
            f"({needed / 1e9:.2f} GB) more, {free:,} bytes ({free / 1e9:.2f} GB) are free.",
            fix="Free some space, pass --local-dir / --cache-dir on a larger disk, or fetch fewer files "
            "with --include / --exclude.")
