"""The rollout's side of the world: this rank's vector env, its reset states and its sampling streams.

Reset states and sampling noise are functions of (seed, rollout epoch, global env id), so any placement
and world size, and a resumed run, see exactly the states and noise of the 1-process uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli.config.schema import EnvSplitConfig, VlarlConfig
from vlarl_cli.envs import registry
from vlarl_cli.envs.base import VectorEnv
from vlarl_cli.envs.registry import EnvRequest
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

    ``num_envs``: the training envs this rank hosts; they count only for a simulator whose envs run in worker
    processes (LIBERO; ManiSkill and the toy task step inside the rank's own process).
    """
    from vlarl_cli.distributed.cpu_budget import decide

    split = config.env.train
    in_workers = num_envs if registry.get(split.env_type).in_workers else 0
    return decide(device_type=device_type, num_envs=in_workers, requested_workers=split.num_workers,
                  offload=config.actor.fsdp_config.cpu_offload, machine=machine,
                  **config.cluster.cpu_budget.model_dump())


def render_deviations(config: VlarlConfig) -> list[str]:
    """Each split's settings that differ from its simulator's published protocols, one line each (run plan,
    dry-run): LIBERO's ``render_quality`` other than exact."""
    lines: list[str] = []
    for name, split in (("train", config.env.train), ("eval", config.env.eval)):
        simulator = registry.get(split.env_type)
        if simulator.deviations is not None:
            lines += simulator.call("deviations", name, split)
    return lines


def task_name(split: EnvSplitConfig) -> str:
    """The task a run is named by: the simulator's (LIBERO: the suite), else the env_type."""
    simulator = registry.get(split.env_type)
    return simulator.call("task_name", split) if simulator.task_name else split.env_type


def make_env(config: VlarlConfig, split: EnvSplitConfig, *, num_envs: int, rank: int, group_size: int,
             cameras: tuple[str, ...], gripper: str, record_video: bool, stages: int, obs_mode: str = "rgb",
             workers: int | None = None) -> VectorEnv:
    """This rank's vector env for ``split``, made by its simulator (``envs/registry.py``). ``cameras`` /
    ``obs_mode`` / ``gripper``: the policy's declarations (``keys.policy_*``); LIBERO's subprocess workers:
    ``workers``, the CPU budget's, or ``split.num_workers``, or one per core."""
    request = EnvRequest(num_envs=num_envs, rank=rank, group_size=group_size,
                         chunk=config.actor.model.num_action_chunks, cameras=tuple(cameras), obs_mode=obs_mode,
                         gripper=gripper, record_video=record_video, stages=stages, workers=workers)
    return registry.get(split.env_type).call("make_env", split, request)


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
