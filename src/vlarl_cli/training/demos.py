"""Demonstration episodes for supervised fine-tuning: on-disk format, expert recording, chunk dataset.

The episode record and its on-disk format (one ``episode_<nnnnn>.npz`` per episode) live in
:mod:`vlarl_cli.datasets.episodes`; the names are re-exported here.

Observation ``t`` and action ``t`` belong together: the policy saw observation ``t`` and the expert took
action ``t``. :class:`ChunkDataset` cuts one training sample per step ``t``: the observation at ``t`` and
the action chunk ``actions[t : t + C]`` ``[C, A]``, padded at the episode end by repeating the last action
(the robot "holds" its last command, which is also what a policy should predict near the end).

Recording:

* :func:`record_toy_demos`: the toy reach task's straight-to-the-goal expert (always succeeds);
* :func:`record_expert_demos`: LIBERO's scripted :class:`~vlarl_cli.envs.libero.expert.PickPlaceExpert`
  closed loop (one action per env step), keeping only successful episodes.

Usage::

    paths = record_toy_demos("runs/sft/demos", 100, seed=0)
    data = ChunkDataset(load_episodes("runs/sft/demos"), chunk=4)
    obs, actions = data.batch([0, 5, 9])      # obs[keys.STATES] [3, 4], actions [3, 4, 2]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vlarl_cli import keys
from vlarl_cli.datasets.episodes import (
    CAMERA_KEYS,
    EPISODE_PATTERN,
    FORMAT_VERSION,
    Episode,
    episode_paths,
    load_episode,
    load_episodes,
    next_episode_index,
    save_episode,
)
from vlarl_cli.errors import VlarlError

__all__ = [
    "CAMERA_KEYS",
    "FORMAT_VERSION",
    "ChunkDataset",
    "Episode",
    "RecordReport",
    "episode_paths",
    "load_episode",
    "load_episodes",
    "read_recording_report",
    "record_expert_dataset",
    "record_expert_demos",
    "record_toy_demos",
    "save_episode",
    "toy_expert_actions",
]

# --------------------------------------------------------------------------------------------------
# dataset


class ChunkDataset:
    """``(observation, action chunk [C, A])`` samples, one per step of every episode.

    ``dataset[i]`` -> ``(obs, chunk)``: ``obs`` holds ``keys.STATES`` ``[S]`` float32, the episode's camera
    images ``[H, W, 3]`` uint8 and ``keys.TASK_DESCRIPTIONS`` (a str); ``chunk`` is ``actions[t : t + C]``
    padded at the end by repeating the last action. :meth:`batch` stacks samples into the policy's batch
    layout (``[B, ...]`` tensors, a list of B descriptions, actions ``[B, C, A]``).
    """

    def __init__(self, episodes: Sequence[Episode], chunk: int) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if not episodes:
            raise VlarlError("No demonstration episodes to train on.", "Record some with `vlarl sft --record N`.")
        self.episodes = list(episodes)
        self.chunk = chunk
        first = self.episodes[0]
        self.action_dim = int(first.actions.shape[1])
        self.state_dim = int(first.states.shape[1])
        self.cameras = tuple(sorted(first.images))
        for i, e in enumerate(self.episodes):
            e.validate(f"episode {i}")
            if e.actions.shape[1] != self.action_dim or e.states.shape[1] != self.state_dim:
                raise VlarlError(f"Demonstration episode {i} has {e.actions.shape[1]}-d actions / "
                                 f"{e.states.shape[1]}-d states, episode 0 has {self.action_dim} / "
                                 f"{self.state_dim}.", "Keep episodes of one task family per folder.")
            if tuple(sorted(e.images)) != self.cameras:
                raise VlarlError(f"Demonstration episode {i} has cameras {sorted(e.images)}, episode 0 has "
                                 f"{list(self.cameras)}.", "Record all episodes with the same cameras.")
        # flat index -> (episode, step), episode-major
        self._episode = np.concatenate([np.full(len(e), k) for k, e in enumerate(self.episodes)])
        self._step = np.concatenate([np.arange(len(e)) for e in self.episodes])

    def __len__(self) -> int:
        return int(self._step.shape[0])

    def chunk_of(self, episode: Episode, t: int) -> np.ndarray:
        """``[C, A]`` actions ``t .. t + C - 1``, the last action repeated past the episode end."""
        idx = np.minimum(np.arange(t, t + self.chunk), len(episode) - 1)
        return episode.actions[idx]

    def __getitem__(self, i: int) -> tuple[dict[str, Any], Tensor]:
        e = self.episodes[int(self._episode[i])]
        t = int(self._step[i])
        obs: dict[str, Any] = {keys.STATES: torch.from_numpy(e.states[t]),
                               keys.TASK_DESCRIPTIONS: e.task_description}
        for cam in self.cameras:
            obs[cam] = torch.from_numpy(e.images[cam][t])
        return obs, torch.from_numpy(self.chunk_of(e, t))

    def batch(self, indices: Sequence[int] | np.ndarray | Tensor) -> tuple[dict[str, Any], Tensor]:
        """Samples ``indices`` stacked: ``(obs batch, actions [B, C, A] float32)``."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        eps = [self.episodes[int(k)] for k in self._episode[idx]]
        steps = [int(t) for t in self._step[idx]]
        obs: dict[str, Any] = {
            keys.STATES: torch.from_numpy(np.stack([e.states[t] for e, t in zip(eps, steps, strict=True)])),
            keys.TASK_DESCRIPTIONS: [e.task_description for e in eps],
        }
        for cam in self.cameras:
            obs[cam] = torch.from_numpy(np.stack([e.images[cam][t] for e, t in zip(eps, steps, strict=True)]))
        actions = np.stack([self.chunk_of(e, t) for e, t in zip(eps, steps, strict=True)])
        return obs, torch.from_numpy(actions)


