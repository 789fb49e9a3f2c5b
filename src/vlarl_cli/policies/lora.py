"""A small LoRA (arXiv 2106.09685) for ``nn.Linear`` layers, with exact merge.

``LoRALinear`` subclasses ``nn.Linear`` and keeps the frozen base parameters under their usual names
(``weight``, ``bias``), so a LoRA-wrapped model's state dict is the plain model's plus ``lora_A`` /
``lora_B`` entries, and checkpoints of the base model load into it unchanged:

    y = x W^T + b + (alpha / r) * (x A^T) B^T,   A [r, in] (Kaiming-uniform), B [out, r] (zeros)

so a freshly wrapped layer computes exactly the base layer. :func:`merge_lora` folds
``W += (alpha / r) B A`` and turns the layer back into a plain ``nn.Linear`` (for export).

Why not peft for training: peft wraps each adapted layer and renames its base parameters
(``q_proj.base_layer.weight``, ``q_proj.lora_A.default.weight``); every checkpoint key map of pi0 and
OpenVLA-OFT reads and writes the plain names, which :class:`LoRALinear` keeps. Where the job is peft's
(reading a published PEFT adapter: its config semantics, scaling rule and key layout),
:func:`read_peft_adapter` uses peft, and the tests check merges against peft's own forward.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DEFAULT_TARGETS", "RLINF_OFT_TARGETS", "AdapterDelta", "LoRALinear", "apply_lora", "init_lora_factors",
           "lora_parameters", "merge_lora", "merge_lora_for_export", "merged_state_dict", "read_peft_adapter"]

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


def merge_lora_for_export(policy: Any) -> int:
    """:func:`merge_lora` for a checkpoint about to be saved: the policy's config then says it has no
    adapters (``is_lora=False``), or a later load would expect LoRA factors. Returns the count."""
    merged = merge_lora(policy)
    if merged:
        # Families keep the flag on different attributes (GR00T ``settings``, pi0 ``cfg``); all are
        # (frozen) dataclasses.
        for attr in ("settings", "config", "cfg"):
            value = getattr(policy, attr, None)
            if dataclasses.is_dataclass(value) and not isinstance(value, type) \
                    and any(f.name == "is_lora" for f in dataclasses.fields(value)):
                setattr(policy, attr, dataclasses.replace(value, is_lora=False))
    return merged


def merged_state_dict(policy: nn.Module) -> dict[str, Tensor]:
    """State dict with every LoRA update folded into its base weight and no LoRA keys (the module is
    left as it is: the export of a policy that keeps training)."""
    sd = {k: v.detach() for k, v in policy.state_dict().items()}
    for name, m in policy.named_modules():
        if isinstance(m, LoRALinear):
            sd[f"{name}.weight"] = m.merged_weight().detach()
            sd.pop(f"{name}.lora_A", None)
            sd.pop(f"{name}.lora_B", None)
    return sd


def init_lora_factors(policy: nn.Module, fresh: Iterable[str]) -> None:
    """LoRA factors a checkpoint lacks (named in ``fresh``), initialised as :class:`LoRALinear` does."""
    miss = set(fresh)
    for name, m in policy.named_modules():
        if isinstance(m, LoRALinear) and f"{name}.lora_A" in miss:
            with torch.no_grad():
                nn.init.kaiming_uniform_(m.lora_A, a=math.sqrt(5))
                m.lora_B.zero_()


# ---------------------------------------------------------------------------------------- PEFT adapters
#: RLinf's LoRA targets for OpenVLA-OFT (``rlinf/models/__init__.py`` ``get_model``, ``is_lora`` without
#: ``lora_path``): timm vision (``proj``, ``qkv``, ``fc1``, ``fc2``), projector / SigLIP pooling head
#: (``q``, ``kv``, ``fc3``, ``out_proj``) and the Llama layers + ``lm_head``; ``lora_alpha = r``.
RLINF_OFT_TARGETS = ("proj", "qkv", "fc1", "fc2", "q", "kv", "fc3", "out_proj", "q_proj", "k_proj", "v_proj",
                     "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


@dataclass(frozen=True)
class AdapterDelta:
    """One adapted ``nn.Linear`` of a PEFT LoRA adapter: ``W' = W + scaling * B @ A``."""

    lora_A: Tensor  # [r, in]
    lora_B: Tensor  # [out, r]
    scaling: float

    def delta(self) -> Tensor:
        """``scaling * B @ A`` in float32 ``[out, in]``."""
        return (self.lora_B.float() @ self.lora_A.float()) * self.scaling


def read_peft_adapter(folder: str | os.PathLike[str]) -> dict[str, AdapterDelta]:
    """A PEFT LoRA adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``) as
    ``{base weight name: AdapterDelta}`` in the base model's own key names.

    The configuration is parsed by peft (``LoraConfig.from_pretrained``) so the scaling follows peft's rule
    (``lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with ``use_rslora``). Features whose merge is not a
    plain ``B @ A`` (DoRA, per-module rank / alpha patterns, trained biases, ``modules_to_save``,
    ``fan_in_fan_out``) are refused rather than merged wrongly.
    """
    from peft import LoraConfig
    from safetensors.torch import load_file

    from vlarl_cli.errors import CheckpointError

    root = Path(folder)
    if not (root / "adapter_config.json").is_file():
        raise CheckpointError(f"{root} has no adapter_config.json: it is not a PEFT adapter folder.",
                              "Point actor.model.lora_path at the folder holding adapter_config.json and "
                              "adapter_model.safetensors.")
    cfg = LoraConfig.from_pretrained(os.fspath(root))
    unsupported = {"use_dora": cfg.use_dora, "rank_pattern": bool(cfg.rank_pattern),
                   "alpha_pattern": bool(cfg.alpha_pattern), "bias": cfg.bias != "none",
                   "modules_to_save": bool(cfg.modules_to_save), "fan_in_fan_out": cfg.fan_in_fan_out}
    bad = [k for k, v in unsupported.items() if v]
    if bad:
        raise CheckpointError(f"The LoRA adapter {root} uses {', '.join(bad)}, which vlarl does not merge.",
                              "Use a plain LoRA adapter (RLinf's OpenVLA-OFT adapters are).")
    weights = root / "adapter_model.safetensors"
    if not weights.is_file():
        raise CheckpointError(f"{root} has no adapter_model.safetensors.", "Re-download the adapter folder.")
    tensors = load_file(os.fspath(weights))
    scaling = cfg.lora_alpha / (math.sqrt(cfg.r) if cfg.use_rslora else cfg.r)
    out: dict[str, AdapterDelta] = {}
    for key, a in tensors.items():
        if ".lora_A." not in key:
            continue
        prefix = key.split(".lora_A.")[0]
        b = tensors.get(key.replace(".lora_A.", ".lora_B."))
        if b is None:
            raise CheckpointError(f"{weights} has {key} without its lora_B.", "Re-download the adapter.")
        base = prefix.removeprefix("base_model.model.") + ".weight"
        out[base] = AdapterDelta(a, b, scaling)
    other = [k for k in tensors if ".lora_A." not in k and ".lora_B." not in k]
    if other or not out:
        raise CheckpointError(f"{weights} holds {'no LoRA factors' if not out else 'non-LoRA tensors: ' + ', '.join(other[:4])}.",
                              "Use a plain LoRA adapter.")
    return out
