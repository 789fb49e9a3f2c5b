"""The PPO / GRPO training loop as short named steps: sync, collect, advantages, update, evaluate, checkpoint.

    vlarl rl-train --config quickstart                       # one process
    vlarl rl-train --config quickstart --nproc-per-node 2    # 2 processes (gloo on CPU, NCCL on GPUs)

One iteration (RLinf's embodied runner, on torch.distributed instead of Ray):
0. ``sync``: with a separated placement, actor rank ``A[0]`` sends the weights to the ranks that hold their
   own rollout copy (``distributed.weight_sync``), only when an optimizer step changed them;
1. ``collect``: ``rollout_epoch`` x (reset, ``T`` chunk steps) on the rollout ranks, pipelined over
   ``pipeline_stage_num`` stages; the envs are local or on env ranks (``training.placement``);
2. the env columns move to the actor ranks (nothing moves when every rank does everything);
3. ``advantages``: the registered estimator (gae / grpo / reinpp / raw) over [T, N], normalised over the
   whole batch of every actor rank;
4. ``update``: ``update_epoch`` passes of shuffled mini-batches (``global_batch_size`` over the actor ranks)
   split into micro-batches, gradients averaged over the actor ranks before clipping;
5. metrics (``actor/*``, ``rollout/*``, ``env/*``, ``time/*``) to every sink; ``eval/*`` every
   ``val_check_interval`` iterations; an atomic checkpoint every ``save_interval`` iterations and at the end.

Randomness: models are initialised under one seed on every rank; reset states and sampling noise are
functions of (seed, rollout epoch, global env id); the shuffle of iteration k is seeded by (seed, k). So a
resumed run repeats the uninterrupted one, and any placement / world size repeats the 1-process run.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlarl_cli import __version__, keys
from vlarl_cli.algorithms.reduction import LOCAL, Reduce, masked_moments
from vlarl_cli.config.loading import LoadedConfig, to_yaml
from vlarl_cli.config.schema import EnvSplitConfig, VlarlConfig
from vlarl_cli.distributed import dist
from vlarl_cli.errors import CheckpointError, ConfigError
from vlarl_cli.training import checkpoint as ckpt
from vlarl_cli.training.rollout import Rollout, collect


@dataclass
class TrainResult:
    run_dir: Path
    iterations: int
    last_metrics: dict[str, float]
    checkpoint: Path | None


# --------------------------------------------------------------------------------------------------
# setup steps


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def derived_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from integers (numpy's SeedSequence hashing)."""
    return int(np.random.SeedSequence([int(p) % (2**32) for p in parts]).generate_state(1, np.uint64)[0]) >> 1


def draw_reset_ids(pool: np.ndarray, num_envs: int, group_size: int, *, ordered: bool, seed: int,
                   rank: int, world_size: int, epoch_index: int) -> np.ndarray:
    """Flat reset-state ids ``[num_envs]`` of ``rank``'s envs for rollout epoch ``epoch_index``.

    A pure function of its arguments (no hidden generator state), so a resumed run draws exactly the
    init states the uninterrupted run would have. The ids of all ``world_size * num_envs`` envs are drawn
    together and ``rank`` takes its slice, so env ``g`` (global index) gets the same state whatever the
    number of processes. Consecutive ``group_size`` envs share one state (GRPO). Ordered: the pool is
    walked group by group; random: uniform draws.
    """
    groups = num_envs // group_size
    total = groups * world_size
    if ordered:
        picks = pool[(epoch_index * total + np.arange(total)) % len(pool)]
    else:
        rng = np.random.default_rng(derived_seed(seed, epoch_index, 7))
        picks = rng.choice(pool, size=total, replace=True)
    return np.repeat(picks[rank * groups:(rank + 1) * groups], group_size)


def sampling_generator(seed: int, epoch_index: int, env_ids: range) -> Any:
    """One sampling stream per env (``policies.noise.RowGenerator``), seeded by (seed, rollout epoch,
    global env id): the actions of env ``g`` do not depend on the world size or the pipeline stages."""
    from vlarl_cli.policies.noise import RowGenerator

    return RowGenerator.from_seeds([derived_seed(seed, epoch_index, g, 3) for g in env_ids])


def resolve_model_path(path: str | None) -> str | None:
    """A local folder as is; a hub id (``org/name``) from the local hub cache, else a clear error."""
    if path is None or Path(path).expanduser().exists():
        return None if path is None else str(Path(path).expanduser())
    if path.count("/") == 1 and not path.startswith(("/", ".", "~")):
        from vlarl_cli.checkpoints.hub import resolve_repo_id

        path, _ = resolve_repo_id(path)  # a renamed repo is cached under its new name
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(path, local_files_only=True)
        except Exception:  # not in the cache (or the client is unusable offline)
            raise CheckpointError(f'Checkpoint "{path}" is not a local folder and not in the hub cache.',
                                  f"Run `vlarl download {path}` first, or set actor.model.model_path to a "
                                  "local checkpoint folder (or actor.model.preset=tiny to try the pipeline).") from None
    raise CheckpointError(f'Checkpoint folder "{path}" does not exist.',
                          "Set actor.model.model_path to an existing folder, or download one with `vlarl download`.")


