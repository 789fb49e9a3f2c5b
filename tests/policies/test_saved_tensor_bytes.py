"""``saved_tensor_bytes`` measures without keeping: a graph it watched is freed when its backward fails part-way
(an out-of-memory error), and the gradients are those of an unwatched backward."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch

from vlarl_cli.policies.activations import saved_tensor_bytes


class _FailingBackward(torch.autograd.Function):
    """Identity forward; the backward raises the error a device out of memory raises."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated in the backward)")


class _Net(torch.nn.Module):
    """Ops that save their own output (exp, softmax, sigmoid): the case a pack hook returning its input as is
    turns into a reference cycle. Weak references to every intermediate say what is still alive."""

    def __init__(self, fail: bool) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.fail = fail
        self.alive: list[weakref.ref[torch.Tensor]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.lin(x).exp()
        h = _FailingBackward.apply(e) if self.fail else e
        s = torch.softmax(h, dim=-1).sigmoid()
        self.alive += [weakref.ref(e), weakref.ref(h), weakref.ref(s)]
        return s.sum()


def _watched_backward(net: _Net) -> int:
    kept, loss = saved_tensor_bytes(lambda: net(torch.randn(32, 64)), net)
    loss.backward()  # type: ignore[attr-defined]
    return kept


def test_a_watched_graph_whose_backward_fails_is_freed() -> None:
    net = _Net(fail=True)
    with pytest.raises(torch.OutOfMemoryError):
        _watched_backward(net)
    gc.collect()
    assert net.alive and [r() for r in net.alive] == [None] * len(net.alive)


def test_a_watched_graph_that_never_runs_backward_is_freed() -> None:
    net = _Net(fail=False)
    kept, loss = saved_tensor_bytes(lambda: net(torch.randn(32, 64)), net)
    assert kept >= 3 * 32 * 64 * 4  # exp, softmax and sigmoid outputs at least (parameters excluded)
    del loss
    gc.collect()
    assert [r() for r in net.alive] == [None] * len(net.alive)


def test_watching_changes_no_gradient() -> None:
    torch.manual_seed(0)
    net = _Net(fail=False)
    x = torch.randn(32, 64)
    net(x).backward()
    plain = [p.grad.clone() for p in net.parameters()]  # type: ignore[union-attr]
    net.zero_grad(set_to_none=True)
    _, loss = saved_tensor_bytes(lambda: net(x), net)
    loss.backward()  # type: ignore[attr-defined]
    for expected, p in zip(plain, net.parameters(), strict=True):
        torch.testing.assert_close(p.grad, expected)
