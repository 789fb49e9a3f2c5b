"""`vlarl download` under faults a user meets: Ctrl-C mid transfer, a file-size limit (EFBIG), an endpoint
answering HTML. Each ends with one paragraph and the documented exit code, and a re-run completes.
"""

from __future__ import annotations

import http.server
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiny_repo import REPO_ID, tiny_repo_files

FILES = tiny_repo_files()
MODEL = "model.safetensors"


def _wait_for(path: Path, size: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.stat().st_size == size:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {size} bytes")


def _as_in_a_terminal() -> None:
    """The child starts with SIGINT at its default, as a command typed in a terminal does. A test run started
    in the background by a non-interactive shell inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt: Ctrl-C could not be tested there."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_mid_transfer_exits_130_keeps_the_partial_and_a_rerun_completes(hub, run_download, tmp_path):
    out = tmp_path / "out"
    size = len(FILES[MODEL])
    hub.stall_at[MODEL] = size // 2
    proc = subprocess.Popen([sys.executable, "-c", run_download.runner, "download", REPO_ID, "--local-dir", str(out)],
                            env=run_download.env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_as_in_a_terminal)
    try:
        assert hub.stalled.wait(timeout=180)
        partial = out / ".cache" / "vlarl" / "partial" / (MODEL + ".part")
        _wait_for(partial, size // 2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)  # seconds on an idle machine; a loaded CI machine once took > 30
    finally:
        if proc.poll() is None:
            proc.kill()
        hub.release_stall.set()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Interrupted" in err and "run the same command again" in err
    assert partial.read_bytes() == FILES[MODEL][: size // 2]  # what arrived is kept
    del hub.stall_at[MODEL]
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / MODEL).read_bytes() == FILES[MODEL]


# Partial files stop growing at LIMIT bytes with EFBIG, as on a FAT32 disk past 4 GiB or under `ulimit -f`.
# (RLIMIT_FSIZE itself is not enforced in every sandbox, so the limit is injected at open().)
_EFBIG_AT = r"""
import builtins, errno
LIMIT = {limit}
_open = builtins.open
class _Capped:
    def __init__(self, fh, path):
        self._fh, self._path = fh, path
    def write(self, data):
        if self._fh.tell() + len(data) > LIMIT:
            raise OSError(errno.EFBIG, "File too large", self._path)
        return self._fh.write(data)
    def __getattr__(self, name):
        return getattr(self._fh, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._fh.__exit__(*exc)
def capped_open(file, mode="r", *args, **kwargs):
    fh = _open(file, mode, *args, **kwargs)
    return _Capped(fh, str(file)) if str(file).endswith(".part") and ("a" in mode or "w" in mode) else fh
builtins.open = capped_open
"""


def test_file_too_large_is_one_paragraph_and_a_rerun_completes(hub, run_download, tmp_path):
    out = tmp_path / "out"
    runner = _EFBIG_AT.format(limit=len(FILES[MODEL]) // 2) + run_download.runner
    cmd = [sys.executable, "-c", runner, "download", REPO_ID, "--local-dir", str(out)]
    proc = subprocess.run(cmd, env=run_download.env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "larger than this file system" in proc.stderr and "ulimit -f" in proc.stderr
    assert not (out / MODEL).exists()  # never a truncated file under the final name
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / MODEL).read_bytes() == FILES[MODEL]


class _HtmlHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><html><body>Sign in to the proxy</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def html_endpoint() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HtmlHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_endpoint_answering_html_is_named(run_download, tmp_path, html_endpoint):
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "out"), extra_env={"HF_ENDPOINT": html_endpoint})
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "not a Hugging Face hub" in res.stderr and "HF_ENDPOINT" in res.stderr
    assert not (tmp_path / "out" / MODEL).exists()
