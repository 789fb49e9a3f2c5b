"""fp32 master weights, bf16 compute: how openpi's JAX trainer trains pi0 / pi0.5, on one device.

openpi's JAX models keep every parameter in float32 and compute in ``Pi0Config.dtype`` (``"bfloat16"`` by
default): each einsum / dense casts its fp32 kernel to the activation dtype at use, gradients flow back to
the fp32 parameters, the optimizer updates them in fp32. Some modules stay fp32 in compute because their
parameters are fp32 and JAX promotes (RMSNorm scales, the token table, SigLIP's stem and LayerNorms, the
action / time / state projections): the family lists them (``Pi0Model.mixed_precision_fp32``).

FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` is the same scheme for a sharded
actor (``distributed/fsdp.py`` gives the family's fp32 modules their own fp32 units). This module is that
policy without sharding, for a single process or data-parallel ranks (``vlarl sft``) and for the CPU
tests: :func:`compute_in` swaps every parameter not kept fp32 for a differentiable cast copy for the
duration of a block, so the forward runs in bf16 and ``backward`` accumulates float32 gradients into the
float32 parameters (the cast's backward), exactly what FSDP2 does after its all-gather.

Usage::

    with compute_in(model, torch.bfloat16):
        loss = model.supervised_loss(obs, actions)
    loss.backward()            # grads land on the fp32 parameters
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import nn

__all__ = ["compute_in", "from_settings", "keeps_fp32"]


def keeps_fp32(model: nn.Module) -> Callable[[str], bool]:
    """The family's rule for parameters that compute in fp32 (``mixed_precision_fp32(name)``), else none."""
    rule = getattr(model, "mixed_precision_fp32", None)
    return rule if callable(rule) else (lambda name: False)


@contextmanager
def compute_in(model: nn.Module, dtype: torch.dtype, keep: Callable[[str], bool] | None = None) -> Iterator[None]:
    """Within the block, every floating parameter of ``model`` not kept fp32 (``keep``, default the family's
    rule) is replaced by ``param.to(dtype)`` (a differentiable copy); the parameters themselves are put back
    on exit, untouched. ``dtype=torch.float32`` is a no-op."""
    keep = keep or keeps_fp32(model)
    swapped: list[tuple[nn.Module, str, nn.Parameter]] = []
    if dtype != torch.float32:
        for module_name, module in model.named_modules():
            for name, param in list(module._parameters.items()):
                full = f"{module_name}.{name}" if module_name else name
                if param is None or not param.is_floating_point() or param.dtype == dtype or keep(full):
                    continue
                swapped.append((module, name, param))
                del module._parameters[name]
                setattr(module, name, param.to(dtype))
    try:
        yield
    finally:
        for module, name, param in reversed(swapped):
            delattr(module, name)
            module._parameters[name] = param


def from_settings(model: nn.Module, master: str | None, param_dtype: str | None, say: object = print
                  ) -> Callable[[], AbstractContextManager[None]]:
    """The compute policy a recipe selects without FSDP: ``actor.model.precision`` fp32 (the master weights)
    with ``actor.fsdp_config.mixed_precision.param_dtype`` bf16 / fp16 -> :func:`compute_in` that dtype
    (announced); anything else -> no policy (the weights' own dtype)."""
    from vlarl_cli.precision import canonical, to_dtype

    if param_dtype is None or canonical(param_dtype) == "fp32" or canonical(master or "fp32") != "fp32":
        return nullcontext
    dtype = to_dtype(param_dtype)
    say(f"precision: fp32 master weights, {canonical(param_dtype)} compute (the family's fp32 modules kept), "  # type: ignore[operator]
        "as openpi's JAX trainer")
    return lambda: compute_in(model, dtype)
