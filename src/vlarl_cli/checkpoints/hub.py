"""`vlarl download`: fetch a model repository from the Hugging Face Hub, verified and resumable.

Built on ``huggingface_hub`` (2.4.0 here) for everything that talks to the Hub API - repository and
revision info (``HfApi.model_info``), the recursive tree listing (``HfApi.list_repo_tree``), the per-file
``HEAD /resolve`` metadata with its redirect rules (``get_hf_file_metadata``), auth headers and error
classes (``hf_raise_for_status``) - but the byte transfer itself is our own ranged ``GET`` on the
client's HTTP session, because the client cannot give what we promise (REFERENCE.md section 6):

* **Verification.** The client checks sizes but never hashes. We hash every byte while it streams:
  sha256 for LFS files (the ``lfs.oid`` of the tree listing) and the git blob sha1
  (``sha1(b"blob <size>\\0" + content)``, the listing's ``oid``) for small files. A file whose hash
  differs is deleted and the download fails with a clear message, never silently accepted.
* **Resume across runs.** The client deletes partial files after a failure and never reuses an
  ``.incomplete`` file left by a killed process. We keep the partial bytes under a name of our own
  (``<local-dir>/.cache/vlarl/partial/<path>.part`` or ``blobs/<sha>.vlarl-partial`` in the cache),
  re-hash them on the next run and continue with ``Range: bytes=<n>-``. If the server ignores the range
  (200 instead of 206) we start that file over. Files already complete are re-verified (or trusted
  when size and mtime match our manifest of verified files).
* **Safety.** Every remote file name goes through :func:`~vlarl_cli.checkpoints.safety.safe_join`
  before anything is requested; one unsafe name aborts the whole download. Pickle-based files are
  skipped unless ``allow_pickle=True``. No remote code is ever imported. Telemetry is disabled.

Targets: ``local_dir`` gets the plain repository tree; without it files go to the standard
huggingface_hub cache layout (``models--org--name/{blobs,snapshots/<commit>,refs}``) so transformers
and the ``hf`` CLI find them too.

``HF_ENDPOINT`` is read when :func:`download` is called (not at import) and passed explicitly to every
client call, so tests can point it at a loopback server.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from vlarl_cli.checkpoints.atomic import atomic_write_json, atomic_write_text, fsync_directory
from vlarl_cli.checkpoints.detect import CheckpointInfo, configs_using, detect_checkpoint
from vlarl_cli.checkpoints.safety import check_relative_name, is_pickle_file, safe_join
from vlarl_cli.errors import HubError, did_you_mean

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

__all__ = [
    "DEFAULT_ENDPOINT",
    "KNOWN_REPOS",
    "RENAMED_REPOS",
    "DownloadResult",
    "FileRecord",
    "RemoteFile",
    "download",
    "git_blob_sha1",
    "resolve_repo_id",
]

DEFAULT_ENDPOINT = "https://huggingface.co"

# Repositories published under a new name. Looked up before any request, with a message.
RENAMED_REPOS: dict[str, str] = {
    "RLinf/RLinf-Pi05-SFT": "RLinf/RLinf-Pi05-LIBERO-SFT",
}

# Repositories the shipped configs and docs refer to; used only for "did you mean" on a 404.
KNOWN_REPOS: tuple[str, ...] = (
    "RLinf/RLinf-Pi05-LIBERO-SFT",
    "RLinf/RLinf-Pi0-LIBERO-Spatial-Object-Goal-SFT",
    "RLinf/RLinf-Pi05-LIBERO-130-fullshot-SFT",
    "nvidia/GR00T-N1.5-3B",
    "nvidia/GR00T-N1.6-3B",
    "lerobot/pi0_base",
    "lerobot/pi05_base",
    "moojink/openvla-7b-oft-finetuned-libero-spatial",
    "Haozhan72/Openvla-oft-SFT-libero10-trajall",
)

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_CHUNK = 1024 * 1024
_STATE_DIR = (".cache", "vlarl")


# --------------------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------------------
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


@dataclass
class FileRecord:
    """Outcome for one file: ``status`` is ``downloaded``, ``resumed`` (continued from partial bytes
    of an earlier run), ``present`` (already complete, verified now or earlier) or ``skipped``."""

    path: str
    size: int
    hash_kind: str
    hash: str
    status: str
    bytes_transferred: int = 0


@dataclass
class DownloadResult:
    """What :func:`download` did.

    Attributes:
        repo_id: repository actually downloaded (after renames).
        requested_repo_id: what the user asked for.
        revision: requested revision (``main`` when not given).
        commit: resolved 40-hex commit sha.
        path: folder holding the files (``local_dir`` or the cache snapshot folder).
        files: one record per listed file (after include/exclude filters).
        skipped_pickle: pickle-based files left out because ``allow_pickle`` was False.
        info: family/format detection of ``path``.
        configs: ``{"uses": [...], "compatible": [...]}`` config presets for this checkpoint.
        offline: True when served from an earlier complete download without contacting the Hub.
    """

    repo_id: str
    requested_repo_id: str
    revision: str
    commit: str
    path: Path
    files: list[FileRecord] = field(default_factory=list)
    skipped_pickle: list[str] = field(default_factory=list)
    info: CheckpointInfo | None = None
    configs: dict[str, list[str]] = field(default_factory=dict)
    offline: bool = False

    @property
    def bytes_transferred(self) -> int:
        return sum(f.bytes_transferred for f in self.files)


# --------------------------------------------------------------------------------------------------
# Hashing
# --------------------------------------------------------------------------------------------------
def git_blob_sha1(data: bytes) -> str:
    """Git's object id of a blob: ``sha1(b"blob " + str(len) + b"\\0" + data)`` (git-scm.com, "Git
    Objects"). The Hub reports this as ``oid`` for files not stored in LFS."""
    h = hashlib.sha1(b"blob %d\x00" % len(data))
    h.update(data)
    return h.hexdigest()


