"""Critic head shared by the model families.

An MLP from pooled features to one scalar per sample (REFERENCE.md section 3: pi0 pools the action
expert output, pi0.5 the VLM prefix, GR00T VL tokens + state features; the pooling belongs to the
family, this module only maps ``[B, in_dim] -> [B]``).

Initialisation choice: the LAST layer is zero-initialised (weight and bias), so every value starts at
exactly 0. Why: rewards in LIBERO are sparse in [0, 1]; a randomly initialised head on large VLM features
can output values of order 1-10, which makes the first GAE advantages and the clipped value loss
dominated by noise and lets the critic's gradient swamp the actor in the shared backbone. Starting at
0 makes the first advantages equal to the discounted returns and the first explained variance 0. The
zero layer still receives gradient (its input is non-zero), so the hidden layers start learning from
the second step on.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["ValueHead"]


class ValueHead(nn.Module):
    """MLP critic: ``features [B, in_dim] -> values [B]``.

    Args:
        in_dim: feature width.
        hidden: hidden layer widths (GELU between layers), RLinf default (512, 128).
    """

    def __init__(self, in_dim: int, hidden: Sequence[int] = (512, 128)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.GELU()]
            width = h
        self.out = nn.Linear(width, 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.body = nn.Sequential(*layers)
        self.in_dim = in_dim

    def forward(self, features: Tensor) -> Tensor:
        if features.dim() != 2 or features.shape[1] != self.in_dim:
            raise ValueError(f"ValueHead expects features [B, {self.in_dim}], got {tuple(features.shape)}")
        # computed in the head's dtype, returned as float32 so the value loss is never done in bf16
        x = features.to(self.out.weight.dtype)
        return self.out(self.body(x)).squeeze(-1).to(torch.float32)