def make_env(config: VlarlConfig, split: EnvSplitConfig, *, num_envs: int, rank: int, group_size: int,
             cameras: tuple[str, ...], record_video: bool, stages: int) -> Any:
    """This rank's vector env for ``split`` (LIBERO subprocess workers)."""
    if split.env_type == "toy_reach":
        from vlarl_cli.envs.toy import ToyVectorEnv

        return ToyVectorEnv(num_envs, chunk=config.actor.model.num_action_chunks,
                            max_steps=split.max_episode_steps, seed=split.seed)
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec, split_spec_fields, workers_for

    spec = VectorEnvSpec(
        suite=split.task_suite_name,
        task_ids=tuple(split.task_ids or ()),
        num_envs=num_envs,
        num_workers=workers_for(num_envs, split.num_workers),
        resolution=split.resolution,
        cameras=cameras,
        max_episode_steps=split.max_episode_steps,
        settle_steps=split.settle_steps,
        protocol=split.protocol,
        **split_spec_fields(split, rank),  # seeds, reset-state switches, step penalty as RLinf (envs/vector.py)
        auto_reset=split.auto_reset,
        group_size=group_size,
        init_state_order="ordered" if split.use_ordered_reset_state_ids else "random",
        reward_coef=split.reward_coef,
        use_rel_reward=split.use_rel_reward,
        ignore_terminations=split.ignore_terminations,
        record_video=record_video,
        stages=stages,
        hard_reset=split.hard_reset,
    )
    spec.validate()
    return LiberoVectorEnv(spec)


def build_optimizer(policy: torch.nn.Module, config: VlarlConfig) -> torch.optim.Optimizer:
    """AdamW with the value head at ``value_lr`` and everything else trainable at ``lr``."""
    optim = config.actor.optim
    value: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in policy.named_parameters():
        if p.requires_grad:
            (value if "value_head" in name else rest).append(p)
    groups = [g for g in ({"params": rest, "lr": optim.lr, "name": "policy"},
                          {"params": value, "lr": optim.value_lr, "name": "value_head"}) if g["params"]]
    if not groups:
        raise ConfigError("The policy has no trainable parameters.",
                          "Check actor.model.train_expert_only / is_lora / the family's freezing flags.")
    return torch.optim.AdamW(groups, betas=optim.betas, eps=optim.adam_eps, weight_decay=optim.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, config: VlarlConfig, total_steps: int
                    ) -> torch.optim.lr_scheduler.LambdaLR:
    optim = config.actor.optim
    horizon = optim.total_training_steps or max(1, total_steps)
    warmup, floor = optim.lr_warmup_steps, optim.min_lr_rate

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if optim.lr_scheduler == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, horizon - warmup))
        if optim.lr_scheduler == "cosine":
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        return floor + (1 - floor) * (1 - progress)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# --------------------------------------------------------------------------------------------------
# iteration steps


def rollout_metrics(rollouts: list[Rollout], reduce: Reduce = LOCAL) -> dict[str, float]:
    """``env/*`` means over the finished episodes and env steps of every process (``reduce``)."""
    episodes: dict[str, list[float]] = {}
    for r in rollouts:
        for k, v in r.episodes.items():
            episodes.setdefault(k, []).extend(v)
    names = (keys.SUCCESS_ONCE, keys.SUCCESS_AT_END, keys.RETURN, keys.EPISODE_LEN)
    rewards = torch.cat([r.rewards.flatten() for r in rollouts]).double()
    # did an env succeed at some step of the rollout (incl. unfinished episodes)
    any_success = torch.cat([r.success.any(dim=(0, 2)).double() for r in rollouts])
    local = [float(sum(episodes.get(k, []))) for k in names] + [
        float(len(episodes.get(keys.SUCCESS_ONCE, []))), float(rewards.sum()), float(rewards.numel()),
        float(any_success.sum()), float(any_success.numel())]
    sums: list[float] = reduce.sum(torch.tensor(local, dtype=torch.float64)).tolist()
    count = sums[len(names)]
    out = {f"env/{k}": sums[i] / count for i, k in enumerate(names) if count > 0}
    out["env/num_episodes"] = count
    out["env/reward"] = sums[-4] / max(1.0, sums[-3])
    out["env/success_any_step"] = sums[-2] / max(1.0, sums[-1])
    return out


