"""Fixtures for checkpoint tests: a loopback hub server, a tiny pi0.5-style repository, a CLI runner.

The download always runs in a subprocess with ``HF_ENDPOINT`` pointing at the loopback server:
huggingface_hub reads its environment at import time (REFERENCE.md section 6), and this also exercises
the real ``vlarl download`` command line path (exit code 2 + one paragraph for user errors).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hub_server import HubServer
from tiny_repo import REPO_ID, tiny_repo_files

# Run the real CLI entry point; until every subcommand module of main.py exists, fall back to an app
# holding only `download` with the same error contract (VlarlError -> one paragraph, exit code 2).
_RUNNER = r"""
import sys
try:
    from vlarl_cli.cli.main import main
except ImportError:
    import typer
    from vlarl_cli.cli import download as _d
    from vlarl_cli.errors import VlarlError
    _app = typer.Typer(pretty_exceptions_enable=False)
    _app.command("download")(_d.command)
    _app.command("unused")(lambda: None)
    def main():
        try:
            _app(standalone_mode=False)
        except VlarlError as err:
            print(f"error: {err.problem}\nfix: {err.fix}", file=sys.stderr)
            sys.exit(2)
main()
"""


@pytest.fixture
def hub() -> Iterator[HubServer]:
    server = HubServer().start()
    server.add_repo(REPO_ID, tiny_repo_files(),
                    extra_revisions={"v1": {"config.json": b'{"pi05": true, "v": 1}',
                                            "README.md": b"old\n", "empty.txt": b""}})
    try:
        yield server
    finally:
        server.stop()


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_download(hub: HubServer, tmp_path: Path):
    """Run ``vlarl download ARGS`` in a subprocess against ``hub``; returns CliResult."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update({
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "NO_COLOR": "1",
        "COLUMNS": "200",
    })

    def run(*args: str, extra_env: dict[str, str] | None = None, timeout: float = 60) -> CliResult:
        proc = subprocess.run([sys.executable, "-c", _RUNNER, "download", *args],
                              env={**env, **(extra_env or {})}, capture_output=True, text=True,
                              timeout=timeout, cwd=tmp_path)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    run.env = env  # type: ignore[attr-defined]
    run.runner = _RUNNER  # type: ignore[attr-defined]
    return run
