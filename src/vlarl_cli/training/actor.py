"""The trained policy on the actor ranks: build (optionally FSDP over the actor ranks), update, save, load.

``actor.enable_offload`` moves the AdamW moments (and the weights, when the rollout samples with a copy of
its own) to the host while the envs and the rollout run; :meth:`Actor.update` brings them back.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vlarl_cli.config.loading import to_yaml
from vlarl_cli.config.schema import VlarlConfig
from vlarl_cli.distributed import dist
from vlarl_cli.distributed.placement import Cluster
from vlarl_cli.errors import CheckpointError
from vlarl_cli.training import checkpoint as ckpt
from vlarl_cli.training.common import build_optimizer, build_scheduler, resolve_model_path
from vlarl_cli.training.dry_run import check_device_fits
from vlarl_cli.training.update import RolloutBatch, UpdateSettings, ppo_update


def build_policy_for(config: VlarlConfig, device: torch.device | str) -> torch.nn.Module:
    """The configured policy (``model_path`` resolved from the hub cache) on ``device``; token policies
    (OpenVLA-OFT) read their sampling temperature from the rollout section."""
    from vlarl_cli.policies.registry import build_policy

    model = config.actor.model.model_copy(update={"model_path": resolve_model_path(config.actor.model.model_path)})
    return build_policy(model, device, temperature=config.rollout.sampling_params.temperature_train)


def build_rollout_policy(config: VlarlConfig, device: torch.device) -> torch.nn.Module:
    """A rollout-only rank's copy of the policy (weights arrive from the actor before each collect)."""
    return build_policy_for(config, device).eval().requires_grad_(False)


def offload_module(module: torch.nn.Module | None, device: torch.device | str | None) -> None:
    """Move a module's parameters, buffers and gradients to ``device`` (no-op for None or when they are
    already there, e.g. on a CPU-only machine). FSDP2 modules move their shards."""
    if module is None or device is None:
        return
    first = next(iter(module.parameters()), None)
    if first is not None and first.device != torch.device(device):
        module.to(device)


def offload_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device | str | None) -> None:
    """``actor.enable_offload``: AdamW moments live on the host while envs and rollout run (no-op for None
    or when they are already there, e.g. on a CPU-only machine)."""
    if device is None:
        return
    # asynchronous only toward a GPU: a non-blocking copy to the host may still be in flight when the host reads
    non_blocking = torch.device(device).type == "cuda"
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and key != "step" and value.device != torch.device(device):
                state[key] = value.to(device, non_blocking=non_blocking)


def update_settings(config: VlarlConfig, world_size: int) -> UpdateSettings:
    """The update's plain numbers; ``world_size`` actor ranks share ``global_batch_size``."""
    algo, actor = config.algorithm, config.actor
    return UpdateSettings(
        update_epoch=algo.update_epoch,
        global_batch_size=actor.global_batch_size // world_size,
        micro_batch_size=actor.micro_batch_size,
        clip_ratio_low=algo.clip_ratio_low,
        clip_ratio_high=algo.clip_ratio_high,
        clip_ratio_c=algo.clip_ratio_c,
        value_clip=algo.value_clip if algo.loss_type == "actor_critic" else None,
        huber_delta=algo.huber_delta,
        entropy_bonus=algo.entropy_bonus,
        kl_beta=algo.kl_beta,
        kl_type=algo.kl_penalty,
        logprob_type=algo.logprob_type,
        loss_agg=algo.loss_agg_func,
        clip_grad=actor.optim.clip_grad,
        critic_warmup_steps=actor.optim.critic_warmup_steps,
        value_coef=1.0 if algo.loss_type == "actor_critic" else 0.0,
        entropy_type=algo.entropy_type,
        clip_log_ratio_min=algo.clip_log_ratio_min,
        clip_log_ratio_max=algo.clip_log_ratio_max,
        policy_loss=algo.policy_loss,
    )


