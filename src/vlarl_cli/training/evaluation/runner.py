"""The episode runner: :func:`run_episodes` plays planned episodes in this process's vector env.

Episodes run in waves of ``num_envs`` (one per env, ``auto_reset`` off, the env renders only at chunk
boundaries); each finished episode is handed to ``on_episode`` (the crash-safe episode log,
:mod:`vlarl_cli.video.episodes`) with its actions and states saved. Episodes lost to a worker crash get
one more run.

Sampling noise is seeded per wave from ``policy_seed`` and the wave's episodes, so a rerun with the same
``num_envs`` and no resume reproduces every episode; resumed waves differ in composition and therefore
in noise (deterministic ODE sampling still starts from seeded noise).
"""

from __future__ import annotations

import inspect
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.envs.vector import workers_for
from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.base import policy_cameras, policy_obs_mode
from vlarl_cli.training.evaluation.plan import EpisodeKey, EvalSettings, split_blocks
from vlarl_cli.video.episodes import EpisodeData, EpisodeRecord, episode_paths, save_frames


def _subset(obs: dict[str, Any], rows: list[int]) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    for k, v in obs.items():
        out[k] = v[rows] if isinstance(v, torch.Tensor) else [v[i] for i in rows] if isinstance(v, list) else v
    return out


def _sampler(policy: Any) -> tuple[bool, bool]:
    """(policy.sample takes ``generator``, policy has a ``temperature`` attribute)."""
    try:
        takes_gen = "generator" in inspect.signature(policy.sample).parameters
    except (TypeError, ValueError):
        takes_gen = False
    return takes_gen, hasattr(policy, "temperature")


def _wave_seed(policy_seed: int, wave: list[EpisodeKey]) -> int:
    return (policy_seed * 1_000_003 + zlib.crc32(repr([(k.suite, k.task, k.trial) for k in wave]).encode())) % 2**63


@dataclass
class RunStats:
    episodes: int = 0
    waves: int = 0
    env_time_s: float = 0.0
    policy_time_s: float = 0.0
    wall_s: float = 0.0
    worker_restarts: int = 0


