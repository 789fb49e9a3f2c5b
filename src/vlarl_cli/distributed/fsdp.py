"""FSDP2 sharding of the actor (``torch.distributed.fsdp.fully_shard``) and full-state checkpoints.

Wrap policy: every submodule whose class name is listed in ``fsdp_config.wrap_policy.
transformer_layer_cls_to_wrap`` (e.g. ``Qwen3DecoderLayer``, ``Siglip2EncoderLayer``) becomes one sharding
unit, falling back to the family's own ``fsdp_wrap_classes`` attribute, then the root. ``sample`` and
``evaluate`` are registered as forward methods so that calling them gathers the parameters exactly like
``forward`` does. Mixed precision (bf16 params / reductions) applies on GPUs only; CPU runs in fp32 with
gloo through the same code. With fp32 master weights and a bf16 ``param_dtype`` (JAX's scheme, openpi's
default), the modules a family keeps fp32 in compute (:func:`fp32_units`) get fp32 units of their own.

Checkpoints are FULL state dicts gathered parameter by parameter onto one owner rank (the actor's first
rank), so a checkpoint saved with any world size loads with any other (or without FSDP at all); loading
gives every rank the full state and each keeps its shards.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from vlarl_cli.errors import ConfigError
from vlarl_cli.precision import to_dtype


def _dtype(name: str | None) -> torch.dtype | None:
    return to_dtype(name) if name else None


def wrap_classes(model: nn.Module, configured: list[str]) -> list[str]:
    names = list(configured) or list(getattr(model, "fsdp_wrap_classes", ()))
    present = {type(m).__name__ for m in model.modules()}
    unknown = [n for n in names if n not in present and n in configured]
    if configured and len(unknown) == len(configured):
        raise ConfigError(f"fsdp_config.wrap_policy.transformer_layer_cls_to_wrap names {unknown}, but the model "
                          "has no module of those classes.",
                          f"Use class names of this model, e.g. {sorted(present)[:8]}, or leave the list empty.")
    return [n for n in names if n in present]


#: FSDP2 on the CPU (gloo) was checked equal to one process on torch 2.13 (tests/distributed/
#: test_data_parallel.py); 2.6 fails inside fully_shard on the CPU (no Stream.record_event) and 2.7.1 gives
#: a different update (approx_kl 0.070 vs 0.361). The package allows torch>=2.6, which is for FSDP2 on CUDA.
CPU_FSDP_MIN_TORCH = (2, 13)


def _check_cpu_fsdp(device: torch.device) -> None:
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if device.type == "cpu" and version < CPU_FSDP_MIN_TORCH:
        raise ConfigError(f"FSDP2 on the CPU is supported from torch {'.'.join(map(str, CPU_FSDP_MIN_TORCH))} "
                          f"(the version it is checked on); this is torch {torch.__version__} (2.6 fails inside "
                          "fully_shard, 2.7.1's updates differ from one process's).",
                          "Install torch==2.13.0 (scripts/install.sh does), or run the actor on CUDA devices.")


def fp32_units(model: nn.Module) -> list[nn.Module]:
    """The top-most submodules whose every parameter the family keeps fp32 in compute under mixed precision
    (``model.mixed_precision_fp32(name)``, :mod:`vlarl_cli.distributed.mixed_precision`): under a bf16
    ``param_dtype`` each becomes its own FSDP unit with an fp32 policy, as JAX computes them (pi0: RMSNorm
    scales, the token table, SigLIP's stem and LayerNorms, the action / time / state projections)."""
    rule = getattr(model, "mixed_precision_fp32", None)
    if not callable(rule):
        return []
    units: list[nn.Module] = []

    def visit(prefix: str, module: nn.Module) -> None:
        names = [prefix + n for n, _ in module.named_parameters()]
        if module is not model and names and all(rule(n) for n in names):
            units.append(module)
            return
        for name, child in module.named_children():
            visit(f"{prefix}{name}.", child)

    visit("", model)
    return units


def _mixed_policies(model: nn.Module, param_dtype: str | None, reduce_dtype: str | None
                    ) -> tuple[Any, Any, list[tuple[nn.Module, Any]]]:
    """(policy of the bf16 units, policy of the root, fp32 units with their policy) for FSDP2. A family with
    an fp32 rule keeps those modules fp32 and handles its own input dtypes (no forward-input casts: the
    replayed denoising chain and the noise stay fp32, as in JAX)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = MixedPrecisionPolicy(param_dtype=_dtype(param_dtype), reduce_dtype=_dtype(reduce_dtype))
    keep = fp32_units(model) if param_dtype and to_dtype(param_dtype) != torch.float32 else []
    if not keep:
        return policy, policy, []
    root = MixedPrecisionPolicy(param_dtype=_dtype(param_dtype), reduce_dtype=_dtype(reduce_dtype),
                                cast_forward_inputs=False)
    fp32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=_dtype(reduce_dtype), cast_forward_inputs=False)
    return policy, root, [(m, fp32) for m in keep]


def shard_model(model: nn.Module, *, device: torch.device, class_names: list[str], reshard_after_forward: bool = True,
                param_dtype: str | None = None, reduce_dtype: str | None = None, cpu_offload: bool = False,
                mesh: Any = None) -> nn.Module:
    """Apply ``fully_shard`` to each unit and the root, in place; returns the model. ``mesh``: a 1-D
    DeviceMesh over the actor ranks (default: every rank)."""
    _check_cpu_fsdp(device)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    if mesh is None:
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    root_kwargs = dict(kwargs)
    if device.type == "cuda" and (param_dtype or reduce_dtype):
        unit_policy, root_policy, fp32 = _mixed_policies(model, param_dtype, reduce_dtype)
        kwargs["mp_policy"], root_kwargs["mp_policy"] = unit_policy, root_policy
        for module, policy in fp32:  # children before their parents, as fully_shard requires
            fully_shard(module, **{**kwargs, "mp_policy": policy})
    if cpu_offload:
        kwargs["offload_policy"] = root_kwargs["offload_policy"] = CPUOffloadPolicy()
    units = wrap_classes(model, class_names)
    for module in list(model.modules()):
        if module is not model and type(module).__name__ in units:
            fully_shard(module, **kwargs)
    fully_shard(model, **root_kwargs)
    for method in ("sample", "evaluate"):
        if hasattr(model, method):
            setattr(model, method, _without_views(getattr(model, method)))
            register_fsdp_forward_method(model, method)
    return model


def _without_views(method: Any) -> Any:
    """``method`` whose dataclass output holds no view among its grad-requiring tensors (a copy instead).

    FSDP2 hooks the backward on a wrapped module's outputs; an in-place op on a view output would skip that
    hook and the all-gather, and torch warns about every such output on every rank. The families return views
    of small tensors (sliced log-probs, chunked token log-probs, reshaped values); copying them here keeps the
    rule in one place for every family."""
    import dataclasses
    import functools

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        out = method(*args, **kwargs)
        if dataclasses.is_dataclass(out) and not isinstance(out, type):
            for field in dataclasses.fields(out):
                value = getattr(out, field.name)
                if isinstance(value, torch.Tensor) and value.requires_grad and value._base is not None:
                    setattr(out, field.name, value.clone())
        return out

    return call


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _gather(value: Any, keep: bool) -> Any:
    """A DTensor's full tensor on the CPU (collective over its mesh: every shard holder calls it), returned
    where ``keep``; other values as they are."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        full = value.full_tensor()
        return full.detach().cpu() if keep else None
    return value


def _owner_keeps(owner: int | None) -> bool:
    import torch.distributed as dist

    return owner is None or not dist.is_initialized() or dist.get_rank() == owner


def full_model_state(model: nn.Module, owner: int | None = 0) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict on CPU, complete on global rank ``owner`` (every rank for None) and
    empty elsewhere; plain ``state_dict()`` for unsharded models. Gathered one parameter at a time, so a
    rank never holds more than one full parameter beyond its shards; ``owner`` need not be rank 0 (an
    actor placed on ranks 4-7 keeps its state on rank 4)."""
    if not is_sharded(model):
        return model.state_dict()
    keep = _owner_keeps(owner)
    out: dict[str, torch.Tensor] = {}
    for name, value in model.state_dict().items():
        full = _gather(value, keep)
        if keep:
            out[name] = full.cpu() if isinstance(full, torch.Tensor) else full  # no-op for gathered shards
    return out


def load_full_model_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a full state dict; for sharded models every rank passes the full state (each keeps its shards)."""
    if not is_sharded(model):
        model.load_state_dict(state, strict=True)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, dict(state), options=StateDictOptions(full_state_dict=True))