def _new_hasher(entry: RemoteFile) -> Any:
    if entry.sha256:
        return hashlib.sha256()
    return hashlib.sha1(b"blob %d\x00" % entry.size)  # header needs the final size: known from listing


def _hash_file(path: Path, entry: RemoteFile, hasher: Any | None = None,
               on_bytes: Any | None = None) -> Any:
    h = hasher if hasher is not None else _new_hasher(entry)
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return h


# --------------------------------------------------------------------------------------------------
# Where files go
# --------------------------------------------------------------------------------------------------
class _Target(Protocol):
    root: Path
    state_dir: Path

    def complete_path(self, entry: RemoteFile) -> Path: ...
    def partial_path(self, entry: RemoteFile) -> Path: ...
    def publish(self, entry: RemoteFile) -> None: ...


class _LocalDirTarget:
    """Plain tree in a user folder; partials and bookkeeping under ``.cache/vlarl`` inside it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_dir = root.joinpath(*_STATE_DIR)

    def complete_path(self, entry: RemoteFile) -> Path:
        return safe_join(self.root, entry.path)

    def partial_path(self, entry: RemoteFile) -> Path:
        return safe_join(self.state_dir / "partial", entry.path + ".part")

    def publish(self, entry: RemoteFile) -> None:  # complete_path is already the final name
        return None


class _CacheTarget:
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


def _repo_cache_folder(cache_dir: Path, repo_id: str) -> Path:
    return cache_dir / ("models--" + repo_id.replace("/", "--"))


# --------------------------------------------------------------------------------------------------
# Manifest of verified files (lets a re-run skip re-hashing multi-GB files)
# --------------------------------------------------------------------------------------------------
class _Manifest:
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


# --------------------------------------------------------------------------------------------------
# Error translation
# --------------------------------------------------------------------------------------------------
def _unreachable(endpoint: str, err: BaseException | str) -> HubError:
    return HubError(
        f"Cannot reach the model hub at {endpoint} ({err}).",
        fix="Check your network; set HF_ENDPOINT to a reachable mirror; or, on a machine without access, "
        "copy the model folder over and pass it with --local-dir / model_path (set HF_HUB_OFFLINE=1 to "
        "skip the hub entirely).",
    )


@contextlib.contextmanager
def _hub_errors(repo_id: str, revision: str, endpoint: str) -> Iterator[None]:
    """Turn huggingface_hub / httpx failures into one-paragraph HubErrors (never a traceback)."""
    import httpx2
    from huggingface_hub import errors as hf_errors

    web = endpoint.rstrip("/")
    try:
        yield
    except HubError:
        raise
    except hf_errors.GatedRepoError as err:
        raise HubError(
            f"{repo_id} is a gated repository: its files are only served to logged-in users who accepted "
            "its access conditions.",
            fix=f"Open {web}/{repo_id}, accept the conditions, then log in with `hf auth login` or set "
            "HF_TOKEN to a token with read access, and run the command again.",
        ) from err
    except hf_errors.RevisionNotFoundError as err:
        raise HubError(
            f"Revision {revision!r} does not exist in {repo_id}.",
            fix=f"Pass a branch, tag or commit that exists (see {web}/{repo_id}/tree/main), or omit "
            "--revision to use main.",
        ) from err
    except hf_errors.RemoteEntryNotFoundError as err:
        raise HubError(f"A file of {repo_id}@{revision} listed by the hub is missing on the server: {err}",
                       fix="Try again later or pick another revision with --revision.") from err
    except hf_errors.DisabledRepoError as err:
        raise HubError(f"Access to {repo_id} has been disabled on the hub.",
                       fix="Use another repository.") from err
    except hf_errors.RepositoryNotFoundError as err:
        raise HubError(
            f"Repository {repo_id} was not found on {web} (it does not exist, or it is private and you "
            "are not logged in).",
            fix="Check the name (organisation/name, case-sensitive)." + did_you_mean(repo_id, KNOWN_REPOS)
            + " For a private repository log in with `hf auth login` or set HF_TOKEN.",
        ) from err
    except hf_errors.OfflineModeIsEnabled as err:
        raise HubError(
            f"HF_HUB_OFFLINE is set, and {repo_id} has no complete earlier download here.",
            fix="Unset HF_HUB_OFFLINE to download, or point --local-dir / model_path at a folder that "
            "already holds the model.",
        ) from err
    except hf_errors.HFValidationError as err:
        raise HubError(f"{repo_id!r} is not a valid repository id: {err}",
                       fix="Use the form organisation/name, e.g. RLinf/RLinf-Pi05-LIBERO-SFT.") from err
    except hf_errors.HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else "?"
        raise HubError(f"The hub at {web} answered HTTP {status} for {repo_id}: {str(err).splitlines()[0]}",
                       fix="Try again later; if it persists check HF_ENDPOINT and your token.") from err
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise HubError(f"The disk is full while downloading {repo_id} ({err}). Bytes received so far "
                           "are kept and resume on the next run.",
                           fix="Free some space (or pass --local-dir / --cache-dir on a larger disk) and run "
                           "the same command again.") from err
        raise
    except httpx2.TransportError as err:  # connect/timeout/protocol errors: not HfHubHTTPError (REF s6)
        raise _unreachable(web, f"{type(err).__name__}: {err}") from err
    except httpx2.HTTPError as err:
        raise _unreachable(web, f"{type(err).__name__}: {err}") from err


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------
def resolve_repo_id(repo_id: str) -> tuple[str, str | None]:
    """Apply :data:`RENAMED_REPOS`; returns ``(repo_id_to_use, message_or_None)``."""
    new = RENAMED_REPOS.get(repo_id)
    if new is None:
        return repo_id, None
    return new, f"{repo_id} is now published as {new}; downloading {new}."


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _select(files: list[RemoteFile], include: Sequence[str] | None, exclude: Sequence[str] | None
            ) -> list[RemoteFile]:
    """Glob filters as in huggingface_hub's allow/ignore patterns (a trailing ``/`` means a folder)."""
    def norm(patterns: Sequence[str] | None) -> list[str]:
        return [p + "*" if p.endswith("/") else p for p in (patterns or [])]

    inc, exc = norm(include), norm(exclude)
    out = []
    for f in files:
        if inc and not any(fnmatch.fnmatch(f.path, p) for p in inc):
            continue
        if any(fnmatch.fnmatch(f.path, p) for p in exc):
            continue
        out.append(f)
    return out