def steps_per_iteration(config: VlarlConfig, actor_ranks: int) -> int:
    """Optimizer steps of one iteration: ``update_epoch`` passes over the mini-batches of one rank."""
    per_rank_batch = config.actor.global_batch_size // actor_ranks
    samples = config.samples_per_iteration() // actor_ranks
    return config.algorithm.update_epoch * max(1, samples // per_rank_batch)


class Actor:
    """The trained policy on an actor rank: optimizer, scheduler, optional FSDP over the actor ranks."""

    def __init__(self, config: VlarlConfig, cluster: Cluster) -> None:
        self.config, self.cluster = config, cluster
        self.group = cluster.groups.get("actor")
        self.sharded = cluster.actor_sharded
        n_actor = len(cluster.roles.actor)
        check_device_fits(config, cluster.ctx.world_size, cluster.device)  # on a GPU: refuse what cannot fit
        policy = build_policy_for(config, cluster.device)
        dist.broadcast_module_(policy, src=cluster.roles.actor[0], group=self.group)
        self.ref_policy = None
        if config.algorithm.kl_beta > 0:  # frozen copy of the starting weights for the KL penalty
            self.ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
        if self.sharded:
            for module in (policy, self.ref_policy):
                if module is not None:
                    self._shard(module)
        self.policy = policy
        self.settings = update_settings(config, n_actor)
        self.reduce = dist.CrossRank(self.group)
        self.critic = config.algorithm.loss_type == "actor_critic" and config.actor.model.effective_add_value_head
        self.optimizer = build_optimizer(policy, config)
        self.weights_offloaded = False
        self.steps_per_iteration = steps_per_iteration(config, n_actor)
        self.scheduler = build_scheduler(self.optimizer, config, self.steps_per_iteration * config.runner.max_epochs)

    def _shard(self, module: torch.nn.Module) -> None:
        from vlarl_cli.distributed import fsdp

        fsdp_cfg = self.config.actor.fsdp_config
        precision = fsdp_cfg.mixed_precision
        fsdp.shard_model(module, device=self.cluster.device,
                         class_names=list(fsdp_cfg.wrap_policy.transformer_layer_cls_to_wrap),
                         reshard_after_forward=fsdp_cfg.reshard_after_forward,
                         param_dtype=precision.param_dtype, reduce_dtype=precision.reduce_dtype,
                         cpu_offload=fsdp_cfg.cpu_offload, mesh=self.cluster.groups.get("mesh"))

    def load(self, path: Path, generators: dict[str, torch.Generator]) -> ckpt.TrainerState:
        from vlarl_cli.distributed import fsdp

        loaded = ckpt.load_checkpoint(path)
        try:
            fsdp.load_full_model_state(self.policy, loaded.model_state)
        except RuntimeError as err:
            detail = " ".join(line.strip() for line in str(err).splitlines()[:3])
            raise CheckpointError(f"Checkpoint {path} does not match the model: {detail[:400]}",
                                  "Resume with the config the run was started with (its config.yaml); if that is "
                                  "the config, the weight file is damaged: resume from an earlier checkpoint.") from None
        fsdp.load_full_optimizer_state(self.policy, self.optimizer, loaded.optimizer_state)
        if loaded.scheduler_state is not None:
            self.scheduler.load_state_dict(loaded.scheduler_state)
        ckpt.restore_rng(loaded, generators)
        return loaded.trainer_state

    def full_state(self, owner: int | None = -1) -> dict[str, torch.Tensor]:
        """The full weights, complete on ``owner`` (default the actor's first rank; None: every actor rank).
        Collective over the actor ranks when sharded."""
        from vlarl_cli.distributed import fsdp

        return fsdp.full_model_state(self.policy, owner=self.cluster.roles.actor[0] if owner == -1 else owner)

    def offload(self, *, weights: bool) -> None:
        """``actor.enable_offload``: before the envs and the rollout run, AdamW state (and the weights, when
        the rollout samples with its own copy) go to the host; :meth:`update` brings them back."""
        if not self.config.actor.enable_offload:
            return
        offload_optimizer_state(self.optimizer, "cpu")
        if weights:
            offload_module(self.policy, "cpu")
            self.weights_offloaded = True

    def update(self, batch: RolloutBatch, generator: torch.Generator, step_offset: int) -> dict[str, float]:
        """PPO passes over ``batch`` (this rank's env columns), gradients averaged over the actor ranks."""
        if self.config.actor.enable_offload:
            offload_module(self.policy, self.cluster.device if self.weights_offloaded else None)
            self.weights_offloaded = False
            offload_optimizer_state(self.optimizer, self.cluster.device)
        # The update stays in eval mode: dropout would make the first ratio != 1 (families also
        # replace dropout by identity where RLinf's disable_dropout asks for it).
        grad_sync = None
        if len(self.cluster.roles.actor) > 1 and not self.sharded:
            group = self.group

            def grad_sync(module: torch.nn.Module) -> None:
                dist.gradient_all_reduce(module, group)

        return ppo_update(self.policy, self.optimizer, batch, self.settings, generator=generator,
                          scheduler=self.scheduler, ref_policy=self.ref_policy, grad_sync=grad_sync,
                          step_offset=step_offset, reduce=self.reduce, env_columns=self.cluster.actor_columns)

    def save(self, run_dir: Path, generators: dict[str, torch.Generator], state: ckpt.TrainerState) -> Path | None:
        """An atomic checkpoint, written by the actor's first rank (collective over the actor ranks)."""
        from vlarl_cli.distributed import fsdp

        # collective over the actor ranks when sharded; complete on the actor's first rank, which writes
        owner = self.cluster.roles.actor[0]
        model_state = fsdp.full_model_state(self.policy, owner=owner)
        optimizer_state = fsdp.full_optimizer_state(self.policy, self.optimizer, owner=owner)
        path = None
        if self.cluster.is_actor_source:
            path = ckpt.save_checkpoint(run_dir, model_state=model_state, optimizer_state=optimizer_state,
                                        export=family_exporter(self.policy, model_state, self.config),
                                        scheduler=self.scheduler, generators=generators,
                                        trainer_state=state, config_yaml=to_yaml(self.config))
        dist.barrier(self.group)
        return path


def family_exporter(policy: torch.nn.Module, model_state: dict[str, torch.Tensor], config: VlarlConfig
                    ) -> Callable[[Path], None] | None:
    """``folder -> None`` writing the policy with its family's ``save_policy(format="vlarl")``, or None when
    the family has no checkpoint module (the toy policies). A sharded policy is first rebuilt on the CPU from
    the gathered full state."""
    from vlarl_cli.distributed import fsdp
    from vlarl_cli.policies.registry import family_module

    try:
        module: Any = importlib.import_module(f"{family_module(config.actor.model.model_type).__name__}.checkpoint")
    except ImportError:
        return None
    target = policy
    if fsdp.is_sharded(policy):
        from vlarl_cli.policies.registry import build_policy

        model = config.actor.model.model_copy(update={"model_path": resolve_model_path(config.actor.model.model_path)})
        target = build_policy(model, "cpu")
        target.load_state_dict(model_state)

    def export(folder: Path) -> None:
        module.save_policy(target, folder, format="vlarl")

    return export
