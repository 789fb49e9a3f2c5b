"""``vlarl rl-train --dry-run``: see the placement, the model sizes and an out-of-memory before renting GPUs.

Builds the policy on the ``meta`` device (no memory, no weights), counts parameters, and estimates the
memory each device needs for the actor (weights, gradients, AdamW states, sharded by FSDP over the actor
ranks, or moved to the host by ``cpu_offload`` / ``enable_offload``), the rollout copy, and the host
memory of the LIBERO env processes (~1.7 GB each, measured; REFERENCE.md section 1).
Activations are not included: they depend on sequence length and micro-batch size; the estimate says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vlarl_cli.config.schema import VlarlConfig

GIB = 1024**3
LIBERO_ENV_BYTES = int(1.7 * GIB)  # RSS of one LIBERO env process, measured on these machines


@dataclass(frozen=True)
class ParamCount:
    total: int
    trainable: int
    value_head: int


@dataclass(frozen=True)
class MemoryEstimate:
    weights: float
    gradients: float
    optimizer: float
    rollout_weights: float
    host_offload: float
    env_host: float

    @property
    def device_total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.rollout_weights


def count_parameters(module: torch.nn.Module) -> ParamCount:
    seen: set[int] = set()
    total = trainable = value = 0
    for name, p in module.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        if p.requires_grad:
            trainable += p.numel()
        if "value_head" in name:
            value += p.numel()
    return ParamCount(total, trainable, value)


def _bytes_per(precision: str | None, device_is_gpu: bool = True) -> int:
    return 2 if precision in ("bf16", "bfloat16", "fp16", "float16") and device_is_gpu else 4


def estimate_memory(config: VlarlConfig, params: ParamCount, world_size: int) -> dict[str, MemoryEstimate]:
    """Per-component-device memory in bytes for each device rank kind."""
    placement = config.cluster.placement(world_size)
    actor_ranks = placement["actor"]
    fsdp = config.actor.fsdp_config
    shard = len(actor_ranks) if fsdp.sharding_strategy in ("full_shard", "hybrid_shard") else 1
    grad_opt_shard = len(actor_ranks) if fsdp.sharding_strategy != "no_shard" else 1
    compute = _bytes_per(config.actor.model.precision)
    # FSDP mixed precision keeps fp32 master weights (sharded) and all-gathers compute-dtype copies
    master = 4
    weights = params.total * master / shard
    grads = params.trainable * master / grad_opt_shard
    optim = 2 * params.trainable * 4 / grad_opt_shard  # AdamW exp_avg + exp_avg_sq in fp32
    host = 0.0
    if fsdp.cpu_offload:
        host += weights + grads + optim
        weights = grads = optim = 0.0
    elif config.actor.enable_offload:
        host += weights + optim  # moved out while envs and rollout run; peak on device is unchanged
    rollout_copy = float(params.total * compute)
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
            env_host=envs_per_env_rank * LIBERO_ENV_BYTES if on_env else 0.0,
        )
    return out


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


def dry_run(config: VlarlConfig, world_size: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    placement = config.cluster.placement(world_size)
    console.print(f"[bold]Placement[/] on {world_size} device(s), {config.cluster.num_nodes} node(s):")
    for comp in ("env", "rollout", "actor"):
        console.print(f"  {comp:8s} -> devices {_ranges(placement[comp])}")
    console.print(f"  pipeline stages: {config.rollout.pipeline_stage_num}; train envs: {config.train_num_envs}; "
                  f"samples per iteration: {config.samples_per_iteration()}; "
                  f"optimizer steps per iteration: "
                  f"{config.algorithm.update_epoch * config.samples_per_iteration() // config.actor.global_batch_size}")
    policy = build_meta_policy(config)
    params = count_parameters(policy)
    console.print(f"[bold]Model[/] {config.actor.model.model_type} ({config.actor.model.preset or 'full'} size): "
                  f"{params.total / 1e9:.3f}B parameters, {params.trainable / 1e9:.3f}B trainable, "
                  f"value head {params.value_head / 1e6:.2f}M")
    table = Table(title="Estimated memory per device (GiB; activations not included)")
    for col in ("device", "actor weights", "grads", "AdamW", "rollout copy", "device total", "host offload",
                "env host RAM"):
        table.add_column(col, justify="right")
    for rank, est in estimate_memory(config, params, world_size).items():
        table.add_row(rank, *(f"{x / GIB:.2f}" for x in (est.weights, est.gradients, est.optimizer,
                                                          est.rollout_weights, est.device_total,
                                                          est.host_offload, est.env_host)))
    console.print(table)


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
