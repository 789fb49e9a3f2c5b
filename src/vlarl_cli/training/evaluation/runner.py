"""The episode runner: :func:`run_episodes` plays planned episodes in this process's vector env.

No lockstep waves: each env works through its own contiguous block of the plan (task-major, so it walks a
task's trials in order and its seed stream needs no replay), and gets its next episode as soon as its
current one ends (:meth:`LiberoVectorEnv.restart`, ``auto_reset`` off); an env whose block is done takes
the last episode of the longest remaining block. Every chunk, one policy call computes the actions of all
running episodes. Each finished episode is handed to ``on_episode`` (the crash-safe episode log,
:mod:`vlarl_cli.video.episodes`) with its actions and states saved. Episodes lost to a worker crash get
one more run.

Sampling noise is seeded per episode (``policy_seed`` and the episode's suite, task and trial, one stream
per row: ``policies.noise.RowGenerator``), and the policy always runs at a batch of ``num_envs`` rows
(idle rows padded), where a row's result does not depend on the other rows or its position (measured bit
for bit on CPU; a different batch size changes the last float bits). So an episode's actions do not
depend on which episodes share its chunk: a resumed evaluation equals the uninterrupted one episode by
episode, with the same ``num_envs``.
"""

from __future__ import annotations

import inspect
import time
import zlib
from collections import deque
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


def episode_seed(policy_seed: int, key: EpisodeKey) -> int:
    """The seed of one episode's sampling noise (depends on nothing but the episode and ``policy_seed``)."""
    return (policy_seed * 1_000_003 + zlib.crc32(repr((key.suite, key.task, key.trial)).encode())) % 2**63


@dataclass
class RunStats:
    episodes: int = 0
    chunks: int = 0
    env_time_s: float = 0.0
    policy_time_s: float = 0.0
    wall_s: float = 0.0
    worker_restarts: int = 0


