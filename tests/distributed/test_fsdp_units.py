"""Rules applied where FSDP2 wraps a policy (``distributed/fsdp.py``) that need no process group to check."""

from __future__ import annotations

import torch

from vlarl_cli.distributed.fsdp import _without_views
from vlarl_cli.policies.base import EvaluateOutput


def test_evaluate_outputs_reach_fsdp_without_views() -> None:
    """A family's view outputs (sliced log-probs, reshaped values) are copied: FSDP2 hooks the backward on each
    output, and an in-place op on a view would skip it (torch warns on every rank)."""
    w = torch.nn.Parameter(torch.ones(4, 3))

    def evaluate() -> EvaluateOutput:
        x = w * 2
        return EvaluateOutput(logprobs=x[:, :2], values=x.sum(-1), entropy=None)

    plain = evaluate()
    assert plain.logprobs._base is not None  # what the family returns
    out = _without_views(evaluate)()
    assert out.logprobs._base is None and out.values._base is None
    torch.testing.assert_close(out.logprobs, plain.logprobs, rtol=0, atol=0)
    out.logprobs.sum().backward()  # still in the graph
    assert w.grad is not None and float(w.grad.sum()) == 16.0
