"""The PPO / GRPO training loop as short named steps: sync, collect, hand over, update, evaluate, checkpoint.

    vlarl rl-train --config quickstart                       # one process
    vlarl rl-train --config quickstart --nproc-per-node 2    # 2 processes (gloo on CPU, NCCL on GPUs)

One iteration (RLinf's embodied runner, on torch.distributed instead of Ray), each step a method of
:class:`Trainer`; where each rank stands is :class:`vlarl_cli.distributed.placement.Cluster`'s business:
0. ``sync``: with a separated placement, actor rank ``A[0]`` sends the weights to the ranks that hold their
   own rollout copy (:class:`RolloutWeights`), only when an optimizer step changed them;
1. ``collect``: ``rollout_epoch`` x (reset, ``T`` chunk steps) on the rollout ranks (``training.rollout``),
   pipelined over ``pipeline_stage_num`` stages; the envs are local or on env ranks
   (``distributed.remote_env``);
2. ``hand_to_actors``: the env columns move to the actor ranks (``distributed.columns``; nothing moves
   when every rank does everything);
3. ``update``: advantages (``training.batch``: the registered estimator over [T, N], normalised over the
   whole batch of every actor rank), then ``update_epoch`` passes of shuffled mini-batches
   (``training.actor``, gradients averaged over the actor ranks before clipping);
4. ``evaluate``: ``eval/*`` every ``val_check_interval`` iterations (``training.validate``);
5. ``log``: metrics to every sink under RLinf's names: ``train/actor/*``, ``train/critic/*``
   (:func:`vlarl_cli.training.update.ppo_update`), ``rollout/*`` and ``env/*``
   (:mod:`vlarl_cli.training.batch`), ``eval/*``, and ``time/sync_weights``, ``time/generate_rollouts``,
   ``time/env/env_interact_step``, ``time/rollout/predict``, ``time/cal_adv_and_returns``,
   ``time/actor_training``, ``time/eval``, ``time/step`` (the slowest rank's); ``checkpoint``: an atomic
   checkpoint every ``save_interval`` iterations and at the end.

Randomness: models are initialised under one seed on every rank; reset states and sampling noise are
functions of (seed, rollout epoch, global env id); the shuffle of iteration k is seeded by (seed, k). So a
resumed run repeats the uninterrupted one, and any placement / world size repeats the 1-process run
(except with ``algorithm.dynamic_sampling``: each rank fills its group slots from its own envs, training/sampling.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from vlarl_cli import __version__
from vlarl_cli.algorithms.reduction import LOCAL, Reduce
from vlarl_cli.config.loading import LoadedConfig, to_yaml
from vlarl_cli.config.schema import VlarlConfig
from vlarl_cli.distributed import dist
from vlarl_cli.distributed.placement import Cluster
from vlarl_cli.envs.base import VectorEnv
from vlarl_cli.keys import policy_cameras, policy_gripper, policy_obs_mode
from vlarl_cli.policies.base import Policy
from vlarl_cli.training import checkpoint as ckpt
from vlarl_cli.training.actor import (
    Actor,
    build_rollout_policy,
    offload_module,
    offload_optimizer_state,
    steps_per_iteration,
    update_settings,
)
from vlarl_cli.training.batch import build_batch, rollout_metrics
from vlarl_cli.training.common import (
    build_optimizer,
    build_scheduler,
    derived_seed,
    resolve_model_path,
    seed_everything,
)
from vlarl_cli.training.envs import (
    draw_reset_ids,
    make_env,
    rank_budget,
    render_deviations,
    sampling_generator,
    task_name,
    write_videos,
)
from vlarl_cli.training.rollout import Rollout, collect
from vlarl_cli.training.sampling import SampledEpoch, fill_with_signal, group_signal, sampling_metrics

#: a dynamic-sampling redraw d of rollout epoch i draws its init states and noise as epoch i + d * _DRAW_STRIDE
_DRAW_STRIDE = 1_000_003

# the names other modules and tests import from here (sft.py, tests): their homes are the modules above
__all__ = ["RolloutWeights", "TrainResult", "Trainer", "build_batch", "build_optimizer", "build_scheduler",
           "derived_seed", "draw_reset_ids", "make_env", "offload_module", "offload_optimizer_state",
           "resolve_model_path", "rollout_metrics", "sampling_generator", "seed_everything", "train",
           "update_settings"]


@dataclass
class TrainResult:
    run_dir: Path
    iterations: int
    last_metrics: dict[str, float]
    checkpoint: Path | None


def train(loaded: LoadedConfig, resume: str | None = None) -> TrainResult:
    """Run ``runner.max_epochs`` iterations (continuing a checkpoint with ``resume``)."""
    config = loaded.config
    ctx = dist.init_distributed()
    cluster = Cluster.create(ctx, config.cluster.placement(ctx.world_size), num_envs=config.train_num_envs,
                             group_size=config.train_group_size,
                             shard_actor=config.actor.fsdp_config.sharding_strategy != "no_shard")
    run = Trainer(config, cluster)
    run.resume(resume or config.runner.resume_dir)
    run.open_logs()
    run.open_envs()
    try:
        run.evaluate_before_training()
        while run.running():
            metrics = run.start_iteration()
            run.sync(metrics)
            rollouts = run.collect(metrics)
            rollouts = run.hand_to_actors(rollouts, metrics)
            run.update(rollouts, metrics)
            run.evaluate(metrics)
            run.log(metrics)
            run.checkpoint()
    finally:
        run.close()
    return run.result()


class RolloutWeights:
    """Keeps the rollout's copy of the weights at the actor's version (separated placements only).

    ``version`` is the optimizer step count at the last change of the actor's weights; every rank knows it
    (:meth:`agree`), so all of them take part in the same collectives of :meth:`push`.
    """

    def __init__(self, cluster: Cluster, actor: Actor | None, policy: torch.nn.Module | None) -> None:
        self.cluster, self.actor, self.policy = cluster, actor, policy
        self.version: int = 0
        self.synced: int | None = None
        self.sync = None
        if not cluster.collocated:
            from vlarl_cli.distributed.weight_sync import WeightSync

            # the source sends the actor's weights, receivers load them into their rollout copy
            module = actor.policy if cluster.is_actor_source and actor is not None else policy
            # buckets on this rank's device: an offloaded module must not switch the backend (gloo vs NCCL)
            self.sync = WeightSync(module if module is not None else torch.nn.Module(), src=cluster.roles.actor[0],
                                   ranks=cluster.sync_ranks, group=cluster.groups.get("sync"), device=cluster.device)

    @property
    def stale(self) -> bool:
        return self.sync is not None and self.version != self.synced

    def push(self, metrics: dict[str, float]) -> None:
        """Actor -> ranks with their own rollout copy (call only when :attr:`stale`)."""
        assert self.sync is not None
        t = time.perf_counter()
        own_copy, actor, policy = self.cluster.owns_rollout_copy, self.actor, self.policy
        full = actor.full_state() if actor is not None and actor.sharded else None  # collective over actors
        offload_module(policy, self.cluster.device if own_copy else None)  # an offloaded copy comes back first
        is_src = self.cluster.rank == self.sync.src
        self.sync.push(self.version, full if is_src else None)
        if is_src and own_copy and policy is not None and actor is not None:
            policy.load_state_dict(full if full is not None else actor.policy.state_dict())
        self.synced = self.version
        if self.cluster.rank in self.sync.ranks:
            metrics["sync/bytes"] = self.sync.stats["bytes"]
            metrics["time/sync_weights"] = time.perf_counter() - t

    def agree(self) -> None:
        """Only the actor ranks know whether an optimizer step happened: they tell the others."""
        if self.sync is not None:
            self.version = int(self.cluster.from_actor(self.version))


class Trainer:
    """One rank's part of an rl-train run; :func:`train` calls its steps in order."""

    def __init__(self, config: VlarlConfig, cluster: Cluster) -> None:
        self.config, self.cluster = config, cluster
        # who uses this rank's cores (distributed/cpu_budget.py): the update's threads are the default,
        # collect switches to the inference threads while the env workers step
        self.cpu = rank_budget(config, cluster.device.type, cluster.roles.envs_per_env_rank if cluster.is_env else 0)
        self.cpu.apply_trainer()
        self.run_dir = Path(config.runner.logger.log_path).expanduser()
        # the same seed on every rank while the models are built: freshly initialised weights (tiny presets,
        # value heads) are then the same whichever rank builds them
        seed_everything(config.actor.seed)
        self.generators = {"shuffle": torch.Generator().manual_seed(config.actor.seed)}
        self.state = ckpt.TrainerState(version=__version__)
        # the actor (trained, maybe sharded) and the rollout's policy: the actor module itself when every
        # actor rank samples with it (collocated, or an unsharded actor), else an unsharded copy that the
        # actor's rank A[0] keeps up to date (RolloutWeights)
        self.actor = Actor(config, cluster) if cluster.is_actor else None
        self.policy = self._rollout_policy()
        self.weights = RolloutWeights(cluster, self.actor, self.policy)
        self.steps_per_iteration = steps_per_iteration(config, len(cluster.roles.actor))
        self.rollout_reduce: Reduce = dist.CrossRank(cluster.groups.get("rollout")) if cluster.is_rollout else LOCAL
        self.env: VectorEnv | None = None
        self.logger: Any = None
        self.progress: Any = None
        self.eval_copy: torch.nn.Module | None = None
        self.last_metrics: dict[str, float] = {}
        self.eval_before: dict[str, float] = {}  # runner.val_before_train: eval/* of the starting weights
        self.eval_last: tuple[int, dict[str, float]] | None = None  # (iteration, metrics) of the latest eval/*
        self.last_checkpoint: Path | None = None
        self.iteration_start = 0.0
        self.resumed = False
        seed_everything(derived_seed(config.actor.seed, cluster.rank))

    def _rollout_policy(self) -> torch.nn.Module | None:
        if not self.cluster.is_rollout:
            return None
        seed_everything(self.config.actor.seed)
        if self.cluster.owns_rollout_copy or self.actor is None:
            return build_rollout_policy(self.config, self.cluster.device)
        return self.actor.policy

    # ---- setup
    def resume(self, resume: str | None) -> None:
        """Continue the checkpoint ``resume`` (a folder, or ``auto`` for the run's latest), if any."""
        self.resumed = bool(resume)
        if resume:
            path = ckpt.resolve_checkpoint(self.run_dir, resume)
            if self.actor is not None:
                self.state = self.actor.load(path, self.generators)
            self.state = self.cluster.from_actor(self.state)
            dist.print0(f"resumed from {path} at iteration {self.state.iteration}")
        self.weights.version = self.state.optimizer_steps

    def open_logs(self) -> None:
        """The metric sinks, the run's ``config.yaml``, the plan line and the progress bar."""
        from vlarl_cli.logging.progress import Progress
        from vlarl_cli.logging.sinks import MetricLogger

        config, ctx = self.config, self.cluster.ctx
        logger = config.runner.logger
        self.logger = MetricLogger.create(self.run_dir, list(logger.logger_backends), project=logger.project_name,
                                          name=logger.experiment_name, config=config.model_dump(mode="json"),
                                          run_ids=self.state.run_ids,
                                          resume_step=self.state.iteration + 1 if self.resumed else None,
                                          main_process=ctx.is_main)
        if ctx.is_main:
            from vlarl_cli.training.run_folder import write_own_text

            write_own_text(self.run_dir, "config.yaml", to_yaml(config))
        if self.actor is not None and self.cluster.is_actor_source:
            _print_plan(config, ctx.world_size, self.actor.policy, self.run_dir, len(self.cluster.roles.actor))
            print(self.cpu.describe(), flush=True)
            for line in render_deviations(config):
                print(f"deviation: {line}", flush=True)
        self.progress = Progress(total=config.runner.max_epochs, start=self.state.iteration, enabled=ctx.is_main)

    def open_envs(self) -> None:
        """Envs local on env+rollout ranks; served to the rollout rank from env-only ranks."""
        from vlarl_cli.distributed import remote_env

        cluster, config = self.cluster, self.config
        roles, split, stages = cluster.roles, config.env.train, config.rollout.pipeline_stage_num
        if cluster.is_env:
            # an env-only rank has no policy: its rollout rank says which cameras to render
            view = (_env_view(self.policy) if cluster.is_rollout
                    else remote_env.receive_setup(roles.rollout_of_env(cluster.rank)))
            self.env = make_env(config, split, num_envs=roles.envs_per_env_rank, rank=cluster.rank,
                                group_size=config.train_group_size, cameras=tuple(view["cameras"]),
                                obs_mode=view["obs_mode"], gripper=view["gripper"],
                                workers=self.cpu.env_workers or None,
                                record_video=split.video_cfg.save_video and cluster.is_first_env, stages=stages)
            if cluster.is_env_only:
                remote_env.send_hello(self.env, roles.rollout_of_env(cluster.rank), stages)
        elif cluster.is_rollout:
            self.env = remote_env.RemoteVectorEnv(roles.env_ranks_of(cluster.rank), _env_view(self.policy))

    # ---- one iteration
    def running(self) -> bool:
        state, runner = self.state, self.config.runner
        return state.iteration < runner.max_epochs and not 0 <= runner.max_steps <= state.optimizer_steps

    def start_iteration(self) -> dict[str, float]:
        """Every random stream of an iteration is derived from (seed, rank, iteration): a run resumed from a
        checkpoint replays exactly what the uninterrupted run would have done. Returns the empty metrics."""
        self.iteration_start = time.perf_counter()
        seed = self.config.actor.seed
        seed_everything(derived_seed(seed, self.cluster.rank, self.state.iteration))
        self.generators["shuffle"].manual_seed(derived_seed(seed, self.state.iteration, 1))
        return {}

    def sync(self, metrics: dict[str, float]) -> None:
        if self.weights.stale:
            self.weights.push(metrics)

    def collect(self, metrics: dict[str, float]) -> list[Rollout] | None:
        """This rank's rollouts (rollout ranks); env-only ranks serve their rollout rank's collect."""
        from vlarl_cli.distributed.remote_env import serve_env

        if self.cluster.is_rollout:
            return self._collect_rollouts(metrics)
        if self.cluster.is_env:
            assert self.env is not None
            serve_env(self.env, self.cluster.roles.rollout_of_env(self.cluster.rank),
                      self.config.rollout.pipeline_stage_num, self.config.chunk_steps_per_epoch)
        return None

    def _collect_rollouts(self, metrics: dict[str, float]) -> list[Rollout]:
        from vlarl_cli.distributed.remote_env import RemoteVectorEnv

        config, cluster, policy = self.config, self.cluster, self.policy
        assert policy is not None
        policy.eval()
        # components sharing this device take turns: the rollout copy comes back, the actor leaves
        own_copy = cluster.owns_rollout_copy
        offload_module(policy, cluster.device if own_copy and config.rollout.enable_offload else None)
        if self.actor is not None:
            self.actor.offload(weights=own_copy)
        with self.cpu.inference():
            sampled = [self._sample_epoch(policy, epoch) for epoch in range(config.rollout_epoch)]
        if isinstance(self.env, RemoteVectorEnv):
            self.env.end_iteration(self.state.iteration + 1)
        drawn = [d for s in sampled for d in s.draws]  # every collection (dynamic sampling draws more)
        metrics.update(rollout_metrics(drawn, self.rollout_reduce))
        if config.algorithm.dynamic_sampling:
            metrics.update(sampling_metrics(sampled, self.rollout_reduce))
        env_steps = (len(cluster.rollout_columns) * config.chunk_steps_per_epoch * config.actor.model.num_action_chunks
                     * len(drawn))
        metrics.update({
            "time/env/env_interact_step": sum(r.env_time for r in drawn),
            "time/rollout/predict": sum(r.inference_time for r in drawn),
            "time/env_steps_per_s": env_steps / max(1e-9, time.perf_counter() - self.iteration_start),
        })
        metrics["time/generate_rollouts"] = time.perf_counter() - self.iteration_start
        return [s.rollout for s in sampled]

    def _sample_epoch(self, policy: torch.nn.Module, epoch: int) -> SampledEpoch:
        """One rollout epoch: one collection, or with ``algorithm.dynamic_sampling`` as many as it takes to
        fill the batch's group slots with groups that carry signal (``training.sampling``)."""
        algo, split = self.config.algorithm, self.config.env.train
        if not algo.dynamic_sampling:
            r = self._collect_epoch(policy, epoch, 0)
            return SampledEpoch(r, [r])
        group_size = self.config.train_group_size
        return fill_with_signal(
            lambda d: self._collect_epoch(policy, epoch, d),
            lambda r: group_signal(r, group_size, auto_reset=split.auto_reset, reward_type=algo.reward_type),
            group_size=group_size, max_draws=algo.max_sampling_draws, reduce=self.rollout_reduce)

    def _collect_epoch(self, policy: torch.nn.Module, epoch: int, draw: int) -> Rollout:
        """Rollout epoch ``epoch`` of this iteration (``draw`` > 0: a dynamic-sampling redraw, with init states
        and sampling streams of its own)."""
        config, cluster, split = self.config, self.cluster, self.config.env.train
        epoch_index = self.state.iteration * config.rollout_epoch + epoch + draw * _DRAW_STRIDE
        columns, rollout_ranks = cluster.rollout_columns, cluster.roles.rollout
        assert self.env is not None
        ids = draw_reset_ids(self.env.pool, len(columns), config.train_group_size,
                             ordered=split.use_ordered_reset_state_ids, seed=split.seed,
                             rank=rollout_ranks.index(cluster.rank), world_size=len(rollout_ranks),
                             epoch_index=epoch_index)
        streams = sampling_generator(config.actor.seed, epoch_index, columns)
        return collect(cast(Policy, policy), self.env, config.chunk_steps_per_epoch,
                       stages=config.rollout.pipeline_stage_num, reset_state_ids=ids, generator=streams,
                       bootstrap=config.bootstrap_truncation)

    def hand_to_actors(self, rollouts: list[Rollout] | None, metrics: dict[str, float]) -> list[Rollout] | None:
        """The actor ranks' env columns of every rollout epoch (None on ranks that are not actors)."""
        from vlarl_cli.distributed.columns import redistribute

        if self.cluster.collocated:
            return rollouts
        t = time.perf_counter()
        moved = redistribute(None if rollouts is None else [r.columns() for r in rollouts], self.cluster.roles)
        if self.cluster.is_rollout:
            metrics["time/transfer"] = time.perf_counter() - t
        return None if moved is None else [Rollout.from_columns(c) for c in moved]

    def update(self, rollouts: list[Rollout] | None, metrics: dict[str, float]) -> None:
        """Count the iteration; on the actor ranks: advantages, then the PPO update; videos of this
        iteration; then every rank learns whether the weights changed."""
        self.state.iteration += 1
        self.state.optimizer_steps += self.steps_per_iteration
        if self.actor is not None:
            assert rollouts is not None
            metrics.update(self._update_actor(self.actor, rollouts))
        video = self.config.env.train.video_cfg
        if self.cluster.is_first_env and video.save_video and self.env is not None:
            write_videos(self.env, video, self.state.iteration)
        self.weights.agree()

    def _update_actor(self, actor: Actor, rollouts: list[Rollout]) -> dict[str, float]:
        if self.cluster.owns_rollout_copy and self.config.rollout.enable_offload:
            offload_module(self.policy, "cpu")  # rollout.enable_offload: off the device while the actor trains
        t_adv = time.perf_counter()
        batch, adv_metrics = build_batch(self.config, rollouts, critic=actor.critic, reduce=actor.reduce)
        t_update = time.perf_counter()
        update_metrics = actor.update(batch, self.generators["shuffle"],
                                      self.state.optimizer_steps - self.steps_per_iteration)
        if update_metrics.get("train/actor/optimizer_steps", 0) > 0:
            self.weights.version = self.state.optimizer_steps
        self.state.skipped_steps += int(update_metrics.get("train/actor/skipped_steps", 0))
        return {**update_metrics, **adv_metrics, "time/cal_adv_and_returns": t_update - t_adv,
                "time/actor_training": time.perf_counter() - t_update}

    def evaluate_before_training(self) -> None:
        """``runner.val_before_train``: ``eval/*`` of the starting weights, logged at step 0 (fresh runs only)."""
        if not self.config.runner.val_before_train or self.state.iteration > 0:
            return
        self.iteration_start = time.perf_counter()
        metrics: dict[str, float] = {}
        self._evaluate_now(metrics)
        metrics = self.cluster.combine_metrics(metrics)
        self.logger.log(metrics, step=0)
        self.eval_before = metrics

    def evaluate(self, metrics: dict[str, float]) -> None:
        """``eval/*`` every ``val_check_interval`` iterations, with the weights this iteration produced."""
        interval = self.config.runner.val_check_interval
        if interval <= 0 or self.state.iteration % interval:
            return
        self._evaluate_now(metrics)

    def _evaluate_now(self, metrics: dict[str, float]) -> None:
        from vlarl_cli.training.validate import evaluate_in_training

        cluster = self.cluster
        if self.weights.stale:
            self.weights.push(metrics)
        if not cluster.is_rollout:
            return
        offload_module(self.policy, cluster.device if cluster.owns_rollout_copy else None)  # back from offload
        t = time.perf_counter()
        metrics.update(evaluate_in_training(self._eval_policy(), self.config, self.state.iteration, self.run_dir,
                                            rank=cluster.rank, ranks=list(cluster.roles.rollout),
                                            group=cluster.groups.get("rollout"), env=self.env))
        metrics["time/eval"] = time.perf_counter() - t

    def _eval_policy(self) -> torch.nn.Module:
        policy, actor = self.policy, self.actor
        assert policy is not None
        if actor is None or policy is not actor.policy or not actor.sharded:
            return policy
        # a sharded module would need the same forwards on every rank; evaluation runs a different number of
        # steps per rank, so it uses an unsharded copy (built once)
        full = actor.full_state(owner=None)
        if self.eval_copy is None:
            seed_everything(self.config.actor.seed)
            self.eval_copy = build_rollout_policy(self.config, self.cluster.device)
        self.eval_copy.load_state_dict(full)
        return self.eval_copy

    def log(self, metrics: dict[str, float]) -> None:
        metrics = self.cluster.combine_metrics(metrics)
        metrics["time/step"] = time.perf_counter() - self.iteration_start
        self.logger.log(metrics, step=self.state.iteration)
        self.last_metrics = metrics
        if any(k.startswith("eval/") for k in metrics):
            self.eval_last = (self.state.iteration, metrics)
        self.progress.update(self.state.iteration, metrics)

    def checkpoint(self) -> None:
        """Every ``save_interval`` iterations and after the last one (the logger's run ids go with it)."""
        runner, state = self.config.runner, self.state
        if not ((runner.save_interval > 0 and state.iteration % runner.save_interval == 0)
                or state.iteration == runner.max_epochs):
            return
        state.run_ids = self.cluster.from_rank(self.logger.run_ids(), 0) or state.run_ids  # rank 0 logs
        if self.actor is not None:
            self.last_checkpoint = self.actor.save(self.run_dir, self.generators, state)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        if self.env is not None:
            self.env.close()
        if self.logger is not None:
            self.logger.close()

    def result(self) -> TrainResult:
        if self.cluster.is_actor_source and self.last_checkpoint is not None:
            print(f"checkpoint: {self.last_checkpoint}", flush=True)
        self._print_before_after()
        return TrainResult(run_dir=self.run_dir, iterations=self.state.iteration, last_metrics=self.last_metrics,
                           checkpoint=self.last_checkpoint)

    def _print_before_after(self) -> None:
        """``runner.val_before_train``: one line comparing the first and the latest evaluation (same trials).
        LIBERO evaluations give a success rate with its Wilson interval; the others their ``success_once``."""
        if self.cluster.rank != 0 or not self.eval_before:
            return
        if self.eval_last is None:
            print(f"eval success before training {self._rate(self.eval_before)}; no evaluation after it (set "
                  "runner.val_check_interval to a divisor of runner.max_epochs to evaluate the last weights)", flush=True)
            return
        iteration, after = self.eval_last
        unevaluated = self.state.iteration - iteration
        tail = f" (the last {unevaluated} iteration(s) were not evaluated)" if unevaluated else ""
        print(f"eval success before training {self._rate(self.eval_before)} -> after {iteration} iterations "
              f"{self._rate(after)}{tail}", flush=True)

    @staticmethod
    def _rate(m: dict[str, float]) -> str:
        key = "eval/success_rate" if "eval/success_rate" in m else "eval/success_once"
        if key not in m:
            return "n/a"
        if "eval/ci95_low" not in m:
            return f"{m[key]:.2f}"
        n = int(m.get("eval/num_episodes", 0))
        return f"{m[key]:.2f} ({round(m[key] * n)}/{n}, 95% CI [{m['eval/ci95_low']:.2f}, {m['eval/ci95_high']:.2f}])"