def run_episodes(policy: Any, settings: EvalSettings, items: list[EpisodeKey], *,
                 on_episode: Any = None, rank: int = 0, out_dir: Path | None = None,
                 log: bool = True, cpu_budget: dict[str, Any] | None = None,
                 env: Any = None) -> tuple[list[EpisodeRecord], RunStats]:
    """Evaluate ``items`` (each exactly once) in this process's vector env.

    Args:
        on_episode: called with each finished :class:`EpisodeRecord` (already holding its data paths).
        out_dir: where per-episode data (actions, fingerprints, live frames) are written; None = nowhere.
        cpu_budget: ``cluster.cpu_budget`` overrides (``distributed.cpu_budget.decide``); the env workers
            and the inference threads follow the budget (printed with ``log``).
        env: a vector env that already exists (rl-train's training env), used instead of building one when
            it would play the same episodes (:func:`reusable`); left open. It saves building the simulators
            (~4 s each) and spawning their workers at every evaluation.

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
    spec = _vector_spec(policy, settings, n, budget.env_workers)
    own = not reusable(env, spec, items)
    run.vec = LiberoVectorEnv(spec) if own else env
    try:
        with budget.inference():
            run.play(_Schedule(items, n))
    finally:
        if own:
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

    device = keys.policy_device(policy)
    device_type = device.type if device is not None else "cpu"
    return decide(device_type=device_type, num_envs=n, requested_workers=settings.num_workers, **(overrides or {}))


def reusable(env: Any, spec: Any, items: list[EpisodeKey]) -> bool:
    """Whether ``env`` plays ``items`` exactly as a vector env built from ``spec`` would: a local LIBERO vector
    env with as many envs (the policy's batch), the same :meth:`VectorEnvSpec.episode_setup` (protocol, seeds,
    reset mode, limits, observation; no auto-reset) and a suite that names every item. Episodes start from
    their init state and the seed stream the protocol gives them whatever the env ran before (a hard reset
    rebuilds the model; ``LiberoEnv`` replays the seed stream), so the results are those of fresh simulators."""
    from vlarl_cli.envs.libero.suites import LIBERO_ALL
    from vlarl_cli.envs.vector import LiberoVectorEnv

    if not isinstance(env, LiberoVectorEnv) or env.num_envs != spec.num_envs:
        return False
    if env.spec.suite != LIBERO_ALL and any(k.suite != env.spec.suite for k in items):
        return False
    return bool(env.spec.episode_setup() == spec.episode_setup())


def _state_id(vec: Any, key: EpisodeKey) -> int:
    """``key``'s flat reset-state id in ``vec``'s suite (libero_all's ids, or those of the key's own suite)."""
    from vlarl_cli.envs.libero.suites import LIBERO_ALL, reset_state_id

    if vec.spec.suite == LIBERO_ALL:
        return key.libero130_reset_state_id
    return reset_state_id(key.suite, key.task, key.trial)


def _vector_spec(policy: Any, settings: EvalSettings, n: int, workers: int | None = None) -> Any:
    from vlarl_cli.envs.libero.suites import LIBERO_ALL
    from vlarl_cli.envs.vector import VectorEnvSpec

    # every task the plan can name: libero_130's, then LIBERO-PRO's (EpisodeKey.libero130_reset_state_id)
    return VectorEnvSpec(
        suite=LIBERO_ALL, num_envs=n, num_workers=workers or workers_for(n, settings.num_workers),
        resolution=settings.resolution, cameras=keys.policy_cameras(policy), obs_mode=keys.policy_obs_mode(policy),
        max_episode_steps=settings.max_steps, settle_steps=settings.settle_steps, protocol=settings.protocol,
        env_seed=settings.effective_env_seed, auto_reset=False, record_video=settings.live_video > 0,
        hard_reset=settings.effective_hard_reset, render_quality=settings.render_quality,
        python="libero_plus" if settings.plus else "libero_pro" if settings.pro_object else None,
        python_key="env.eval.python",
    )


class _Schedule:
    """Which episode each env plays next: its own contiguous block first, then the tail of the longest other
    block (an env that has finished its block helps the slowest one)."""

    def __init__(self, items: list[EpisodeKey], n: int) -> None:
        self.blocks = [deque(b) for b in split_blocks(items, n)]

    def next_for(self, env: int) -> EpisodeKey | None:
        if self.blocks[env]:
            return self.blocks[env].popleft()
        donor = max(self.blocks, key=len)
        return donor.pop() if donor else None


@dataclass
class _Episode:
    """One running episode: its key, its noise stream, the action chunks sent, the states and joint positions
    seen, and its live frames."""

    key: EpisodeKey
    generator: Any
    sent: list[np.ndarray] = field(default_factory=list)
    states: list[np.ndarray] = field(default_factory=list)
    joints: list[np.ndarray] = field(default_factory=list)
    frames: dict[str, np.ndarray] | None = None

    def see(self, obs: dict[str, Any], e: int) -> None:
        self.states.append(obs[keys.STATES][e].numpy().copy())
        self.joints.append(obs["joint_pos"][e].numpy().copy())


class _Evaluation:
    """The state of one :func:`run_episodes`: the vector env, the running episodes, the records and retries."""

    vec: Any

    def __init__(self, policy: Any, settings: EvalSettings, n: int, takes_gen: bool, *, rank: int,
                 out_dir: Path | None, log: bool, on_episode: Any, total: int) -> None:
        self.policy, self.settings, self.n, self.takes_gen = policy, settings, n, takes_gen
        self.rank, self.out_dir, self.log, self.on_episode, self.total = rank, out_dir, log, on_episode, total
        self.predicted = int(policy.num_action_chunks)
        self.chunk = settings.replan(self.predicted)  # openpi executes the first 5 of pi0's chunk, then replans
        self.batch = max(settings.num_envs, n)  # the policy's batch: fixed, so rows never change bits
        self.stats = RunStats()
        self.records: list[EpisodeRecord] = []
        self.live_left = settings.live_video
        self.retried: set[EpisodeKey] = set()
        self.running: dict[int, _Episode] = {}
        self.start = time.perf_counter()

    def begin(self, key: EpisodeKey, obs: dict[str, Any], e: int) -> None:
        import torch

        gen = torch.Generator().manual_seed(episode_seed(self.settings.policy_seed, key)) if self.takes_gen else None
        self.running[e] = _Episode(key, gen)
        self.running[e].see(obs, e)

    def timed_env(self, call: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        out = call(*args)
        self.stats.env_time_s += time.perf_counter() - t0
        return out

    def play(self, schedule: _Schedule) -> None:
        """Start every env on its first episode, then step until no episode is left; an env whose episode
        ended starts its next one before the next chunk."""
        first = {e: k for e in range(self.n) if (k := schedule.next_for(e)) is not None}
        obs = self.timed_env(self.vec.reset, [_state_id(self.vec, k) for k in first.values()])
        for e, key in first.items():
            self.begin(key, obs, e)
        while self.running:
            actions = self.act(obs)
            restarts = self.vec.restarts
            obs, _, _, info = self.timed_env(self.vec.step_chunk, actions)
            lost = self.vec.restarts > restarts
            self.stats.worker_restarts += self.vec.restarts - restarts
            nxt = self.finish(obs, actions, info, lost, schedule)
            if nxt:
                obs = self.timed_env(self.vec.restart, list(nxt), [_state_id(self.vec, k) for k in nxt.values()])
                for e, key in nxt.items():
                    self.begin(key, obs, e)

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        """``[n, chunk, 7]`` actions: the policy's for running episodes, NaN for idle envs (never sent on).

        The policy sees a batch of ``self.batch`` rows (the envs, then copies of row 0); rows without an
        episode draw from throwaway streams."""
        import torch

        from vlarl_cli.policies.noise import RowGenerator

        actions = np.full((self.n, self.chunk, 7), np.nan, np.float32)
        rows = list(range(self.n)) + [0] * (self.batch - self.n)
        kwargs: dict[str, Any] = {}
        if self.takes_gen:
            kwargs["generator"] = RowGenerator([self.running[e].generator if e in self.running and i == e
                                                else torch.Generator().manual_seed(0) for i, e in enumerate(rows)])
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self.policy.sample(_subset(obs, rows), deterministic=self.settings.deterministic, **kwargs)
        self.stats.policy_time_s += time.perf_counter() - t0
        self.stats.chunks += 1
        a = out.actions.detach().to("cpu", torch.float32).numpy()
        if a.shape != (len(rows), self.predicted, 7):
            raise ConfigError(f"The policy returned actions of shape {list(a.shape)}, expected "
                              f"[{len(rows)}, {self.predicted}, 7].", "Check actor.model.num_action_chunks.")
        running = sorted(self.running)
        actions[running] = a[running, :self.chunk]
        return actions

    def finish(self, obs: dict[str, Any], actions: np.ndarray, info: dict[str, Any], lost: bool,
               schedule: _Schedule) -> dict[int, EpisodeKey]:
        """Log the chunk of every running episode; record those that ended (or queue those a worker crash
        lost for one more run, in the same env); the next episode of each env that became free."""
        from vlarl_cli.envs.vector import EPISODE_DONE, ERRORS

        done = info[EPISODE_DONE].numpy()
        nxt: dict[int, EpisodeKey] = {}
        for e in sorted(self.running):
            ep = self.running[e]
            ep.sent.append(actions[e])
            ep.see(obs, e)
            if not done[e]:
                continue
            del self.running[e]
            error = info[ERRORS].get(e, "")
            if error and lost and ep.key not in self.retried:  # a worker died: not the policy's fault, run again
                self.retried.add(ep.key)
                schedule.blocks[e].appendleft(ep.key)
            else:
                if self.settings.live_video > 0:
                    got = self.vec.episode_frames(e)
                    if got and self.live_left > 0:
                        ep.frames = got[-1]
                        self.live_left -= 1
                self.record(ep, (bool(info[keys.SUCCESS_ONCE][e]), int(info[keys.EPISODE_LEN][e]), error))
            key = schedule.next_for(e)
            if key is not None:
                nxt[e] = key
        return nxt

    def record(self, ep: _Episode, ended: tuple[bool, int, str]) -> None:
        """The :class:`EpisodeRecord` of a finished episode ``(success, steps, error)``: data saved, handed on,
        logged."""
        from vlarl_cli.envs.libero.suites import get_task

        success, steps, error = ended
        key, wall = ep.key, time.perf_counter() - self.start
        task = get_task(key.suite, key.task)
        max_steps, settle, seed = self.settings.effective(key.suite)
        rec = EpisodeRecord(suite=key.suite, task=key.task, trial=key.trial, reset_state_id=key.task * 50 + key.trial,
                            task_name=task.name, language=task.language, success=success and not error, steps=steps,
                            seed=seed, max_steps=max_steps, settle_steps=settle, error=error, rank=self.rank,
                            wall_s=round(wall, 3), root=self.out_dir)
        if self.out_dir is not None:
            rec.data, frames_path = episode_paths(rec.label, key.suite)
            EpisodeData(np.stack(ep.sent), np.stack(ep.states), np.stack(ep.joints)).save(self.out_dir / rec.data)
            if ep.frames is not None:
                save_frames(self.out_dir / frames_path, ep.frames)
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
