"""`vlarl download`: fetch a model repository from the Hugging Face Hub, verified and resumable.

Built on ``huggingface_hub`` (2.4.0 here) for everything that talks to the Hub API - repository and
revision info (``HfApi.repo_info``), the recursive tree listing (``HfApi.list_repo_tree``), the per-file
``HEAD /resolve`` metadata with its redirect rules (``get_hf_file_metadata``), auth headers and error
classes (``hf_raise_for_status``) - but the byte transfer itself is our own ranged ``GET`` on the
client's HTTP session, because the client cannot give what we promise (REFERENCE.md section 6): it
never hashes and it throws partial files away. Verification (sha256 / git blob sha1 while streaming)
and resume across runs (kept partial bytes + ``Range``) live in :mod:`vlarl_cli.checkpoints.transfer`.

* **Safety.** Every remote file name goes through :func:`~vlarl_cli.checkpoints.safety.safe_join`
  before anything is requested; one unsafe name aborts the whole download. Pickle-based files are
  skipped unless ``allow_pickle=True``. No remote code is ever imported. Telemetry is disabled.

Repositories are models unless ``repo_type="dataset"`` (the hub's dataset repos: ``/api/datasets/...``,
``/datasets/<id>/resolve/...``, cache folder ``datasets--org--name``); a dataset is verified the same way
and is not run through the checkpoint detection.

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
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlarl_cli.checkpoints.atomic import atomic_write_json, atomic_write_text, fsync_directory
from vlarl_cli.checkpoints.detect import CheckpointInfo, detect_checkpoint
from vlarl_cli.checkpoints.safety import check_relative_name, is_pickle_file, safe_join
from vlarl_cli.checkpoints.transfer import (
    STATE_DIR,
    CacheTarget,
    FileTransfer,
    LocalDirTarget,
    Manifest,
    RemoteFile,
    Target,
    check_free_space,
    exclusive_lock,
    git_blob_sha1,
    hash_file,
    repo_cache_folder,
)
from vlarl_cli.errors import HubError, did_you_mean

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

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

#: ``(info, repo_id) -> {"uses": [...], "compatible": [...]}``: the config presets of a checkpoint
Presets = Callable[[CheckpointInfo, str], dict[str, list[str]]]


# --------------------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------------------
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
        configs: ``{"uses": [...], "compatible": [...]}`` config presets for this checkpoint (empty when
            ``download`` was given no ``presets``).
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
    """Turn huggingface_hub / httpx failures into one-paragraph HubErrors (never a traceback); anything
    else (a bug of ours, Ctrl-C, an OSError other than a full disk) passes through unchanged."""
    web = endpoint.rstrip("/")
    try:
        yield
    except HubError:
        raise
    except Exception as err:
        translated = _repository_error(err, repo_id, revision, web) or _transport_error(err, repo_id, web)
        if translated is None:
            raise
        raise translated from err


def _repository_error(err: Exception, repo_id: str, revision: str, web: str) -> HubError | None:
    """What the hub said about the repository, revision or file (huggingface_hub's error classes)."""
    from huggingface_hub import errors as hf_errors

    # Most specific first: GatedRepoError, RevisionNotFoundError, ... are RepositoryNotFoundError /
    # HfHubHTTPError subclasses, and OfflineModeIsEnabled is an OSError (huggingface_hub/errors.py).
    if isinstance(err, hf_errors.GatedRepoError):
        return HubError(
            f"{repo_id} is a gated repository: its files are only served to logged-in users who accepted "
            "its access conditions.",
            fix=f"Open {web}/{repo_id}, accept the conditions, then log in with `hf auth login` or set "
            "HF_TOKEN to a token with read access, and run the command again.")
    if isinstance(err, hf_errors.RevisionNotFoundError):
        return HubError(
            f"Revision {revision!r} does not exist in {repo_id}.",
            fix=f"Pass a branch, tag or commit that exists (see {web}/{repo_id}/tree/main), or omit "
            "--revision to use main.")
    if isinstance(err, hf_errors.RemoteEntryNotFoundError):
        return HubError(f"A file of {repo_id}@{revision} listed by the hub is missing on the server: {err}",
                        fix="Try again later or pick another revision with --revision.")
    if isinstance(err, hf_errors.DisabledRepoError):
        return HubError(f"Access to {repo_id} has been disabled on the hub.", fix="Use another repository.")
    if isinstance(err, hf_errors.RepositoryNotFoundError):
        return HubError(
            f"Repository {repo_id} was not found on {web} (it does not exist, or it is private and you "
            "are not logged in).",
            fix="Check the name (organisation/name, case-sensitive)." + did_you_mean(repo_id, KNOWN_REPOS)
            + " For a private repository log in with `hf auth login` or set HF_TOKEN.")
    if isinstance(err, hf_errors.OfflineModeIsEnabled):
        return HubError(
            f"HF_HUB_OFFLINE is set, and {repo_id} has no complete earlier download here.",
            fix="Unset HF_HUB_OFFLINE to download, or point --local-dir / model_path at a folder that "
            "already holds the model.")
    if isinstance(err, hf_errors.HFValidationError):
        return HubError(f"{repo_id!r} is not a valid repository id: {err}",
                        fix="Use the form organisation/name, e.g. RLinf/RLinf-Pi05-LIBERO-SFT.")
    if isinstance(err, hf_errors.HfHubHTTPError):
        status = err.response.status_code if err.response is not None else "?"
        return HubError(f"The hub at {web} answered HTTP {status} for {repo_id}: {str(err).splitlines()[0]}",
                        fix="Try again later; if it persists check HF_ENDPOINT and your token.")
    return None


def _transport_error(err: Exception, repo_id: str, web: str) -> HubError | None:
    """A full disk, a server that is no hub, or no connection at all; None for any other error."""
    import httpx2

    if isinstance(err, OSError):
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            return None
        return HubError(f"The disk is full while downloading {repo_id} ({err}). Bytes received so far "
                        "are kept and resume on the next run.",
                        fix="Free some space (or pass --local-dir / --cache-dir on a larger disk) and run "
                        "the same command again.")
    if isinstance(err, json.JSONDecodeError):  # a captive portal, proxy or web page answering 200 with HTML
        return HubError(f"The server at {web} answered the hub API for {repo_id} with something that is not JSON "
                        f"({err.msg} at line {err.lineno}); it is not a Hugging Face hub (an HTML page from a "
                        "proxy, a login portal or a wrong HF_ENDPOINT?).",
                        fix="Point HF_ENDPOINT at a hub or mirror API (or unset it for https://huggingface.co) "
                        "and check any proxy settings, then run the same command again.")
    if isinstance(err, httpx2.HTTPError):  # connect/timeout/protocol errors: not HfHubHTTPError (REF s6)
        return _unreachable(web, f"{type(err).__name__}: {err}")
    return None


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------
def resolve_repo_id(repo_id: str) -> tuple[str, str | None]:
    """Apply :data:`RENAMED_REPOS`; returns ``(repo_id_to_use, message_or_None)``."""
    new = RENAMED_REPOS.get(repo_id)
    if new is None:
        return repo_id, None
    return new, f"{repo_id} is now published as {new}; downloading {new}."


# A hub repository id: "name" or "organisation/name", letters, digits, '-', '_', '.' (huggingface_hub's rule).
_REPO_ID_RE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def _check_arguments(repo_id: str, local_dir: str | os.PathLike[str] | None, repo_type: str,
                     cache_dir: str | os.PathLike[str] | None = None) -> None:
    """What is wrong with the arguments themselves, said before the hub (or its offline cache) is asked."""
    if not _REPO_ID_RE.match(repo_id) or ".." in repo_id:
        raise HubError(f"{repo_id!r} is not a repository id (organisation/name: letters, digits, '-', '_', '.').",
                       fix="Use the form organisation/name, e.g. RLinf/RLinf-Pi05-LIBERO-SFT."
                       + did_you_mean(repo_id, KNOWN_REPOS))
    if local_dir is not None and cache_dir is not None:
        raise HubError(f"--cache-dir {cache_dir} has no effect with --local-dir {local_dir}: the files go to the "
                       "local folder, not to a cache.", fix="Pass one of --local-dir and --cache-dir.")
    for folder, option in ((local_dir, "--local-dir"), (cache_dir, "--cache-dir")):
        target = Path(folder).expanduser() if folder is not None else None
        blocker = next((p for p in (target, *target.parents) if p.exists() and not p.is_dir()), None) if target else None
        if blocker is not None:
            raise HubError(f"Cannot create the download folder {target} ({option}): {blocker} is a file.",
                           fix=f"Choose a folder path for {option} (or move the file away).")
    if repo_type not in ("model", "dataset"):
        raise HubError(f"Repository type {repo_type!r} is not one vlarl downloads.",
                       fix="Use --repo-type model (checkpoints) or --repo-type dataset (e.g. simulator assets).")


def _consoles(console: Console | None) -> tuple[Console, Console]:
    """The summary's console (``console`` or stdout) and stderr's, for notes and progress."""
    from rich.console import Console

    return console or Console(highlight=False, soft_wrap=True), Console(stderr=True, highlight=False,
                                                                        soft_wrap=True)


def _follow_rename(repo_id: str, note_to: Console | None) -> str:
    """The repository to download after :data:`RENAMED_REPOS`, with a note when it was renamed."""
    new_id, message = resolve_repo_id(repo_id)
    if message and note_to is not None:
        note_to.print(f"note: {message}", markup=False)
    return new_id


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _select_paths(paths: list[str], include: Sequence[str] | None, exclude: Sequence[str] | None) -> list[str]:
    """Glob filters as in huggingface_hub's allow/ignore patterns (a trailing ``/`` means a folder), on repository
    paths: the hub's listing online, an earlier download's file list offline."""
    def norm(patterns: Sequence[str] | None) -> list[str]:
        return [p + "*" if p.endswith("/") else p for p in (patterns or [])]

    inc, exc = norm(include), norm(exclude)
    return [path for path in paths if (not inc or any(fnmatch.fnmatch(path, p) for p in inc))
            and not any(fnmatch.fnmatch(path, p) for p in exc)]


def _listing(api: Any, repo_id: str, commit: str, repo_type: str = "model") -> list[RemoteFile]:
    from huggingface_hub.hf_api import RepoFile

    files: list[RemoteFile] = []
    for item in api.list_repo_tree(repo_id, revision=commit, recursive=True, repo_type=repo_type):
        if not isinstance(item, RepoFile):
            check_relative_name(item.path)  # folders are never written, but refuse bad names early
            continue
        check_relative_name(item.path)
        lfs = item.lfs
        files.append(RemoteFile(path=item.path, size=int(item.size),
                                sha256=(lfs["sha256"] if lfs else None), git_sha1=item.blob_id))
    return files


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
    repo_type: str = "model",
    presets: Presets | None = None,
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
        repo_type: ``model`` or ``dataset`` (a hub dataset repository, e.g. simulator assets).
        presets: matches presets to the checkpoint (:data:`Presets`, e.g. ``config.presets.configs_using``).

    Raises:
        HubError: offline/unreachable hub, gated/missing repository or revision, unsafe listing,
            interrupted transfer (partial bytes kept; rerun resumes), hash mismatch.
    """
    # Set before huggingface_hub is imported (its constants are read at import time; REFERENCE s6).
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    out, err_console = _consoles(console)
    _check_arguments(repo_id, local_dir, repo_type, cache_dir)
    requested, repo_id = repo_id, _follow_rename(repo_id, None if quiet else err_console)
    rev, endpoint, filters = revision or "main", _endpoint(), (include, exclude, allow_pickle)
    if _offline():
        result = _offline_result(requested, repo_id, rev, local_dir, cache_dir, repo_type, presets, filters=filters)
    else:
        commit, listing = _remote_listing(repo_id, rev, endpoint, token, repo_type)
        wanted, skipped_pickle = _wanted(listing, include, exclude, allow_pickle, f"{repo_id}@{rev}")
        target = _prepared_target(wanted, local_dir, cache_dir, repo_id, repo_type, commit)
        records = _fetch_all(repo_id, commit, endpoint, token, retries, retry_wait, quiet, err_console,
                             wanted, target, repo_type)
        result = DownloadResult(repo_id=repo_id, requested_repo_id=requested, revision=rev, commit=commit,
                                path=target.root, files=records, skipped_pickle=skipped_pickle)
        _record_download(target, result, repo_type, endpoint)
        _detect(result, repo_type, presets)
    if not quiet:
        _print_summary(out, result)
    return result


def _remote_listing(repo_id: str, rev: str, endpoint: str, token: str | bool | None,
                    repo_type: str) -> tuple[str, list[RemoteFile]]:
    """Ask the hub which commit ``rev`` is and which files that commit holds."""
    import huggingface_hub
    from huggingface_hub import HfApi
    from huggingface_hub import constants as hf_constants

    hf_constants.HF_HUB_DISABLE_TELEMETRY = True  # in case the client was imported before us
    huggingface_hub.utils.disable_progress_bars()

    api = HfApi(endpoint=endpoint, token=token, library_name="vlarl")
    with _hub_errors(repo_id, rev, endpoint):
        info = api.repo_info(repo_id, revision=rev, repo_type=repo_type)
        commit = info.sha
        if not commit or not _COMMIT_RE.match(commit):
            raise HubError(f"The hub at {endpoint} gave no commit id for {repo_id}@{rev}.",
                           fix="Check that HF_ENDPOINT points at a Hugging Face Hub compatible server.")
        return commit, _listing(api, repo_id, commit, repo_type)


def _wanted(listing: list[RemoteFile], include: Sequence[str] | None, exclude: Sequence[str] | None,
            allow_pickle: bool, where: str) -> tuple[list[RemoteFile], list[str]]:
    """The files to fetch after the filters, and the pickle files left out; an empty choice is an error."""
    paths, skipped_pickle = _wanted_paths([f.path for f in listing], include, exclude, allow_pickle, where)
    keep = set(paths)
    return [f for f in listing if f.path in keep], skipped_pickle


def _wanted_paths(paths: list[str], include: Sequence[str] | None, exclude: Sequence[str] | None,
                  allow_pickle: bool, where: str) -> tuple[list[str], list[str]]:
    """:func:`_wanted` on repository paths (online: the listing; offline: the earlier download's files)."""
    selected = _select_paths(paths, include, exclude)
    skipped_pickle = [] if allow_pickle else [p for p in selected if is_pickle_file(p)]
    wanted = [p for p in selected if allow_pickle or not is_pickle_file(p)]
    if not wanted:
        raise HubError(
            f"Nothing to download from {where}: {len(paths)} files listed, none left after the "
            f"filters (include={list(include or [])}, exclude={list(exclude or [])}"
            + (f", {len(skipped_pickle)} pickle files skipped" if skipped_pickle else "") + ").",
            fix="Loosen --include/--exclude" + (" or pass --allow-pickle" if skipped_pickle else "") + ".",
        )
    return wanted, skipped_pickle


def _cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    """``--cache-dir``, else huggingface_hub's ``HF_HUB_CACHE``."""
    from huggingface_hub import constants as hf_constants

    return Path(cache_dir).expanduser() if cache_dir is not None else Path(hf_constants.HF_HUB_CACHE)


def _prepared_target(wanted: list[RemoteFile], local_dir: str | os.PathLike[str] | None,
                     cache_dir: str | os.PathLike[str] | None, repo_id: str, repo_type: str,
                     commit: str) -> Target:
    """The destination (``local_dir`` or the cache snapshot), every file name in it checked, its folders made."""
    target: Target
    if local_dir is not None:
        target = LocalDirTarget(Path(local_dir).expanduser())
    else:
        target = CacheTarget(repo_cache_folder(_cache_root(cache_dir), repo_id, repo_type), commit)
    # Validate every destination before the first byte moves (a bad name aborts everything).
    reserved = "/".join(STATE_DIR) + "/"
    for f in wanted:
        safe_join(target.root, f.path)
        target.partial_path(f)
        if isinstance(target, LocalDirTarget) and (f.path + "/").startswith(reserved):
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
    return target


def _record_download(target: Target, result: DownloadResult, repo_type: str, endpoint: str) -> None:
    """Write the branch ref (cache) and the records a later offline run serves from."""
    commit, rev = result.commit, result.revision
    if isinstance(target, CacheTarget):
        if not _COMMIT_RE.match(rev):
            ref = safe_join(target.repo_folder / "refs", rev)
            atomic_write_text(ref, commit)
    state = {"repo_id": result.repo_id, "repo_type": repo_type, "revision": rev, "commit": commit,
             "endpoint": endpoint, "files": [r.path for r in result.files], "complete": True}
    atomic_write_json(target.state_dir / f"download-{commit}.json", state)
    atomic_write_json(target.state_dir / f"download-rev-{_slug(rev)}.json", state)


def _detect(result: DownloadResult, repo_type: str, presets: Presets | None) -> None:
    """Family / format detection and the presets that use it (models only: datasets are not checkpoints)."""
    if repo_type == "model":
        result.info = detect_checkpoint(result.path)
        if presets is not None:
            result.configs = presets(result.info, result.repo_id)


def _slug(rev: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", rev)


def _fetch_all(repo_id: str, commit: str, endpoint: str, token: str | bool | None, retries: int,
               retry_wait: float, quiet: bool, err_console: Console, wanted: list[RemoteFile],
               target: Target, repo_type: str = "model") -> list[FileRecord]:
    """Every wanted file present and verified in ``target``, one writer at a time, with progress bars."""
    with exclusive_lock(target.state_dir / "lock", target.root):
        check_free_space(wanted, target)
        manifest = Manifest(target.state_dir / "verified.json")
        return _fetch_each(repo_id, commit, endpoint, token, retries, retry_wait, quiet, err_console,
                           wanted, target, manifest, repo_type)


def _fetch_each(repo_id: str, commit: str, endpoint: str, token: str | bool | None, retries: int,
                retry_wait: float, quiet: bool, err_console: Console, wanted: list[RemoteFile],
                target: Target, manifest: Manifest, repo_type: str) -> list[FileRecord]:
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
        transfer = FileTransfer(repo_id=repo_id, commit=commit, endpoint=endpoint, token=token,
                             retries=retries, retry_wait=retry_wait, progress=progress, repo_type=repo_type)
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


def _place_one(entry: RemoteFile, target: Target, manifest: Manifest, transfer: FileTransfer,
               progress: Progress, quiet: bool, err_console: Console) -> FileRecord:
    """Make ``entry`` present and verified in ``target``: trust the manifest, re-hash a file of the
    right size, or download (resuming partial bytes)."""
    final = target.complete_path(entry)
    key = final.relative_to(target.state_dir.parent if isinstance(target, CacheTarget)
                            else target.root).as_posix()
    rec = FileRecord(path=entry.path, size=entry.size, hash_kind=entry.hash_kind,
                     hash=entry.expected_hash, status="present")
    if final.is_file() and not final.is_symlink():
        if manifest.is_verified(key, final, entry):
            target.publish(entry)
            return rec
        if final.stat().st_size == entry.size:
            task = progress.add_task(f"verify {entry.path}", total=entry.size)
            digest = hash_file(final, entry,
                                on_bytes=lambda n, t=task: progress.advance(t, n)).hexdigest()
            progress.remove_task(task)
            if digest == entry.expected_hash:
                manifest.mark(key, final, entry)
                target.publish(entry)
                return rec
        if not quiet:
            err_console.print(f"note: replacing {entry.path}: it differs from the hub copy", markup=False)
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
                    cache_dir: str | os.PathLike[str] | None, repo_type: str = "model",
                    presets: Presets | None = None, *, filters: tuple[Sequence[str] | None, Sequence[str] | None,
                                                                      bool] = (None, None, False)) -> DownloadResult:
    """HF_HUB_OFFLINE: serve an earlier complete download of the same repo/revision, or fail clearly. ``filters``
    (include, exclude, allow_pickle) choose among its files as they choose among the hub's listing online."""
    state_file: Path | None = None
    if local_dir is not None:
        state_file = Path(local_dir).expanduser().joinpath(*STATE_DIR, f"download-rev-{_slug(rev)}.json")
        root = Path(local_dir).expanduser()
    else:
        folder = repo_cache_folder(_cache_root(cache_dir), repo_id, repo_type)
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
    files, skipped_pickle = _wanted_paths(list(state.get("files", [])), *filters,
                                          where=f"the earlier download of {repo_id}@{rev} (HF_HUB_OFFLINE is set)")
    missing = [p for p in files if not safe_join(path, p).exists()]
    if missing:
        raise HubError(f"HF_HUB_OFFLINE is set and the earlier download in {path} lacks {missing[:5]}.",
                       fix="Unset HF_HUB_OFFLINE and run the download again to complete it.")
    result = DownloadResult(repo_id=repo_id, requested_repo_id=requested, revision=rev, commit=commit,
                            path=path, offline=True, skipped_pickle=skipped_pickle,
                            files=[FileRecord(p, safe_join(path, p).stat().st_size, "", "", "present") for p in files])
    _detect(result, repo_type, presets)
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
        f"{result.repo_id} @ {result.revision} (commit {result.commit[:12]})"  # printed with markup off
        + ("  (offline: earlier download)" if result.offline else ""),
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
    if not uses and not compatible and info is not None and result.configs:
        lines.append("  configs:     no preset in configs/ uses this model family")
    console.print("\n".join(lines), markup=False)  # paths and names are the user's: never rich markup