def _env_view(policy: torch.nn.Module | None) -> dict[str, Any]:
    """What the env renders for ``policy`` and how its actions grip: its cameras, LIBERO observation mode and
    gripper convention (sent to env-only ranks)."""
    return {"cameras": list(policy_cameras(policy)), "obs_mode": policy_obs_mode(policy),
            "gripper": policy_gripper(policy)}


def _task_name(config: VlarlConfig) -> str:
    return task_name(config.env.train)


def _print_plan(config: VlarlConfig, world_size: int, policy: torch.nn.Module, run_dir: Path, actor_ranks: int) -> None:
    from vlarl_cli.training.dry_run import count_parameters

    params = count_parameters(policy)
    placement = config.cluster.placement(world_size)
    print(f"vlarl rl-train: {config.actor.model.model_type} ({params.total / 1e6:.2f}M params, "
          f"{params.trainable / 1e6:.2f}M trainable) | {_task_name(config)} "
          f"{config.train_num_envs} envs | {config.algorithm.adv_type} | world {world_size}: "
          + ", ".join(f"{k}={v}" for k, v in placement.items()) + f" | run dir {run_dir}")
    if actor_ranks > 1 and config.actor.global_batch_size % config.train_num_envs:
        print(f"note: actor.global_batch_size {config.actor.global_batch_size} is not a multiple of "
              f"total_num_envs {config.train_num_envs}: mini-batches are shuffled by sample, so this run's "
              "mini-batches differ from a 1-process run's (otherwise every env gives each mini-batch the same "
              "number of its chunk steps)", flush=True)
