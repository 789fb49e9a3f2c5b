"""A small LoRA (arXiv 2106.09685) for ``nn.Linear`` layers, with exact merge.

``LoRALinear`` subclasses ``nn.Linear`` and keeps the frozen base parameters under their usual names
(``weight``, ``bias``), so a LoRA-wrapped model's state dict is the plain model's plus ``lora_A`` /
``lora_B`` entries, and checkpoints of the base model load into it unchanged:

    y = x W^T + b + (alpha / r) * (x A^T) B^T,   A [r, in] (Kaiming-uniform), B [out, r] (zeros)

so a freshly wrapped layer computes exactly the base layer. :func:`merge_lora` folds
``W += (alpha / r) B A`` and turns the layer back into a plain ``nn.Linear`` (for export).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DEFAULT_TARGETS", "LoRALinear", "apply_lora", "lora_parameters", "merge_lora"]

#: Gemma attention + MLP projections (openpi's gemma_2b_lora adapts the same places).
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoRALinear(nn.Linear):
    """``nn.Linear`` plus a rank-``r`` update; the base weight and bias are frozen."""

    def __init__(self, in_features: int, out_features: int, bias: bool, rank: int, alpha: float,
                 device: torch.device | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {rank}")
        self.rank = rank
        self.alpha = alpha
        self.lora_A = nn.Parameter(torch.empty(rank, in_features, device=device, dtype=dtype))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank, device=device, dtype=dtype))
        if self.lora_A.device.type != "meta":
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    @classmethod
    def from_linear(cls, linear: nn.Linear, rank: int, alpha: float) -> LoRALinear:
        """Wrap ``linear``, SHARING its weight/bias parameters (no copy)."""
        new = cls(linear.in_features, linear.out_features, linear.bias is not None, rank, alpha,
                  device=linear.weight.device, dtype=linear.weight.dtype)
        new.weight = linear.weight
        new.bias = linear.bias
        new.weight.requires_grad_(False)
        if new.bias is not None:
            new.bias.requires_grad_(False)
        return new

    def forward(self, x: Tensor) -> Tensor:
        base = F.linear(x, self.weight, self.bias)
        return base + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling

    def merged_weight(self) -> Tensor:
        return self.weight + (self.lora_B @ self.lora_A) * self.scaling

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, alpha={self.alpha}"


def apply_lora(module: nn.Module, rank: int, alpha: float | None = None,
               targets: Iterable[str] = DEFAULT_TARGETS) -> int:
    """Replace every ``nn.Linear`` child named in ``targets`` under ``module`` by a :class:`LoRALinear`.

    ``alpha`` defaults to ``rank`` (scaling 1). Returns the number of wrapped layers.
    """
    alpha = float(rank if alpha is None else alpha)
    names = set(targets)
    count = 0
    for parent in list(module.modules()):
        for child_name, child in list(parent.named_children()):
            if child_name in names and type(child) is nn.Linear:
                setattr(parent, child_name, LoRALinear.from_linear(child, rank, alpha))
                count += 1
    return count


def merge_lora(module: nn.Module) -> int:
    """Fold every :class:`LoRALinear` under ``module`` into a plain ``nn.Linear``; returns the count."""
    count = 0
    for parent in list(module.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                plain = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                  device=child.weight.device, dtype=child.weight.dtype)
                with torch.no_grad():
                    plain.weight.copy_(child.merged_weight())
                    if child.bias is not None:
                        plain.bias.copy_(child.bias)
                setattr(parent, child_name, plain)
                count += 1
    return count


def lora_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The trainable LoRA factors under ``module``."""
    return [p for m in module.modules() if isinstance(m, LoRALinear) for p in (m.lora_A, m.lora_B)]