# --------------------------------------------------------------------------------------------------
# experts


def toy_expert_actions(states: Tensor, step_size: float) -> Tensor:
    """The toy reach expert: straight at the goal. ``states [B, 4]`` (pos, goal) -> actions ``[B, 2]``.

    The action ``(goal - pos) / step_size`` reaches the goal in one step; it is scaled down (direction
    kept) so that no component leaves ``[-1, 1]``, the env's clip range.
    """
    delta = (states[:, 2:4] - states[:, 0:2]) / step_size
    scale = delta.abs().amax(dim=-1, keepdim=True).clamp(min=1.0)
    return delta / scale


def record_toy_demos(out_dir: str | Path, n: int, *, max_steps: int = 16, step_size: float = 0.25,
                     goal_radius: float = 0.2, seed: int = 0) -> list[Path]:
    """Record ``n`` expert episodes of the toy reach task (:class:`vlarl_cli.envs.toy.ReachEnv`) into
    ``out_dir``; goals from ``seed``. Episodes end at the first step within ``goal_radius`` of the goal."""
    from vlarl_cli.envs.toy import ReachEnv

    if n < 1:
        raise VlarlError(f"Cannot record {n} demonstrations.", "Pass --record N with N >= 1.")
    out = Path(out_dir).expanduser()
    env = ReachEnv(n, chunk=1, max_steps=max_steps, step_size=step_size, goal_radius=goal_radius)
    obs = env.reset(generator=torch.Generator().manual_seed(seed))
    states, actions, alive = [], [], []
    for _ in range(max_steps):
        s = obs[keys.STATES].clone()
        a = toy_expert_actions(s, step_size)
        was_active = ~env.done
        step = env.step(a[:, None, :])
        states.append(s)
        actions.append(a)
        alive.append(was_active)
        obs = step.obs
        if bool(env.done.all()):
            break
    s_all, a_all, m_all = torch.stack(states, 1), torch.stack(actions, 1), torch.stack(alive, 1)  # [n, T, ...]
    start = next_episode_index(out)
    paths = []
    for i in range(n):
        t = int(m_all[i].sum())
        ep = Episode(states=s_all[i, :t].numpy(), actions=a_all[i, :t].numpy(), task_description="",
                     success=bool(env.success[i]),
                     meta={"env_type": "toy_reach", "expert": "straight_to_goal", "seed": seed, "index": i})
        paths.append(save_episode(out / f"episode_{start + i:05d}.npz", ep))
    return paths


