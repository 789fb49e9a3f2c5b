"""The rollout's side of the world: this rank's vector env, its reset states and its sampling streams.

Reset states and sampling noise are functions of (seed, rollout epoch, global env id), so any placement
and world size, and a resumed run, see exactly the states and noise of the 1-process uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli.config.schema import EnvSplitConfig, VlarlConfig
from vlarl_cli.envs.base import VectorEnv
from vlarl_cli.training.common import derived_seed


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


def rank_budget(config: VlarlConfig, device_type: str, num_envs: int, machine: Any = None) -> Any:
    """This rank's CPU budget (``distributed.cpu_budget``) with ``cluster.cpu_budget``'s overrides.

    ``num_envs``: the LIBERO training envs this rank hosts in worker processes (ManiSkill and the toy task
    step inside the rank's own process: 0 there).
    """
    from vlarl_cli.distributed.cpu_budget import decide

    split = config.env.train
    in_workers = num_envs if split.env_type == "libero" else 0
    return decide(device_type=device_type, num_envs=in_workers, requested_workers=split.num_workers,
                  offload=config.actor.fsdp_config.cpu_offload, machine=machine,
                  **config.cluster.cpu_budget.model_dump())


def render_deviations(config: VlarlConfig) -> list[str]:
    """``env.<split>.render_quality`` other than exact, one line per LIBERO split (run plan, dry-run)."""
    from vlarl_cli.training.evaluation.plan import render_quality_deviation

    return [f"env.{name}.{render_quality_deviation(split.render_quality)}"
            for name, split in (("train", config.env.train), ("eval", config.env.eval))
            if split.env_type == "libero" and split.render_quality != "exact"]


def make_env(config: VlarlConfig, split: EnvSplitConfig, *, num_envs: int, rank: int, group_size: int,
             cameras: tuple[str, ...], record_video: bool, stages: int, obs_mode: str = "rgb",
             workers: int | None = None) -> VectorEnv:
    """This rank's vector env for ``split`` (LIBERO subprocess workers: ``workers``, the CPU budget's, or
    ``split.num_workers``, or one per core)."""
    if split.env_type == "toy_reach":
        from vlarl_cli.envs.toy import ToyVectorEnv

        return ToyVectorEnv(num_envs, chunk=config.actor.model.num_action_chunks,
                            max_steps=split.max_episode_steps, seed=split.seed, auto_reset=split.auto_reset)
    if split.env_type == "maniskill":
        from vlarl_cli.envs.maniskill.make import gripper_convention, make_maniskill_env

        model = config.actor.model
        return make_maniskill_env(split, num_envs=num_envs, rank=rank, group_size=group_size, cameras=cameras,
                                  record_video=record_video, stages=stages,
                                  gripper=gripper_convention(model.model_type, model.embodiment_tag))
    from vlarl_cli.envs.vector import LiberoVectorEnv, VectorEnvSpec, split_spec_fields, workers_for

    spec = VectorEnvSpec(
        suite=split.task_suite_name,
        task_ids=tuple(split.task_ids or ()),
        num_envs=num_envs,
        num_workers=workers or workers_for(num_envs, split.num_workers),
        resolution=split.resolution,
        cameras=cameras,
        obs_mode=obs_mode,
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


def write_videos(env: VectorEnv, video: Any, iteration: int) -> None:
    """This iteration's recorded episodes, at most ``video.max_videos`` of them."""
    from vlarl_cli.video.writer import write_episode_video

    base = Path(video.video_base_dir)
    written = 0
    for env_id in range(env.num_envs):
        for episode in env.episode_frames(env_id):
            if written < video.max_videos:
                write_episode_video(base / f"iter_{iteration:05d}_env{env_id}.mp4", episode, fps=video.fps,
                                    caption=f"iter {iteration} env {env_id}" if video.info_on_video else None)
                written += 1
