"""Run the `vlarl` CLI in a subprocess (single or multi-process through torch.distributed.run)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_vlarl(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``python -m vlarl_cli.cli.main *args``; an argument ``{port}`` becomes a free port (retried when
    another process takes it before the launcher binds it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for _ in range(3):
        launch = [a if a != "{port}" else str(free_port()) for a in args]
        out = subprocess.run([sys.executable, "-m", "vlarl_cli.cli.main", *launch], capture_output=True,
                             text=True, timeout=timeout, env=env)
        if "ddress already in use" not in out.stderr:
            break
    return out