def _listing(api: Any, repo_id: str, commit: str) -> list[RemoteFile]:
    from huggingface_hub.hf_api import RepoFile

    files: list[RemoteFile] = []
    for item in api.list_repo_tree(repo_id, revision=commit, recursive=True):
        if not isinstance(item, RepoFile):
            check_relative_name(item.path)  # folders are never written, but refuse bad names early
            continue
        check_relative_name(item.path)
        lfs = item.lfs
        files.append(RemoteFile(path=item.path, size=int(item.size),
                                sha256=(lfs["sha256"] if lfs else None), git_sha1=item.blob_id))
    return files


def _range_starts_at(resp: Any, offset: int) -> bool:
    """True for a 206 whose ``Content-Range: bytes <offset>-...`` starts where our partial file ends."""
    if resp.status_code != 206:
        return False
    m = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
    return m is not None and int(m.group(1)) == offset


# --------------------------------------------------------------------------------------------------
# Transfer of one file
# --------------------------------------------------------------------------------------------------
class _Transfer:
    """Downloads one file into its partial name with Range resume, hashing as bytes arrive."""

    def __init__(self, *, repo_id: str, commit: str, endpoint: str, token: str | bool | None,
                 retries: int, retry_wait: float, progress: Progress | None) -> None:
        self.repo_id, self.commit, self.endpoint, self.token = repo_id, commit, endpoint, token
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

        url = hf_hub_url(self.repo_id, entry.path, revision=self.commit, endpoint=self.endpoint)
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
        from huggingface_hub import constants
        from huggingface_hub.utils import get_session, hf_raise_for_status

        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.touch()  # exists even for an empty file (no request is made for 0 bytes)
        offset = partial.stat().st_size
        if offset > entry.size:
            partial.unlink()
            offset = 0
        resumed = offset > 0
        hasher = _new_hasher(entry)
        if offset:
            _hash_file(partial, entry, hasher)
        self._show(task, offset)
        transferred = 0
        url: str | None = None
        headers: dict[str, str] = {}
        failures = 0
        while offset < entry.size:
            before = offset
            try:
                if url is None:  # (re-)resolve after a failure: CDN URLs are signed and expire
                    url, headers = self._url_and_headers(entry)
                req = dict(headers)
                if offset:
                    req["Range"] = f"bytes={offset}-"
                with get_session().stream("GET", url, headers=req, follow_redirects=True,
                                          timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as resp:
                    if resp.status_code == 416 and offset:  # our partial no longer matches: start over
                        partial.unlink()
                        offset, hasher = 0, _new_hasher(entry)
                        continue
                    if resp.status_code >= 400:
                        resp.read()
                    hf_raise_for_status(resp)
                    if offset and not _range_starts_at(resp, offset):
                        # Range ignored (200: the body is the whole file, take it from byte 0) or
                        # answered for other bytes (206 elsewhere: drop it and ask again without Range).
                        partial.unlink()
                        offset, hasher, resumed = 0, _new_hasher(entry), False
                        self._show(task, 0)
                        if resp.status_code != 200:
                            continue
                    with open(partial, "ab", buffering=0) as fh:  # unbuffered: a SIGKILL keeps what arrived
                        for chunk in resp.iter_bytes():  # as received: a cut loses nothing
                            if offset + len(chunk) > entry.size:
                                raise HubError(
                                    f"The server sent more than the {entry.size} bytes the listing gives "
                                    f"for {entry.path}.",
                                    fix="The hub or HF_ENDPOINT mirror is inconsistent; try again later.")
                            fh.write(chunk)
                            hasher.update(chunk)
                            offset += len(chunk)
                            transferred += len(chunk)
                            self._show(task, offset)
                        fh.flush()
                        os.fsync(fh.fileno())
                if offset < entry.size:
                    raise httpx2.RemoteProtocolError("connection closed before the end of the file")
            except httpx2.TransportError as err:
                url = None
                failures = 0 if offset > before else failures + 1  # progress resets the budget
                if failures > self.retries:
                    raise HubError(
                        f"The transfer of {entry.path} from {self.endpoint} was interrupted after {offset} of "
                        f"{entry.size} bytes ({type(err).__name__}: {err}). The {offset} bytes received are "
                        f"kept in {partial}.",
                        fix="Run the same command again: it resumes from there. If the hub stays "
                        "unreachable, check HF_ENDPOINT / your network, or use --local-dir with a copy of "
                        "the model (HF_HUB_OFFLINE=1 skips the hub).",
                    ) from err
                time.sleep(min(self.retry_wait * 2 ** max(failures - 1, 0), 8.0))
        return transferred, resumed, hasher.hexdigest()


# --------------------------------------------------------------------------------------------------
# Main entry point
# --------------------------------------------------------------------------------------------------
def download(
    repo_id: str,
    revision: str | None = None,
    local_dir: str | os.PathLike[str] | None = None,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    allow_pickle: bool = False,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    token: str | bool | None = None,
    retries: int = 5,
    retry_wait: float = 1.0,
    quiet: bool = False,
    console: Console | None = None,
) -> DownloadResult:
    """Download ``repo_id`` at ``revision``, verify every file, detect the model and print a summary.

    Args:
        repo_id: ``organisation/name``; names in :data:`RENAMED_REPOS` are redirected with a message.
        revision: branch, tag or commit (default ``main``).
        local_dir: put the plain file tree here; default: the huggingface_hub cache.
        include, exclude: glob patterns on repository paths (``*.json``, ``assets/``).
        allow_pickle: also download ``.bin``/``.pt``/... files (skipped by default; see safety.py).
        cache_dir: cache root instead of ``HF_HUB_CACHE`` (only when ``local_dir`` is None).
        token: hub token; None uses ``HF_TOKEN`` / the stored login.
        retries: transport failures tolerated per file without progress before giving up.
        retry_wait: first back-off in seconds (doubles, capped at 8 s).
        quiet: no progress bars and no summary.
        console: rich console for the summary (progress goes to stderr).

    Raises:
        HubError: offline/unreachable hub, gated/missing repository or revision, unsafe listing,
            interrupted transfer (partial bytes kept; rerun resumes), hash mismatch.
    """
    # Set before huggingface_hub is imported (its constants are read at import time; REFERENCE s6).
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from rich.console import Console

    out = console or Console(highlight=False, soft_wrap=True)
    err_console = Console(stderr=True, highlight=False, soft_wrap=True)

    requested = repo_id
    repo_id, renamed_msg = resolve_repo_id(repo_id)
    if renamed_msg and not quiet:
        err_console.print(f"[yellow]note:[/] {renamed_msg}")
    rev = revision or "main"
    endpoint = _endpoint()

    if _offline():
        result = _offline_result(requested, repo_id, rev, local_dir, cache_dir)
        if not quiet:
            _print_summary(out, result)
        return result

    import huggingface_hub
    from huggingface_hub import HfApi
    from huggingface_hub import constants as hf_constants

    hf_constants.HF_HUB_DISABLE_TELEMETRY = True  # in case the client was imported before us
    huggingface_hub.utils.disable_progress_bars()

    api = HfApi(endpoint=endpoint, token=token, library_name="vlarl")
    with _hub_errors(repo_id, rev, endpoint):
        info = api.model_info(repo_id, revision=rev)
        commit = info.sha
        if not commit or not _COMMIT_RE.match(commit):
            raise HubError(f"The hub at {endpoint} gave no commit id for {repo_id}@{rev}.",
                           fix="Check that HF_ENDPOINT points at a Hugging Face Hub compatible server.")
        listing = _listing(api, repo_id, commit)

    selected = _select(listing, include, exclude)
    skipped_pickle = [] if allow_pickle else [f.path for f in selected if is_pickle_file(f.path)]
    wanted = [f for f in selected if allow_pickle or not is_pickle_file(f.path)]
    if not wanted:
        raise HubError(
            f"Nothing to download from {repo_id}@{rev}: {len(listing)} files listed, none left after the "
            f"filters (include={list(include or [])}, exclude={list(exclude or [])}"
            + (f", {len(skipped_pickle)} pickle files skipped" if skipped_pickle else "") + ").",
            fix="Loosen --include/--exclude" + (" or pass --allow-pickle" if skipped_pickle else "") + ".",
        )

    target: _Target
    if local_dir is not None:
        target = _LocalDirTarget(Path(local_dir).expanduser())
    else:
        cache = Path(cache_dir).expanduser() if cache_dir is not None else Path(hf_constants.HF_HUB_CACHE)
        target = _CacheTarget(_repo_cache_folder(cache, repo_id), commit)
    # Validate every destination before the first byte moves (a bad name aborts everything).
    reserved = "/".join(_STATE_DIR) + "/"
    for f in wanted:
        safe_join(target.root, f.path)
        target.partial_path(f)
        if isinstance(target, _LocalDirTarget) and (f.path + "/").startswith(reserved):
            raise HubError(f"The repository contains {f.path!r}, inside {reserved}, the folder where vlarl keeps "
                           "its own download records; vlarl refuses to let a download overwrite them.",
                           fix="Exclude it with --exclude '.cache/vlarl/*' or download into the cache "
                           "(no --local-dir).")
    try:
        target.root.mkdir(parents=True, exist_ok=True)
        target.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file in the way, no permission, read-only filesystem
        raise HubError(f"Cannot create the download folder {target.root}: {err.strerror or err}.",
                       fix="Pass a writable folder with --local-dir (or --cache-dir).") from err
    with _exclusive(target.state_dir / "lock", target.root):
        _check_free_space(wanted, target)
        manifest = _Manifest(target.state_dir / "verified.json")
        records = _fetch_all(repo_id, commit, endpoint, token, retries, retry_wait, quiet, err_console,
                             wanted, target, manifest)

    if isinstance(target, _CacheTarget):
        if not _COMMIT_RE.match(rev):
            ref = safe_join(target.repo_folder / "refs", rev)
            atomic_write_text(ref, commit)
    state = {"repo_id": repo_id, "revision": rev, "commit": commit, "endpoint": endpoint,
             "files": [r.path for r in records], "complete": True}
    atomic_write_json(target.state_dir / f"download-{commit}.json", state)
    atomic_write_json(target.state_dir / f"download-rev-{_slug(rev)}.json", state)

    result = DownloadResult(repo_id=repo_id, requested_repo_id=requested, revision=rev, commit=commit,
                            path=target.root, files=records, skipped_pickle=skipped_pickle)
    result.info = detect_checkpoint(target.root)
    result.configs = configs_using(result.info, repo_id)
    if not quiet:
        _print_summary(out, result)
    return result


@contextlib.contextmanager
def _exclusive(lock_file: Path, root: Path) -> Iterator[None]:
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


def _check_free_space(wanted: list[RemoteFile], target: _Target) -> None:
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


def _slug(rev: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", rev)


def _fetch_all(repo_id: str, commit: str, endpoint: str, token: str | bool | None, retries: int,
               retry_wait: float, quiet: bool, err_console: Console, wanted: list[RemoteFile],
               target: _Target, manifest: _Manifest) -> list[FileRecord]:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(), console=err_console,
                        disable=quiet, transient=False)
    records: list[FileRecord] = []
    with progress, _hub_errors(repo_id, commit, endpoint):
        transfer = _Transfer(repo_id=repo_id, commit=commit, endpoint=endpoint, token=token,
                             retries=retries, retry_wait=retry_wait, progress=progress)
        if len(wanted) > 1:
            transfer.overall = progress.add_task(f"all {len(wanted)} files",
                                                 total=sum(f.size for f in wanted))
        done = 0
        for entry in wanted:
            transfer.base = done
            records.append(_place_one(entry, target, manifest, transfer, progress, quiet, err_console))
            done += entry.size
            if transfer.overall is not None:
                progress.update(transfer.overall, completed=done)
    return records


def _place_one(entry: RemoteFile, target: _Target, manifest: _Manifest, transfer: _Transfer,
               progress: Progress, quiet: bool, err_console: Console) -> FileRecord:
    """Make ``entry`` present and verified in ``target``: trust the manifest, re-hash a file of the
    right size, or download (resuming partial bytes)."""
    final = target.complete_path(entry)
    key = final.relative_to(target.state_dir.parent if isinstance(target, _CacheTarget)
                            else target.root).as_posix()
    rec = FileRecord(path=entry.path, size=entry.size, hash_kind=entry.hash_kind,
                     hash=entry.expected_hash, status="present")
    if final.is_file() and not final.is_symlink():
        if manifest.is_verified(key, final, entry):
            target.publish(entry)
            return rec
        if final.stat().st_size == entry.size:
            task = progress.add_task(f"verify {entry.path}", total=entry.size)
            digest = _hash_file(final, entry,
                                on_bytes=lambda n, t=task: progress.advance(t, n)).hexdigest()
            progress.remove_task(task)
            if digest == entry.expected_hash:
                manifest.mark(key, final, entry)
                target.publish(entry)
                return rec
        if not quiet:
            err_console.print(f"[yellow]note:[/] replacing {entry.path}: it differs from the hub copy")
    elif final.is_symlink() or final.exists():
        raise HubError(f"{final} exists and is not a regular file.",
                       fix="Remove it or choose another --local-dir.")
    partial = target.partial_path(entry)
    task = progress.add_task(entry.path, total=entry.size)
    n, resumed = transfer.run(entry, partial, task)
    progress.remove_task(task)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, final)
    fsync_directory(final.parent)
    manifest.mark(key, final, entry)
    target.publish(entry)
    rec.status = "resumed" if resumed else "downloaded"
    rec.bytes_transferred = n
    return rec


