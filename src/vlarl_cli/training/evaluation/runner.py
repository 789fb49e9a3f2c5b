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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.envs.vector import workers_for
from vlarl_cli.errors import ConfigError
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
                 log: bool = True, cpu_budget: dict[str, Any] | None = None) -> tuple[list[EpisodeRecord], RunStats]:
    """Evaluate ``items`` (each exactly once) in this process's vector env.

    Args:
        on_episode: called with each finished :class:`EpisodeRecord` (already holding its data paths).
        out_dir: where per-episode data (actions, fingerprints, live frames) are written; None = nowhere.
        cpu_budget: ``cluster.cpu_budget`` overrides (``distributed.cpu_budget.decide``); the env workers
            and the inference threads follow the budget (printed with ``log``).

    Returns:
        (records in completion order, timing stats).
    """
    from vlarl_cli.envs.vector import LiberoVectorEnv

    if not items:
        return [], RunStats()
    takes_gen = _prepare_sampling(policy, settings)
    n = min(settings.num_envs, len(items))
    budget = _budget(policy, settings, n, cpu_budget)
    if log and rank == 0:
        print(f"vlarl eval: {budget.describe()}", flush=True)
    run = _Evaluation(policy, settings, n, takes_gen, rank=rank, out_dir=out_dir, log=log, on_episode=on_episode,
                      total=len(items))
    queue = _waves(items, n)
    run.vec = LiberoVectorEnv(_vector_spec(policy, settings, n, budget.env_workers))
    try:
        with budget.inference():
            while queue or run.retry:
                if not queue:  # episodes lost to a worker crash get one more run, packed into fresh waves
                    queue, run.retry = _waves(run.retry, n), []
                run.wave(queue.pop(0))
    finally:
        run.vec.close()
    run.stats.wall_s = time.perf_counter() - run.start
    return run.records, run.stats


def _prepare_sampling(policy: Any, settings: EvalSettings) -> bool:
    """Set the policy's sampling temperature when asked; whether its ``sample`` takes a ``generator``."""
    takes_gen, has_temp = _sampler(policy)
    if settings.temperature is not None:
        if has_temp:
            policy.temperature = settings.temperature
        elif settings.temperature != 1.0:
            raise ConfigError(f"{type(policy).__name__} has no sampling temperature (a flow policy samples "
                              "with its configured noise).",
                              "Use --temperature 1 to sample with the configured noise, or --deterministic.")
    return takes_gen


def _budget(policy: Any, settings: EvalSettings, n: int, overrides: dict[str, Any] | None) -> Any:
    """This process's CPU budget for ``n`` eval envs on the policy's device."""
    from vlarl_cli.distributed.cpu_budget import decide

    first = next(iter(policy.parameters()), None) if hasattr(policy, "parameters") else None
    device_type = first.device.type if first is not None else "cpu"
    return decide(device_type=device_type, num_envs=n, requested_workers=settings.num_workers, **(overrides or {}))


def _vector_spec(policy: Any, settings: EvalSettings, n: int, workers: int | None = None) -> Any:
    from vlarl_cli.envs.vector import VectorEnvSpec
    return VectorEnvSpec(
        suite="libero_130", num_envs=n, num_workers=workers or workers_for(n, settings.num_workers),
        resolution=settings.resolution, cameras=keys.policy_cameras(policy), obs_mode=keys.policy_obs_mode(policy),
        max_episode_steps=settings.max_steps, settle_steps=settings.settle_steps, protocol=settings.protocol,
        env_seed=settings.effective_env_seed, auto_reset=False, record_video=settings.live_video > 0,
        hard_reset=settings.effective_hard_reset, render_quality=settings.render_quality,
    )


def _waves(items: list[EpisodeKey], n: int) -> list[list[EpisodeKey | None]]:
    """``items`` in waves of ``n`` (one episode per env; None where an env has none)."""
    blocks = split_blocks(items, n)
    return [[b[k] if k < len(b) else None for b in blocks] for k in range(len(blocks[0]))]


@dataclass
class _Played:
    """One wave as played, per env: the action chunks sent, the states and joint positions seen, how the
    episode ended ``(success, steps, error)`` and its live frames."""

    sent: list[list[np.ndarray]]
    states: list[list[np.ndarray]]
    joints: list[list[np.ndarray]]
    ended: dict[int, tuple[bool, int, str]] = field(default_factory=dict)
    frames: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)

    def see(self, obs: dict[str, Any], rows: list[int] | range) -> None:
        for e in rows:
            self.states[e].append(obs[keys.STATES][e].numpy().copy())
            self.joints[e].append(obs["joint_pos"][e].numpy().copy())


