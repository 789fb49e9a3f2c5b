"""The small heads of OpenVLA-OFT: RLinf's critic, the OFT authors' L1-regression action head and proprio
projector. Module and parameter names follow the upstream checkpoints so their files load unchanged.

Facts (read for facts only):

* :class:`OftCritic` = RLinf ``rlinf/models/embodiment/modules/value_head.py`` ``ValueHead(input_dim=D,
  hidden_sizes=(512, 128), output_dim=1 | num_action_chunks, activation="gelu", bias_last=False)``:
  ``mlp = Sequential(Linear(D, 512), GELU, Linear(512, 128), GELU, Linear(128, out, bias=False))``, so
  RLinf's critic parameters are ``value_head.mlp.{0,2}.{weight,bias}`` and ``value_head.mlp.4.weight``.
  ``out`` is 1 for ``value_type: chunk_level`` and ``num_action_chunks`` for ``action_level``
  (RLinf ``OpenVLAOFTForRLActionPrediction.__init__``). Initialisation differs on purpose: RLinf draws the
  last layer from N(0, 0.02^2); here it is zero so every value starts at 0 (see
  :mod:`vlarl_cli.policies.value_head` for why).
* :class:`L1RegressionHead` = openvla-oft ``prismatic/models/action_heads.py`` ``L1RegressionActionHead``:
  ``model = MLPResNet(num_blocks=2, input_dim=D * ACTION_DIM, hidden_dim=D, output_dim=ACTION_DIM)``;
  the action hidden states ``[B, C * A, D]`` are reshaped to ``[B, C, A * D]`` and mapped to ``[B, C, A]``
  normalised actions. MLPResNet: LayerNorm -> Linear -> ReLU -> blocks (x + ReLU(Linear(LayerNorm(x))))
  -> LayerNorm -> Linear. Keys ``model.layer_norm1``, ``model.fc1``,
  ``model.mlp_resnet_blocks.N.ffn.{0,1}``, ``model.layer_norm2``, ``model.fc2``.
* :class:`ProprioProjector` = openvla-oft ``prismatic/models/projectors.py``: ``fc1 (P -> D)``, GELU,
  ``fc2 (D -> D)``; its output is one token appended after the image patches.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["L1RegressionHead", "OftCritic", "ProprioProjector"]


class OftCritic(nn.Module):
    """RLinf's OFT critic: ``features [B, D] -> values [B, num_values]`` (float32)."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...] = (512, 128), num_values: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.GELU()]
            width = h
        last = nn.Linear(width, num_values, bias=False)
        nn.init.zeros_(last.weight)
        self.mlp = nn.Sequential(*layers, last)
        self.in_dim, self.num_values = in_dim, num_values

    def forward(self, features: Tensor) -> Tensor:
        if features.dim() != 2 or features.shape[1] != self.in_dim:
            raise ValueError(f"OftCritic expects features [B, {self.in_dim}], got {tuple(features.shape)}")
        first: nn.Linear = self.mlp[0]  # type: ignore[assignment]
        # computed in the head's dtype, returned as float32 so the value loss is never done in bf16
        return self.mlp(features.to(first.weight.dtype)).to(torch.float32)


class _ResNetBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ffn = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.ReLU())

    def forward(self, x: Tensor) -> Tensor:
        return x + self.ffn(x)


class _MLPResNet(nn.Module):
    def __init__(self, num_blocks: int, input_dim: int, hidden_dim: int, output_dim: int) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(input_dim)
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.relu = nn.ReLU()
        self.mlp_resnet_blocks = nn.ModuleList([_ResNetBlock(hidden_dim) for _ in range(num_blocks)])
        self.layer_norm2 = nn.LayerNorm(hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, output_dim)

    def forward(self, x: Tensor) -> Tensor:
        x = self.relu(self.fc1(self.layer_norm1(x)))
        for block in self.mlp_resnet_blocks:
            x = block(x)
        return self.fc2(self.layer_norm2(x))


class L1RegressionHead(nn.Module):
    """``action hidden [B, C * A, D] -> normalised action means [B, C, A]`` (float32)."""

    def __init__(self, llm_width: int, hidden: int, action_dim: int, num_blocks: int = 2) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.model = _MLPResNet(num_blocks, llm_width * action_dim, hidden, action_dim)

    def forward(self, hidden: Tensor, num_chunks: int) -> Tensor:
        b = hidden.shape[0]
        if hidden.shape[1] != num_chunks * self.action_dim:
            raise ValueError(f"expected {num_chunks * self.action_dim} action hidden states, got {hidden.shape[1]}")
        x = hidden.reshape(b, num_chunks, -1).to(self.model.fc1.weight.dtype)
        return self.model(x).to(torch.float32)


class ProprioProjector(nn.Module):
    """``proprio [B, P] -> one token [B, 1, D]``."""

    def __init__(self, llm_width: int, proprio_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(proprio_dim, llm_width)
        self.fc2 = nn.Linear(llm_width, llm_width)
        self.act_fn1 = nn.GELU()

    def forward(self, proprio: Tensor) -> Tensor:
        x = proprio.to(self.fc1.weight.dtype)
        return self.fc2(self.act_fn1(self.fc1(x)))[:, None]
