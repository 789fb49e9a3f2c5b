"""The suite's CPU kernels are pinned (tests/conftest.py): without the pin an AVX-512 CPU rounds the committed
fixtures' comparisons past their tolerances, so a pin that silently stopped working would show up there as
drift. This checks the pin itself, in this process and in a process a test starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

NATIVE = os.environ.get("VLARL_TEST_NATIVE_KERNELS") == "1"
PROBE = "import torch; print(torch.backends.cpu.get_cpu_capability())"


@pytest.mark.skipif(NATIVE, reason="VLARL_TEST_NATIVE_KERNELS=1: the suite runs on the CPU's own kernels")
def test_torch_runs_no_avx512_kernels_here_or_in_a_child_process() -> None:
    here = torch.backends.cpu.get_cpu_capability()
    child = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.strip()
    assert "AVX512" not in here, here
    assert child == here
    # oneDNN reads its own variable when it first runs; the pin must reach it the same way
    assert os.environ["DNNL_MAX_CPU_ISA"] == "AVX2"


def test_a_plugin_that_imports_torch_first_is_named_not_run_unpinned(tmp_path: Path) -> None:
    """torch loaded before tests/conftest.py could pin it: pytest stops with the reason and the way out."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA", "VLARL_TEST_NATIVE_KERNELS")}
    code = "import sys, torch, pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', sys.argv[1]]))"
    test = os.path.join(os.path.dirname(__file__), "test_kernel_pin.py")
    out = subprocess.run([sys.executable, "-c", code, test], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode != 0
    assert "must run before torch is imported" in out.stdout + out.stderr
    assert "VLARL_TEST_NATIVE_KERNELS=1" in out.stdout + out.stderr
