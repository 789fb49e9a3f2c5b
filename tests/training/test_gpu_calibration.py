"""``--dry-run``'s memory plan against the peaks measured on a GPU (docs/gpu): within 15% for every family
measured with the current attention layout (benchmarks/gpu_truth.py's run of 2026-11-28 on an H200).

The first run of that day is not used: pi0 then ran the math attention kernel (grouped-query SDPA with a mask),
which the code no longer does on CUDA. A new GPU run that changes a peak updates ``MEASURED``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "docs" / "gpu" / "gpu_truth_2026-11-28_run2.json"


@pytest.fixture(scope="module")
def gpu_truth() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_truth", ROOT / "benchmarks" / "gpu_truth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_truth"] = module
    spec.loader.exec_module(module)
    return module


def _measured() -> dict[str, dict]:
    parts = json.loads(MEASURED.read_text())["parts"]
    return {p.split(":", 1)[1]: r["update"] for p, r in parts.items()
            if p.startswith("family:") and (r.get("update") or {}).get("peak_bytes")}


def test_the_gpu_run_measured_four_families() -> None:
    assert set(_measured()) == {"pi0", "pi05", "gr00t_n15", "gr00t_n16"}  # OpenVLA-OFT: out of memory (docs/gpu)


@pytest.mark.parametrize("family", ["pi0", "pi05", "gr00t_n15", "gr00t_n16"])
def test_dry_run_is_within_15_percent_of_the_measured_peak(gpu_truth: ModuleType, family: str) -> None:
    update = _measured()[family]
    predicted = gpu_truth._prediction(gpu_truth._family_config(family, smoke=False), update["micro_batch"])
    ratio = update["peak_bytes"] / predicted["predicted_bytes"]
    assert 0.85 <= ratio <= 1.15, (family, ratio, update, predicted)