class _Evaluation:
    """The state of one :func:`run_episodes`: the vector env, the waves played, the records and retries."""

    vec: Any

    def __init__(self, policy: Any, settings: EvalSettings, n: int, takes_gen: bool, *, rank: int,
                 out_dir: Path | None, log: bool, on_episode: Any, total: int) -> None:
        self.policy, self.settings, self.n, self.takes_gen = policy, settings, n, takes_gen
        self.rank, self.out_dir, self.log, self.on_episode, self.total = rank, out_dir, log, on_episode, total
        self.predicted = int(policy.num_action_chunks)
        self.chunk = settings.replan(self.predicted)  # openpi executes the first 5 of pi0's chunk, then replans
        self.stats = RunStats()
        self.records: list[EpisodeRecord] = []
        self.live_left = settings.live_video
        self.retried: set[EpisodeKey] = set()
        self.retry: list[EpisodeKey] = []
        self.last: dict[int, EpisodeKey] = {}
        self.start = time.perf_counter()

    def wave(self, wave: list[EpisodeKey | None]) -> None:
        """Play one wave and record its episodes (or queue those a worker crash lost for one more run)."""
        restarts = self.vec.restarts
        played = self.play(wave)
        wall = time.perf_counter() - self.start
        lost = self.vec.restarts > restarts
        self.stats.worker_restarts += self.vec.restarts - restarts
        self.stats.waves += 1
        for e, key in enumerate(wave):
            if key is None:
                continue
            error = played.ended[e][2]
            if error and lost and key not in self.retried:  # a worker died: not the policy's fault, run again
                self.retried.add(key)
                self.retry.append(key)
                continue
            self.record(key, e, played, wall)

    def play(self, wave: list[EpisodeKey | None]) -> _Played:
        """Reset the envs to the wave's episodes and step them until every one has ended."""
        import torch

        n = self.n
        # envs without an episode this wave restart their previous one (same task: no rebuild) and
        # end it at once with a NaN chunk (the env fails a malformed chunk without stepping)
        filler = [wave[e] is None for e in range(n)]
        fallback = next(x for x in wave if x is not None)
        keys_ = [w if w is not None else self.last.get(e, fallback) for e, w in enumerate(wave)]
        self.last.update({e: w for e, w in enumerate(wave) if w is not None})
        t0 = time.perf_counter()
        obs = self.vec.reset([k.libero130_reset_state_id for k in keys_])
        self.stats.env_time_s += time.perf_counter() - t0
        active = np.array([not f for f in filler])
        played = _Played(sent=[[] for _ in range(n)], states=[[] for _ in range(n)], joints=[[] for _ in range(n)])
        played.see(obs, range(n))
        gen = torch.Generator().manual_seed(_wave_seed(self.settings.policy_seed, [k for k in wave if k]))
        first = True
        while active.any() or first:
            rows = [int(e) for e in np.flatnonzero(active)]
            actions = self.act(obs, rows, gen)
            first = False
            t0 = time.perf_counter()
            obs, _, _, info = self.vec.step_chunk(actions)
            self.stats.env_time_s += time.perf_counter() - t0
            for e in rows:
                played.sent[e].append(actions[e])
            played.see(obs, rows)
            self.finish(info, rows, active, played, filler)
        return played

    def act(self, obs: dict[str, Any], rows: list[int], gen: Any) -> np.ndarray:
        """``[n, chunk, 7]`` actions: the policy's for ``rows``, NaN (which ends filler episodes at once) elsewhere."""
        import torch

        actions = np.full((self.n, self.chunk, 7), np.nan, np.float32)
        if not rows:
            return actions
        t0 = time.perf_counter()
        kwargs = {"generator": gen} if self.takes_gen else {}
        with torch.no_grad():
            out = self.policy.sample(_subset(obs, rows), deterministic=self.settings.deterministic, **kwargs)
        self.stats.policy_time_s += time.perf_counter() - t0
        a = out.actions.detach().to("cpu", torch.float32).numpy()
        if a.shape != (len(rows), self.predicted, 7):
            raise ConfigError(f"The policy returned actions of shape {list(a.shape)}, expected "
                              f"[{len(rows)}, {self.predicted}, 7].", "Check actor.model.num_action_chunks.")
        actions[rows] = a[:, :self.chunk]
        return actions

    def finish(self, info: dict[str, Any], rows: list[int], active: np.ndarray, played: _Played,
               filler: list[bool]) -> None:
        """Mark the episodes that ended in this chunk (with their live frames)."""
        from vlarl_cli.envs.vector import EPISODE_DONE, ERRORS

        done = info[EPISODE_DONE].numpy()
        record_video = self.settings.live_video > 0
        for e in rows:
            if not done[e]:
                continue
            active[e] = False
            played.ended[e] = (bool(info[keys.SUCCESS_ONCE][e]), int(info[keys.EPISODE_LEN][e]),
                               info[ERRORS].get(e, ""))
            if record_video:
                got = self.vec.episode_frames(e)
                if got and self.live_left > 0:
                    played.frames[e] = got[-1]
                    self.live_left -= 1
        if record_video:
            for e in np.flatnonzero(done):
                if filler[int(e)]:
                    self.vec.episode_frames(int(e))  # drop

    def record(self, key: EpisodeKey, e: int, played: _Played, wall: float) -> None:
        """The :class:`EpisodeRecord` of env ``e``'s episode ``key``, its data saved, handed on and logged."""
        from vlarl_cli.envs.libero.suites import get_task

        success, steps, error = played.ended[e]
        task = get_task(key.suite, key.task)
        max_steps, settle, seed = self.settings.effective(key.suite)
        rec = EpisodeRecord(suite=key.suite, task=key.task, trial=key.trial, reset_state_id=key.task * 50 + key.trial,
                            task_name=task.name, language=task.language, success=success and not error, steps=steps,
                            seed=seed, max_steps=max_steps, settle_steps=settle, error=error, rank=self.rank,
                            wall_s=round(wall, 3), root=self.out_dir)
        if self.out_dir is not None:
            rec.data, frames_path = episode_paths(rec.label, key.suite)
            EpisodeData(np.stack(played.sent[e]), np.stack(played.states[e]),
                        np.stack(played.joints[e])).save(self.out_dir / rec.data)
            if e in played.frames:
                save_frames(self.out_dir / frames_path, played.frames[e])
                rec.frames = frames_path
        self.records.append(rec)
        self.stats.episodes += 1
        if self.on_episode is not None:
            self.on_episode(rec)
        if self.log:
            status = "success" if rec.success else ("ERROR " + error if error else "fail")
            rate = 60 * self.stats.episodes / max(wall, 1e-9)
            print(f"[rank {self.rank}] {self.stats.episodes}/{self.total} {rec.label}: {status} ({steps} steps) "
                  f"| {rate:.2f} episodes/min", flush=True)