def run_episodes(policy: Any, settings: EvalSettings, items: list[EpisodeKey], *,
                 on_episode: Any = None, rank: int = 0, out_dir: Path | None = None,
                 log: bool = True) -> tuple[list[EpisodeRecord], RunStats]:
    """Evaluate ``items`` (each exactly once) in this process's vector env.

    Args:
        on_episode: called with each finished :class:`EpisodeRecord` (already holding its data paths).
        out_dir: where per-episode data (actions, fingerprints, live frames) are written; None = nowhere.

    Returns:
        (records in completion order, timing stats).
    """
    import torch

    from vlarl_cli.envs.libero.suites import get_task
    from vlarl_cli.envs.vector import EPISODE_DONE, ERRORS, LiberoVectorEnv, VectorEnvSpec

    stats = RunStats()
    if not items:
        return [], stats
    takes_gen, has_temp = _sampler(policy)
    if settings.temperature is not None:
        if has_temp:
            policy.temperature = settings.temperature
        elif settings.temperature != 1.0:
            raise ConfigError(f"{type(policy).__name__} has no sampling temperature (a flow policy samples "
                              "with its configured noise).",
                              "Use --temperature 1 to sample with the configured noise, or --deterministic.")
    predicted = int(policy.num_action_chunks)
    chunk = settings.replan(predicted)  # openpi executes the first 5 of pi0's chunk, then replans
    n = min(settings.num_envs, len(items))
    spec = VectorEnvSpec(
        suite="libero_130", num_envs=n, num_workers=workers_for(n, settings.num_workers),
        resolution=settings.resolution, cameras=policy_cameras(policy), obs_mode=policy_obs_mode(policy),
        max_episode_steps=settings.max_steps, settle_steps=settings.settle_steps, protocol=settings.protocol,
        env_seed=settings.effective_env_seed, auto_reset=False, record_video=settings.live_video > 0,
        hard_reset=settings.effective_hard_reset,
    )
    blocks = split_blocks(items, n)
    queue = [[b[k] if k < len(b) else None for b in blocks] for k in range(len(blocks[0]))]
    records: list[EpisodeRecord] = []
    live_left = settings.live_video
    start = time.perf_counter()
    vec = LiberoVectorEnv(spec)
    try:
        retried: set[EpisodeKey] = set()
        retry: list[EpisodeKey] = []
        last: dict[int, EpisodeKey] = {}
        while queue or retry:
            if not queue:  # episodes lost to a worker crash get one more run, packed into fresh waves
                more = split_blocks(retry, n)
                queue = [[b[k] if k < len(b) else None for b in more] for k in range(len(more[0]))]
                retry = []
            wave = queue.pop(0)
            # envs without an episode this wave restart their previous one (same task: no rebuild) and
            # end it at once with a NaN chunk (the env fails a malformed chunk without stepping)
            filler = [wave[e] is None for e in range(n)]
            fallback = next(x for x in wave if x is not None)
            keys_ = [w if w is not None else last.get(e, fallback) for e, w in enumerate(wave)]
            last.update({e: w for e, w in enumerate(wave) if w is not None})
            restarts = vec.restarts
            t0 = time.perf_counter()
            obs = vec.reset([k.libero130_reset_state_id for k in keys_])
            stats.env_time_s += time.perf_counter() - t0
            active = np.array([not f for f in filler])
            sent: list[list[np.ndarray]] = [[] for _ in range(n)]
            states = [[obs[keys.STATES][e].numpy().copy()] for e in range(n)]
            joints = [[obs["joint_pos"][e].numpy().copy()] for e in range(n)]
            gen = torch.Generator().manual_seed(_wave_seed(settings.policy_seed, [k for k in wave if k]))
            ended: dict[int, tuple[bool, int, str]] = {}
            frames: dict[int, dict[str, np.ndarray]] = {}
            first = True
            while active.any() or first:
                rows = [int(e) for e in np.flatnonzero(active)]
                actions = np.full((n, chunk, 7), np.nan, np.float32)  # NaN ends filler episodes at once
                if rows:
                    t0 = time.perf_counter()
                    kwargs = {"generator": gen} if takes_gen else {}
                    with torch.no_grad():
                        out = policy.sample(_subset(obs, rows), deterministic=settings.deterministic, **kwargs)
                    stats.policy_time_s += time.perf_counter() - t0
                    a = out.actions.detach().to("cpu", torch.float32).numpy()
                    if a.shape != (len(rows), predicted, 7):
                        raise ConfigError(f"The policy returned actions of shape {list(a.shape)}, expected "
                                          f"[{len(rows)}, {predicted}, 7].", "Check actor.model.num_action_chunks.")
                    actions[rows] = a[:, :chunk]
                first = False
                t0 = time.perf_counter()
                obs, _, _, info = vec.step_chunk(actions)
                stats.env_time_s += time.perf_counter() - t0
                done = info[EPISODE_DONE].numpy()
                for e in rows:
                    sent[e].append(actions[e])
                    states[e].append(obs[keys.STATES][e].numpy().copy())
                    joints[e].append(obs["joint_pos"][e].numpy().copy())
                    if done[e]:
                        active[e] = False
                        ended[e] = (bool(info[keys.SUCCESS_ONCE][e]), int(info[keys.EPISODE_LEN][e]),
                                    info[ERRORS].get(e, ""))
                        if spec.record_video:
                            got = vec.episode_frames(e)
                            if got and live_left > 0:
                                frames[e] = got[-1]
                                live_left -= 1
                if spec.record_video:
                    for e in np.flatnonzero(done):
                        if filler[int(e)]:
                            vec.episode_frames(int(e))  # drop
            wall = time.perf_counter() - start
            lost = vec.restarts > restarts
            stats.worker_restarts += vec.restarts - restarts
            stats.waves += 1
            for e, key in enumerate(wave):
                if key is None:
                    continue
                success, steps, error = ended[e]
                if error and lost and key not in retried:  # a worker died: not the policy's fault, run again
                    retried.add(key)
                    retry.append(key)
                    continue
                task = get_task(key.suite, key.task)
                max_steps, settle, seed = settings.effective(key.suite)
                rec = EpisodeRecord(suite=key.suite, task=key.task, trial=key.trial,
                                    reset_state_id=key.task * 50 + key.trial, task_name=task.name,
                                    language=task.language, success=success and not error, steps=steps,
                                    seed=seed, max_steps=max_steps, settle_steps=settle, error=error, rank=rank,
                                    wall_s=round(wall, 3), root=out_dir)
                if out_dir is not None:
                    rec.data, frames_path = episode_paths(rec.label, key.suite)
                    EpisodeData(np.stack(sent[e]), np.stack(states[e]), np.stack(joints[e])).save(out_dir / rec.data)
                    if e in frames:
                        save_frames(out_dir / frames_path, frames[e])
                        rec.frames = frames_path
                records.append(rec)
                stats.episodes += 1
                if on_episode is not None:
                    on_episode(rec)
                if log:
                    status = "success" if rec.success else ("ERROR " + error if error else "fail")
                    rate = 60 * stats.episodes / max(wall, 1e-9)
                    print(f"[rank {rank}] {stats.episodes}/{len(items)} {rec.label}: {status} ({steps} steps) "
                          f"| {rate:.2f} episodes/min", flush=True)
    finally:
        vec.close()
    stats.wall_s = time.perf_counter() - start
    return records, stats
