"""One small real evaluation through the CLI, shared by the LIBERO tests of this folder.

2 tasks x 2 trials of libero_spatial with the tiny pi0 policy of the quickstart config, 10 policy steps
after 2 settle steps, 128 px, 2 envs in 1 worker process; the first episode is also recorded live so
re-simulation can be compared with it frame for frame.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

EVAL_ARGS = ["eval", "--suite", "libero_spatial", "--config", "libero_tiny_ppo", "--tasks", "0,1", "--trials", "2",
             "--max-steps", "10", "--settle-steps", "2", "--num-envs", "2", "--num-workers", "1",
             "--resolution", "128", "--live-video", "1"]


@dataclass
class CliRun:
    out: Path
    returncode: int
    stdout: str
    stderr: str


def run_cli(args: list[str], cwd: Path, timeout: float = 600) -> CliRun:
    proc = subprocess.run([sys.executable, "-m", "vlarl_cli.cli.main", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    out = Path(args[args.index("--out") + 1]) if "--out" in args else cwd
    return CliRun(out, proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def eval_run(tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    root = tmp_path_factory.mktemp("eval")
    return run_cli([*EVAL_ARGS, "--out", str(root / "results")], cwd=root)