def build_batch(config: VlarlConfig, rollouts: list[Rollout], *, critic: bool, reduce: Reduce = LOCAL
                ) -> tuple[Any, dict[str, float]]:
    """Advantages and returns per rollout epoch, flattened into one ``RolloutBatch`` of E*T*N samples
    (row ``(e * T + t) * N + n``). Batch-wide normalisation and the metrics cover every rollout epoch
    and, through ``reduce``, every process."""
    from vlarl_cli.algorithms.advantages import (
        BATCH_NORMALIZED,
        advantage_metrics,
        aggregate_dones,
        aggregate_rewards,
        compute_advantages,
        loss_mask_from_dones,
        normalize_pieces,
        trajectory_valid_fraction,
    )
    from vlarl_cli.training.update import RolloutBatch

    algo = config.algorithm
    if algo.adv_type == "gae" and algo.reward_type != "chunk_level":
        raise ConfigError("adv_type gae needs one value per chunk: reward_type action_level is not supported "
                          "with gae yet.", "Use reward_type: chunk_level with gae (or adv_type grpo).")
    bounds = (algo.rewards_lower_bound, algo.rewards_upper_bound) if algo.filter_rewards else None
    normalize_later = algo.normalize_advantages and algo.adv_type in BATCH_NORMALIZED
    t, n, c = rollouts[0].rewards.shape

    def flat(x: torch.Tensor) -> torch.Tensor:  # [T, N, ...] -> [T*N, ...] (t-major, like the replay)
        return x.reshape(t * n, *x.shape[2:])

    results = []
    for r in rollouts:
        rewards = aggregate_rewards(r.rewards, algo.reward_type)  # [T, N] or [T, N, C]
        dones = aggregate_dones(r.dones, algo.reward_type)  # [T+1, N] or [T+1, N, C]
        chunk_dones = r.dones.any(dim=-1)  # [T+1, N]
        if config.env.train.auto_reset:
            loss_mask = torch.ones(t, n, dtype=torch.bool)
        else:
            loss_mask = loss_mask_from_dones(chunk_dones)
        step_mask = loss_mask if algo.reward_type == "chunk_level" else loss_mask.unsqueeze(-1).expand(t, n, c)
        result = compute_advantages(
            algo.adv_type, rewards, dones, step_mask, values=r.values if critic else None, gamma=algo.gamma,
            gae_lambda=algo.gae_lambda, group_size=config.train_group_size,
            normalize=algo.normalize_advantages and not normalize_later, filter_bounds=bounds)
        results.append(result)
    if normalize_later:  # one mean / std over all rollout epochs on all processes
        normalized = normalize_pieces([(x.advantages, x.loss_mask) for x in results], reduce=reduce)
        for x, a in zip(results, normalized, strict=True):
            x.advantages = a
    adv, ret, masks, fractions, old_values, metrics_adv = [], [], [], [], [], []
    for r, result in zip(rollouts, results, strict=True):
        valid = result.loss_mask if result.loss_mask.dim() == 2 else result.loss_mask.any(-1)  # [T, N]
        adv.append(flat(result.advantages))
        masks.append(flat(valid.unsqueeze(-1).expand(t, n, c)))
        fractions.append(flat(trajectory_valid_fraction(valid)))
        if critic and result.returns is not None:
            ret.append(flat(result.returns))
            old_values.append(flat(r.values[:-1]))
        metrics_adv.append((result.advantages, valid if result.advantages.dim() == 2 else result.loss_mask))
    batch = RolloutBatch(
        replay={k: torch.cat([r.replay[k] for r in rollouts]) for k in rollouts[0].replay},
        old_logprobs=torch.cat([flat(r.logprobs) for r in rollouts]).float(),
        advantages=torch.cat(adv).float(),
        loss_mask=torch.cat(masks),
        old_values=torch.cat(old_values).float() if ret else None,
        returns=torch.cat(ret).float() if ret else None,
        valid_fraction=torch.cat(fractions).float(),
        steps_per_trajectory=t,
    )
    all_adv = torch.cat([a.flatten() for a, _ in metrics_adv])
    all_mask = torch.cat([m.flatten() for _, m in metrics_adv])
    metrics = {f"rollout/{k}": v for k, v in advantage_metrics(all_adv, all_mask, reduce).items()}

    def mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> float:
        count, value, _ = masked_moments([(x.float(), mask)], reduce)
        return float(value) if count else 0.0

    if ret:
        metrics["rollout/returns_mean"] = mean(torch.cat(ret), torch.cat([m.flatten() for _, m in metrics_adv]))
        metrics["rollout/values_mean"] = mean(torch.cat(old_values))
    metrics["rollout/rewards"] = mean(torch.cat([r.rewards.sum(-1).flatten() for r in rollouts]))
    metrics["rollout/valid_fraction"] = mean(batch.loss_mask)
    return batch, metrics


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
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and key != "step" and value.device != torch.device(device):
                state[key] = value.to(device, non_blocking=True)


def update_settings(config: VlarlConfig, world_size: int) -> Any:
    from vlarl_cli.training.update import UpdateSettings

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
    )


# --------------------------------------------------------------------------------------------------
# the loop


