"""A loopback stand-in for the Hugging Face Hub API, for download tests (stdlib only).

It answers exactly what huggingface_hub 2.4.0 asks (REFERENCE.md section 6; huggingface_hub
``hf_api.py``/``file_download.py``/``utils/_http.py``):

* ``GET /api/models/{org}/{name}[/revision/{rev}]`` -> ``{"id", "sha", "gated", "private", "siblings"}``
* ``GET /api/models/{org}/{name}/tree/{rev}?recursive=..`` -> ``[{"type": "file", "path", "size",
  "oid" (git blob sha1), "lfs": {"oid" (sha256), "size", "pointerSize"}}, {"type": "directory", ...}]``
* the same under ``/api/datasets/`` and ``/datasets/{org}/{name}/resolve/`` for dataset repositories
  (``add_repo(..., repo_type="dataset")``); a repository asked for under the other type is not found.
* ``HEAD|GET /{org}/{name}/resolve/{rev}/{path}``: small files answered directly with ``ETag`` (git
  sha1) and ``X-Repo-Commit``; LFS files with a 302 to a second "CDN" server on another port and the
  ``X-Linked-Size`` / ``X-Linked-Etag`` headers the client reads from the redirect.
* ``Range: bytes=a-`` / ``bytes=a-b`` on both servers -> 206 + ``Content-Range``.
* Errors carry the ``X-Error-Code`` header the client maps to its exception classes:
  ``RepoNotFound`` (404), ``RevisionNotFound`` (404), ``EntryNotFound`` (404), ``GatedRepo`` (403).

Fault injection (all per file path): ``cut_at`` (every transfer of the file stops at that absolute
byte and the connection is closed), ``cut_once`` (only the first transfer is cut), ``corrupt`` (right
size, wrong bytes), ``stall_at`` (send up to a byte, then hold the connection until
``release_stall`` is set), ``ignore_range`` (answer 200 with the whole file), ``misplaced_range`` (206 for the wrong bytes),
``extra_entries``
(additional raw listing entries, e.g. a malicious ``../evil``).

Bounded: binds 127.0.0.1 only, on a free port; handler sockets time out after 10 s; a stalled
transfer waits at most 30 s; every request is logged in ``server.log`` for assertions.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_THRESHOLD = 1024  # files at least this big are "LFS" files (the real hub's rule is by .gitattributes)


def git_sha1(data: bytes) -> str:
    h = hashlib.sha1(b"blob %d\x00" % len(data))
    h.update(data)
    return h.hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fake_commit(seed: str) -> str:
    return hashlib.sha1(seed.encode()).hexdigest()


@dataclass
class FakeRepo:
    """A model (or dataset) repository: ``refs`` (branch/tag -> commit) and ``commits`` (commit -> {path: bytes})."""

    repo_id: str
    commits: dict[str, dict[str, bytes]]
    refs: dict[str, str]
    gated: bool = False
    repo_type: str = "model"
    extra_entries: list[dict[str, Any]] = field(default_factory=list)

    def resolve(self, rev: str) -> str | None:
        if rev in self.refs:
            return self.refs[rev]
        return rev if rev in self.commits else None


@dataclass
class LogEntry:
    server: str  # "hub" or "cdn"
    method: str
    path: str
    range: str | None
    status: int = 0
    bytes_sent: int = 0


class HubServer:
    """Start with :meth:`start`, stop with :meth:`stop`; ``endpoint`` is the HF_ENDPOINT value."""

    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.cut_at: dict[str, int] = {}
        self.cut_once: set[str] = set()
        self.corrupt: set[str] = set()
        self.stall_at: dict[str, int] = {}
        self.release_stall = threading.Event()
        self.stalled = threading.Event()
        self.ignore_range = False
        self.fail_status: dict[str, list[int]] = {}  # path -> statuses to answer first (e.g. [503])
        self.misplaced_range = False  # answer a Range with 206 for bytes 0-... (a broken proxy)
        self.gated_status = 403  # the real hub answers 401 or 403, always with X-Error-Code: GatedRepo
        self.log: list[LogEntry] = []
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self.endpoint = ""
        self.cdn = ""

    # -- repository setup ------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes], *, gated: bool = False,
                 extra_revisions: dict[str, dict[str, bytes]] | None = None, repo_type: str = "model") -> FakeRepo:
        """Add a repo whose ``main`` holds ``files``; ``extra_revisions`` adds branches/tags."""
        main = fake_commit(repo_id + "main")
        commits = {main: dict(files)}
        refs = {"main": main}
        for name, content in (extra_revisions or {}).items():
            c = fake_commit(repo_id + name)
            commits[c] = dict(content)
            refs[name] = c
        repo = FakeRepo(repo_id, commits, refs, gated=gated, repo_type=repo_type)
        self.repos[repo_id] = repo
        return repo

    def blob(self, digest: str) -> bytes | None:
        for repo in self.repos.values():
            for files in repo.commits.values():
                for data in files.values():
                    if len(data) >= LFS_THRESHOLD and sha256(data) == digest:
                        return data
        return None

    def served(self, server: str, method: str, suffix: str) -> list[LogEntry]:
        """Log entries of one server/method whose path ends with ``suffix``."""
        return [e for e in self.log if e.server == server and e.method == method and e.path.endswith(suffix)]

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> HubServer:
        hub = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self, "hub"))
        cdn = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self, "cdn"))
        for s in (hub, cdn):
            s.daemon_threads = True
            t = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            t.start()
            self._servers.append(s)
            self._threads.append(t)
        self.endpoint = f"http://127.0.0.1:{hub.server_address[1]}"
        self.cdn = f"http://127.0.0.1:{cdn.server_address[1]}"
        return self

    def stop(self) -> None:
        self.release_stall.set()
        for s in self._servers:
            s.shutdown()
            s.server_close()
        for t in self._threads:
            t.join(timeout=5)


_API_RE = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+)(/.*)?)?$")
_RESOLVE_RE = re.compile(r"^/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_CDN_RE = re.compile(r"^/cdn/([0-9a-f]{64})$")


def _make_handler(state: HubServer, server_name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            return

        # -- helpers -------------------------------------------------------------------------
        def _entry(self) -> LogEntry:
            e = LogEntry(server_name, self.command, urlsplit(self.path).path, self.headers.get("Range"))
            with state._lock:
                state.log.append(e)
            return e

        def _error(self, entry: LogEntry, status: int, code: str, message: str,
                   extra: dict[str, str] | None = None) -> None:
            body = json.dumps({"error": message}).encode()
            entry.status = status
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, entry: LogEntry, obj: Any) -> None:
            body = json.dumps(obj).encode()
            entry.status = 200
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send_file(self, entry: LogEntry, key: str, data: bytes, headers: dict[str, str]) -> None:
            """Serve ``data`` (with Range and fault injection); ``key`` is the repo path for knobs."""
            size = len(data)
            with state._lock:
                queued = state.fail_status.get(key)
                status_now = queued.pop(0) if queued else None
            if status_now is not None:
                self._error(entry, status_now, "Overloaded", "try again", {"Retry-After": "0"})
                return
            if key in state.corrupt:
                data = bytes(b ^ 0xFF for b in data[:16]) + data[16:]  # same size, different content
            start, end = 0, size - 1
            rng = self.headers.get("Range")
            status = 200
            if rng and not state.ignore_range:
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
                if m is None:
                    self._error(entry, 416, "RangeNotSatisfiable", "bad range")
                    return
                start = 0 if state.misplaced_range else int(m.group(1))
                end = int(m.group(2)) if m.group(2) else size - 1
                if start >= size:
                    self._error(entry, 416, "RangeNotSatisfiable", "range start beyond end",
                                {"Content-Range": f"bytes */{size}"})
                    return
                status = 206
            body = data[start:end + 1]
            entry.status = status
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(body)))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            if self.command == "HEAD":
                return
            limit = len(body)
            with state._lock:
                if key in state.cut_at:
                    limit = max(0, min(limit, state.cut_at[key] - start))
                elif key in state.cut_once:
                    state.cut_once.discard(key)
                    limit = len(body) // 2
            stall = state.stall_at.get(key)
            if stall is not None:
                limit = min(limit, max(0, stall - start))
            self.wfile.write(body[:limit])
            self.wfile.flush()
            entry.bytes_sent = limit
            if stall is not None and limit < len(body):
                state.stalled.set()
                state.release_stall.wait(timeout=30)
            if limit < len(body):
                self.close_connection = True  # body shorter than Content-Length: client sees a cut

        # -- routes --------------------------------------------------------------------------
        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            entry = self._entry()
            path = urlsplit(self.path).path
            if server_name == "cdn":
                m = _CDN_RE.match(path)
                data = state.blob(m.group(1)) if m else None
                if data is None:
                    self._error(entry, 404, "EntryNotFound", "no such blob")
                    return
                key = next((p for r in state.repos.values() for fs in r.commits.values()
                            for p, d in fs.items() if d is data), "")
                self._send_file(entry, key, data, {"ETag": f'"{m.group(1)}"'})
                return
            m = _API_RE.match(path)
            if m:
                self._api(entry, m)
                return
            m = _RESOLVE_RE.match(path)
            if m:
                self._resolve(entry, m)
                return
            self._error(entry, 404, "NotFound", "unknown route")

        def _repo_rev(self, entry: LogEntry, repo_id: str, rev: str, repo_type: str = "model"
                      ) -> tuple[FakeRepo, str] | None:
            repo = state.repos.get(repo_id)
            if repo is None or repo.repo_type != repo_type:
                self._error(entry, 404, "RepoNotFound", "Repository not found")
                return None
            commit = repo.resolve(rev)
            if commit is None:
                self._error(entry, 404, "RevisionNotFound", "Invalid rev id: " + rev)
                return None
            return repo, commit

        def _api(self, entry: LogEntry, m: re.Match[str]) -> None:
            repo_type = "dataset" if m.group(1) == "datasets" else "model"
            repo_id, kind, rev = m.group(2), m.group(3), unquote(m.group(4) or "main")
            found = self._repo_rev(entry, repo_id, rev, repo_type)
            if found is None:
                return
            repo, commit = found
            files = repo.commits[commit]
            if kind in (None, "revision"):
                self._json(entry, {
                    "_id": "x", "id": repo.repo_id, "modelId": repo.repo_id, "sha": commit, "private": False,
                    "gated": "manual" if repo.gated else False, "disabled": False,
                    "siblings": [{"rfilename": p} for p in sorted(files)],
                })
                return
            listing: list[dict[str, Any]] = []
            folders: set[str] = set()
            for p in sorted(files):
                data = files[p]
                parts = p.split("/")
                for i in range(1, len(parts)):
                    folders.add("/".join(parts[:i]))
                item: dict[str, Any] = {"type": "file", "oid": git_sha1(data), "size": len(data), "path": p}
                if len(data) >= LFS_THRESHOLD:
                    # For an LFS file the git blob is the pointer file; its oid is not the content's.
                    item["oid"] = git_sha1(b"pointer " + sha256(data).encode())
                    item["lfs"] = {"oid": sha256(data), "size": len(data), "pointerSize": 134}
                listing.append(item)
            listing += [{"type": "directory", "oid": fake_commit(f), "size": 0, "path": f} for f in folders]
            listing += repo.extra_entries
            self._json(entry, listing)

        def _resolve(self, entry: LogEntry, m: re.Match[str]) -> None:
            repo_type = "dataset" if m.group(1) else "model"
            repo_id, rev, fpath = m.group(2), unquote(m.group(3)), unquote(m.group(4))
            found = self._repo_rev(entry, repo_id, rev, repo_type)
            if found is None:
                return
            repo, commit = found
            if repo.gated and "authorization" not in {k.lower() for k in self.headers}:
                self._error(entry, state.gated_status, "GatedRepo",
                            "Access to model is restricted. You must have access to it and be authenticated.")
                return
            data = repo.commits[commit].get(fpath)
            if data is None:
                self._error(entry, 404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit})
                return
            common = {"X-Repo-Commit": commit}
            if len(data) >= LFS_THRESHOLD:
                digest = sha256(data)
                entry.status = 302
                self.send_response(302)
                self.send_header("Location", f"{state.cdn}/cdn/{digest}")
                self.send_header("X-Repo-Commit", commit)
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("X-Linked-Etag", f'"{digest}"')
                self.send_header("ETag", f'"{git_sha1(data)}"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._send_file(entry, fpath, data, {**common, "ETag": f'"{git_sha1(data)}"'})

    return Handler
