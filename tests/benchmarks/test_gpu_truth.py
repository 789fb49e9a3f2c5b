"""benchmarks/gpu_truth.py on CPU: a family part measures what it claims, a failing or slow part is recorded and
the run goes on. (The whole ``--smoke`` runs with every benchmark's smoke run.)"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_truth.py"


@pytest.fixture(scope="module")
def gpu_truth() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_truth", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_truth"] = module
    spec.loader.exec_module(module)
    return module


def test_family_part_compares_a_real_update_with_the_dry_run(gpu_truth: ModuleType, tmp_path: Path) -> None:
    result_file = tmp_path / "parts.json"
    gpu_truth.run_parts(["family:pi05", "no_such_part"], True, result_file)
    results = json.loads(result_file.read_text())
    fam = results["family:pi05"]
    assert fam["ok"], fam
    update, memory = fam["update"], fam["memory"]
    assert update["micro_batch"] == 2 and update["kept_activation_bytes"] > 0 and update["update_samples_per_s"] > 0
    assert memory["predicted_bytes"] > memory["predicted_activation_bytes"] > 0
    assert 0.5 < memory["activation_ratio"] < 2.0  # measured kept activations vs the family's declared stacks
    rollout = fam["rollout"]
    assert rollout["batch"] == 2 and rollout["sample_s"] > 0 and rollout["uncached_s"] > 0  # pi0.5: cache off too
    assert fam["offload"] == {"note": "device is the CPU: nothing moves"}
    bad = results["no_such_part"]  # an error in one part is recorded; the parts after it still run
    assert not bad["ok"] and "unknown part" in bad["error"] and "seconds" in bad


def test_a_part_over_its_time_limit_is_recorded(gpu_truth: ModuleType) -> None:
    results = gpu_truth.spawn(["family:openvla_oft", "libero"], True, timeout=0.5)
    assert set(results) == {"family:openvla_oft", "libero"}
    assert all(not r["ok"] and r["error"] == "timed out after 0 s" for r in results.values())


def test_a_part_that_fails_late_keeps_what_it_measured(gpu_truth: ModuleType, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Stages a part finished before it failed (or before its process was killed) stay in the result file."""
    def run_part(part: str, smoke: bool) -> dict:
        gpu_truth._progress({"build_s": 1.5})
        raise RuntimeError("CUDA error: out of memory in the rollout")

    monkeypatch.setattr(gpu_truth, "run_part", run_part)
    result_file = tmp_path / "parts.json"
    gpu_truth.run_parts(["family:pi0"], True, result_file)
    saved = json.loads(result_file.read_text())["family:pi0"]
    assert saved["build_s"] == 1.5 and not saved["ok"] and "out of memory" in saved["error"]
    gpu_truth._progress({"x": 1})  # outside a run the hook records nothing
    assert json.loads(result_file.read_text())["family:pi0"]["build_s"] == 1.5


def test_timeouts_are_checked(gpu_truth: ModuleType) -> None:
    assert gpu_truth._timeouts(["libero=5"], smoke=False)["libero"] == 5.0
    limits = gpu_truth._timeouts(["family=60", "family:pi0=95"], smoke=False)
    assert limits["family:gr00t_n15"] == 60.0 and limits["family:pi0"] == 95.0
    assert set(limits) == set(gpu_truth.PARTS)
    assert gpu_truth.planned_seconds(gpu_truth.PARTS, gpu_truth._timeouts([], smoke=False)) <= 500  # one call
    with pytest.raises(SystemExit, match="PART=SECONDS"):
        gpu_truth._timeouts(["gpu=5"], smoke=False)


def test_the_gpu_run_configs_load(gpu_truth: ModuleType, tmp_path: Path) -> None:
    """What only the GPU machine runs is at least a valid configuration here."""
    from vlarl_cli.config.loading import load_config

    for family, recipe in gpu_truth.FAMILIES.items():
        config = gpu_truth._family_config(family, smoke=False)
        assert config.actor.model.preset == "full" and config.actor.model.model_path is None, recipe
    name, overrides = gpu_truth.iteration_recipe(False, tmp_path)
    config = load_config(name, overrides).config
    assert config.env.train.task_suite_name == "libero_spatial"  # the suite whose assets the kit carries
    assert config.train_num_envs == 16


def test_an_update_out_of_memory_halves_the_micro_batch(gpu_truth: ModuleType,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    tried: list[int] = []

    def update(policy: object, optimizer: torch.optim.Optimizer, micro_batch: int, size: int, device: object) -> dict:
        tried.append(micro_batch)
        if micro_batch > 4:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return {"micro_batch": micro_batch}

    monkeypatch.setattr(gpu_truth, "_update", update)
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    result = gpu_truth._update_fitting(None, optimizer, 16, 8, torch.device("cpu"))
    assert tried == [16, 8, 4] and result == {"micro_batch": 4, "out_of_memory_at": [16, 8]}
