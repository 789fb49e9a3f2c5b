"""RLinf's GR00T critic, so an RLinf GR00T checkpoint resumes with its value head.

RLinf (``rlinf/models/embodiment/gr00t/gr00t_n1d5/gr00t_action_model.py`` and ``gr00t_n1d6/...``, class
``FlowMatchingActionHeadForRLActionPrediction``) builds ``action_head.value_head`` as its shared
``rlinf/models/embodiment/modules/value_head.py`` ``ValueHead(input_dim, hidden_sizes=(1024, 512, 256),
output_dim=1, activation="relu", bias_last=True)``: ``mlp = Sequential(Linear, ReLU, Linear, ReLU, Linear, ReLU,
Linear)``, so the tensors are ``action_head.value_head.mlp.{0,2,4,6}.{weight,bias}``. Input: the mean over ALL
VL tokens of the processed backbone features (padding included, ``value_vlm_mode: mean_token``) concatenated
with the flattened state token (2048 + 1536 = 3584), or the VL mean alone with ``use_vlm_value``.

Initialisation (``ValueHead._init_weights``, which RLinf's ``get_model`` calls again right after loading a
pretrained policy): Kaiming-normal ``fan_out`` for the hidden layers, N(0, 0.02) for the last one, zero
biases. This module is separate from the family-shared :mod:`vlarl_cli.policies.value_head` on purpose:
its layout is RLinf's, not ours.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["RLINF_HIDDEN", "Gr00tCritic"]

#: RLinf's GR00T critic widths
RLINF_HIDDEN = (1024, 512, 256)


class Gr00tCritic(nn.Module):
    """``features [B, in_dim] -> values [B]`` (float32), parameters named as RLinf's ``value_head``."""

    def __init__(self, in_dim: int, hidden: Sequence[int] = RLINF_HIDDEN) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1, bias=True))
        self.mlp = nn.Sequential(*layers)
        self.in_dim = in_dim
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """RLinf ``ValueHead._init_weights("relu")``."""
        last = self.mlp[-1]
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                if m is last:
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
                else:
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, features: Tensor) -> Tensor:
        if features.dim() != 2 or features.shape[1] != self.in_dim:
            raise ValueError(f"Gr00tCritic expects features [B, {self.in_dim}], got {tuple(features.shape)}")
        x = features.to(next(self.mlp.parameters()).dtype)
        return self.mlp(x)[:, 0].to(torch.float32)


def pool_vl(vl: Tensor) -> Tensor:
    """RLinf ``get_value`` ``mean_token``: mean over every VL token, padding included. [B, S, D] -> [B, D]."""
    return vl.mean(dim=1)