def _by_name(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with parameter names instead of integer ids (the FQN layout that
    ``get_optimizer_state_dict(full_state_dict=True)`` produces for sharded models)."""
    names = {id(p): n for n, p in model.named_parameters()}
    ordered = [p for g in optimizer.param_groups for p in g["params"]]
    raw = optimizer.state_dict()
    index_to_name = {i: names[id(p)] for i, p in enumerate(ordered)}
    return {"state": {index_to_name[i]: v for i, v in raw["state"].items()},
            "param_groups": [{**g, "params": [index_to_name[i] for i in g["params"]]} for g in raw["param_groups"]]}


def _from_names(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    names = {id(p): n for n, p in model.named_parameters()}
    ordered = [names[id(p)] for g in optimizer.param_groups for p in g["params"]]
    index = {n: i for i, n in enumerate(ordered)}
    missing = [n for g in state["param_groups"] for n in g["params"] if n not in index]
    if missing:
        raise ConfigError(f"Optimizer state names parameters the model does not train: {missing[:5]}.",
                          "Resume with the same trainable-parameter settings the run was started with.")
    optimizer.load_state_dict({
        "state": {index[n]: v for n, v in state["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]],
    })


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, owner: int | None = 0
                         ) -> dict[str, Any]:
    """Optimizer state keyed by parameter name, full (unsharded), complete on global rank ``owner``;
    loads at any world size."""
    state = _by_name(model, optimizer)
    if not is_sharded(model):
        return state
    keep = _owner_keeps(owner)
    # the same parameter order on every rank: the gathers are collectives
    gathered = {name: {k: _gather(v, keep) for k, v in entry.items()} for name, entry in state["state"].items()}
    return {"state": gathered, "param_groups": state["param_groups"]} if keep else {}


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    if not is_sharded(model):
        _from_names(model, optimizer, state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