def train(loaded: LoadedConfig, resume: str | None = None) -> TrainResult:
    """Run ``runner.max_epochs`` iterations (continuing a checkpoint with ``resume``)."""
    from vlarl_cli.logging.progress import Progress
    from vlarl_cli.logging.sinks import MetricLogger
    from vlarl_cli.training import placement as pl

    config = loaded.config
    ctx = dist.init_distributed()
    roles = pl.roles_for(config.cluster.placement(ctx.world_size), rank=ctx.rank, world=ctx.world_size,
                         num_envs=config.train_num_envs, group_size=config.train_group_size)
    groups = _process_groups(roles, config)
    run_dir = Path(config.runner.logger.log_path).expanduser()
    # the same seed on every rank while the models are built: freshly initialised weights (tiny presets,
    # value heads) are then the same whichever rank builds them
    seed_everything(config.actor.seed)
    generators = {"shuffle": torch.Generator().manual_seed(config.actor.seed)}
    state = ckpt.TrainerState(version=__version__)
    split = config.env.train
    stages = config.rollout.pipeline_stage_num
    video = split.video_cfg

    # ---- models: the actor (trained, maybe sharded) and the rollout's policy: the actor module itself
    # when every actor rank samples with it (collocated, or an unsharded actor), else an unsharded copy
    # that the actor's rank A[0] keeps up to date (WeightSync)
    policy: torch.nn.Module | None = None
    actor = _Actor(config, ctx, roles, groups) if roles.is_actor else None
    own_copy = roles.rank in _rollout_copy_ranks(config, roles)
    if roles.is_rollout:
        seed_everything(config.actor.seed)
        policy = _build_rollout_policy(config, ctx) if own_copy or actor is None else actor.policy
    sync = None
    if not roles.collocated:
        from vlarl_cli.distributed.weight_sync import WeightSync

        # the source sends the actor's weights, receivers load them into their rollout copy
        module = actor.policy if ctx.rank == roles.actor[0] and actor is not None else policy
        # buckets on this rank's device: an offloaded module must not switch the backend (gloo vs NCCL)
        sync = WeightSync(module if module is not None else torch.nn.Module(), src=roles.actor[0],
                          ranks=_sync_ranks(config, roles), group=groups.get("sync"), device=ctx.device)

    seed_everything(derived_seed(config.actor.seed, ctx.rank))
    resume = resume or config.runner.resume_dir
    if resume:
        path = ckpt.resolve_checkpoint(run_dir, resume)
        if actor is not None:
            state = actor.load(path, generators)
        state = _broadcast_object(state, roles.actor[0])
        dist.print0(f"resumed from {path} at iteration {state.iteration}")

    logger = MetricLogger.create(run_dir, list(config.runner.logger.logger_backends),
                                 project=config.runner.logger.project_name,
                                 name=config.runner.logger.experiment_name,
                                 config=config.model_dump(mode="json"), run_ids=state.run_ids,
                                 resume_step=state.iteration + 1 if resume else None, main_process=ctx.is_main)
    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        from vlarl_cli.checkpoints.atomic import atomic_write_text

        atomic_write_text(run_dir / "config.yaml", to_yaml(config))
    if actor is not None and roles.rank == roles.actor[0]:
        _print_plan(config, ctx.world_size, actor.policy, run_dir)
        if len(roles.actor) > 1 and config.actor.global_batch_size % config.train_num_envs:
            print(f"note: actor.global_batch_size {config.actor.global_batch_size} is not a multiple of "
                  f"total_num_envs {config.train_num_envs}: mini-batches are shuffled by sample, so this run's "
                  "mini-batches differ from a 1-process run's (otherwise every env gives each mini-batch the same "
                  "number of its chunk steps)", flush=True)

    # ---- envs: local on env+rollout ranks, served to the rollout rank from env-only ranks
    n_envs = roles.envs_per_env_rank
    records = video.save_video and roles.rank == roles.env[0]
    env: Any = None
    if roles.is_env:
        # an env-only rank has no policy: its rollout rank says which cameras to render
        cameras = (_cameras(policy) if roles.is_rollout
                   else tuple(pl.receive_setup(roles.rollout_of_env(ctx.rank))["cameras"]))
        env = make_env(config, split, num_envs=n_envs, rank=ctx.rank, group_size=config.train_group_size,
                       cameras=cameras, record_video=records, stages=stages)
        if not roles.is_rollout:
            pl.send_hello(env, roles.rollout_of_env(ctx.rank), stages)
    elif roles.is_rollout:
        env = pl.RemoteVectorEnv(roles.env_ranks_of(ctx.rank), {"cameras": list(_cameras(policy))})
    columns = roles.rollout_columns(ctx.rank) if roles.is_rollout else range(0)

    num_chunk_steps = config.chunk_steps_per_epoch
    last_metrics: dict[str, float] = {}
    last_ckpt: Path | None = None
    weights_version, synced_version = state.optimizer_steps, None
    steps_per_iter = _steps_per_iter(config, roles)
    rollout_reduce = dist.CrossRank(groups.get("rollout")) if roles.is_rollout else LOCAL
    eval_copy: torch.nn.Module | None = None

    def sync_weights(metrics: dict[str, float]) -> None:
        """Actor -> ranks with their own rollout copy; only called when the weights changed (every rank
        knows ``weights_version``, so all of them take part in the same collectives)."""
        nonlocal synced_version
        assert sync is not None
        t = time.perf_counter()
        full = actor.full_state() if actor is not None and actor.sharded else None  # collective over actors
        offload_module(policy, ctx.device if own_copy else None)  # an offloaded copy comes back first
        sync.push(weights_version, full if ctx.rank == sync.src else None)
        if ctx.rank == sync.src and own_copy and policy is not None and actor is not None:
            policy.load_state_dict(full if full is not None else actor.policy.state_dict())
        synced_version = weights_version
        if ctx.rank in sync.ranks:
            metrics["sync/bytes"] = sync.stats["bytes"]
            metrics["time/sync"] = time.perf_counter() - t

    progress = Progress(total=config.runner.max_epochs, start=state.iteration, enabled=ctx.is_main)
    try:
        while state.iteration < config.runner.max_epochs:
            if 0 <= config.runner.max_steps <= state.optimizer_steps:
                break
            it_start = time.perf_counter()
            # Every random stream of an iteration is derived from (seed, rank, iteration): a run resumed
            # from a checkpoint replays exactly what the uninterrupted run would have done.
            seed_everything(derived_seed(config.actor.seed, ctx.rank, state.iteration))
            generators["shuffle"].manual_seed(derived_seed(config.actor.seed, state.iteration, 1))
            metrics: dict[str, float] = {}
            if sync is not None and weights_version != synced_version:
                sync_weights(metrics)
            rollouts: list[Rollout] | None = None
            if roles.is_rollout:
                assert policy is not None
                policy.eval()
                # components sharing this device take turns: the rollout copy comes back, the actor leaves
                offload_module(policy, ctx.device if own_copy and config.rollout.enable_offload else None)
                if actor is not None:
                    actor.offload(weights=own_copy)
                rollouts = []
                for epoch in range(config.rollout_epoch):
                    epoch_index = state.iteration * config.rollout_epoch + epoch
                    ids = draw_reset_ids(env.pool, len(columns), config.train_group_size,
                                         ordered=split.use_ordered_reset_state_ids, seed=split.seed,
                                         rank=roles.rollout.index(ctx.rank), world_size=len(roles.rollout),
                                         epoch_index=epoch_index)
                    streams = sampling_generator(config.actor.seed, epoch_index, columns)
                    rollouts.append(collect(policy, env, num_chunk_steps,  # type: ignore[arg-type]
                                            stages=stages, reset_state_ids=ids, generator=streams))
                if isinstance(env, pl.RemoteVectorEnv):
                    env.end_iteration(state.iteration + 1)
                metrics.update(rollout_metrics(rollouts, rollout_reduce))
                metrics.update({
                    "time/env": sum(r.env_time for r in rollouts),
                    "time/rollout": sum(r.inference_time for r in rollouts),
                    "time/env_steps_per_s": len(columns) * num_chunk_steps * config.actor.model.num_action_chunks
                    * config.rollout_epoch / max(1e-9, time.perf_counter() - it_start),
                })
            elif roles.is_env:
                pl.serve_env(env, roles.rollout_of_env(ctx.rank), stages, num_chunk_steps)
            t_collect = time.perf_counter()
            if roles.is_rollout:
                metrics["time/collect"] = t_collect - it_start
            if not roles.collocated:
                rollouts = pl.redistribute(rollouts, roles)
                if roles.is_rollout:
                    metrics["time/transfer"] = time.perf_counter() - t_collect
            state.iteration += 1
            state.optimizer_steps += steps_per_iter
            if actor is not None:
                assert rollouts is not None
                if own_copy and config.rollout.enable_offload:
                    offload_module(policy, "cpu")  # rollout.enable_offload: off the device while the actor trains
                t_adv = time.perf_counter()
                batch, adv_metrics = build_batch(config, rollouts, critic=actor.critic, reduce=actor.reduce)
                t_update = time.perf_counter()
                update_metrics = actor.update(batch, generators["shuffle"], state.optimizer_steps - steps_per_iter,
                                              env_columns=actor.columns)
                if update_metrics.get("actor/optimizer_steps", 0) > 0:
                    weights_version = state.optimizer_steps
                state.skipped_steps += int(update_metrics.get("actor/skipped_steps", 0))
                metrics.update({**update_metrics, **adv_metrics, "time/advantages": t_update - t_adv,
                                "time/actor": time.perf_counter() - t_update})
            if roles.rank == roles.env[0] and video.save_video:
                _write_videos(env, run_dir, video, state.iteration, config)
            if sync is not None:  # only the actor ranks know whether an optimizer step happened
                weights_version = int(_broadcast_object(weights_version, roles.actor[0]))
            if config.runner.val_check_interval > 0 and state.iteration % config.runner.val_check_interval == 0:
                if sync is not None and weights_version != synced_version:
                    sync_weights(metrics)  # evaluate the weights this iteration produced
                if roles.is_rollout:
                    assert policy is not None
                    offload_module(policy, ctx.device if own_copy else None)  # back from rollout.enable_offload
                    eval_policy = policy
                    if actor is not None and policy is actor.policy and actor.sharded:
                        # a sharded module would need the same forwards on every rank; evaluation runs a
                        # different number of steps per rank, so it uses an unsharded copy (built once)
                        full = actor.full_state(owner=None)
                        if eval_copy is None:
                            seed_everything(config.actor.seed)
                            eval_copy = _build_rollout_policy(config, ctx)
                        eval_copy.load_state_dict(full)
                        eval_policy = eval_copy
                    metrics.update(evaluate_in_training(eval_policy, config, ctx, state.iteration, run_dir,
                                                        roles=roles, group=groups.get("rollout")))
            metrics = _mean_over_ranks(metrics)
            metrics["time/iteration"] = time.perf_counter() - it_start
            logger.log(metrics, step=state.iteration)
            last_metrics = metrics
            progress.update(state.iteration, metrics)
            save_now = (config.runner.save_interval > 0 and state.iteration % config.runner.save_interval == 0) \
                or state.iteration == config.runner.max_epochs
            if save_now:
                state.run_ids = _broadcast_object(logger.run_ids(), 0) or state.run_ids  # rank 0 logs
            if save_now and actor is not None:
                last_ckpt = actor.save(run_dir, generators, state, config)
    finally:
        progress.close()
        if env is not None:
            env.close()
        logger.close()
    if roles.rank == roles.actor[0] and last_ckpt is not None:
        print(f"checkpoint: {last_ckpt}", flush=True)
    return TrainResult(run_dir=run_dir, iterations=state.iteration, last_metrics=last_metrics, checkpoint=last_ckpt)


