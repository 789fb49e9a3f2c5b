"""``vlarl rl-train --dry-run``: see the placement, the model sizes and an out-of-memory before renting GPUs.

Builds the policy on the ``meta`` device (no memory, no weights), counts parameters, and estimates the
memory each device needs for the actor (weights, gradients, AdamW states, sharded by FSDP over the actor
ranks, or moved to the host by ``cpu_offload`` / ``enable_offload``), the rollout copy, and the host
memory of the envs (each simulator's measured figures: LIBERO ~1.7 GB per env process, REFERENCE.md section
1; ManiSkill one process per env rank, ``envs/maniskill/simulator.py``).
Activations: each family declares the transformer stacks its backward keeps (``activation_stacks`` on the
policy, :mod:`vlarl_cli.policies.activations`); one micro-batch of them, in the compute dtype, is added to
every actor device (an estimate from the shapes, to be calibrated against a measured peak on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from vlarl_cli.config.schema import VlarlConfig
from vlarl_cli.envs import registry

GIB = 1024**3
# The envs' host memory is each simulator's fact (``envs/<sim>/simulator.py``: rank_bytes, env_bytes).
# The largest machines one can rent (2026): 192 GB accelerators (B200 / MI300X) and ~4 TiB of host memory
# per node (8-socket or high-memory cloud instances). A plan above these fits on no machine at all.
LARGEST_DEVICE_BYTES = 192 * 10**9
LARGEST_HOST_BYTES = 4 * 1024 * GIB
RLINF_PLACEHOLDER = "/path/to/"  # RLinf recipes' model_path before the user fills it in


@dataclass(frozen=True)
class ParamCount:
    total: int
    trainable: int
    value_head: int
    total_bytes: int  # in the dtype each parameter is built in (bf16 families: 2 bytes each)
    trainable_bytes: int


@dataclass(frozen=True)
class MemoryEstimate:
    weights: float
    gradients: float
    optimizer: float
    rollout_weights: float
    host_offload: float
    env_host: float
    activations: float = 0.0  # one micro-batch's kept activations (actor devices)
    #: AdamW's step (torch's multi-tensor path) allocates one moment-sized temporary (the square root of
    #: exp_avg_sq) after the backward has freed the activations: the peak is the larger of the two
    optimizer_step: float = 0.0

    @property
    def device_total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.rollout_weights
                + max(self.activations, self.optimizer_step))


def count_parameters(module: torch.nn.Module) -> ParamCount:
    seen: set[int] = set()
    total = trainable = value = total_bytes = trainable_bytes = 0
    for name, p in module.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        total_bytes += p.numel() * p.element_size()
        if p.requires_grad:
            trainable += p.numel()
            trainable_bytes += p.numel() * p.element_size()
        if "value_head" in name:
            value += p.numel()
    return ParamCount(total, trainable, value, total_bytes, trainable_bytes)


@dataclass(frozen=True)
class ActivationPlan:
    """One micro-batch's kept activations on an actor device (``bytes``), from the family's stacks."""

    bytes: int
    micro_batch: int
    dtype: torch.dtype
    stacks: tuple[Any, ...]


def compute_dtype(config: VlarlConfig, policy: torch.nn.Module) -> torch.dtype:
    """The dtype activations take on a GPU: FSDP's / the mixed-precision ``param_dtype`` when set, else the
    dtype most parameters are built in."""
    from vlarl_cli.precision import to_dtype

    param_dtype = config.actor.fsdp_config.mixed_precision.param_dtype
    if param_dtype:
        return to_dtype(param_dtype)
    counts: dict[torch.dtype, int] = {}
    for p in policy.parameters():
        if p.is_floating_point():
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return max(counts, key=counts.__getitem__) if counts else torch.float32


def activation_plan(config: VlarlConfig, policy: torch.nn.Module) -> ActivationPlan | None:
    """The activation term at ``actor.micro_batch_size``; None for a family that declares no stacks (the
    toy policies: a few kilobytes)."""
    from vlarl_cli.policies.activations import activation_bytes

    declare = getattr(policy, "activation_stacks", None)
    if declare is None:
        return None
    stacks = tuple(declare())
    dtype, micro = compute_dtype(config, policy), config.actor.micro_batch_size
    return ActivationPlan(activation_bytes(stacks, micro, dtype), micro, dtype, stacks)


def estimate_memory(config: VlarlConfig, params: ParamCount, world_size: int,
                    activations: float = 0.0) -> dict[str, MemoryEstimate]:
    """Per-component-device memory in bytes for each device rank kind; ``activations``: one micro-batch's
    kept activations (:func:`activation_plan`), on every actor device."""
    placement = config.cluster.placement(world_size)
    actor_ranks = placement["actor"]
    fsdp = config.actor.fsdp_config
    shard = len(actor_ranks) if fsdp.sharding_strategy in ("full_shard", "hybrid_shard") else 1
    grad_opt_shard = len(actor_ranks) if fsdp.sharding_strategy != "no_shard" else 1
    # the sharded weights, their gradients and AdamW's two moments (zeros_like) are in the dtype each parameter
    # is built in (fp32 masters for an fp32 build with a bf16 FSDP param_dtype; bf16 for a bf16 build)
    weights = params.total_bytes / shard
    grads = params.trainable_bytes / grad_opt_shard
    optim = 2 * params.trainable_bytes / grad_opt_shard  # AdamW exp_avg + exp_avg_sq
    step = params.trainable_bytes / grad_opt_shard  # the step's temporary (measured: GR00T N1.6 on an H200)
    host = 0.0
    if fsdp.cpu_offload:
        host += weights + grads + optim
        weights = grads = optim = step = 0.0
    elif config.actor.enable_offload:
        host += weights + optim  # moved out while envs and rollout run; peak on device is unchanged
    rollout_copy = float(params.total_bytes)  # a rollout rank builds the same family in the same dtype
    envs_per_env_rank = config.train_num_envs / max(1, len(placement["env"]))
    from vlarl_cli.distributed.placement import rollout_copy_ranks

    # the rollout samples with the actor module itself unless it needs its own copy (distributed.placement)
    copies = rollout_copy_ranks(placement, world_size, len(actor_ranks) > 1 and fsdp.sharding_strategy != "no_shard")
    out: dict[str, MemoryEstimate] = {}
    for rank in range(world_size):
        on_actor = rank in actor_ranks
        on_env = rank in placement["env"]
        out[str(rank)] = MemoryEstimate(
            weights=weights if on_actor else 0.0,
            gradients=grads if on_actor else 0.0,
            optimizer=optim if on_actor else 0.0,
            rollout_weights=rollout_copy if rank in copies and not (on_actor and config.rollout.enable_offload)
            else 0.0,
            host_offload=host if on_actor else 0.0,
            env_host=env_host_bytes(config, envs_per_env_rank) if on_env else 0.0,
            activations=activations if on_actor else 0.0,
            optimizer_step=step if on_actor else 0.0,
        )
    return out


def env_host_bytes(config: VlarlConfig, envs: float) -> float:
    """Host memory of one env rank's ``envs`` training envs, from its simulator's facts (``envs/registry.py``:
    a process per LIBERO env, one process for ManiSkill's scenes)."""
    simulator = registry.get(config.env.train.env_type)
    return simulator.rank_bytes + envs * simulator.env_bytes


def check_envs_fit(config: VlarlConfig, world_size: int) -> None:
    """Before a launch: refuse a number of training envs whose host memory no machine has (the dry run only warns,
    so that it can still print the plan)."""
    from vlarl_cli.errors import ConfigError

    env_ranks = config.cluster.placement(world_size)["env"]
    per_node = max(1, world_size // config.cluster.num_nodes)
    fullest = max(sum(1 for rank in env_ranks if rank // per_node == node) for node in range(config.cluster.num_nodes))
    need = fullest * env_host_bytes(config, config.train_num_envs / max(1, len(env_ranks)))
    if need > LARGEST_HOST_BYTES:
        raise ConfigError(f"{config.train_num_envs:,} {config.env.train.env_type} training envs need ~{need / GIB:,.0f} "
                          f"GiB of host memory on one node, more than any machine has ({LARGEST_HOST_BYTES / GIB:,.0f} "
                          "GiB).", "Use fewer envs (env.train.total_num_envs) or more nodes; `--dry-run` prints "
                          "the whole memory plan.")


def memory_warnings(config: VlarlConfig, estimates: dict[str, MemoryEstimate], world_size: int) -> list[str]:
    """Sentences for a plan that no machine can hold: one device, or one node's host memory, too big."""
    warnings: list[str] = []
    worst = max(estimates.items(), key=lambda kv: kv[1].device_total)
    if worst[1].device_total > LARGEST_DEVICE_BYTES:
        warnings.append(f"device {worst[0]} needs ~{worst[1].device_total / GIB:,.0f} GiB, more "
                        f"than any accelerator has ({LARGEST_DEVICE_BYTES / GIB:.0f} GiB): shard over more actor "
                        "devices (fsdp full_shard), offload (actor.enable_offload, fsdp_config.cpu_offload), keep "
                        "fewer activations (a smaller actor.micro_batch_size, actor.model.gradient_checkpointing=true) "
                        "or use a smaller model")
    per_node = max(1, world_size // config.cluster.num_nodes)
    host: dict[int, float] = {}
    for rank, est in estimates.items():
        host[int(rank) // per_node] = host.get(int(rank) // per_node, 0.0) + est.env_host + est.host_offload
    node, need = max(host.items(), key=lambda kv: kv[1])
    if need > LARGEST_HOST_BYTES:
        warnings.append(f"node {node} needs ~{need / GIB:,.0f} GiB of host memory ({config.train_num_envs} "
                        f"{config.env.train.env_type} envs, plus offloaded state), more than any "
                        f"machine has ({LARGEST_HOST_BYTES / GIB:,.0f} GiB): use fewer envs "
                        "(env.train.total_num_envs) or more nodes")
    return warnings


#: the plan is within 15% of every peak measured on a GPU (tests/training/test_gpu_calibration.py): a micro-batch
#: "fits" a device when its plan, grown by that margin, is at most the device's memory
FIT_MARGIN = 1.15


def _size(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f} GiB" if nbytes >= GIB / 10 else f"{nbytes / 2**20:.1f} MiB"


@dataclass(frozen=True)
class DeviceFit:
    """Which micro-batch of a plan fits one device, and what does not depend on the micro-batch."""

    device_bytes: float
    recipe_micro_batch: int
    planned: dict[int, MemoryEstimate]  # the fullest actor device's plan at the recipe's micro-batch and halvings
    fixed: MemoryEstimate  # the same with no activations: weights, gradients, AdamW moments, the step, rollout copy
    params: ParamCount
    world_size: int = 1

    def fits(self, estimate: MemoryEstimate) -> bool:
        return estimate.device_total * FIT_MARGIN <= self.device_bytes

    @property
    def micro_batch(self) -> int | None:
        """The recipe's micro-batch or its largest halving that fits with the margin; 1 when only the plan without
        the margin fits; None when not even that (:func:`refusal` says why and what to do)."""
        fitting = next((mb for mb, est in self.planned.items() if self.fits(est)), None)
        if fitting is None and self.planned[1].device_total <= self.device_bytes:
            return 1
        return fitting

    def reason(self) -> str:
        """One sentence on the choice, with the figures."""
        dev, mb, recipe = self.device_bytes, self.micro_batch, self.recipe_micro_batch
        at = f"{_size(self.planned[recipe].device_total)} planned at the recipe's micro-batch {recipe}"
        margin = f"{_size(dev)} with the {FIT_MARGIN:.2f} margin"
        if mb is None:
            return (f"{at}; what does not depend on the micro-batch alone, {_size(self.fixed.device_total)}, "
                    f"exceeds {_size(dev)}: no micro-batch fits")
        planned = self.planned[mb].device_total
        if mb == recipe:
            return f"{at} fits {margin}"
        if not self.fits(self.planned[mb]):
            return f"{at}; only micro-batch 1 fits {_size(dev)}, and only without the margin ({_size(planned)})"
        return f"{at} does not fit {margin}; micro-batch {mb} does ({_size(planned)} planned)"


def plan_device_fit(config: VlarlConfig, device_bytes: float, policy: torch.nn.Module | None = None,
                    world_size: int = 1) -> DeviceFit:
    """The fullest actor device's plan over ``world_size`` devices at the recipe's micro-batch and each halving
    down to 1, against ``device_bytes``; ``policy``: the configured family already built (meta or real), else
    built on meta."""
    meta = build_meta_policy(config) if policy is None else policy
    params, plan = count_parameters(meta), activation_plan(config, meta)
    recipe = config.actor.micro_batch_size

    def fullest(activations: float) -> MemoryEstimate:
        return max(estimate_memory(config, params, world_size, activations).values(), key=lambda e: e.device_total)

    planned, mb = {}, recipe
    while mb >= 1:
        planned[mb] = fullest(0.0 if plan is None else plan.bytes * mb / plan.micro_batch)
        mb //= 2
    return DeviceFit(float(device_bytes), recipe, planned, fullest(0.0), params, world_size)


#: device sizes the dry run reports a fit for (GiB as torch reports them: 80 GB A100 / H100, the H200 measured)
COMMON_DEVICES = {"24 GiB": 24 * GIB, "48 GiB": 48 * GIB, "80 GB": 79.6 * GIB, "H200 (139.8 GiB)": 139.8 * GIB}


def fit_summary(config: VlarlConfig, policy: torch.nn.Module, world_size: int) -> str:
    """One line: the micro-batch-independent part of the fullest actor device, what a sample adds, and the largest
    micro-batch (the configured one or a halving) each common device size holds with the calibration margin."""
    plan = plan_device_fit(config, 0.0, policy, world_size)  # the plan does not depend on the device's size
    fits = {name: replace(plan, device_bytes=size) for name, size in COMMON_DEVICES.items()}
    fixed, recipe = plan.fixed, plan.recipe_micro_batch
    per_sample = plan.planned[recipe].activations / recipe
    held = ", ".join(name for name, v in (("weights", fixed.weights), ("gradients", fixed.gradients),
                                          ("AdamW moments", fixed.optimizer), ("the step's temporary",
                                          fixed.optimizer_step), ("the rollout copy", fixed.rollout_weights)) if v)
    def largest(fit: DeviceFit) -> str:
        mb = fit.micro_batch
        return "none" if mb is None else f"{mb}" + ("" if fit.fits(fit.planned[mb]) else " (only without the margin)")

    sizes = "; ".join(f"{name}: {largest(fit)}" for name, fit in fits.items())
    none = any(fit.micro_batch is None for fit in fits.values())
    return (f"Fit: {_size(fixed.device_total)} of the fullest actor device does not depend on the micro-batch "
            f"({held or 'nothing'}); each sample adds {per_sample / GIB:.2f} GiB of activations. Largest micro-batch "
            f"(the configured {recipe} or a halving) with the {FIT_MARGIN:.2f} margin per device size: {sizes}."
            + (" None: no micro-batch helps there; shard with FSDP over more devices, offload "
               "(actor.fsdp_config.cpu_offload) or train LoRA adapters (actor.model.is_lora)." if none else ""))


def check_device_fits(config: VlarlConfig, world_size: int, device: torch.device | str) -> None:
    """Before the actor is built on a GPU, the plan against its memory: a :class:`ConfigError` naming the figures
    and the fixes when what does not depend on the micro-batch alone exceeds it (no micro-batch can help); a
    printed warning naming the micro-batch that fits when only the configured one does not. Nothing on the CPU."""
    from vlarl_cli.errors import ConfigError

    device = torch.device(device)
    if device.type != "cuda":
        return
    fit = plan_device_fit(config, torch.cuda.get_device_properties(device).total_memory, world_size=world_size)
    if fit.micro_batch is None:
        raise ConfigError(refusal(config, fit))
    if fit.micro_batch != fit.recipe_micro_batch:
        _warn(f"{fit.reason()}: this run will likely run out of memory in its first update; "
              f"actor.micro_batch_size={fit.micro_batch} fits (the global batch stays: more accumulation steps).")


def refusal(config: VlarlConfig, fit: DeviceFit) -> str:
    """One paragraph for a plan whose micro-batch-independent part alone exceeds the device: the figures, and the
    fixes with theirs (FSDP over N devices, CPU offload, LoRA, a smaller recipe)."""
    f, dev, params = fit.fixed, fit.device_bytes, fit.params
    where = "one device" if fit.world_size == 1 else f"{fit.world_size} devices"
    parts = (f"weights {_size(f.weights)}, gradients {_size(f.gradients)}, AdamW moments {_size(f.optimizer)}, "
             f"the optimizer step's temporary {_size(f.optimizer_step)}"
             + (f", the rollout copy {_size(f.rollout_weights)}" if f.rollout_weights else ""))
    offload = _with_fsdp(config, cpu_offload=True)
    off = max(e.device_total for e in estimate_memory(offload, params, fit.world_size,
                                                       fit.planned[1].activations).values())
    return (f"{config.actor.model.model_type} cannot train on {where} of {_size(dev)} at any micro-batch: what "
            f"does not depend on the micro-batch alone is {_size(f.device_total)} ({parts}), so halving "
            f"the micro-batch (configured: {fit.recipe_micro_batch}) cannot help. Fixes: {_fsdp_devices(config, params, fit)}; "
            f"or keep weights, gradients and AdamW on the host (actor.fsdp_config.cpu_offload=true: {_size(off)} "
            f"on the device at micro-batch 1, slower updates); or train LoRA adapters (actor.model.is_lora=true: "
            f"gradients and AdamW for the adapters only, about the weights' {_size(f.weights)} stay); or a "
            f"smaller recipe or model.")


def _with_fsdp(config: VlarlConfig, **update: Any) -> VlarlConfig:
    fsdp = config.actor.fsdp_config.model_copy(update=update)
    return config.model_copy(update={"actor": config.actor.model_copy(update={"fsdp_config": fsdp})})


def _fsdp_devices(config: VlarlConfig, params: ParamCount, fit: DeviceFit, largest: int = 1024) -> str:
    """The fewest devices (a power of two) over which FSDP full_shard fits, at the largest micro-batch there."""
    sharded = _with_fsdp(config, sharding_strategy="full_shard")
    n = 2 * fit.world_size
    while n <= largest:
        for mb, est in fit.planned.items():
            worst = max(e.device_total for e in estimate_memory(sharded, params, n, est.activations).values())
            if worst * FIT_MARGIN <= fit.device_bytes:
                return (f"shard the actor with FSDP over {n} such devices (actor.fsdp_config.sharding_strategy="
                        f"full_shard, cluster.component_placement over {n} devices: {_size(worst)} each at "
                        f"micro-batch {mb})")
        n *= 2
    return f"FSDP does not fit it on up to {largest} such devices"


def build_meta_policy(config: VlarlConfig) -> torch.nn.Module:
    """The configured family at its full size on the meta device (tiny when the preset says so)."""
    # torch 2.6 imports torch._dynamo lazily and that import builds tensors, which fails under a meta
    # default device (transformers then reports "Could not import module 'Qwen3Model'"): import it first
    import torch._dynamo

    from vlarl_cli.policies.registry import build_policy

    model = config.actor.model
    preset = model.preset or "full"
    meta_model = model.model_copy(update={"model_path": None, "preset": preset})
    return build_policy(meta_model, torch.device("meta"))


def preflight(config: VlarlConfig) -> None:
    """What a launch checks before it trains, without starting anything: the weights of ``model_path``
    are present and their safetensors headers intact, and the run folder can be written."""
    from pathlib import Path

    from vlarl_cli.checkpoints.atomic import check_writable_folder
    from vlarl_cli.checkpoints.detect import tensor_table, weight_files
    from vlarl_cli.errors import CheckpointError
    from vlarl_cli.training.common import resolve_model_path

    model_path = config.actor.model.model_path
    if model_path is not None and model_path.startswith(RLINF_PLACEHOLDER):
        # RLinf's published recipes say "/path/to/model/<name>" for "put your download here": plan anyway
        _warn(f'actor.model.model_path "{model_path}" is the placeholder of an RLinf recipe; a launch needs the '
              "checkpoint there (`vlarl download <repo> --local-dir <folder>`, then actor.model.model_path=<folder>). "
              "The plan below is for the full-size architecture of the family.")
        check_writable_folder(config.runner.logger.log_path, "The run folder (runner.logger.log_path)")
        return
    try:
        path = resolve_model_path(model_path)  # CheckpointError for a missing folder / hub id
    except CheckpointError as err:
        if "hub cache" not in err.problem:
            raise
        # planning usually happens before the weights are fetched (often on another machine): say it, go on
        _warn(f"{err.problem} A launch on this machine would refuse it; {err.fix}")
        path = None
    if path is not None and Path(path).is_dir():
        tensor_table(weight_files(Path(path)))  # CheckpointError naming a truncated or lying file
    check_writable_folder(config.runner.logger.log_path, "The run folder (runner.logger.log_path)")


def _warn(text: str) -> None:
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True, highlight=False, soft_wrap=True).print(Text.assemble(("warning: ", "bold yellow"), text))


def dry_run(config: VlarlConfig, world_size: int) -> None:
    from rich.console import Console
    from rich.table import Table

    preflight(config)
    console = Console()
    placement = config.cluster.placement(world_size)
    console.print(f"[bold]Placement[/] on {world_size} device(s), {config.cluster.num_nodes} node(s):")
    for comp in ("env", "rollout", "actor"):
        console.print(f"  {comp:8s} -> devices {_ranges(placement[comp])}")
    console.print(f"  pipeline stages: {config.rollout.pipeline_stage_num}; train envs: {config.train_num_envs}; "
                  f"samples per iteration: {config.samples_per_iteration()}; "
                  f"optimizer steps per iteration: "
                  f"{config.algorithm.update_epoch * config.samples_per_iteration() // config.actor.global_batch_size}")
    console.print(cpu_plan(config, world_size).describe("rank 0 if run on this machine"), soft_wrap=True, markup=False)
    from vlarl_cli.training.envs import render_deviations

    for line in render_deviations(config):
        _warn(f"deviation: {line}")
    policy = build_meta_policy(config)
    params = count_parameters(policy)
    console.print(f"[bold]Model[/] {config.actor.model.model_type} ({config.actor.model.preset or 'full'} size): "
                  f"{params.total / 1e9:.3f}B parameters, {params.trainable / 1e9:.3f}B trainable, "
                  f"value head {params.value_head / 1e6:.2f}M")
    plan = activation_plan(config, policy)
    table = Table(title="Estimated memory per device (GiB)")
    for col in ("device", "actor weights", "grads", "AdamW", "activations", "rollout copy", "device total",
                "host offload", "env host RAM"):
        table.add_column(col, justify="right")
    estimates = estimate_memory(config, params, world_size, plan.bytes if plan else 0.0)
    for rank, est in estimates.items():
        table.add_row(rank, *(f"{x / GIB:.2f}" for x in (est.weights, est.gradients, est.optimizer, est.activations,
                                                          est.rollout_weights, est.device_total,
                                                          est.host_offload, est.env_host)))
    console.print(table)
    console.print(activation_summary(plan, estimates))
    console.print(fit_summary(config, policy, world_size), soft_wrap=True, markup=False)
    for warning in memory_warnings(config, estimates, world_size):
        _warn(f"this plan fits on no machine: {warning}.")


def cpu_plan(config: VlarlConfig, world_size: int) -> Any:
    """Rank 0's CPU budget if the plan ran on this machine (its cores shared by the node's ranks)."""
    from vlarl_cli.distributed.cpu_budget import affinity_cores, cgroup_quota, share
    from vlarl_cli.distributed.device import default_device
    from vlarl_cli.training.envs import rank_budget

    placement = config.cluster.placement(world_size)
    envs = config.train_num_envs // max(1, len(placement["env"])) if 0 in placement["env"] else 0
    machine = share(affinity_cores(), cgroup_quota(), max(1, world_size // config.cluster.num_nodes))
    return rank_budget(config, default_device(0).type, envs, machine=machine)


def activation_summary(plan: ActivationPlan | None, estimates: dict[str, MemoryEstimate]) -> str:
    """One line on the activation term: what it counts and its share of the fullest actor device."""
    if plan is None:
        return "Activations: this family declares no activation stacks (toy policies: negligible); not counted."
    actor = [e for e in estimates.values() if e.activations]
    total = max((e.device_total for e in actor), default=0.0)
    share = f"{100 * plan.bytes / total:.0f}% of the fullest actor device" if total else "no actor device"
    kept = ", ".join(f"{s.name} {s.layers}x{s.tokens} tok" + (" (checkpointed)" if s.checkpointed else "")
                     for s in plan.stacks) or "nothing (every stack frozen)"
    dtype = str(plan.dtype).removeprefix("torch.")
    return (f"Activations: {plan.bytes / GIB:.2f} GiB per actor device at micro-batch {plan.micro_batch} in {dtype} "
            f"({share}; kept by: {kept}). An estimate from the shapes: glue outside the layers is not counted.")


def _ranges(ranks: list[int]) -> str:
    if not ranks:
        return "-"
    parts, start, prev = [], ranks[0], ranks[0]
    for r in [*ranks[1:], None]:  # type: ignore[list-item]
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(parts)
