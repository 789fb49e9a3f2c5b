"""enable_offload moves the right tensors (checked by moving to the meta device: CPU -> CPU is a no-op here)."""

from __future__ import annotations

import torch

from vlarl_cli.policies.toy import ToyFlowPolicy
from vlarl_cli.training.actor import offload_module, offload_optimizer_state


def _trained() -> tuple[ToyFlowPolicy, torch.optim.Optimizer]:
    policy = ToyFlowPolicy(seed=0)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    policy.value_head(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    return policy, optimizer


def test_same_device_is_a_no_op() -> None:
    policy, optimizer = _trained()
    before = [p for p in policy.parameters()]
    state = [v for s in optimizer.state.values() for v in s.values()]
    offload_module(policy, "cpu")
    offload_optimizer_state(optimizer, "cpu")
    assert all(a is b for a, b in zip(before, policy.parameters(), strict=True))
    assert all(a is b for a, b in zip(state, [v for s in optimizer.state.values() for v in s.values()], strict=True))


def test_weights_grads_and_adam_moments_move_the_step_counter_stays() -> None:
    policy, optimizer = _trained()
    offload_module(policy, "meta")
    offload_optimizer_state(optimizer, "meta")
    assert {p.device.type for p in policy.parameters()} == {"meta"}
    assert {p.grad.device.type for p in policy.parameters() if p.grad is not None} == {"meta"}
    moved = [(k, v.device.type) for s in optimizer.state.values() for k, v in s.items()]
    assert {d for k, d in moved if k in ("exp_avg", "exp_avg_sq")} == {"meta"}
    assert {d for k, d in moved if k == "step"} == {"cpu"}  # AdamW keeps its step counter on the host
    offload_module(None, "meta")  # nothing to move
