"""W&B (offline) and SwanLab (offline) through MetricLogger, with the real packages: every metric name
arrives unchanged, a resumed run continues the same run id, and nothing reaches the network.

Each run happens in a subprocess whose HTTP(S) proxies and W&B base URL point at a local listener that
counts connections, and whose Python socket connects are audited (``sys.addaudithook``): the W&B service
is a Go binary, so the proxies catch what the audit hook cannot see. The files the trackers write are read
back: W&B's ``run-<id>.wandb`` is a LevelDB-style log of protobuf records (32 KiB blocks, 7-byte chunk
headers; the format W&B's old ``sdk/internal/datastore.py`` documented), SwanLab's ``run-<id>.swanlab`` is
read with SwanLab's own ``DataStoreReader``.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

# Names as the trainer logs them (RLinf's namespaces; the sinks must not rename anything)
METRICS = {
    1: {"train/actor/policy_loss": 0.5, "train/critic/value_loss": 2.0, "train/critic/explained_variance": 0.1,
        "env/success_once": 0.25, "env/return": 1.5, "time/generate_rollouts": 3.0, "eval/success_once": 0.5},
    2: {"train/actor/policy_loss": 0.25, "train/critic/value_loss": 1.0, "env/success_once": 0.5},
}
RESUMED = {3: {"train/actor/policy_loss": 0.125, "env/success_once": 0.75}}

_CHILD = textwrap.dedent("""
    import ipaddress, json, socket, sys

    def audit(event, args):
        if event == "socket.connect":
            address = args[1]
            host = address[0] if isinstance(address, tuple) else None
            if host is not None and not ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
                with open(sys.argv[2], "a") as out:
                    out.write(repr(address) + "\\n")
    sys.addaudithook(audit)

    from pathlib import Path
    from vlarl_cli.logging.sinks import MetricLogger

    job = json.loads(sys.argv[1])
    logger = MetricLogger.create(Path(job["run_dir"]), [job["backend"]], project="vlarl-test", name="trackers",
                                 config={"seed": 1}, run_ids=job["run_ids"], resume_step=job["resume_step"])
    for step, metrics in job["steps"].items():
        logger.log(metrics, step=int(step))
    ids = logger.run_ids()
    logger.close()
    print("RUN_IDS=" + json.dumps(ids))
""")


class _Listener:
    """A local TCP listener that counts the connections it accepts (and closes them)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def _run(tmp_path: Path, backend: str, steps: dict, run_ids: dict, resume_step: int | None) -> dict[str, str]:
    listener = _Listener()
    proxy = f"http://127.0.0.1:{listener.port}"
    outside = tmp_path / "outside_connections.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "SWANLAB_"))}
    env.update(WANDB_MODE="offline", SWANLAB_MODE="offline", WANDB_SILENT="true", WANDB_BASE_URL=proxy,
               HTTP_PROXY=proxy, HTTPS_PROXY=proxy, ALL_PROXY=proxy, http_proxy=proxy, https_proxy=proxy,
               NO_PROXY="", no_proxy="", WANDB_DIR=str(tmp_path), WANDB_CACHE_DIR=str(tmp_path / "wandb-cache"),
               WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"), SWANLAB_SAVE_DIR=str(tmp_path / "swanlab-home"),
               HOME=str(tmp_path / "home"))
    job = {"run_dir": str(tmp_path / "run"), "backend": backend, "steps": steps, "run_ids": run_ids,
           "resume_step": resume_step}
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(job), str(outside)], capture_output=True,
                             text=True, timeout=300, env=env, cwd=tmp_path)
    finally:
        listener.close()
    assert out.returncode == 0, out.stdout + out.stderr
    assert listener.connections == 0, f"{backend} made {listener.connections} connection(s) through the proxies"
    assert not outside.exists(), f"{backend} connected outside: {outside.read_text()}"
    line = [x for x in out.stdout.splitlines() if x.startswith("RUN_IDS=")][-1]
    return json.loads(line.removeprefix("RUN_IDS="))


def _wandb_records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, chunks = 7, []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a chunk header is zero padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunks.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # FULL, or LAST of FIRST/MIDDLE.../LAST
            record = pb.Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            yield record


def _wandb_history(run_file: Path) -> tuple[str, dict[int, dict[str, float]]]:
    run_id, history = None, {}
    for record in _wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_id = record.run.run_id
        elif kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            step = int(items.pop("_step"))
            history[step] = {k: v for k, v in items.items() if not k.startswith("_")}
    assert run_id is not None
    return run_id, history


def test_wandb_offline_logs_every_name_and_resume_keeps_the_run_id(tmp_path: Path) -> None:
    ids = _run(tmp_path, "wandb", METRICS, {}, None)
    runs = sorted((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and runs[0].name.endswith(ids["wandb"])
    run_id, history = _wandb_history(runs[0] / f"run-{ids['wandb']}.wandb")
    assert run_id == ids["wandb"]
    assert history == METRICS

    resumed = _run(tmp_path, "wandb", RESUMED, ids, resume_step=3)
    assert resumed == ids
    runs = sorted((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.name.endswith(ids["wandb"]) for r in runs)  # `wandb sync` joins them
    run_id, history = _wandb_history(runs[1] / f"run-{ids['wandb']}.wandb")
    assert run_id == ids["wandb"] and history == RESUMED


def _swanlab_history(run_file: Path) -> tuple[str, str, dict[int, dict[str, float]]]:
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    reader = DataStoreReader()
    reader.open(str(run_file))
    start, history = None, {}
    while (data := reader.scan()) is not None:
        record = Record()
        record.ParseFromString(data)
        if record.HasField("start"):
            start = record.start
        elif record.HasField("scalar"):
            history.setdefault(record.scalar.step, {})[record.scalar.key] = record.scalar.value.number
    assert start is not None
    return start.id, start.project, history


def test_swanlab_offline_logs_every_name_and_resume_keeps_the_run_id(tmp_path: Path) -> None:
    ids = _run(tmp_path, "swanlab", METRICS, {}, None)
    runs = sorted((tmp_path / "run").glob("run-*"))
    assert len(runs) == 1 and runs[0].name.endswith(ids["swanlab"])
    run_id, project, history = _swanlab_history(runs[0] / f"run-{ids['swanlab']}.swanlab")
    assert (run_id, project) == (ids["swanlab"], "vlarl-test")
    assert history == METRICS

    resumed = _run(tmp_path, "swanlab", RESUMED, ids, resume_step=3)
    assert resumed == ids
    runs = sorted((tmp_path / "run").glob("run-*"))
    assert len(runs) == 2 and all(r.name.endswith(ids["swanlab"]) for r in runs)
    run_id, _, history = _swanlab_history(runs[1] / f"run-{ids['swanlab']}.swanlab")
    assert run_id == ids["swanlab"] and history == RESUMED
