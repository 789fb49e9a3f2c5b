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


def test_openvla_oft_on_the_measured_h200_is_planned_at_a_halved_micro_batch() -> None:
    """The next GPU run measures OpenVLA-OFT where the plan fits: the recipe's 32 does not fit the H200's memory
    with the calibration margin (it ran out of memory there), 16 does, and the fixed part is far below the device
    (so the earlier retry's failures down to 1 were not the micro-batch's)."""
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.dry_run import FIT_MARGIN, plan_device_fit

    device = json.loads(MEASURED.read_text())["device_memory_bytes"]
    config = load_config("libero_10_ppo_openvlaoft", ["actor.model.model_path=null", "actor.model.preset=full"]).config
    fit = plan_device_fit(config, device)
    assert fit.recipe_micro_batch == 32 and fit.micro_batch == 16
    assert fit.planned[32].device_total * FIT_MARGIN > device >= fit.planned[16].device_total * FIT_MARGIN
    # the micro-batch-independent part is about half the device (70.3 of 139.8 GiB): the 134 GiB still allocated at
    # micro-batch 1 in the earlier retry were the failed attempts', not the plan's
    assert fit.planned[1].device_total == fit.fixed.device_total < 0.55 * device
