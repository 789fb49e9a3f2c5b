"""`vlarl download` end to end against the loopback hub (tests/checkpoints/hub_server.py).

Each test runs the real command in a subprocess with HF_ENDPOINT set (see conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import git_sha1, sha256
from tiny_repo import REPO_ID, TINY_PARAMS, tiny_repo_files

FILES = tiny_repo_files()
MODEL = "model.safetensors"


def _no_traceback(res) -> None:
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)


def _tree(root: Path) -> dict[str, bytes]:
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not rel.startswith(".cache/"):
            out[rel] = p.read_bytes()
    return out


def test_download_local_dir_verifies_and_summarises(hub, run_download, tmp_path):
    out = tmp_path / "out"
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    expected = {k: v for k, v in FILES.items() if not k.endswith(".bin")}
    assert _tree(out) == expected  # exact bytes, pickle file skipped
    # Summary: family/variant/format from tensor names, parameter count from the safetensors header.
    assert "family:      pi0 (pi05), format openpi" in res.stdout
    assert f"parameters:  {TINY_PARAMS}\n" in res.stdout
    assert "physical-intelligence/libero/norm_stats.json" in res.stdout
    assert "big.bin" in res.stdout and "--allow-pickle" in res.stdout
    # The client protocol: revision info, tree listing, HEAD + GET per file; LFS bytes come from the CDN.
    commit = hub.repos[REPO_ID].refs["main"]
    assert hub.served("hub", "GET", f"/api/models/{REPO_ID}/revision/main")
    assert hub.served("hub", "GET", f"/api/models/{REPO_ID}/tree/{commit}")
    assert len(hub.served("hub", "HEAD", f"/resolve/{commit}/{MODEL}")) == 1
    assert len(hub.served("cdn", "GET", f"/cdn/{sha256(FILES[MODEL])}")) == 1
    assert len(hub.served("hub", "GET", f"/resolve/{commit}/config.json")) == 1
    assert not hub.served("hub", "GET", "big.bin") and not hub.served("hub", "HEAD", "big.bin")
    # Telemetry is off: every request went to the API, /resolve or the CDN, nothing else.
    assert all(e.path.startswith(("/api/models/", "/cdn/")) or "/resolve/" in e.path for e in hub.log)


def test_second_run_transfers_nothing(hub, run_download, tmp_path):
    out = tmp_path / "out"
    assert run_download(REPO_ID, "--local-dir", str(out)).returncode == 0
    n_get = len([e for e in hub.log if e.method == "GET" and "/api/" not in e.path])
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    assert len([e for e in hub.log if e.method == "GET" and "/api/" not in e.path]) == n_get
    assert "4 present" in res.stdout and "0 bytes transferred" in res.stdout


def test_revision_and_filters(hub, run_download, tmp_path):
    res = run_download(REPO_ID, "--revision", "v1", "--local-dir", str(tmp_path / "v1"))
    assert res.returncode == 0, res.stderr
    assert _tree(tmp_path / "v1") == {"config.json": b'{"pi05": true, "v": 1}', "README.md": b"old\n",
                                      "empty.txt": b""}
    v1 = hub.repos[REPO_ID].refs["v1"]
    res = run_download(REPO_ID, "--revision", v1, "--local-dir", str(tmp_path / "sha"))
    assert res.returncode == 0, res.stderr
    assert _tree(tmp_path / "sha") == _tree(tmp_path / "v1")  # a commit id works like the tag
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "j"), "--include", "*.json",
                       "--exclude", "physical-intelligence/")
    assert res.returncode == 0, res.stderr
    assert set(_tree(tmp_path / "j")) == {"config.json"}
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "p"), "--include", "*.bin", "--allow-pickle")
    assert res.returncode == 0, res.stderr
    assert _tree(tmp_path / "p") == {"big.bin": FILES["big.bin"]}


def test_cache_layout(hub, run_download, tmp_path):
    res = run_download(REPO_ID)
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "hf_home" / "hub" / "models--acme--tiny-pi05"
    commit = hub.repos[REPO_ID].refs["main"]
    assert (folder / "refs" / "main").read_text() == commit
    snap = folder / "snapshots" / commit
    link = snap / MODEL
    assert link.is_symlink() and link.read_bytes() == FILES[MODEL]
    assert Path(os.path.realpath(link)) == (folder / "blobs" / sha256(FILES[MODEL])).resolve()
    small = snap / "physical-intelligence" / "libero" / "norm_stats.json"
    assert Path(os.path.realpath(small)).name == git_sha1(FILES["physical-intelligence/libero/norm_stats.json"])
    assert str(snap) in res.stdout
    # huggingface_hub itself (hence transformers and training.rl.resolve_model_path) finds it offline.
    code = "from huggingface_hub import snapshot_download as s; print(s('acme/tiny-pi05', local_files_only=True))"
    env = {**run_download.env, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == snap
    # Our own offline mode serves the cached snapshot too, without contacting the hub.
    hub.log.clear()
    res = run_download(REPO_ID, extra_env={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr
    assert "offline" in res.stdout and str(snap) in res.stdout and hub.log == []
    # ... choosing among its files with --include as online, and saying when the filters leave nothing
    jsons = sorted(p for p in FILES if p.endswith(".json"))
    res = run_download(REPO_ID, "--include", "*.json", extra_env={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr
    assert f"files:       {len(jsons)} ({len(jsons)} present)" in res.stdout and 0 < len(jsons) < len(FILES)
    res = run_download(REPO_ID, "--include", "*.onnx", extra_env={"HF_HUB_OFFLINE": "1"})
    _no_traceback(res)
    assert "Nothing to download from the earlier download of acme/tiny-pi05@main" in res.stderr
    assert "HF_HUB_OFFLINE is set" in res.stderr and "include=['*.onnx']" in res.stderr and hub.log == []


@pytest.mark.parametrize("gated_status", [401, 403])
def test_missing_repo_revision_and_gated(hub, run_download, tmp_path, gated_status):
    hub.gated_status = gated_status
    res = run_download("acme/nope", "--local-dir", str(tmp_path / "a"))
    _no_traceback(res)
    assert "acme/nope was not found" in res.stderr and "HF_TOKEN" in res.stderr

    res = run_download(REPO_ID, "--revision", "nope", "--local-dir", str(tmp_path / "b"))
    _no_traceback(res)
    assert "Revision 'nope' does not exist" in res.stderr

    hub.add_repo("acme/gated", {"config.json": b"{}"}, gated=True)
    res = run_download("acme/gated", "--local-dir", str(tmp_path / "c"))
    _no_traceback(res)
    assert "gated" in res.stderr and "HF_TOKEN" in res.stderr and "hf auth login" in res.stderr


def test_unreachable_and_offline(run_download, tmp_path):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "x"),
                       extra_env={"HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    _no_traceback(res)
    for word in ("Cannot reach", f"127.0.0.1:{port}", "HF_ENDPOINT", "HF_HUB_OFFLINE", "--local-dir"):
        assert word in res.stderr, res.stderr

    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "y"), extra_env={"HF_HUB_OFFLINE": "1"})
    _no_traceback(res)
    assert "HF_HUB_OFFLINE" in res.stderr and "--local-dir" in res.stderr

    # After a complete download, offline mode serves it without contacting the hub.
    assert run_download(REPO_ID, "--local-dir", str(tmp_path / "y")).returncode == 0
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "y"),
                       extra_env={"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert res.returncode == 0, res.stderr
    assert "offline" in res.stdout and "family:      pi0" in res.stdout


def test_connection_dropped_by_server_is_a_clear_error(run_download, tmp_path):
    """A server that accepts and hangs up surfaces in httpx as RemoteProtocolError (not an
    HfHubHTTPError nor OSError, REFERENCE.md s6); the user must still get one paragraph."""
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def hang_up() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.recv(65536)
            conn.close()

    t = threading.Thread(target=hang_up, daemon=True)
    t.start()
    try:
        port = srv.getsockname()[1]
        res = run_download(REPO_ID, "--local-dir", str(tmp_path / "x"),
                           extra_env={"HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    finally:
        stop.set()
        t.join(timeout=5)
        srv.close()
    _no_traceback(res)
    assert "RemoteProtocolError" in res.stderr and "HF_ENDPOINT" in res.stderr


def test_cache_mode_resume(hub, run_download, tmp_path):
    size = len(FILES[MODEL])
    hub.cut_at[MODEL] = size // 2
    assert run_download(REPO_ID, "--retries", "0").returncode == 2
    blobs = tmp_path / "hf_home" / "hub" / "models--acme--tiny-pi05" / "blobs"
    partial = blobs / f"{sha256(FILES[MODEL])}.vlarl-partial"
    assert partial.read_bytes() == FILES[MODEL][: size // 2]
    del hub.cut_at[MODEL]
    hub.log.clear()
    res = run_download(REPO_ID)
    assert res.returncode == 0, res.stderr
    assert [g.range for g in hub.served("cdn", "GET", "")] == [f"bytes={size // 2}-"]
    assert (blobs / sha256(FILES[MODEL])).read_bytes() == FILES[MODEL] and not partial.exists()


def test_interrupted_transfer_resumes_next_run(hub, run_download, tmp_path):
    out = tmp_path / "out"
    size = len(FILES[MODEL])
    cut = size // 3
    hub.cut_at[MODEL] = cut
    res = run_download(REPO_ID, "--local-dir", str(out), "--retries", "0")
    _no_traceback(res)
    assert "interrupted" in res.stderr and "Run the same command again" in res.stderr
    partial = out / ".cache" / "vlarl" / "partial" / (MODEL + ".part")
    assert partial.read_bytes() == FILES[MODEL][:cut]  # the received prefix is kept
    assert not (out / MODEL).exists()

    del hub.cut_at[MODEL]
    hub.log.clear()
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    gets = hub.served("cdn", "GET", f"/cdn/{sha256(FILES[MODEL])}")
    assert [(g.range, g.status, g.bytes_sent) for g in gets] == [(f"bytes={cut}-", 206, size - cut)]
    assert (out / MODEL).read_bytes() == FILES[MODEL]
    assert not partial.exists()
    assert "1 resumed" in res.stdout


def test_cut_within_one_run_is_retried_with_range(hub, run_download, tmp_path):
    hub.cut_once.add(MODEL)
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "o"), "--retries", "2")
    assert res.returncode == 0, res.stderr
    gets = hub.served("cdn", "GET", f"/cdn/{sha256(FILES[MODEL])}")
    half = len(FILES[MODEL]) // 2
    assert [(g.range, g.bytes_sent) for g in gets] == [(None, half), (f"bytes={half}-", len(FILES[MODEL]) - half)]
    assert (tmp_path / "o" / MODEL).read_bytes() == FILES[MODEL]


def test_transient_http_status_is_retried(hub, run_download, tmp_path):
    hub.fail_status[MODEL] = [503, 429]
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "o"), "--retries", "3")
    assert res.returncode == 0, res.stderr
    assert [g.status for g in hub.served("cdn", "GET", "")] == [503, 429, 200]
    assert (tmp_path / "o" / MODEL).read_bytes() == FILES[MODEL]
    hub.fail_status[MODEL] = [503, 503]
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "p"), "--retries", "1")
    _no_traceback(res)
    assert "HTTP 503" in res.stderr


@pytest.mark.parametrize("fault", ["ignore_range", "misplaced_range"])
def test_server_mishandling_range_restarts_file(hub, run_download, tmp_path, fault):
    out = tmp_path / "out"
    hub.cut_at[MODEL] = 100
    assert run_download(REPO_ID, "--local-dir", str(out), "--retries", "0").returncode == 2
    del hub.cut_at[MODEL]
    setattr(hub, fault, True)
    hub.log.clear()
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / MODEL).read_bytes() == FILES[MODEL]
    gets = [(g.range, g.status) for g in hub.served("cdn", "GET", "")]
    # 200 for the whole file is used as is; a 206 for the wrong bytes is dropped and asked again.
    assert gets == ([("bytes=100-", 200)] if fault == "ignore_range" else [("bytes=100-", 206), (None, 200)])


@pytest.mark.parametrize("path", [MODEL, "config.json"])
def test_corrupted_file_of_right_size_is_caught(hub, run_download, tmp_path, path):
    hub.corrupt.add(path)
    out = tmp_path / "out"
    res = run_download(REPO_ID, "--local-dir", str(out))
    _no_traceback(res)
    kind = "sha256" if path == MODEL else "git-sha1"
    assert f"{path} arrived corrupted: its {kind}" in res.stderr
    assert not (out / path).exists()
    assert not list((out / ".cache" / "vlarl" / "partial").rglob("*.part"))  # bad bytes deleted


def test_local_file_changed_on_disk_is_replaced(hub, run_download, tmp_path):
    out = tmp_path / "out"
    assert run_download(REPO_ID, "--local-dir", str(out)).returncode == 0
    damaged = bytearray(FILES[MODEL])
    damaged[-1] ^= 1
    (out / MODEL).write_bytes(bytes(damaged))  # same size, new mtime: manifest no longer trusts it
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / MODEL).read_bytes() == FILES[MODEL]
    assert "replacing model.safetensors" in res.stderr


@pytest.mark.parametrize("evil", ["../evil.txt", "a/../../evil.txt", "/tmp/evil.txt", "a//b", "a\\..\\b"])
def test_malicious_listing_writes_nothing(hub, run_download, tmp_path, evil):
    hub.repos[REPO_ID].extra_entries.append(
        {"type": "file", "oid": git_sha1(b"pwn"), "size": 3, "path": evil})
    out = tmp_path / "deep" / "out"
    res = run_download(REPO_ID, "--local-dir", str(out))
    _no_traceback(res)
    assert "unsafe file name" in res.stderr
    assert not (tmp_path / "deep" / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()
    assert not [e for e in hub.log if "/resolve/" in e.path]  # refused before any file request
    assert not out.exists() or not any(out.iterdir())


def test_listing_cannot_overwrite_our_records(hub, run_download, tmp_path):
    hub.add_repo("acme/sneaky", {"config.json": b"{}", ".cache/vlarl/verified.json": b"{}"})
    res = run_download("acme/sneaky", "--local-dir", str(tmp_path / "o"))
    _no_traceback(res)
    assert "download records" in res.stderr
    res = run_download("acme/sneaky", "--local-dir", str(tmp_path / "o"), "--exclude", ".cache/vlarl/*")
    assert res.returncode == 0, res.stderr


def test_renamed_repo(hub, run_download, tmp_path):
    hub.add_repo("RLinf/RLinf-Pi05-LIBERO-SFT", {"config.json": b"{}"})
    res = run_download("RLinf/RLinf-Pi05-SFT", "--local-dir", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert "RLinf/RLinf-Pi05-SFT is now published as RLinf/RLinf-Pi05-LIBERO-SFT" in res.stderr
    assert (tmp_path / "r" / "config.json").read_bytes() == b"{}"


def test_sigkill_mid_transfer_then_resume(hub, run_download, tmp_path):
    out = tmp_path / "out"
    size = len(FILES[MODEL])
    hub.stall_at[MODEL] = size // 2
    proc = subprocess.Popen([sys.executable, "-c", run_download.runner, "download", REPO_ID,
                             "--local-dir", str(out)], env=run_download.env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert hub.stalled.wait(timeout=180)
        partial = out / ".cache" / "vlarl" / "partial" / (MODEL + ".part")
        for _ in range(100):  # the client writes what it received; wait until it hit the disk
            if partial.exists() and partial.stat().st_size == size // 2:
                break
            import time

            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert partial.read_bytes() == FILES[MODEL][: size // 2]
    del hub.stall_at[MODEL]
    hub.release_stall.set()
    hub.log.clear()
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    gets = hub.served("cdn", "GET", f"/cdn/{sha256(FILES[MODEL])}")
    assert [g.range for g in gets] == [f"bytes={size // 2}-"]
    assert (out / MODEL).read_bytes() == FILES[MODEL]


def test_state_files_are_json(hub, run_download, tmp_path):
    out = tmp_path / "out"
    assert run_download(REPO_ID, "--local-dir", str(out)).returncode == 0
    commit = hub.repos[REPO_ID].refs["main"]
    state = json.loads((out / ".cache" / "vlarl" / f"download-{commit}.json").read_text())
    assert state["complete"] and state["commit"] == commit and state["repo_id"] == REPO_ID
    verified = json.loads((out / ".cache" / "vlarl" / "verified.json").read_text())
    assert verified[MODEL]["hash"] == sha256(FILES[MODEL])
    assert verified["config.json"]["hash"] == git_sha1(FILES["config.json"])


def test_stale_partial_with_wrong_bytes_is_refetched_from_zero(hub, run_download, tmp_path):
    out = tmp_path / "out"
    partial = out / ".cache" / "vlarl" / "partial" / (MODEL + ".part")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\x00" * 100)  # e.g. left by a power cut: right length so far, wrong content
    res = run_download(REPO_ID, "--local-dir", str(out))
    assert res.returncode == 0, res.stderr
    gets = hub.served("cdn", "GET", f"/cdn/{sha256(FILES[MODEL])}")
    assert [g.range for g in gets] == ["bytes=100-", None]  # resume tried, hash failed, fetched afresh
    assert (out / MODEL).read_bytes() == FILES[MODEL]
    assert "1 resumed" not in res.stdout


def test_second_concurrent_download_is_refused(hub, run_download, tmp_path):
    import fcntl

    out = tmp_path / "out"
    lock = out / ".cache" / "vlarl" / "lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write("4242")
        fh.flush()
        res = run_download(REPO_ID, "--local-dir", str(out))
    _no_traceback(res)
    assert "Another vlarl download (pid 4242)" in res.stderr
    assert run_download(REPO_ID, "--local-dir", str(out)).returncode == 0  # lock released with the holder


def test_free_space_check(tmp_path, monkeypatch):
    import shutil as _shutil
    from collections import namedtuple

    from vlarl_cli.checkpoints import transfer as tr
    from vlarl_cli.errors import HubError

    target = tr.LocalDirTarget(tmp_path)
    files = [tr.RemoteFile("a.bin", 1000, "0" * 64, "0" * 40), tr.RemoteFile("b", 500, None, "1" * 40)]
    (tmp_path / "b").write_bytes(b"x" * 500)  # complete already: not counted
    part = target.partial_path(files[0])
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 300)  # 700 bytes still missing
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(_shutil, "disk_usage", lambda p: usage(10**6, 0, 699))
    with pytest.raises(HubError, match="needs 700 bytes"):
        tr.check_free_space(files, target)
    monkeypatch.setattr(_shutil, "disk_usage", lambda p: usage(10**6, 0, 700))
    tr.check_free_space(files, target)  # exactly enough


def test_unwritable_target_is_a_clear_error(hub, run_download, tmp_path):
    (tmp_path / "afile").write_text("in the way")
    res = run_download(REPO_ID, "--local-dir", str(tmp_path / "afile" / "sub"))
    _no_traceback(res)
    assert "Cannot create the download folder" in res.stderr and "--local-dir" in res.stderr


def test_python_api_in_process(hub, tmp_path, monkeypatch):
    """download() as a library call: HF_ENDPOINT is read at call time, not at import time."""
    from vlarl_cli.checkpoints.hub import download

    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    res = download(REPO_ID, local_dir=tmp_path / "o", quiet=True, allow_pickle=True)
    assert res.commit == hub.repos[REPO_ID].refs["main"] and res.path == tmp_path / "o"
    assert sorted(r.path for r in res.files) == sorted(FILES)
    assert {r.status for r in res.files} == {"downloaded"} and res.bytes_transferred == sum(map(len, FILES.values()))
    assert res.info is not None and (res.info.family, res.info.format, res.info.variant) == ("pi0", "openpi", "pi05")
    assert res.info.num_parameters == TINY_PARAMS and res.info.pickle_files == ["big.bin"]
    again = download(REPO_ID, local_dir=tmp_path / "o", quiet=True, allow_pickle=True)
    assert {r.status for r in again.files} == {"present"} and again.bytes_transferred == 0
