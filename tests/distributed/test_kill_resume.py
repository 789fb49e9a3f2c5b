"""SIGKILL a 2-process run mid-training, resume it, and get the uninterrupted run's numbers.

The kill lands wherever it lands (during an iteration, or while a checkpoint is being written): the
checkpoint folder is written atomically and ``latest`` moves only after it is complete, and every random
stream is a function of (seed, iteration), so the resumed run must repeat the uninterrupted run exactly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launcher import free_port, run_vlarl

ARGS = ["--config", "toy_reach_ppo", "runner.val_check_interval=-1", "env.train.total_num_envs=16",
        "actor.global_batch_size=32", "actor.micro_batch_size=8", "runner.max_epochs=6", "runner.save_interval=1",
        "algorithm.update_epoch=60"]  # ~1 s per iteration, so the kill lands inside the run


def _rows(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_sigkill_then_resume_repeats_the_uninterrupted_run(tmp_path: Path) -> None:
    full, cut = tmp_path / "full", tmp_path / "cut"
    out = run_vlarl("rl-train", *ARGS, f"runner.logger.log_path={full}", "--nproc-per-node", "2",
                    "--master-port", "{port}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    cmd = [sys.executable, "-m", "vlarl_cli.cli.main", "rl-train", *ARGS, f"runner.logger.log_path={cut}",
           "--nproc-per-node", "2", "--master-port", str(free_port())]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 300
    while not (cut / "checkpoints" / "global_step_2").is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # launcher and both ranks, without warning
    proc.wait(timeout=60)
    assert (cut / "checkpoints" / "global_step_2").is_dir()
    assert not (cut / "checkpoints" / "global_step_6").exists()  # it really was cut short

    out = run_vlarl("rl-train", *ARGS, f"runner.logger.log_path={cut}", "--resume", "auto", "--nproc-per-node", "2",
                    "--master-port", "{port}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "resumed from" in out.stdout
    a, b = _rows(full), _rows(cut)
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5, 6]
    for ra, rb in zip(a, b, strict=True):
        for key, value in ra.items():
            if key.startswith(("train/", "rollout/", "env/")):
                assert rb[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (ra["step"], key)
