"""--dry-run's activation term: each family's declared stacks against what one real backward keeps on CPU.

The measured side is autograd's own record: the distinct storages saved for backward while ``evaluate`` runs
(``saved_tensors_hooks``, parameters excluded). The estimate counts the transformer layers only (no glue,
no attention scores: the dry run plans for the CUDA kernels), so it must land within a factor of 2 of the
measurement on the tiny presets (measured here: 1.1x to 1.6x).
"""

from __future__ import annotations

import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.config.loading import load_config
from vlarl_cli.policies.activations import activation_bytes, saved_tensor_bytes
from vlarl_cli.policies.registry import build_policy
from vlarl_cli.training.dry_run import (
    GIB,
    activation_plan,
    build_meta_policy,
    count_parameters,
    estimate_memory,
)

FACTOR = 2.0
BATCH = 4


def _obs(batch: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    return {keys.MAIN_IMAGES: torch.randint(0, 256, (batch, 64, 64, 3), dtype=torch.uint8, generator=g),
            keys.WRIST_IMAGES: torch.randint(0, 256, (batch, 64, 64, 3), dtype=torch.uint8, generator=g),
            keys.STATES: torch.rand(batch, 8, generator=g),
            keys.TASK_DESCRIPTIONS: ["put the bowl on the plate"] * batch}


def _measure(name: str, overrides: list[str]) -> tuple[int, int]:
    """(saved bytes of one real ``evaluate`` on CPU, the family's fp32 estimate without the rebuilt layer)."""
    config = load_config(name, overrides).config
    policy = build_policy(config.actor.model.model_copy(update={"model_path": None}), "cpu",
                          temperature=config.rollout.sampling_params.temperature_train)
    replay = policy.sample(_obs(BATCH)).replay
    policy.train()
    measured, out = saved_tensor_bytes(lambda: policy.evaluate(replay), policy)
    assert out.logprobs.requires_grad  # a real graph was built
    estimate = activation_bytes(policy.activation_stacks(), BATCH, torch.float32, rebuilt=False)
    return measured, estimate


@pytest.mark.parametrize(("name", "overrides"), [
    ("maniskill_pickcube_ppo_openpi", []),
    ("maniskill_pickcube_ppo_openpi", ["actor.model.openpi.train_expert_only=false"]),
    ("maniskill_pickcube_ppo_openpi", ["actor.model.openpi.train_expert_only=false",
                                       "actor.model.gradient_checkpointing=true"]),
    ("maniskill_pickcube_ppo_gr00t", []),
    ("maniskill_pickcube_ppo_gr00t_n1d6", []),
    ("maniskill_pickcube_ppo_openvlaoft", []),
])
def test_declared_stacks_match_one_real_backward(name: str, overrides: list[str]) -> None:
    measured, estimate = _measure(name, overrides)
    assert estimate / FACTOR <= measured <= estimate * FACTOR, (measured, estimate)


def test_training_the_vlm_and_checkpointing_move_the_term_as_the_backward_does() -> None:
    frozen, _ = _measure("maniskill_pickcube_ppo_openpi", [])
    trained, trained_est = _measure("maniskill_pickcube_ppo_openpi", ["actor.model.openpi.train_expert_only=false"])
    ckpt, ckpt_est = _measure("maniskill_pickcube_ppo_openpi", ["actor.model.openpi.train_expert_only=false",
                                                                 "actor.model.gradient_checkpointing=true"])
    assert trained > 3 * frozen and ckpt < trained / 2  # what the stacks must follow
    assert ckpt_est < trained_est / 2


def test_plan_is_per_micro_batch_in_the_compute_dtype_on_every_actor_device() -> None:
    config = load_config("libero_10_ppo_gr00t").config  # bf16 family
    policy = build_meta_policy(config)
    plan = activation_plan(config, policy)
    assert plan is not None and plan.dtype == torch.bfloat16 and plan.micro_batch == config.actor.micro_batch_size
    half = activation_plan(load_config("libero_10_ppo_gr00t", ["actor.micro_batch_size=64"]).config, policy)
    assert half is not None and half.bytes * 2 == plan.bytes
    params = count_parameters(policy)
    assert params.total_bytes < 2.1 * params.total  # built in bf16: 2 bytes per parameter, not 4
    one = estimate_memory(config, params, 1, plan.bytes)["0"]
    assert one.activations == plan.bytes
    assert one.device_total == pytest.approx(one.weights + one.gradients + one.optimizer + plan.bytes)
    assert one.weights == params.total_bytes and one.optimizer == 2 * params.trainable_bytes
    eight = estimate_memory(config, params, 8, plan.bytes)
    assert all(e.activations == plan.bytes for e in eight.values())  # every rank is an actor rank here
    assert 1 < plan.bytes / GIB < 100  # a full-size model at micro-batch 128: GiBs, not bytes or TiBs


def test_toy_family_declares_none_and_the_plan_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from vlarl_cli.training.dry_run import dry_run

    config = load_config("toy_reach_ppo").config
    assert activation_plan(config, build_meta_policy(config)) is None
    dry_run(load_config("libero_tiny_ppo").config, 1)
    out = " ".join(capsys.readouterr().out.split())
    assert "Activations:" in out and "per actor device at micro-batch" in out and "expert" in out