def _offline_result(requested: str, repo_id: str, rev: str, local_dir: str | os.PathLike[str] | None,
                    cache_dir: str | os.PathLike[str] | None) -> DownloadResult:
    """HF_HUB_OFFLINE: serve an earlier complete download of the same repo/revision, or fail clearly."""
    state_file: Path | None = None
    if local_dir is not None:
        state_file = Path(local_dir).expanduser().joinpath(*_STATE_DIR, f"download-rev-{_slug(rev)}.json")
        root = Path(local_dir).expanduser()
    else:
        from huggingface_hub import constants as hf_constants

        cache = Path(cache_dir).expanduser() if cache_dir is not None else Path(hf_constants.HF_HUB_CACHE)
        folder = _repo_cache_folder(cache, repo_id)
        state_file = folder / ".vlarl" / f"download-rev-{_slug(rev)}.json"
        root = folder / "snapshots"
    state: dict[str, Any] | None = None
    if state_file.is_file():
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(state_file.read_text(encoding="utf-8"))
    if not state or state.get("repo_id") != repo_id or not state.get("complete"):
        raise HubError(
            f"HF_HUB_OFFLINE is set and there is no complete earlier download of {repo_id}@{rev} "
            f"{'in ' + str(local_dir) if local_dir is not None else 'in the hub cache'}.",
            fix="Unset HF_HUB_OFFLINE (and check HF_ENDPOINT) to download it, or point --local-dir / "
            "model_path at a folder that already holds the model.",
        )
    commit = str(state["commit"])
    path = root if local_dir is not None else root / commit
    missing = [p for p in state.get("files", []) if not safe_join(path, p).exists()]
    if missing:
        raise HubError(f"HF_HUB_OFFLINE is set and the earlier download in {path} lacks {missing[:5]}.",
                       fix="Unset HF_HUB_OFFLINE and run the download again to complete it.")
    result = DownloadResult(repo_id=repo_id, requested_repo_id=requested, revision=rev, commit=commit,
                            path=path, offline=True,
                            files=[FileRecord(p, safe_join(path, p).stat().st_size, "", "", "present")
                                   for p in state.get("files", [])])
    result.info = detect_checkpoint(path)
    result.configs = configs_using(result.info, repo_id)
    return result