def _steps_per_iter(config: VlarlConfig, roles: Any) -> int:
    per_rank_batch = config.actor.global_batch_size // len(roles.actor)
    samples = config.samples_per_iteration() // len(roles.actor)
    return config.algorithm.update_epoch * max(1, samples // per_rank_batch)


def _cameras(policy: torch.nn.Module | None) -> tuple[str, ...]:
    return tuple(getattr(policy, "cameras", ("main", "wrist")))


def _broadcast_object(obj: Any, src: int) -> Any:
    if not torch.distributed.is_initialized():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def _actor_sharded(config: VlarlConfig, roles: Any) -> bool:
    return len(roles.actor) > 1 and config.actor.fsdp_config.sharding_strategy != "no_shard"


def _rollout_copy_ranks(config: VlarlConfig, roles: Any) -> list[int]:
    from vlarl_cli.training.placement import rollout_copy_ranks

    return rollout_copy_ranks({"env": list(roles.env), "rollout": list(roles.rollout), "actor": list(roles.actor)},
                              roles.world, _actor_sharded(config, roles))


def _sync_ranks(config: VlarlConfig, roles: Any) -> list[int]:
    """WeightSync participants: the actor's rank A[0] and every other rank with its own rollout copy."""
    return sorted({roles.actor[0], *_rollout_copy_ranks(config, roles)})


def _process_groups(roles: Any, config: VlarlConfig) -> dict[str, Any]:
    """Sub-groups for a separated placement (``new_group`` is collective: every rank creates every group)."""
    if roles.collocated or not torch.distributed.is_initialized():
        return {}
    world = list(range(roles.world))
    out: dict[str, Any] = {}
    for name, ranks in (("actor", list(roles.actor)), ("rollout", list(roles.rollout))):
        out[name] = None if ranks == world else torch.distributed.new_group(ranks)
    sync = _sync_ranks(config, roles)
    out["sync"] = None if sync == world else torch.distributed.new_group(sync)
    if len(roles.actor) > 1:
        from torch.distributed.device_mesh import DeviceMesh

        from vlarl_cli.distributed.device import default_device

        out["mesh"] = DeviceMesh(default_device().type, list(roles.actor))
    return out


def _build_rollout_policy(config: VlarlConfig, ctx: dist.DistContext) -> torch.nn.Module:
    """A rollout-only rank's copy of the policy (weights arrive from the actor before each collect)."""
    from vlarl_cli.policies.registry import build_policy

    model = config.actor.model.model_copy(update={"model_path": resolve_model_path(config.actor.model.model_path)})
    policy = build_policy(model, ctx.device, temperature=config.rollout.sampling_params.temperature_train)
    return policy.eval().requires_grad_(False)


class _Actor:
    """The trained policy on an actor rank: optimizer, scheduler, optional FSDP over the actor ranks."""

    def __init__(self, config: VlarlConfig, ctx: dist.DistContext, roles: Any, groups: dict[str, Any]) -> None:
        from vlarl_cli.policies.registry import build_policy

        self.config, self.ctx, self.roles = config, ctx, roles
        self.group = groups.get("actor")
        self.columns = roles.actor_columns(ctx.rank)
        model = config.actor.model.model_copy(update={"model_path": resolve_model_path(config.actor.model.model_path)})
        # token policies (OpenVLA-OFT) read their sampling temperature from the rollout section
        policy = build_policy(model, ctx.device, temperature=config.rollout.sampling_params.temperature_train)
        dist.broadcast_module_(policy, src=roles.actor[0], group=self.group)
        fsdp_cfg = config.actor.fsdp_config
        n_actor = len(roles.actor)
        self.sharded = _actor_sharded(config, roles)
        self.ref_policy = None
        if config.algorithm.kl_beta > 0:  # frozen copy of the starting weights for the KL penalty
            import copy

            self.ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
        if self.sharded:
            from vlarl_cli.distributed import fsdp

            precision = fsdp_cfg.mixed_precision
            for module in (policy, self.ref_policy):
                if module is not None:
                    fsdp.shard_model(module, device=ctx.device,
                                     class_names=list(fsdp_cfg.wrap_policy.transformer_layer_cls_to_wrap),
                                     reshard_after_forward=fsdp_cfg.reshard_after_forward,
                                     param_dtype=precision.param_dtype, reduce_dtype=precision.reduce_dtype,
                                     cpu_offload=fsdp_cfg.cpu_offload, mesh=groups.get("mesh"))
        self.policy = policy
        self.settings = update_settings(config, n_actor)
        self.reduce = dist.CrossRank(self.group)
        self.critic = config.algorithm.loss_type == "actor_critic" and config.actor.model.effective_add_value_head
        self.optimizer = build_optimizer(policy, config)
        self.weights_offloaded = False
        self.scheduler = build_scheduler(self.optimizer, config, _steps_per_iter(config, roles) * config.runner.max_epochs)

    def load(self, path: Path, generators: dict[str, torch.Generator]) -> ckpt.TrainerState:
        from vlarl_cli.distributed import fsdp

        loaded = ckpt.load_checkpoint(path)
        try:
            fsdp.load_full_model_state(self.policy, loaded.model_state)
        except RuntimeError as err:
            raise CheckpointError(f"Checkpoint {path} does not match the model: {str(err).splitlines()[0]}",
                                  "Resume with the config the run was started with.") from None
        fsdp.load_full_optimizer_state(self.policy, self.optimizer, loaded.optimizer_state)
        if loaded.scheduler_state is not None:
            self.scheduler.load_state_dict(loaded.scheduler_state)
        ckpt.restore_rng(loaded, generators)
        return loaded.trainer_state

    def full_state(self, owner: int | None = -1) -> dict[str, torch.Tensor]:
        """The full weights, complete on ``owner`` (default the actor's first rank; None: every actor rank).
        Collective over the actor ranks when sharded."""
        from vlarl_cli.distributed import fsdp

        return fsdp.full_model_state(self.policy, owner=self.roles.actor[0] if owner == -1 else owner)

    def offload(self, *, weights: bool) -> None:
        """``actor.enable_offload``: before the envs and the rollout run, AdamW state (and the weights, when
        the rollout samples with its own copy) go to the host; :meth:`update` brings them back."""
        if not self.config.actor.enable_offload:
            return
        offload_optimizer_state(self.optimizer, "cpu")
        if weights:
            offload_module(self.policy, "cpu")
            self.weights_offloaded = True

    def update(self, batch: Any, generator: torch.Generator, step_offset: int, *, env_columns: range
               ) -> dict[str, float]:
        from vlarl_cli.training.update import ppo_update

        if self.config.actor.enable_offload:
            offload_module(self.policy, self.ctx.device if self.weights_offloaded else None)
            self.weights_offloaded = False
            offload_optimizer_state(self.optimizer, self.ctx.device)
        # The update stays in eval mode: dropout would make the first ratio != 1 (families also
        # replace dropout by identity where RLinf's disable_dropout asks for it).
        grad_sync = None
        if len(self.roles.actor) > 1 and not self.sharded:
            group = self.group

            def grad_sync(module: torch.nn.Module) -> None:
                dist.gradient_all_reduce(module, group)

        return ppo_update(self.policy, self.optimizer, batch, self.settings, generator=generator,
                          scheduler=self.scheduler, ref_policy=self.ref_policy, grad_sync=grad_sync,
                          step_offset=step_offset, reduce=self.reduce, env_columns=env_columns)

    def save(self, run_dir: Path, generators: dict[str, torch.Generator], state: ckpt.TrainerState,
             config: VlarlConfig) -> Path | None:
        from vlarl_cli.distributed import fsdp

        # collective over the actor ranks when sharded; complete on the actor's first rank, which writes
        model_state = fsdp.full_model_state(self.policy, owner=self.roles.actor[0])
        optimizer_state = fsdp.full_optimizer_state(self.policy, self.optimizer, owner=self.roles.actor[0])
        path = None
        if self.ctx.rank == self.roles.actor[0]:
            export = _family_exporter(self.policy, model_state, config)
            path = ckpt.save_checkpoint(run_dir, model_state=model_state, optimizer_state=optimizer_state,
                                        export=export, scheduler=self.scheduler, generators=generators,
                                        trainer_state=state, config_yaml=to_yaml(config))
        dist.barrier(self.group)
        return path


def _mean_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Combine the ranks' metrics: ``time/*`` phase durations are the slowest reporting rank's (a phase
    ends when its last rank does), ``time/env_steps_per_s`` adds up, everything else is averaged over the
    ranks that report it.

    The ``actor/*``, ``rollout/*`` and ``env/*`` metrics are already whole-batch values on every rank that
    reports them (``CrossRank``). Ranks report different keys (only rollout ranks collect, only actor ranks
    train), so the dicts are gathered as objects rather than reduced as one fixed-length tensor.
    """
    if not torch.distributed.is_initialized():
        return metrics
    gathered: list[dict[str, float]] = [{} for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather_object(gathered, metrics)
    out: dict[str, float] = {}
    for key in sorted({k for m in gathered for k in m}):
        values = [float(m[key]) for m in gathered if key in m]
        if key == "time/env_steps_per_s":
            out[key] = sum(values)
        elif key.startswith("time/"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out


def _family_exporter(policy: torch.nn.Module, model_state: dict[str, torch.Tensor], config: VlarlConfig) -> Any:
    """``folder -> None`` writing the policy with its family's ``save_policy(format="vlarl")``, or None when
    the family has no checkpoint module (the toy policies). A sharded policy is first rebuilt on the CPU from
    the gathered full state."""
    import importlib

    from vlarl_cli.distributed import fsdp
    from vlarl_cli.policies.registry import build_policy, family_module

    try:
        module = importlib.import_module(f"{family_module(config.actor.model.model_type).__name__}.checkpoint")
    except ImportError:
        return None
    target = policy
    if fsdp.is_sharded(policy):
        model = config.actor.model.model_copy(update={"model_path": resolve_model_path(config.actor.model.model_path)})
        target = build_policy(model, "cpu")
        target.load_state_dict(model_state)

    def export(folder: Path) -> None:
        module.save_policy(target, folder, format="vlarl")

    return export


def _write_videos(env: Any, run_dir: Path, video: Any, iteration: int, config: VlarlConfig) -> None:
    from vlarl_cli.video.writer import write_episode_video

    base = Path(video.video_base_dir)
    written = 0
    for env_id in range(env.num_envs):
        for episode in env.episode_frames(env_id):
            if written < video.max_videos:
                write_episode_video(base / f"iter_{iteration:05d}_env{env_id}.mp4", episode, fps=video.fps,
                                    caption=f"iter {iteration} env {env_id}" if video.info_on_video else None)
                written += 1


def evaluate_in_training(policy: torch.nn.Module, config: VlarlConfig, ctx: dist.DistContext,
                         iteration: int, run_dir: Path, *, roles: Any = None, group: Any = None) -> dict[str, float]:
    """``eval/*`` metrics with deterministic actions on ``env.eval``: the same code as ``vlarl eval``
    (protocol, fixed init states, results folder ``<run>/eval/iter_<k>``), on the rollout ranks (process
    ``group``); the toy task uses its own env."""
    split = config.env.eval
    if split.env_type == "libero":
        from vlarl_cli.training.evaluation import training_eval_metrics

        ranks = list(roles.rollout) if roles is not None else list(range(ctx.world_size))
        return training_eval_metrics(policy, config, rank=ranks.index(ctx.rank), world_size=len(ranks),
                                     out_dir=run_dir / "eval" / f"iter_{iteration:05d}", group=group)
    env = make_env(config, split, num_envs=max(1, split.total_num_envs or 1), rank=ctx.rank, group_size=1,
                   cameras=(), record_video=False, stages=1)
    try:
        policy.eval()
        steps = split.max_steps_per_rollout_epoch // config.actor.model.num_action_chunks
        # the same noise streams at every evaluation (flow policies start their ODE from noise)
        streams = sampling_generator(config.actor.seed, -1, range(env.num_envs))
        rollout = collect(policy, env, steps, deterministic=True, generator=streams)  # type: ignore[arg-type]
    finally:
        env.close()
    return {k.replace("env/", "eval/"): v for k, v in rollout_metrics([rollout]).items()}


def _task_name(config: VlarlConfig) -> str:
    split = config.env.train
    return split.task_suite_name if split.env_type == "libero" else split.env_type


def _print_plan(config: VlarlConfig, world_size: int, policy: torch.nn.Module, run_dir: Path) -> None:
    from vlarl_cli.training.dry_run import count_parameters

    params = count_parameters(policy)
    placement = config.cluster.placement(world_size)
    print(f"vlarl rl-train: {config.actor.model.model_type} ({params.total / 1e6:.2f}M params, "
                f"{params.trainable / 1e6:.2f}M trainable) | {_task_name(config)} "
                f"{config.train_num_envs} envs | {config.algorithm.adv_type} | world {world_size}: "
                + ", ".join(f"{k}={v}" for k, v in placement.items()) + f" | run dir {run_dir}")
