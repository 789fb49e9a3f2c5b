"""Shared by every script under benchmarks/: the ``--smoke`` size and the machine printed beside the figures.

A benchmark's figures mean nothing without the machine that produced them, and on a shared machine the
load of other jobs changes them several-fold; so every script ends with :func:`emit`, which prints its one
JSON line with ``machine``: versions, the CPU model and the instruction set of torch's CPU kernels (AVX2 and
AVX-512 kernels differ in speed and in float rounding), core count (``os.cpu_count``, the affinity mask, the
cgroup quota, this process's CPU budget) and the load average at the start and at the end of the run.

``--smoke`` runs the same code path at a size of seconds (``tests/benchmarks/test_smoke.py`` runs every
script that way, so none rots); its figures are not measurements (``"smoke": true`` in the JSON).

Scripts import it as ``from _bench import ...`` (``python benchmarks/x.py`` puts benchmarks/ first on the path).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any

#: Distributions whose versions decide the figures (those not installed are reported as such).
VERSIONED = ("vlarl", "torch", "numpy", "mujoco", "robosuite", "libero", "mani-skill", "sapien", "lerobot")
_START_LOAD = os.getloadavg()


def add_smoke(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path at a size of seconds (CI); the figures are not measurements")


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else (platform.processor() or "unknown")


def _torch_kernels() -> str:
    """The instruction set torch's CPU kernels run on here (ATEN_CPU_CAPABILITY can lower it)."""
    if "torch" not in sys.modules:  # not loaded by this benchmark: loading it only to ask would cost seconds
        return "torch not loaded"
    return str(sys.modules["torch"].backends.cpu.get_cpu_capability())


def machine() -> dict[str, Any]:
    """Versions, cores and load average (1, 5, 15 min) at the start of the process and now."""
    try:  # a reference venv (benchmarks/lerobot_loader.py) may not have vlarl
        from vlarl_cli.distributed.cpu_budget import usable_cores

        cores = usable_cores()
        affinity, quota, count = cores.affinity, cores.quota, cores.count
    except ImportError:
        affinity, quota, count = len(os.sched_getaffinity(0)), None, None
    return {
        "python": platform.python_version(), "platform": platform.platform(),
        "versions": {name: _version(name) for name in VERSIONED},
        "cpu_model": _cpu_model(), "torch_cpu_kernels": _torch_kernels(),
        "cpu_count": os.cpu_count(), "affinity_cpus": affinity, "cgroup_cpu_quota": quota, "rank_cores": count,
        "load_avg_start": [round(x, 2) for x in _START_LOAD],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
    }


def emit(result: dict[str, Any], *, smoke: bool = False) -> None:
    """Print the benchmark's one JSON line, with ``smoke`` and ``machine`` beside its figures."""
    print(json.dumps({**result, "smoke": smoke, "machine": machine()}), flush=True)


def skipped(benchmark: str, why: str, *, smoke: bool = False) -> None:
    """A part that cannot run here (a reference venv or package missing): said in the JSON and on stderr."""
    print(f"{benchmark}: {why}", file=sys.stderr, flush=True)
    emit({"benchmark": benchmark, "skipped": why}, smoke=smoke)