def record_expert_demos(out_dir: str | Path, n: int, *, suite: str = "libero_spatial",
                        task_ids: Sequence[int] | None = None, resolution: int = 128,
                        cameras: Sequence[str] = ("main", "wrist"), max_episode_steps: int | None = None,
                        settle_steps: int | None = None, protocol: str = "standard", first_trial: int = 0,
                        max_attempts: int | None = None, progress: Any = None) -> list[Path]:
    """Record ``n`` SUCCESSFUL episodes of LIBERO's scripted pick-and-place expert into ``out_dir``.

    Tasks are visited round robin (``task_ids``, default: every task of ``suite``), each from its fixed
    init states ``first_trial, first_trial + 1, ...``; the expert runs closed loop, one action per env step,
    so every step's observation is rendered. Failed episodes are dropped; after ``max_attempts``
    (default ``3 n``) episodes the recording stops with a :class:`VlarlError`. Only single ``on``/``in``
    goals are scripted (libero_spatial, most of libero_object): other tasks are skipped (reported through
    ``progress``), and a :class:`VlarlError` is raised when none is left. ``progress(message)`` is called
    after each episode.
    """
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv

    if n < 1:
        raise VlarlError(f"Cannot record {n} demonstrations.", "Pass --record N with N >= 1.")
    out = Path(out_dir).expanduser()
    tasks = list(task_ids) if task_ids else list(range(suites.num_tasks(suite)))
    attempts_left = max_attempts if max_attempts is not None else 3 * n
    options = EnvOptions(resolution=resolution, cameras=tuple(cameras), protocol=protocol,
                         max_episode_steps=max_episode_steps, settle_steps=settle_steps)
    env = LiberoEnv(suite, tasks[0], options)
    paths: list[Path] = []
    start = next_episode_index(out)
    attempt = 0
    unscripted: list[int] = []
    try:
        while len(paths) < n:
            if not tasks:
                raise _none_scripted(unscripted, suite)
            if attempts_left <= 0:
                raise VlarlError(f"The scripted expert succeeded in only {len(paths)} of {attempt} episodes "
                                 f"on {suite} tasks {tasks}; {n} were requested.", _FEWER)
            task = tasks[attempt % len(tasks)]
            trial = (first_trial + attempt // len(tasks)) % len(suites.init_states(suite, task))
            if env.task_id != task:
                env.set_task(task)
            obs = env.reset(trial)
            expert = _expert_or_skip(env, suite, task, progress)
            if expert is None:  # a goal the expert does not script: drop the task, not the recording
                tasks.remove(task)
                unscripted.append(task)
                continue
            attempt += 1
            attempts_left -= 1
            ep = _expert_episode(env, obs, expert, meta={"env_type": "libero", "suite": suite, "task_id": task,
                                                          "trial_id": trial, "expert": "PickPlaceExpert",
                                                          "resolution": resolution, "protocol": protocol})
            if progress is not None:
                progress(f"demo attempt {attempt}: task {task} trial {trial}: "
                         f"{'success' if ep.success else 'failure'} in {len(ep.actions)} steps")
            if ep.success:
                paths.append(save_episode(out / f"episode_{start + len(paths):05d}.npz", ep))
    finally:
        env.close()
    return paths



_FEWER = "Use a task the expert solves (libero_spatial), raise max_episode_steps, or record fewer demonstrations."


def _none_scripted(unscripted: Sequence[int], suite: str) -> VlarlError:
    return VlarlError(f"The scripted expert handles none of the tasks {list(unscripted)} of {suite} (it only "
                      "scripts a single on/in goal).", "Record on libero_spatial (or libero_object) tasks, or "
                      "bring your own demonstrations with --demos.")


def _expert_or_skip(env: Any, suite: str, task: int, progress: Any) -> Any:
    """The scripted expert of ``env``'s current episode, or None (reported) when it does not script the goal."""
    from vlarl_cli.envs.libero.expert import PickPlaceExpert
    from vlarl_cli.errors import EnvError

    try:
        return PickPlaceExpert(env.raw_env.env)
    except EnvError as err:
        if progress is not None:
            progress(f"skipping {suite} task {task}: {err.problem}")
        return None


# --------------------------------------------------------------------------------------------------
# LIBERO expert -> LeRobot dataset, in parallel worker processes

_ATTEMPTS_LOG = "attempts.jsonl"
RECORDING_META = "vlarl_recording.json"  # how a recorded dataset came about, in its meta/ folder
SAMPLED_SEED_BASE = 100_000  # sampled init states: placement seed SAMPLED_SEED_BASE + attempt index


@dataclass
class RecordReport:
    """What :func:`record_expert_dataset` did: the dataset, and the expert's own success rate."""

    path: Path
    attempts: int  # expert episodes run (on scripted tasks)
    successes: int
    kept: int  # episodes written to the dataset
    unscripted_tasks: list[int]

    @property
    def success_rate(self) -> float:
        return self.successes / self.attempts if self.attempts else float("nan")


@dataclass(frozen=True)
class _RecordJob:
    """One worker's share: attempts ``worker, worker + workers, ...`` until ``quota`` successes."""

    worker: int
    workers: int
    quota: int
    max_attempts: int
    staging: str
    suite: str
    tasks: tuple[int, ...]
    options: dict[str, Any]
    first_trial: int
    init: str  # "fixed" (the suite's init states) | "sampled" (fresh placements)
    keep_failures: bool


def _attempt_target(job: _RecordJob, attempt: int, num_init: int) -> tuple[int, int]:
    """``(task, trial)`` of attempt ``attempt``: tasks round robin; trial = the init state (fixed) or the
    placement-seed offset (sampled)."""
    task = job.tasks[attempt % len(job.tasks)]
    k = attempt // len(job.tasks)
    return task, (job.first_trial + k) % num_init if job.init == "fixed" else k


def _done_attempts(staging: Path) -> dict[int, dict[str, Any]]:
    done: dict[int, dict[str, Any]] = {}
    for log in staging.glob(f"*{_ATTEMPTS_LOG}"):
        for line in log.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[int(row["attempt"])] = row
    return done


def _run_expert_episode(env: Any, task: int, trial: int, init: str, attempt: int) -> tuple[Episode, bool]:
    """One closed-loop expert episode (EnvError from the expert when the task is not scripted)."""
    from vlarl_cli.envs.libero.expert import PickPlaceExpert, sample_init_state

    if env.task_id != task:
        env.set_task(task)
    if init == "sampled":
        obs = env.reset(init_state=sample_init_state(env, SAMPLED_SEED_BASE + attempt))
    else:
        obs = env.reset(trial)
    expert = PickPlaceExpert(env.raw_env.env)
    ep = _expert_episode(env, obs, expert, meta={"env_type": "libero", "task_id": task, "trial_id": trial,
                                                 "init": init, "attempt": attempt, "expert": "PickPlaceExpert"})
    return ep, ep.success


def _expert_episode(env: Any, obs: dict[str, Any], expert: Any, *, meta: dict[str, Any]) -> Episode:
    """Run ``expert`` closed loop (one action per env step) from observation ``obs`` until the episode
    ends; observation ``t`` and action ``t`` are stored together (module docstring)."""
    states, actions = [], []
    frames: dict[str, list[np.ndarray]] = {k: [] for k in CAMERA_KEYS if k in obs}
    result = None
    while env.episode_active:
        action = np.clip(np.asarray(expert.act(), dtype=np.float64), -1.0, 1.0)
        states.append(np.asarray(obs[keys.STATES], np.float32))
        actions.append(action.astype(np.float32))
        for k in frames:
            frames[k].append(np.asarray(obs[k], np.uint8))
        result = env.step_chunk(action[None])
        obs = result.obs
    success = bool(result is not None and result.episode and result.episode.get(keys.SUCCESS_ONCE))
    return Episode(states=np.stack(states), actions=np.stack(actions),
                   task_description=str(obs[keys.TASK_DESCRIPTIONS]), success=success,
                   images={k: np.stack(v) for k, v in frames.items()}, meta=meta)


def _record_worker(job: _RecordJob) -> dict[str, Any]:
    """Worker body (also run in-process for one worker): record ``job.quota`` successes into the staging
    folder (``episode_<attempt>.npz`` + one line per attempt in ``<worker>.attempts.jsonl``)."""
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv
    from vlarl_cli.errors import EnvError

    staging = Path(job.staging)
    done = _done_attempts(staging)
    successes = sum(1 for a, r in done.items() if a % job.workers == job.worker and r.get("success"))
    skipped = {int(r["task"]) for r in done.values() if r.get("unscripted")}
    log = staging / f"{job.worker}.{_ATTEMPTS_LOG}"
    env = LiberoEnv(job.suite, job.tasks[0], EnvOptions(**job.options))
    attempt, tried = job.worker - job.workers, 0
    try:
        while successes < job.quota:
            attempt += job.workers
            task, trial = _attempt_target(job, attempt, len(suites.init_states(job.suite, job.tasks[attempt % len(job.tasks)])))
            if len(skipped) == len(job.tasks) or tried >= job.max_attempts:
                break
            if attempt in done or task in skipped:
                continue
            try:
                ep, success = _run_expert_episode(env, task, trial, job.init, attempt)
            except EnvError as err:
                skipped.add(task)
                row = {"attempt": attempt, "task": task, "unscripted": True, "reason": err.problem}
            else:
                tried += 1
                successes += success
                if success or job.keep_failures:
                    save_episode(staging / f"episode_{attempt:05d}.npz", ep)
                row = {"attempt": attempt, "task": task, "trial": trial, "success": success, "steps": len(ep)}
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
    finally:
        env.close()
    return {"worker": job.worker, "successes": successes}


def _run_jobs(jobs: list[_RecordJob]) -> None:
    """The recording jobs: in this process for one, else in as many spawned processes."""
    import multiprocessing as mp

    if len(jobs) == 1:
        _record_worker(jobs[0])
        return
    with mp.get_context("spawn").Pool(len(jobs)) as pool:
        pool.map(_record_worker, jobs)


def record_expert_dataset(out_dir: str | Path, n: int, *, suite: str = "libero_spatial",
                          task_ids: Sequence[int] | None = None, resolution: int = 128,
                          cameras: Sequence[str] = ("main", "wrist"), max_episode_steps: int | None = None,
                          settle_steps: int | None = None, protocol: str = "standard", first_trial: int = 0,
                          init: str = "fixed", workers: int = 1, keep_failures: bool = False,
                          max_attempts: int | None = None, fps: int = 20, progress: Any = None,
                          obs_mode: str = "rgb", render_quality: str = "exact") -> RecordReport:
    """Record ``n`` successful episodes of LIBERO's scripted expert as a LeRobot v3.0 dataset at ``out_dir``.

    ``workers`` simulator processes (spawned; one runs in this process) share the attempts: attempt ``a``
    visits task ``task_ids[a % len]`` (round robin) from init state ``first_trial + a // len`` (``init``
    ``fixed``: the suite's 50 evaluation states) or from a fresh placement drawn with seed
    ``SAMPLED_SEED_BASE + a`` (``init`` ``sampled``: states the standard evaluation never starts from, so
    demonstrations and evaluation stay disjoint). Episodes are staged as episode files in
    ``<out_dir>.staging/`` (an interrupted recording resumes there), then written as one LeRobot dataset;
    the staging folder, made by this function, is removed afterwards. Failed episodes are dropped unless
    ``keep_failures`` (they are then kept, ``success`` False, and training skips them). Tasks the expert does
    not script are skipped. The report gives the expert's success rate over its attempts. ``obs_mode``
    ``state`` (with no ``cameras``) records the env's 14-d privileged state (``EnvOptions.obs_mode``).
    ``render_quality``: the camera frames' rendering (``EnvOptions.render_quality``; ``exact`` by default).
    """
    import shutil

    from vlarl_cli.envs.libero import suites

    if n < 1:
        raise VlarlError(f"Cannot record {n} demonstrations.", "Pass --record N with N >= 1.")
    if init not in ("fixed", "sampled"):
        raise VlarlError(f"Unknown init {init!r}.", 'Use "fixed" or "sampled".')
    out = Path(out_dir).expanduser()
    if out.exists():
        raise VlarlError(f"{out} already exists; expert demonstrations are recorded into a new folder.",
                         "Pass --demos with that folder to train on it, or record into a new folder.")
    staging = out.parent / f"{out.name}.staging"
    staging.mkdir(parents=True, exist_ok=True)
    tasks = tuple(task_ids) if task_ids else tuple(range(suites.num_tasks(suite)))
    options = {"resolution": resolution, "cameras": tuple(cameras), "protocol": protocol,
               "max_episode_steps": max_episode_steps, "settle_steps": settle_steps, "obs_mode": obs_mode,
               "render_quality": render_quality}
    workers = max(1, min(workers, n))
    quotas = [n // workers + (w < n % workers) for w in range(workers)]
    _run_jobs([_RecordJob(w, workers, quotas[w], max_attempts or 3 * quotas[w] + 3, str(staging), suite, tasks,
                          options, first_trial, init, keep_failures) for w in range(workers)])
    done = _done_attempts(staging)
    unscripted = sorted({int(r["task"]) for r in done.values() if r.get("unscripted")})
    rows = [r for r in done.values() if not r.get("unscripted")]
    successes = sum(bool(r["success"]) for r in rows)
    if progress is not None:
        progress(f"expert: {successes} successes in {len(rows)} episodes ({successes / max(1, len(rows)):.0%}) on "
                 f"{suite} tasks {list(tasks)}" + (f"; not scripted: tasks {unscripted}" if unscripted else ""))
    if successes < n:
        if len(unscripted) == len(tasks):
            raise _none_scripted(unscripted, suite)
        raise VlarlError(f"The scripted expert succeeded in only {successes} of {len(rows)} episodes on {suite} "
                         f"tasks {list(tasks)}; {n} were requested (staged episodes kept in {staging}).", _FEWER)
    report = _write_dataset(out, staging, rows, suite=suite, tasks=tasks, init=init, unscripted=unscripted, fps=fps)
    shutil.rmtree(staging)
    return report


def _write_dataset(out: Path, staging: Path, rows: list[dict[str, Any]], *, suite: str, tasks: tuple[int, ...],
                   init: str, unscripted: list[int], fps: int) -> RecordReport:
    """The staged episodes as one LeRobot dataset at ``out``, with how they came about in its meta/."""
    from vlarl_cli.datasets.lerobot import write_lerobot

    episodes = [load_episode(p) for p in sorted(staging.glob(EPISODE_PATTERN))]
    for e in episodes:
        e.meta = {**e.meta, "suite": suite}
    report = RecordReport(out, len(rows), sum(bool(r["success"]) for r in rows), len(episodes), unscripted)
    provenance = {"expert": "PickPlaceExpert", "suite": suite, "tasks": list(tasks), "init": init,
                  "attempts": report.attempts, "successes": report.successes, "kept": report.kept,
                  "success_rate": report.success_rate, "unscripted_tasks": unscripted, "episodes": sorted(
                      (r for r in rows), key=lambda r: r["attempt"])}
    write_lerobot(out, episodes, fps=fps, extra_meta={RECORDING_META: provenance})
    return report


def read_recording_report(dataset: str | Path) -> RecordReport:
    """The :class:`RecordReport` of a dataset :func:`record_expert_dataset` wrote (``meta/vlarl_recording.json``)."""
    path = Path(dataset).expanduser() / "meta" / RECORDING_META
    if not path.is_file():
        raise VlarlError(f"{path.parent.parent} was not recorded by vlarl's expert (no meta/{RECORDING_META}).",
                         "Use a dataset written by record_expert_dataset / vlarl sft --record.")
    d = json.loads(path.read_text())
    return RecordReport(path.parent.parent, d["attempts"], d["successes"], d["kept"], d["unscripted_tasks"])


# The simulators' experts as the simulator table names them (``record_demos`` in ``envs/<sim>/simulator.py``):
# ``(config, folder, n, *, progress) -> folder``, called by ``vlarl sft`` when it records its own demonstrations.


def record_toy_demos_for(config: Any, folder: Path, n: int, *, progress: Any = None) -> Path:
    """The toy reach expert (straight to the goal) for ``config.env.train``: episode files in ``folder``."""
    split = config.env.train
    record_toy_demos(folder, n, max_steps=split.max_episode_steps, seed=split.seed)
    return folder


def record_libero_demos(config: Any, folder: Path, n: int, *, progress: Any = None) -> Path:
    """LIBERO's scripted pick-and-place expert for ``config.env.train``: a new LeRobot v3.0 dataset in ``folder``
    (``sft.record_workers`` simulator processes)."""
    from vlarl_cli.envs.libero.make import suite_of

    split = config.env.train
    report = record_expert_dataset(folder, n, suite=suite_of(split), task_ids=split.task_ids,
                                   resolution=split.resolution, max_episode_steps=split.max_episode_steps,
                                   settle_steps=split.settle_steps, protocol=split.protocol,
                                   first_trial=split.seed, workers=config.sft.record_workers,
                                   keep_failures=config.sft.keep_failures, progress=progress,
                                   render_quality=split.render_quality)
    return report.path
