"""N LIBERO simulators in W worker subprocesses (the generic pool of :mod:`vlarl_cli.envs.pool`, hosting a
:class:`LiberoWorker` each), observations through shared memory. This module holds LIBERO's rules: reset
states, seeds, auto-reset, recovery and the packing of results.

Layout: env ``e`` lives in worker ``e // (N / W)``. Images and states are written by the workers into
shared-memory arrays ``[N, ...]`` owned by the parent, so no image is ever pickled; only actions
(``[C, 7]`` floats per env), per-step rewards/dones and episode metrics cross the pipes.

Init states (GRPO groups): envs ``[g * group_size, (g + 1) * group_size)`` form group ``g`` and share one
reset state. :meth:`LiberoVectorEnv.reset` assigns a new reset state to every group, either the next ones
of the pool in order (``ordered``: task-major, trial 0..49 for each task, wrapping) or drawn as RLinf's
``LiberoEnv._get_random_reset_state_ids`` does (``random``: ``default_rng(seed + rank * stages)``,
``integers(0, len(pool))``; ``specific_reset_id`` pins every draw). On auto-reset the protocol decides:
``rlinf`` draws NEW ids (RLinf ``_handle_train_auto_reset``: with fixed reset-state ids a new id for every
group, of which the finished envs take theirs; without, one per finished env), ``standard`` restarts the
env's current state.

Env seeds (``every_reset`` seeding): the k envs of a pipeline stage reset together get ``base * k + i``
(``i`` = position in the stage, ``base = env_seed + rank * stages + stage``), RLinf's rule
(``protocol.rlinf_reset_seeds``); so the finished envs of one chunk are reset together, by the parent,
after the chunk. ``once_per_task`` seeding leaves seeds to each simulator.

Pipelining: env ``e`` belongs to stage ``e % stages``; every worker hosts envs of every stage, so while
the workers step stage ``s`` the policy can compute actions for stage ``s + 1``
(:meth:`step_chunk_async` / :meth:`wait`).

Recovery: a worker that dies (or stops answering) is replaced by a fresh process; every env it hosted has
its current episode reported as failed (``dones`` True, ``error`` set) and restarts from its assigned
state; envs in other workers are untouched. Unstable physics is handled inside the worker by rebuilding
that one simulator.

Usage::

    vec = LiberoVectorEnv(VectorEnvSpec(suite="libero_spatial", task_ids=(0,), num_envs=4, num_workers=2))
    obs = vec.reset()                       # dict of tensors [N, ...] + task_descriptions
    obs, rewards, dones, infos = vec.step_chunk(actions)   # actions [N, C, 7] -> rewards/dones [N, C]
    vec.close()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np

from vlarl_cli import keys
from vlarl_cli.envs.libero import suites
from vlarl_cli.envs.libero.env import (
    CAMERAS,
    ERROR,
    RAW_STATE_KEYS,
    UNSTABLE,
    EnvOptions,
    state_dim,
)
from vlarl_cli.envs.libero.protocol import get_protocol, rlinf_reset_seeds
from vlarl_cli.envs.pool import SharedArrays, Worker, WorkerDied, WorkerPool
from vlarl_cli.errors import EnvError

#: Info keys returned by step_chunk beyond vlarl_cli.keys.
EPISODE_DONE = "episode_done"  # [N] bool: an episode ended during this chunk (metrics valid there)
ERRORS = "errors"  # dict env_id -> message for episodes failed this chunk
RESET_STATE_IDS = "reset_state_ids"  # [N] int: flat reset-state id each env (re)started from
ACTIVE = "active"  # [N] bool: env has a running episode (False only without auto-reset)

_REPLY_TIMEOUT_S = 900.0  # a reset may construct a simulator (~4-12 s) under heavy CPU sharing


@dataclass(frozen=True)
class VectorEnvSpec:
    """Everything the vector env needs, as plain fields (the runner maps its config onto it).

    Attributes:
        suite: LIBERO suite (``libero_130`` = all tasks).
        task_ids: tasks of the suite to draw init states from; empty = all tasks.
        num_envs: N simulators.
        num_workers: W subprocesses; N must be divisible by W.
        resolution: square image size (128 / 224 / 256).
        cameras: policy cameras, subset of ("main", "wrist"); () = physics only.
        obs_mode: the policy's LIBERO observation mode (``rgb`` or ``state``, ``EnvOptions.obs_mode``).
        max_episode_steps: policy steps per episode; None = protocol limit of the task's suite.
        settle_steps: None = protocol's.
        protocol: ``standard`` or ``rlinf``.
        seed: seeds the init-state generator (``random`` order; RLinf ``cfg.seed``).
        env_seed: base env seed (RLinf ``cfg.seed``); None = the protocol's.
        seeding: ``once_per_task`` / ``every_reset``; None = the protocol's.
        rank: this env rank (RLinf ``seed_offset = rank * stages + stage``).
        auto_reset: restart finished envs inside ``step_chunk`` (see the module docstring for which state).
        group_size: consecutive envs sharing one init state (GRPO); must divide N.
        init_state_order: ``ordered`` or ``random``.
        fixed_reset_state_ids: groups share drawn states (RLinf ``use_fixed_reset_state_ids``); False =
            every env draws its own state.
        specific_reset_id: every draw returns this flat reset-state id (RLinf ``specific_reset_id``).
        redraw_on_auto_reset: draw new states on auto-reset; None = the protocol's.
        reward_coef, use_rel_reward, step_penalty, reset_gripper_open, ignore_terminations: see ``EnvOptions``.
        record_video: render every step and keep both cameras' frames per episode.
        stages: pipeline stages; must divide N.
        hard_reset: robosuite hard reset; None = the protocol's.
        cache_dir: vlarl cache root (LIBERO config); None = default.
        render_quality: ``exact`` / ``fast`` / ``fast_noaa`` (``envs.libero.env.RENDER_QUALITIES``).
        python: the interpreter the workers run in (``envs.interpreter``: a path or a ``vlarl setup-sim``
            name); None = this one. ``python_key``: the config key that set it (error messages).
    """

    suite: str
    task_ids: tuple[int, ...] = ()
    num_envs: int = 1
    num_workers: int = 1
    resolution: int = 128
    cameras: tuple[str, ...] = ("main", "wrist")
    obs_mode: str = "rgb"
    max_episode_steps: int | None = None
    settle_steps: int | None = None
    protocol: str = "standard"
    seed: int = 0
    env_seed: int | None = None
    seeding: str | None = None
    rank: int = 0
    auto_reset: bool = True
    group_size: int = 1
    init_state_order: Literal["ordered", "random"] = "ordered"
    fixed_reset_state_ids: bool = True
    specific_reset_id: int | None = None
    redraw_on_auto_reset: bool | None = None
    reward_coef: float = 1.0
    use_rel_reward: bool = False
    step_penalty: float = 0.0
    reset_gripper_open: bool = True
    ignore_terminations: bool = False
    record_video: bool = False
    stages: int = 1
    hard_reset: bool | None = None
    cache_dir: str | None = None
    render_quality: str = "exact"
    python: str | None = None
    python_key: str = "env.train.python"

    @property
    def every_reset_seeding(self) -> bool:
        """True when the parent seeds every reset (RLinf's rule), else each simulator seeds itself."""
        return (self.seeding or get_protocol(self.protocol).seeding) == "every_reset"

    @property
    def redraws(self) -> bool:
        """Auto-reset draws new reset-state ids (the protocol's rule unless overridden)."""
        if self.redraw_on_auto_reset is not None:
            return self.redraw_on_auto_reset
        return get_protocol(self.protocol).redraw_on_auto_reset

    def stage_base_seed(self, stage: int) -> int:
        """RLinf ``cfg.seed + seed_offset`` with ``seed_offset = rank * stages + stage`` (env_worker.py)."""
        env_seed = self.env_seed if self.env_seed is not None else get_protocol(self.protocol).seed
        return env_seed + self.rank * self.stages + stage

    def env_options(self) -> EnvOptions:
        """Each simulator's options: the spec's fields of the same names, taken by name (not copied one by one),
        with ``seed`` the env seed (``env_seed``; the spec's ``seed`` seeds the reset-state draws)."""
        shared = {f.name for f in fields(EnvOptions)} & {f.name for f in fields(self)} - {"seed"}
        values: dict[str, Any] = {name: getattr(self, name) for name in shared}
        values["cameras"] = tuple(self.cameras)
        return EnvOptions(**values, seed=self.env_seed)

    def episode_setup(self) -> tuple[Any, ...]:
        """Everything that decides what happens in an episode started from a given init state: the interpreter,
        the observation, the protocol's step limits, settle steps, seeding and reset mode (its defaults
        filled in), terminations, actions and rendering. Rewards, reset-state draws and ranks are not part of
        it, except where every reset is seeded (RLinf's rule: the seeds depend on the rank and the stages).
        Two specs with equal setups play an explicitly started episode alike (rl-train's evaluation runs in
        the training env when they match: ``training.evaluation.runner``)."""
        o, p = self.env_options(), get_protocol(self.protocol)
        seeded_by = (self.rank, self.stages) if self.every_reset_seeding else ()
        return (self.python, self.auto_reset, seeded_by, o.resolution, tuple(o.cameras), o.obs_mode, o.protocol,
                o.max_episode_steps, p.settle_steps if o.settle_steps is None else o.settle_steps,
                p.seed if o.seed is None else o.seed, o.seeding or p.seeding,
                p.hard_reset if o.hard_reset is None else o.hard_reset, o.ignore_terminations, o.reset_gripper_open,
                o.clip_actions, o.record_video, o.render_quality)

    def validate(self) -> None:
        suites.check_suite(self.suite)
        self.env_options().validate()
        n_tasks = suites.num_tasks(self.suite)
        for t in self.task_ids:
            if not 0 <= t < n_tasks:
                raise EnvError(f"task id {t} is out of range for {self.suite} ({n_tasks} tasks).")
        if self.specific_reset_id is not None:
            suites.address(self.suite, self.specific_reset_id)  # range check with a clear message
        rules = [
            (self.num_envs >= 1, f"num_envs must be >= 1, got {self.num_envs}"),
            (1 <= self.num_workers <= self.num_envs, f"num_workers must be in [1, num_envs], got {self.num_workers}"),
            (self.num_envs % self.num_workers == 0, f"num_envs {self.num_envs} % num_workers {self.num_workers} != 0"),
            (self.group_size >= 1 and self.num_envs % self.group_size == 0,
             f"num_envs {self.num_envs} must be a multiple of group_size {self.group_size}"),
            (self.stages >= 1 and self.num_envs % self.stages == 0,
             f"num_envs {self.num_envs} must be a multiple of stages {self.stages}"),
            (self.init_state_order in ("ordered", "random"),
             f'init_state_order must be "ordered" or "random", got "{self.init_state_order}"'),
        ]  # fmt: skip
        for ok, message in rules:
            if not ok:
                raise EnvError(message + ".", fix="Adjust the env section of the config.")


def split_spec_fields(split: Any, rank: int) -> dict[str, Any]:
    """The :class:`VectorEnvSpec` fields an RLinf env split (``config.schema.EnvSplitConfig``) sets beyond the
    plain ones: seeds (RLinf uses ``cfg.seed`` for the env and the reset-state generator alike), the rank,
    the reset-state switches and the step penalty.

    The penalty: RLinf subtracts exactly 1 when ``use_step_penalty`` (``_calc_step_reward``); vlarl's
    ``step_penalty`` sets another size, and its default 0 means RLinf's 1.
    """
    penalty = (split.step_penalty or 1.0) if split.use_step_penalty else 0.0
    return {
        "seed": split.seed,
        "env_seed": split.seed,
        "rank": rank,
        "fixed_reset_state_ids": split.use_fixed_reset_state_ids,
        "specific_reset_id": split.specific_reset_id,
        "reset_gripper_open": split.reset_gripper_open,
        "step_penalty": penalty,
        "render_quality": split.render_quality,
    }


def draw_group_states(
    pool: np.ndarray, num_groups: int, order: str, rng: np.random.Generator, cursor: int
) -> tuple[np.ndarray, int]:
    """Pick one reset-state id per GRPO group.

    Args:
        pool: ``[P]`` flat reset-state ids to draw from.
        num_groups: how many groups need a state.
        order: ``ordered`` takes the next ``num_groups`` ids after ``cursor`` (wrapping around the pool);
            ``random`` draws uniformly with replacement from ``rng`` as RLinf does
            (``rng.integers(0, len(pool), num_groups)``, then the pool's entries).
        rng: seeded generator (used only by ``random``).
        cursor: position in the pool for ``ordered``.

    Returns:
        ``([num_groups] ids, new cursor)``.
    """
    if order == "random":
        return pool[rng.integers(low=0, high=len(pool), size=(num_groups,))], cursor
    idx = (cursor + np.arange(num_groups)) % len(pool)
    return pool[idx], int((cursor + num_groups) % len(pool))


def group_reset_state_ids(group_ids: np.ndarray, group_size: int) -> np.ndarray:
    """``[G]`` group states -> ``[G * group_size]`` env states (consecutive envs share their group's)."""
    return np.repeat(np.asarray(group_ids), group_size)


# ------------------------------------------------------------------------------------------------
# Shared memory layout
# ------------------------------------------------------------------------------------------------


def _obs_layout(spec: VectorEnvSpec) -> dict[str, tuple[tuple[int, ...], str]]:
    """Shared arrays: name -> (shape, dtype)."""
    n, r = spec.num_envs, spec.resolution
    layout: dict[str, tuple[tuple[int, ...], str]] = {}
    for cam in spec.cameras:
        layout[CAMERAS[cam][1]] = ((n, r, r, 3), "uint8")
    layout[keys.STATES] = ((n, state_dim(spec.obs_mode)), "float32")
    for name, dim in RAW_STATE_KEYS.items():
        layout[name] = ((n, dim), "float32")
    if spec.auto_reset:  # the last observation of an episode the time limit cut, for the value bootstrap
        layout.update({_FINAL + k: v for k, v in list(layout.items())})
    return layout


_FINAL = "final:"  # prefix of the shared arrays of final observations (envs/base.py, keys.FINAL_OBSERVATION)


def _obs_names(layout: dict[str, Any]) -> list[str]:
    return [k for k in layout if not k.startswith(_FINAL)]


# ------------------------------------------------------------------------------------------------
# Worker process
# ------------------------------------------------------------------------------------------------


class LiberoWorker:
    """The host of one worker process (:mod:`vlarl_cli.envs.pool`): the LiberoEnv instances of ``env_ids``,
    started, stepped and reset by LIBERO's rules, their observations written into the shared arrays."""

    def __init__(self, env_ids: list[int], arrays: dict[str, np.ndarray], spec_fields: dict) -> None:
        from vlarl_cli.envs.libero.setup import prepare_libero

        self.spec = spec = VectorEnvSpec(**spec_fields)
        self.arrays, self.names = arrays, _obs_names(_obs_layout(spec))
        prepare_libero(Path(spec.cache_dir) if spec.cache_dir else None, check_assets=False)
        self.options = spec.env_options()
        self.envs: dict[int, Any] = {}

    def write(self, gid: int, obs: dict[str, Any], prefix: str = "") -> None:
        for k in self.names:
            self.arrays[prefix + k][gid] = obs[k]

    def start(self, gid: int, task_id: int, trial_id: int, seed: int | None = None) -> str:
        from vlarl_cli.envs.libero.env import LiberoEnv

        env = self.envs.get(gid)
        if env is None:
            env = self.envs[gid] = LiberoEnv(self.spec.suite, task_id, self.options, cache_dir=None)
        else:
            env.set_task(task_id)
        obs = env.reset(trial_id, seed=seed)
        self.write(gid, obs)
        return obs[keys.TASK_DESCRIPTIONS]

    def handle(self, cmd: str, payload: Any) -> Any:
        if cmd == "reset":
            return {gid: self.start(gid, task_id, trial_id, seed) for gid, task_id, trial_id, seed in payload}
        if cmd == "step":
            return {gid: self.step(gid, actions, task_id, trial_id, auto_reset)
                    for gid, actions, (task_id, trial_id), auto_reset in payload}
        if cmd == "frames":
            return {gid: self.envs[gid].pop_frames() for gid in payload}
        raise ValueError(f"unknown worker command {cmd!r}")

    def step(self, gid: int, actions: np.ndarray, task_id: int, trial_id: int, auto_reset: bool) -> dict[str, Any]:
        env = self.envs[gid]
        out: dict[str, Any] = {}
        if not env.episode_active:
            c = len(actions)
            out["inactive"] = True
            out["rewards"] = np.zeros(c, np.float32)
            out["dones"] = np.ones(c, bool)
            out["success"] = np.zeros(c, bool)
            out["truncated"] = np.zeros(c, bool)
            return out
        try:
            result = env.step_chunk(actions)
        except Exception as err:  # simulator error: fail this episode, keep the worker
            c = len(actions)
            out.update(
                rewards=np.zeros(c, np.float32), dones=np.ones(c, bool),
                success=np.zeros(c, bool), truncated=np.zeros(c, bool),
                episode={keys.SUCCESS_ONCE: False, keys.SUCCESS_AT_END: False, keys.RETURN: 0.0,
                         keys.EPISODE_LEN: env.elapsed_steps, ERROR: f"simulator error: {err!r}",
                         UNSTABLE: True},
            )  # fmt: skip
        else:
            out.update(
                rewards=result.rewards, dones=result.dones, success=result.success,
                truncated=result.truncated, episode=result.episode,
            )  # fmt: skip
            if result.episode is None:
                self.write(gid, result.obs)
            elif self.spec.auto_reset and result.truncated.any():
                self.write(gid, result.obs, _FINAL)
                out["final"] = True
        episode = out.get("episode")
        if episode is not None:
            if self.spec.record_video:
                out["frames"] = env.pop_frames()
            if episode.get(UNSTABLE):
                env.rebuild()
            if auto_reset:
                out["task_description"] = self.start(gid, task_id, trial_id)
            else:
                self.write(gid, env.observation())
        return out

    def close(self) -> None:
        for env in self.envs.values():
            try:
                env.close()
            except Exception:
                pass


# ------------------------------------------------------------------------------------------------
# Parent side
# ------------------------------------------------------------------------------------------------



@dataclass
class _StageRows:
    """One stage's chunk results, row by row (``wait``): ``[n, C]`` steps, ``[n]`` episode ends and metrics,
    errors by env id, and the final observations of episodes the time limit cut (by row)."""

    rewards: np.ndarray
    dones: np.ndarray
    success: np.ndarray
    truncated: np.ndarray
    ep_done: np.ndarray
    ep: dict[str, np.ndarray]
    errors: dict[int, str] = field(default_factory=dict)
    finals: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def zeros(cls, n: int, chunk: int) -> _StageRows:
        ep = {keys.SUCCESS_ONCE: np.zeros(n, bool), keys.SUCCESS_AT_END: np.zeros(n, bool),
              keys.RETURN: np.zeros(n, np.float32), keys.EPISODE_LEN: np.zeros(n, np.int64)}
        return cls(np.zeros((n, chunk), np.float32), np.zeros((n, chunk), bool), np.zeros((n, chunk), bool),
                   np.zeros((n, chunk), bool), np.zeros(n, bool), ep)

class LiberoVectorEnv:
    """Vectorised LIBERO (see module docstring). All arrays are indexed by global env id."""

    def __init__(self, spec: VectorEnvSpec) -> None:
        from vlarl_cli.envs.libero.setup import prepare_libero

        spec.validate()
        self.spec = spec
        # Probe the GL backend and write LIBERO's config once, here; workers inherit the environment.
        prepare_libero(Path(spec.cache_dir) if spec.cache_dir else None)
        pro_object = spec.suite in suites.pro_object_suite_names() or spec.python == "libero_pro"
        if spec.python is None and pro_object:  # PRO's object classes: only in PRO's own package
            from vlarl_cli.envs.libero_pro.catalog import pro_suites
            from vlarl_cli.envs.libero_pro.data import check_runnable

            check_runnable([pro_suites()[spec.suite]], python=None)  # raises, naming vlarl setup-sim libero_pro
        if spec.python is not None:  # another interpreter: refused in one paragraph before any worker starts
            from vlarl_cli.envs import registry
            from vlarl_cli.envs.interpreter import check

            # LIBERO-Plus's / LIBERO-PRO's suites (or their named environments) need their row's packages
            # (Wand ...; PRO's assets) and setup command
            plus = spec.suite in suites.plus_suite_names() or spec.python == "libero_plus"
            sim = registry.get("libero_plus" if plus else "libero_pro" if pro_object else "libero")
            check(spec.python, sim.name, spec.python_key, packages=sim.packages, modules=sim.modules)
        n = spec.num_envs
        self._layout = _obs_layout(spec)
        self._shared = SharedArrays(self._layout)
        self._arrays = self._shared.arrays
        task_ids = spec.task_ids or tuple(range(suites.num_tasks(spec.suite)))
        #: The pool of flat reset-state ids, task-major (task t trial 0..49, then the next task).
        self.pool = np.array(
            [t * suites.TRIALS_PER_TASK + i for t in task_ids for i in range(suites.TRIALS_PER_TASK)]
        )
        # RLinf LiberoEnv: np.random.default_rng(seed=cfg.seed + seed_offset) (one per rank with one stage)
        self._rng = np.random.default_rng(spec.seed + spec.rank * spec.stages)
        self._cursor = 0
        self._reset_state_ids = np.full(n, -1, dtype=np.int64)
        self._seeds = np.full(n, -1, dtype=np.int64)  # env seed of each env's current episode (-1: its own)
        self._task_descriptions = [""] * n
        self._active = np.zeros(n, bool)
        self._lost: dict[int, str] = {}  # env id -> error for episodes lost in a worker restart
        self._frames: dict[int, list[dict[str, np.ndarray]]] = {}
        self._pending_stage: dict[int, tuple] = {}
        self._closed = False
        #: finished envs are reset by the parent after the chunk (new ids drawn, or seeds that depend on
        #: how many envs reset together) instead of inside their worker
        self._parent_resets = spec.auto_reset and (spec.redraws or spec.every_reset_seeding)
        self.restarts = 0
        self._pool = WorkerPool(LiberoWorker, (asdict(spec),), num_envs=n, num_workers=spec.num_workers,
                                shared=self._shared, name="vlarl-libero", reply_timeout_s=_REPLY_TIMEOUT_S,
                                python=spec.python)
        self._workers = self._pool.workers
        self._env_worker = self._pool.env_worker

    # ------------------------------------------------------------------ properties

    @property
    def num_envs(self) -> int:
        return self.spec.num_envs

    @property
    def reset_state_ids(self) -> np.ndarray:
        """``[N]`` flat reset-state id each env last started from."""
        return self._reset_state_ids.copy()

    def stage_ids(self, stage: int) -> list[int]:
        """Global env ids of pipeline stage ``stage`` (env e is in stage e % stages)."""
        if not 0 <= stage < self.spec.stages:
            raise EnvError(f"stage {stage} out of range (stages={self.spec.stages}).")
        return list(range(stage, self.spec.num_envs, self.spec.stages))

    def worker_pids(self) -> list[int]:
        return self._pool.pids()

    # ------------------------------------------------------------------ worker plumbing

    def _send(self, worker: Worker, cmd: str, payload: Any) -> int:
        return self._pool.send(worker, cmd, payload)

    def _recv(self, worker: Worker, tag: int) -> Any:
        return self._pool.recv(worker, tag)

    def _assignment(self, env_id: int) -> tuple[int, int]:
        address = suites.address(self.spec.suite, int(self._reset_state_ids[env_id]))
        return address.task_id, address.trial_id

    def _restart(self, worker: Worker) -> None:
        """Replace a dead worker and restart all its envs from their assigned states.

        Commands that were in flight on it get synthesised replies (failed episodes) in its stash.
        """
        self.restarts += 1
        pending = self._pool.replace(worker)
        items = [(e, *self._assignment(e), self._seed_of(e)) for e in worker.env_ids if self._reset_state_ids[e] >= 0]
        if items:
            tag = self._send(worker, "reset", items)
            try:
                descriptions = self._recv(worker, tag)
            except WorkerDied as died:
                raise EnvError(
                    f"LIBERO worker {worker.index} died again right after being restarted "
                    + (f"when resetting its envs: {died}" if str(died) else f"(exit code {worker.process.exitcode})")
                    + "; see its traceback above.",
                    fix="Fix what its error names. A worker that dies without one: scripts that create a "
                    "LiberoVectorEnv must guard their entry point with `if __name__ == '__main__':` (workers are "
                    "spawned); otherwise check memory and MUJOCO_GL.",
                ) from None
            for e, d in descriptions.items():
                self._task_descriptions[e] = d
                self._active[e] = True
        message = f"worker {worker.index} died; its episodes were restarted"
        stepped: set[int] = set()
        # Answer the commands that were in flight on the dead worker, as if it had replied.
        for tag, (cmd, payload) in pending.items():
            reply: dict[int, Any] = {}
            if cmd == "reset":
                reply = {gid: self._task_descriptions[gid] for gid, _, _, _ in payload}
            elif cmd == "step":
                for gid, actions, _, _ in payload:
                    stepped.add(gid)
                    c = len(actions)
                    reply[gid] = {
                        "rewards": np.zeros(c, np.float32), "dones": np.ones(c, bool),
                        "success": np.zeros(c, bool), "truncated": np.zeros(c, bool),
                        "episode": {keys.SUCCESS_ONCE: False, keys.SUCCESS_AT_END: False, keys.RETURN: 0.0,
                                    keys.EPISODE_LEN: 0, ERROR: message, UNSTABLE: False},
                        "task_description": self._task_descriptions[gid],
                    }  # fmt: skip
            worker.stash[tag] = reply
        # Envs of this worker that were not being stepped lost their episode too: report it at their next step.
        for e in worker.env_ids:
            if e not in stepped:
                self._lost[e] = message

    def _request(self, sends: list[tuple[Worker, str, Any]]) -> dict[int, Any]:
        """Send commands to several workers, then gather replies (restarting dead workers)."""
        tags = [(w, self._send(w, cmd, payload)) for w, cmd, payload in sends]
        return self._gather(tags)

    def _gather(self, tags: list[tuple[Worker, int]]) -> dict[int, Any]:
        merged: dict[int, Any] = {}
        for worker, tag in tags:
            try:
                merged.update(self._recv(worker, tag))
            except WorkerDied:
                self._restart(worker)
                merged.update(self._recv(worker, tag))
        return merged

    # ------------------------------------------------------------------ reset

    def _draw_group_states(self, num_groups: int) -> np.ndarray:
        if self.spec.specific_reset_id is not None:
            return np.full(num_groups, self.spec.specific_reset_id, dtype=np.int64)
        ids, self._cursor = draw_group_states(
            self.pool, num_groups, self.spec.init_state_order, self._rng, self._cursor
        )
        return ids

    def _draw_env_states(self) -> np.ndarray:
        """``[N]`` new states: one per group (fixed reset-state ids) or one per env."""
        n, g = self.spec.num_envs, self.spec.group_size
        if self.spec.fixed_reset_state_ids:
            return group_reset_state_ids(self._draw_group_states(n // g), g)
        return self._draw_group_states(n)

    def _seed_of(self, env_id: int) -> int | None:
        seed = int(self._seeds[env_id])
        return seed if seed >= 0 else None

    def _assign_seeds(self, env_ids: list[int]) -> None:
        """RLinf's seeds for envs reset together: per stage, ``base * k + position`` (k = resets in it)."""
        if not self.spec.every_reset_seeding:
            return
        for stage in range(self.spec.stages):
            members = self.stage_ids(stage)
            resetting = [e for e in env_ids if e in members]
            seeds = rlinf_reset_seeds(
                self.spec.stage_base_seed(stage), [members.index(e) for e in resetting], len(resetting)
            )
            self._seeds[resetting] = seeds

    def _start(self, env_ids: list[int]) -> None:
        """Reset ``env_ids`` from their assigned states with their seeds (one request per worker)."""
        self._assign_seeds(env_ids)
        sends = []
        for w in self._workers:
            items = [(e, *self._assignment(e), self._seed_of(e)) for e in w.env_ids if e in env_ids]
            if items:
                sends.append((w, "reset", items))
        for e, d in self._request(sends).items():
            self._task_descriptions[e] = d
            self._active[e] = True

    def reset(self, reset_state_ids: np.ndarray | list[int] | None = None) -> dict[str, Any]:
        """Start a new episode in every env.

        Args:
            reset_state_ids: explicit ``[N]`` flat reset-state ids (evaluation); None = new states drawn
                (see the module docstring).

        Returns:
            observation batch: image tensors ``[N, H, W, 3]`` uint8, ``states`` ``[N, 8]`` float32, raw
            state parts, ``task_descriptions`` list[str].
        """
        n = self.spec.num_envs
        if reset_state_ids is None:
            ids = self._draw_env_states()
        else:
            ids = np.asarray(reset_state_ids, dtype=np.int64).reshape(-1)
            if ids.shape != (n,):
                raise EnvError(f"reset_state_ids has {ids.size} entries, expected num_envs={n}.")
            for i in ids:
                suites.address(self.spec.suite, int(i))  # range check with a clear message
        self._reset_state_ids[:] = ids
        self._lost.clear()
        self._start(list(range(n)))
        return self._observation(list(range(n)))

    def restart(self, env_ids: list[int], reset_state_ids: list[int]) -> dict[str, Any]:
        """Start new episodes in ``env_ids`` only, from the given flat reset-state ids; the other envs keep
        their running episodes (the evaluation runner hands an env its next episode as soon as one ends).

        Returns:
            the observation batch of ALL envs (rows of ``env_ids`` hold their new episodes' first).
        """
        if len(env_ids) != len(reset_state_ids):
            raise EnvError(f"restart got {len(env_ids)} envs and {len(reset_state_ids)} reset-state ids.")
        for e, i in zip(env_ids, reset_state_ids, strict=True):
            suites.address(self.spec.suite, int(i))  # range check with a clear message
            self._reset_state_ids[e] = int(i)
            self._lost.pop(e, None)
        self._start([int(e) for e in env_ids])
        return self._observation(list(range(self.spec.num_envs)))

    def _redraw_auto_reset(self, env_ids: list[int]) -> None:
        """RLinf ``_handle_train_auto_reset`` for the envs whose episode ended in this chunk."""
        if self.spec.fixed_reset_state_ids:
            # update_reset_state_ids: a new state for EVERY group; only the finished envs start theirs now
            fresh = group_reset_state_ids(self._draw_group_states(self.spec.num_envs // self.spec.group_size),
                                          self.spec.group_size)  # fmt: skip
            self._reset_state_ids[env_ids] = fresh[env_ids]
        else:
            self._reset_state_ids[env_ids] = self._draw_group_states(len(env_ids))
        self._start(env_ids)

    def _observation(self, env_ids: list[int]) -> dict[str, Any]:
        import torch

        idx = np.asarray(env_ids)
        obs: dict[str, Any] = {k: torch.from_numpy(self._arrays[k][idx]) for k in _obs_names(self._layout)}
        obs[keys.TASK_DESCRIPTIONS] = [self._task_descriptions[e] for e in env_ids]
        return obs

    def _final_observation(self, env_id: int) -> dict[str, Any]:
        """Env ``env_id``'s last observation of the episode the time limit just cut (before its reset)."""
        obs: dict[str, Any] = {k: self._arrays[_FINAL + k][env_id].copy() for k in _obs_names(self._layout)}
        obs[keys.TASK_DESCRIPTIONS] = self._task_descriptions[env_id]
        return obs

    # ------------------------------------------------------------------ stepping

    def _as_actions(self, actions: Any, count: int) -> np.ndarray:
        if hasattr(actions, "detach"):
            actions = actions.detach().cpu().numpy()
        a = np.asarray(actions, dtype=np.float64)
        if a.ndim != 3 or a.shape[0] != count or a.shape[2] != 7 or a.shape[1] < 1:
            raise EnvError(
                f"Action batch has shape {list(a.shape)}, expected [{count}, chunk, 7].",
                fix="Pass one [chunk, 7] action chunk per env of the stage (LIBERO convention).",
            )
        return a

    def step_chunk_async(self, stage: int, actions: Any) -> None:
        """Send ``[len(stage_ids(stage)), C, 7]`` actions to the stage's envs; collect with :meth:`wait`."""
        ids = self.stage_ids(stage)
        a = self._as_actions(actions, len(ids))
        if (self._reset_state_ids < 0).any():
            raise EnvError("step_chunk called before reset().", fix="Call reset() first.")
        if stage in self._pending_stage:
            raise EnvError(f"stage {stage} already has a chunk in flight.", fix="Call wait(stage) first.")
        per_worker: dict[int, list] = {}
        lost_now: dict[int, str] = {}
        for row, e in enumerate(ids):
            if e in self._lost:
                lost_now[e] = self._lost.pop(e)
                continue
            item = (e, a[row], self._assignment(e), self.spec.auto_reset and not self._parent_resets)
            per_worker.setdefault(self._env_worker[e], []).append(item)
        tags = [
            (self._workers[w], self._send(self._workers[w], "step", items)) for w, items in per_worker.items()
        ]
        self._pending_stage[stage] = (ids, a.shape[1], tags, lost_now)

    def wait(self, stage: int) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
        """Results of the chunk sent to ``stage``: ``(obs, rewards [n, C], dones [n, C], infos)``.

        ``infos``: ``success`` / ``truncated`` ``[n, C]`` bool tensors, ``episode_done`` ``[n]`` bool,
        ``success_once`` / ``success_at_end`` ``[n]`` bool, ``return`` ``[n]`` float, ``episode_len``
        ``[n]`` int (valid where ``episode_done``), ``errors`` {env_id: message}, ``reset_state_ids``
        ``[n]``, ``active`` ``[n]``, and ``env_ids`` (the global ids of the rows).
        With auto-reset the observation of an env whose episode ended is the first of its next episode;
        ``final_observation`` (present when the time limit cut one) holds the cut episode's last.
        """
        import torch

        ids, chunk, tags, lost_now = self._pending_stage.pop(stage)
        replies = self._gather(tags)
        rows = _StageRows.zeros(len(ids), chunk)
        for row, e in enumerate(ids):
            if e in lost_now:
                rows.dones[row] = True
                rows.ep_done[row] = True
                rows.errors[e] = lost_now[e]
            else:
                self._take_reply(rows, row, e, replies[e])
        if self._parent_resets:
            finished = [e for row, e in enumerate(ids) if rows.ep_done[row] and e not in lost_now]
            if finished:
                if self.spec.redraws:
                    self._redraw_auto_reset(finished)
                else:
                    self._start(finished)
        infos: dict[str, Any] = {
            keys.SUCCESS: torch.from_numpy(rows.success),
            keys.TRUNCATED: torch.from_numpy(rows.truncated),
            EPISODE_DONE: torch.from_numpy(rows.ep_done),
            **{k: torch.from_numpy(v) for k, v in rows.ep.items()},
            ERRORS: rows.errors,
            RESET_STATE_IDS: torch.from_numpy(self._reset_state_ids[ids].copy()),
            ACTIVE: torch.from_numpy(self._active[ids].copy()),
            "env_ids": ids,
        }
        obs = self._observation(ids)
        if rows.finals:
            from vlarl_cli.envs.base import final_observation  # torch: parent side only, workers stay light

            infos[keys.FINAL_OBSERVATION] = final_observation(obs, rows.finals)
        return obs, torch.from_numpy(rows.rewards), torch.from_numpy(rows.dones), infos

    def _take_reply(self, rows: _StageRows, row: int, e: int, out: dict[str, Any]) -> None:
        """Env ``e``'s reply to a chunk into row ``row``; its episode's end, frames and new instruction kept."""
        rows.rewards[row], rows.dones[row] = out["rewards"], out["dones"]
        rows.success[row], rows.truncated[row] = out["success"], out["truncated"]
        episode = out.get("episode")
        if episode is not None:
            rows.ep_done[row] = True
            for k in rows.ep:
                rows.ep[k][row] = episode[k]
            if episode[ERROR]:
                rows.errors[e] = episode[ERROR]
            if "frames" in out:
                self._frames.setdefault(e, []).append(out["frames"])
            if not self.spec.auto_reset:
                self._active[e] = False
        if out.get("final"):
            rows.finals[row] = self._final_observation(e)
        if "task_description" in out:
            self._task_descriptions[e] = out["task_description"]

    def step_chunk(self, actions: Any) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
        """Execute ``[N, C, 7]`` actions in all envs; returns ``(obs, rewards [N, C], dones [N, C], infos)``.

        With several stages the stages are sent together and the results merged back into env order.
        """
        if self.spec.stages == 1:
            self.step_chunk_async(0, actions)
            return self.wait(0)
        a = self._as_actions(actions, self.spec.num_envs)
        for s in range(self.spec.stages):
            self.step_chunk_async(s, a[self.stage_ids(s)])
        parts = [self.wait(s) for s in range(self.spec.stages)]
        return _merge_stages(parts, self.spec.num_envs)

    def episode_frames(self, env_id: int) -> list[dict[str, np.ndarray]]:
        """Frames of the episodes of ``env_id`` finished since the last call (record_video only):
        a list of ``{"main": [T, H, W, 3], "wrist": [T, H, W, 3]}`` uint8."""
        return self._frames.pop(env_id, [])

    def close(self) -> None:
        """Stop the workers and free the shared memory (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if hasattr(self, "_pool"):  # absent when a worker could not be spawned
            self._pool.close()
        self._shared.close()

    def __enter__(self) -> LiberoVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _merge_stages(parts: list[tuple], n: int) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    """Put per-stage results back into global env order."""
    import torch

    order = np.concatenate([np.asarray(p[3]["env_ids"]) for p in parts])
    inverse = np.argsort(order)
    inv_t = torch.from_numpy(inverse)

    def cat(values: list[Any]) -> Any:
        if isinstance(values[0], torch.Tensor):
            return torch.cat(values)[inv_t]
        if isinstance(values[0], list):
            flat = [x for v in values for x in v]
            return [flat[i] for i in inverse]
        return values

    obs = {k: cat([p[0][k] for p in parts]) for k in parts[0][0]}
    rewards = cat([p[1] for p in parts])
    dones = cat([p[2] for p in parts])
    infos: dict[str, Any] = {}
    finals = [p[3].pop(keys.FINAL_OBSERVATION, p[0]) for p in parts]
    if any(f is not p[0] for f, p in zip(finals, parts, strict=True)):  # some stage cut an episode
        infos[keys.FINAL_OBSERVATION] = {k: cat([f[k] for f in finals]) for k in obs}
    for k in parts[0][3]:
        if k == ERRORS:
            infos[k] = {e: m for p in parts for e, m in p[3][k].items()}
        elif k == "env_ids":
            infos[k] = list(range(n))
        else:
            infos[k] = cat([p[3][k] for p in parts])
    return obs, rewards, dones, infos
