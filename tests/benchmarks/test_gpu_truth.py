"""benchmarks/gpu_truth.py on CPU: a family part measures what it claims, a failing or slow part is recorded and
the run goes on. (The whole ``--smoke`` runs with every benchmark's smoke run.)"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from vlarl_cli import keys

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
    choice = fam["micro_batch_choice"]  # the dry run's plan on this device chose the micro-batch measured
    assert choice["recipe_micro_batch"] == choice["chosen_micro_batch"] == 2 and " fits " in choice["reason"]
    assert choice["planned_bytes"]["2"] == memory["predicted_bytes"] >= choice["fixed_bytes"] > 0
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


class _FailingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated in the backward)")


class _OomPolicy(torch.nn.Module):
    """A policy whose backward runs out of memory above ``fits`` samples from its ``fail_from``-th evaluate on
    (2: the first update, which creates AdamW's moments, passes; the measured one fails). exp, softmax and sigmoid
    save their outputs: what a leaking saved-tensor hook would keep."""

    def __init__(self, fits: int, fail_from: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(256, 256)
        self.fits, self.fail_from, self.calls = fits, fail_from, 0

    def sample(self, obs: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(replay={"x": torch.randn(len(obs[keys.TASK_DESCRIPTIONS]), 64, 256)})

    def evaluate(self, replay: dict[str, torch.Tensor]) -> SimpleNamespace:
        self.calls += 1
        h = self.lin(replay["x"]).exp()
        if h.shape[0] > self.fits and self.calls >= self.fail_from:
            h = _FailingBackward.apply(h)
        s = torch.softmax(h, dim=-1).sigmoid()
        return SimpleNamespace(logprobs=s, values=s.mean(-1), entropy=None)


def _retry(gpu_truth: ModuleType, policy: _OomPolicy) -> dict:
    optimizer = torch.optim.AdamW(policy.parameters())
    return gpu_truth._update_fitting(policy, optimizer, 16, 8, torch.device("cpu"), leak_bytes=256 * 1024)


def test_an_update_out_of_memory_frees_the_attempt_and_halves(gpu_truth: ModuleType) -> None:
    """The real update (measured with the saved-tensor hook) fails at 16 and 8: the retry frees what they built
    (16 x 64 x 256 floats are 1 MiB a tensor; less than 256 KiB stays) and measures at 4."""
    result = _retry(gpu_truth, _OomPolicy(fits=4, fail_from=2))
    assert result["micro_batch"] == 4 and result["out_of_memory_at"] == [16, 8]
    assert len(result["left_after_out_of_memory_bytes"]) == 2
    assert max(result["left_after_out_of_memory_bytes"]) < 256 * 1024, result


def test_a_retry_that_frees_nothing_stops_and_says_why(gpu_truth: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a saved-tensor hook that keeps the failed graph (the pack hook returning its input as is, as before),
    the retry stops after the first failure instead of halving down to 1."""
    from vlarl_cli.policies import activations

    def leaky(fn: Any, module: torch.nn.Module) -> tuple[int, object]:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            return 0, fn()

    monkeypatch.setattr(activations, "saved_tensor_bytes", leaky)
    policy = _OomPolicy(fits=4, fail_from=2)
    with pytest.raises(gpu_truth.NoFit, match=r"micro-batch 16, [0-9.]+ GiB stayed allocated.*not retrying"):
        _retry(gpu_truth, policy)
    assert policy.calls == 2  # the first update and the measured one at 16; nothing smaller was tried


def test_a_plan_whose_fixed_part_exceeds_the_device_is_refused_before_any_update(
        gpu_truth: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from vlarl_cli.training.dry_run import plan_device_fit

    fixed = plan_device_fit(gpu_truth._family_config("openvla_oft", True), 1.0).fixed.device_total
    monkeypatch.setattr(gpu_truth, "_device_bytes", lambda device: int(0.8 * fixed))  # fits sharded over 2, not on 1
    result_file = tmp_path / "parts.json"
    gpu_truth.run_parts(["family:openvla_oft"], True, result_file)
    fam = json.loads(result_file.read_text())["family:openvla_oft"]
    choice = fam["micro_batch_choice"]
    assert not fam["ok"] and "build_s" not in fam and choice["chosen_micro_batch"] is None  # refused before building
    assert choice["fixed_bytes"] > choice["device_bytes"] and "no micro-batch fits" in choice["reason"]
    assert fam["error"].startswith("NoFit: openvla_oft cannot train on one device of ")
    assert "at any micro-batch: what does not depend on the micro-batch alone is" in fam["error"]
    for fix in ("FSDP over 2", "cpu_offload=true", "is_lora=true", "smaller recipe"):
        assert fix in fam["error"], fix