def _human(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def _print_summary(console: Console, result: DownloadResult) -> None:
    info = result.info
    counts: dict[str, int] = {}
    for r in result.files:
        counts[r.status] = counts.get(r.status, 0) + 1
    status = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    lines = [
        f"[bold]{result.repo_id}[/] @ {result.revision} (commit {result.commit[:12]})"
        + ("  [yellow](offline: earlier download)[/]" if result.offline else ""),
        f"  folder:      {result.path}",
        f"  files:       {len(result.files)} ({status}); {result.bytes_transferred:,} bytes transferred; "
        + ("all verified against the hub's sha256 / git sha1" if not result.offline else "not re-verified"),
    ]
    if info is not None:
        fam = info.family or "unknown"
        lines.append(f"  family:      {fam}" + (f" ({info.variant})" if info.variant else "")
                     + f", format {info.format or 'unknown'}")
        lines.append(f"  parameters:  {_human(info.num_parameters)}"
                     + (f" ({info.num_parameters:,})" if info.num_parameters and info.num_parameters >= 1000
                        else ""))
        lines.append("  norm stats:  " + (", ".join(info.norm_stats) if info.norm_stats else "none found"))
        if info.has_remote_code:
            lines.append("  remote code: present in the repository; vlarl never executes it")
        for note in info.notes:
            lines.append(f"  note:        {note}")
    if result.skipped_pickle:
        lines.append(f"  skipped:     {len(result.skipped_pickle)} pickle file(s) "
                     f"({', '.join(result.skipped_pickle[:3])}{', ...' if len(result.skipped_pickle) > 3 else ''});"
                     " pass --allow-pickle to fetch them")
    uses, compatible = result.configs.get("uses", []), result.configs.get("compatible", [])
    if uses:
        lines.append(f"  configs:     {', '.join(uses)} (their model_path is this repository)")
    if compatible:
        lines.append(f"  compatible:  {', '.join(compatible)} (run with actor.model.model_path={result.path})")
    if not uses and not compatible:
        lines.append("  configs:     no preset in configs/ uses this model family")
    console.print("\n".join(lines))
