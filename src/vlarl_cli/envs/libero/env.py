"""One LIBERO simulator instance that executes action chunks and renders only what the policy reads.

Why the camera gating (REFERENCE.md section 1): on CPU one camera frame costs ~115 ms against ~15 ms of
physics per control step, and a policy reads an observation only at the start of each action chunk.
Three traps shape the implementation:

1. robosuite's camera observables sample at the FIRST physics substep of a control step, so an image
   rendered after ``env.step`` returns is not the image the observation holds. We therefore never render
   ourselves: we let robosuite's own sampling run, and only decide whether its sensor function renders.
2. A hard reset re-creates all observables, so the gate is re-installed after every reset.
3. Toggling an observable's ``enabled`` flag resets its sampling timer and returns stale images, so the
   observables stay enabled and untouched; we replace only their sensor function by a gated wrapper that
   calls the real renderer when the gate is open and otherwise returns the previous value (same shape,
   no GL work).

The gate is open during the last control step of each chunk (whose observation the policy reads), during
the last settle step of a reset, and on every step while recording video. Observations are therefore
bit-identical to rendering every step (``tests/envs/test_env.py`` checks it).

Seeding follows the protocol (``protocol.py``): ``once_per_task`` seeds a task's simulator once when it is
built and lets every reset continue numpy's global stream (openpi / OFT), so trial i is the (i+1)-th reset
(out of order, the stream is replayed first: :meth:`LiberoEnv._replay_stream`); ``every_reset`` seeds right
before every reset (RLinf), with the seed the caller passes to :meth:`LiberoEnv.reset`. Resets draw
object-placement noise from that stream, which the init state does not fix. Measured: seeded right before
a soft reset, an episode is bit-identical to a freshly built, seeded, hard-reset simulator.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, get_args

import numpy as np

from vlarl_cli import keys
from vlarl_cli.envs.libero import suites
from vlarl_cli.envs.libero.conventions import ACTION_DIM, STATE_DIM, make_state, rotate_180
from vlarl_cli.envs.libero.protocol import Seeding, get_protocol, rlinf_step_reward
from vlarl_cli.errors import EnvError, did_you_mean

#: Policy-facing camera names -> LIBERO camera names and observation keys.
CAMERAS: dict[str, tuple[str, str]] = {
    "main": ("agentview", keys.MAIN_IMAGES),
    "wrist": ("robot0_eye_in_hand", keys.WRIST_IMAGES),
}
RESOLUTIONS = (128, 224, 256)
#: ``rgb``: cameras + 8-d proprio (every published protocol); ``state``: no camera, 14-d privileged state.
OBS_MODES = ("rgb", "state")
#: MuJoCo rendering settings (``EnvOptions.render_quality``): what each one turns off, for the deviation lines.
#: Measured with benchmarks/render_quality.py (Mesa EGL, 128 px, libero_spatial task 0, 2 shared cores at load
#: ~5.5): exact 177 ms per frame, ``fast`` 101 ms (1.75x; mean pixel difference 0.93 / 255 on the agentview
#: image, 1.2 % of its pixels, the reflective surfaces), ``fast_noaa`` 57 ms (3.1x; 2.76 / 255, edges alias).
RENDER_QUALITIES = {
    "exact": "MuJoCo's defaults, as every published protocol renders",
    "fast": "MuJoCo's reflection pass off (reflective surfaces such as the stove plate render plain)",
    "fast_noaa": "MuJoCo's reflection pass and multisample anti-aliasing off (edges alias)",
}


def state_dim(obs_mode: str) -> int:
    """Size of ``states`` in ``obs_mode``: the 8-d proprio, plus the goal's object and target positions."""
    return STATE_DIM + (6 if obs_mode == "state" else 0)

# Raw proprio parts, exposed next to the 8-d state (keys of the observation dict).
EEF_POS = "eef_pos"  # [3]
EEF_QUAT = "eef_quat"  # [4] x-y-z-w
GRIPPER_QPOS = "gripper_qpos"  # [2]
JOINT_POS = "joint_pos"  # [7]
RAW_STATE_KEYS = {EEF_POS: 3, EEF_QUAT: 4, GRIPPER_QPOS: 2, JOINT_POS: 7}

# Episode-level info keys beyond vlarl_cli.keys.
ERROR = "error"  # str: why the episode was failed ('' when fine)
UNSTABLE = "unstable"  # bool: physics went unstable; the simulator must be rebuilt


@dataclass(frozen=True)
class EnvOptions:
    """Everything that shapes one env's episodes (plain fields; the vector env passes it to workers).

    Attributes:
        resolution: square image size (128, 224 or 256).
        cameras: subset of ``("main", "wrist")`` rendered for the policy; ``()`` = physics only.
        protocol: ``standard`` or ``rlinf`` (step limits, settle steps, seeding, reset mode).
        max_episode_steps: policy steps per episode; None = the protocol's limit for the task's suite.
        settle_steps: no-op steps after ``set_init_state``; None = the protocol's.
        seed: the env seed (applied as ``seeding`` says); None = the protocol's seed.
        seeding: ``once_per_task`` or ``every_reset`` (see ``protocol.Seeding``); None = the protocol's.
            ``every_reset`` makes every episode reproducible on its own (training, tests, demos).
        reward_coef: sparse success reward scale (RLinf ``reward_coef``).
        use_rel_reward: reward is the change of the step's reward level (RLinf ``use_rel_reward``).
        step_penalty: subtracted from the reward level of every step before the change is taken (RLinf
            ``use_step_penalty`` = 1.0; with ``use_rel_reward`` it shows only on the first step).
        reset_gripper_open: settle with the gripper commanded open (-1), else 0 (RLinf
            ``reset_gripper_open``).
        ignore_terminations: keep stepping after success until the step limit (RLinf
            ``ignore_terminations``); then ``success_at_end`` can differ from ``success_once``.
        hard_reset: robosuite's hard reset on every reset (a fresh model and data; made cheap by
            reusing the compiled model, see ``_CompiledModel``); None = the protocol's.
        record_video: render both cameras on every step and keep the frames of the current episode.
        clip_actions: clip actions to [-1, 1] before executing them.
        obs_mode: ``rgb`` (the standard observation: cameras + the 8-d proprio state) or ``state``
            (no camera: the state is the 8-d proprio followed by the world positions of the goal's two
            objects, 14-d; privileged like ManiSkill's ``state`` mode, for CPU learning runs).
        render_quality: ``exact`` (MuJoCo's defaults), ``fast`` (reflection pass off) or ``fast_noaa``
            (reflection and multisampling off); see ``RENDER_QUALITIES``. Images differ from ``exact``.
    """

    resolution: int = 128
    cameras: tuple[str, ...] = ("main", "wrist")
    protocol: str = "standard"
    max_episode_steps: int | None = None
    settle_steps: int | None = None
    seed: int | None = None
    seeding: str | None = None
    reward_coef: float = 1.0
    use_rel_reward: bool = False
    step_penalty: float = 0.0
    reset_gripper_open: bool = True
    ignore_terminations: bool = False
    hard_reset: bool | None = None
    record_video: bool = False
    clip_actions: bool = True
    obs_mode: str = "rgb"
    render_quality: str = "exact"

    def validate(self) -> None:
        get_protocol(self.protocol)
        if self.resolution not in RESOLUTIONS:
            raise EnvError(
                f"Resolution {self.resolution} is not supported.", fix=f"Use one of {RESOLUTIONS}."
            )
        for cam in self.cameras:
            if cam not in CAMERAS:
                raise EnvError(
                    f'Unknown camera "{cam}".{did_you_mean(cam, list(CAMERAS))}', fix=f"Use {list(CAMERAS)}."
                )
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise EnvError(f"max_episode_steps must be >= 1, got {self.max_episode_steps}.")
        if self.seeding is not None and self.seeding not in get_args(Seeding):
            raise EnvError(
                f'Unknown seeding "{self.seeding}".{did_you_mean(self.seeding, list(get_args(Seeding)))}',
                fix=f"Use one of {list(get_args(Seeding))}.",
            )
        if self.settle_steps is not None and self.settle_steps < 0:
            raise EnvError(f"settle_steps must be >= 0, got {self.settle_steps}.")
        if self.obs_mode not in OBS_MODES:
            raise EnvError(f'Unknown LIBERO obs_mode "{self.obs_mode}".{did_you_mean(self.obs_mode, OBS_MODES)}',
                           fix=f"Use one of {list(OBS_MODES)}.")
        if self.render_quality not in RENDER_QUALITIES:
            raise EnvError(f'Unknown render_quality "{self.render_quality}".'
                           f"{did_you_mean(self.render_quality, list(RENDER_QUALITIES))}",
                           fix=f"Use one of {list(RENDER_QUALITIES)}.")
        if self.obs_mode == "state" and self.cameras:
            raise EnvError(f"obs_mode state renders no camera, but cameras {list(self.cameras)} were asked for.",
                           fix="Use obs_mode rgb for image policies, or no cameras with obs_mode state.")


class _ChunkBuffers(NamedTuple):
    """The per-step arrays of one chunk, filled as it runs (``ChunkResult``'s order)."""

    rewards: np.ndarray
    dones: np.ndarray
    success: np.ndarray
    truncated: np.ndarray

    @classmethod
    def zeros(cls, chunk: int) -> _ChunkBuffers:
        return cls(np.zeros(chunk, np.float32), np.zeros(chunk, bool), np.zeros(chunk, bool), np.zeros(chunk, bool))


@dataclass
class ChunkResult:
    """Result of executing one action chunk.

    Attributes:
        obs: observation after the last executed step (see :meth:`LiberoEnv.observation`). Its images are
            rendered when that step is the chunk's last or reaches the step limit; after an early success
            they are the last rendered ones (the episode is over, no policy reads them).
        rewards: ``[C]`` float32; positions after the episode ended are 0.
        dones: ``[C]`` bool; True from the step where the episode ended onwards.
        success: ``[C]`` bool, ``check_success()`` after each executed step (False when not executed).
        truncated: ``[C]`` bool, True at the step where the step limit was reached.
        executed: number of actions actually executed (< C when the episode ended inside the chunk).
        episode: the episode metrics when the episode ended in this chunk, else None.
    """

    obs: dict[str, Any]
    rewards: np.ndarray
    dones: np.ndarray
    success: np.ndarray
    truncated: np.ndarray
    executed: int
    episode: dict[str, Any] | None = None


class _Gate:
    """Shared open/closed flag read by the gated camera sensors of one env."""

    def __init__(self) -> None:
        self.open = True
        self.renders = 0  # real camera renders since construction (for tests and benchmarks)


def _make_current(context: Any) -> None:
    """Make a robosuite render context's GL context current before rendering with it.

    robosuite's ``MjRenderContext.render`` (utils/binding_utils.py) does not do it, so with several
    simulators in one process the last one constructed is rendered into. Freeing an EGL context
    (renderers/context/egl_context.py ``free``) also calls ``eglReleaseThread``, which resets the thread's
    bound API to OpenGL ES, so the OpenGL API is bound again first. Measured: without both, a second env
    built and closed in the same process turns the first env's images into garbage.
    """
    if context is None:
        return
    gl_ctx = context.gl_ctx
    if type(gl_ctx).__name__ == "EGLGLContext":
        from OpenGL import EGL

        EGL.eglBindAPI(EGL.EGL_OPENGL_API)
    gl_ctx.make_current()


def close_libero_env(env: Any) -> None:
    """Close a LIBERO ``ControlEnv`` without damaging other simulators' rendering in this process.

    robosuite frees the render context's GL objects (``MjRenderContext.__del__``: ``con.free()``) in
    whatever GL context is current; if another env's context is current, that env's textures and buffers
    are deleted instead. Making this env's context current first keeps the others intact. Use it for raw
    ``OffScreenRenderEnv`` instances too (tests, benchmarks).
    """
    inner = getattr(env, "env", env)
    sim = getattr(inner, "sim", None)
    if sim is not None:
        _make_current(getattr(sim, "_render_context_offscreen", None))
    env.close()


def _install_gates(inner_env: Any, observable_names: list[str], gate: _Gate) -> None:
    """Wrap each camera observable's sensor so it renders only while ``gate.open`` (idempotent)."""
    for name in observable_names:
        observable = inner_env._observables[name]
        real = observable._sensor
        if getattr(real, "_vlarl_gated", False):
            continue

        def gated(obs_cache: dict, _real=real, _observable=observable) -> Any:
            if gate.open:
                gate.renders += 1
                _make_current(inner_env.sim._render_context_offscreen)
                return _real(obs_cache)
            return _observable._current_observed_value

        gated.__modality__ = real.__modality__  # type: ignore[attr-defined]  # robosuite's @sensor tag
        gated._vlarl_gated = True  # type: ignore[attr-defined]
        # Assign directly: Observable.set_sensor would call the sensor once to check it (a render).
        observable._sensor = gated


class _CompiledModel:
    """A hard reset without recompiling an unchanged model: robosuite's own reset with two methods replaced.

    What a robosuite hard reset does (``MujocoEnv.reset``): free the simulator and its render context, rebuild
    the task's XML (``_load_model``, ~25 ms, which also rebuilds robots' models and grippers), compile it into a
    new ``MjSim`` (~3 s), ``forward``, create a new offscreen render context (~1 s, running ``forward`` once
    more), then the ``_reset_internal`` and observable set-up a soft reset also runs, except that the new
    observables each render their camera to check it (3-4 frames per camera that nothing reads). Beyond a soft
    reset it changes only what a new ``MjModel`` and ``MjData`` bring: model arrays back to the compiled ones
    (LIBERO's resets move fixtures through ``model.body_pos`` / ``body_quat``), and a fresh ``MjData``
    (zero solver warm start ``qacc_warmstart``, warning counters, contacts); controllers are rebuilt by
    ``_reset_internal`` either way.

    So this keeps a copy of the model as compiled (taken at construction, before anything edits it; ~260 MB
    for a LIBERO scene, most of it textures) with its XML. When a hard reset builds the same XML string, the
    current model's arrays and parameter structs are copied back from it in place, the new ``MjSim`` wraps it
    with a fresh ``MjData`` (what a compile gives, bit for bit), and the render context moves over (its GL
    objects were uploaded from identical meshes and textures) after the ``forward`` its creation would run;
    while ``blank`` is set, the new observables' check renders return black frames of the right shape
    (the settle steps render the frame the policy sees). Another XML compiles as robosuite does and becomes
    the kept copy. ``tests/envs/test_libero_hard_reset.py`` compares whole episodes (images, states, rewards) with
    robosuite's own hard reset.
    """

    def __init__(self, inner_env: Any) -> None:
        self.env = inner_env
        # the construction's compile, recorded by _recording_compiles (else the next hard reset compiles)
        compiled: tuple[str | None, Any] = getattr(inner_env, "_vlarl_compiled", (None, None))
        self.xml, self.model = compiled
        self.stashed: Any = None
        self.blank = False
        self.reused = 0
        inner_env._destroy_sim = self._destroy_sim
        inner_env._initialize_sim = self._initialize_sim

    def uninstall(self) -> None:
        """Back to robosuite's own hard reset (tests compare the two)."""
        del self.env._destroy_sim, self.env._initialize_sim

    def _destroy_sim(self) -> None:
        # keep the simulator (and its render context) until the new XML is known
        self.stashed, self.env.sim = self.env.sim, None

    def _initialize_sim(self, xml_string: str | None = None) -> None:
        import copy

        from robosuite.utils.binding_utils import MjSim

        env = self.env
        xml = _model_xml(env, xml_string)
        old, self.stashed = self.stashed, None
        if old is not None and xml == self.xml:
            _copy_into(old.model._model, self.model)
            sim = MjSim(old.model._model)
            context, old._render_context_offscreen = old._render_context_offscreen, None
            if context is not None:
                sim.forward()  # MjRenderContext.__init__ runs one
                sim._render_context_offscreen = context
                context.sim, context.model, context.data = sim, sim.model, sim.data
            self.reused += 1
        else:
            if old is not None:
                _make_current(getattr(old, "_render_context_offscreen", None))
                old.free()
            sim = MjSim.from_xml_string(xml)
            self.xml, self.model = xml, copy.copy(sim.model._model)
        if self.blank:
            sim.render = _blank_render
        env.sim = sim
        sim.forward()
        env.initialize_time(env.control_freq)


def _blank_render(width: int | None = None, height: int | None = None, *, depth: bool = False,
                  **_: Any) -> Any:
    """Stands in for ``MjSim.render`` while observables check their sensors: a black frame of the shape asked."""
    rgb = np.zeros((height or 1, width or 1, 3), np.uint8)
    return (rgb, np.zeros((height or 1, width or 1), np.float32)) if depth else rgb


def _copy_into(dst: Any, src: Any, depth: int = 0) -> None:
    """Copy every array and number of a MuJoCo struct (``MjModel``, its ``opt`` / ``vis`` / ``stat``) in place."""
    for name in dir(src):
        if name.startswith("_"):
            continue
        value = getattr(src, name)
        if isinstance(value, np.ndarray):
            np.copyto(getattr(dst, name), value)
        elif isinstance(value, (bool, int, float)):
            if getattr(dst, name) != value:
                setattr(dst, name, value)
        elif depth < 2 and type(value).__module__.startswith("mujoco") and not callable(value):
            _copy_into(getattr(dst, name), value, depth + 1)


def _model_xml(inner_env: Any, xml_string: str | None) -> str:
    """The XML robosuite's ``MujocoEnv._initialize_sim`` compiles."""
    xml = xml_string if xml_string else inner_env.model.get_xml()
    return inner_env._xml_processor(xml) if inner_env._xml_processor is not None else xml


@contextmanager
def _recording_compiles() -> Iterator[None]:
    """While building a simulator, keep a copy of the model robosuite compiles (for :class:`_CompiledModel`)."""
    import copy

    from robosuite.environments.base import MujocoEnv

    real = MujocoEnv._initialize_sim

    def recording(self: Any, xml_string: str | None = None) -> None:
        real(self, xml_string)
        self._vlarl_compiled = (_model_xml(self, xml_string), copy.copy(self.sim.model._model))

    MujocoEnv._initialize_sim = recording  # type: ignore[method-assign]
    try:
        yield
    finally:
        MujocoEnv._initialize_sim = real  # type: ignore[method-assign]


#: numpy's random stream after k resets of a seeded ``once_per_task`` simulator, per (task, seed, reset mode,
#: cameras, resolution): shared by the envs of one process, so an env that starts at trial i after another
#: env of its worker reset trial i - 1 needs no replay (:meth:`LiberoEnv._replay_stream`).
_STREAMS: dict[tuple[Any, ...], dict[int, Any]] = {}


def _physics_warnings(sim: Any) -> int:
    """Count of MuJoCo's bad-qacc/qpos/qvel warnings (MuJoCo resets the state when they fire)."""
    import mujoco

    data = sim.data._data
    return int(
        sum(
            data.warning[int(w)].number
            for w in (
                mujoco.mjtWarning.mjWARN_BADQACC,
                mujoco.mjtWarning.mjWARN_BADQPOS,
                mujoco.mjtWarning.mjWARN_BADQVEL,
            )
        )
    )


class LiberoEnv:
    """One LIBERO task environment executing ``[C, 7]`` action chunks.

    Args:
        suite: a suite name (``libero_130`` allowed).
        task_id: task index inside ``suite``; change it later with :meth:`set_task`.
        options: episode options.
        cache_dir: vlarl cache root for LIBERO's config (see ``setup.prepare_libero``).

    Typical use::

        env = LiberoEnv("libero_spatial", 0, EnvOptions(resolution=224))
        obs = env.reset(trial_id=3)
        result = env.step_chunk(actions)  # actions: [C, 7] float, LIBERO convention
        env.close()
    """

    def __init__(
        self, suite: str, task_id: int, options: EnvOptions | None = None, *, cache_dir: Path | None = None
    ) -> None:
        from vlarl_cli.envs.libero.setup import prepare_libero

        self.options = options if options is not None else EnvOptions()
        self.options.validate()
        self.suite = suites.check_suite(suite)
        self.protocol = get_protocol(self.options.protocol)
        prepare_libero(cache_dir)
        self._env: Any = None
        self._gate = _Gate()
        self.task_id = -1
        self.task: suites.TaskInfo | None = None
        self._frames: dict[str, list[np.ndarray]] = {}
        self._episode_active = False
        self.timings = {"construct_s": 0.0, "reset_s": 0.0}
        self.set_task(task_id)

    # ------------------------------------------------------------------ construction

    @property
    def cameras_built(self) -> tuple[str, ...]:
        """Cameras present in the simulator: the policy's, plus both while recording video."""
        return tuple(CAMERAS) if self.options.record_video else tuple(self.options.cameras)

    @property
    def max_episode_steps(self) -> int:
        assert self.task is not None
        if self.options.max_episode_steps is not None:
            return self.options.max_episode_steps
        return self.protocol.max_steps_for(self.task.suite)

    @property
    def settle_steps(self) -> int:
        return self.protocol.settle_steps if self.options.settle_steps is None else self.options.settle_steps

    @property
    def seed(self) -> int:
        return self.protocol.seed if self.options.seed is None else self.options.seed

    @property
    def seeding(self) -> str:
        return self.protocol.seeding if self.options.seeding is None else self.options.seeding

    @property
    def hard_reset(self) -> bool:
        return self.protocol.hard_reset if self.options.hard_reset is None else self.options.hard_reset

    @property
    def raw_env(self) -> Any:
        """LIBERO's ``ControlEnv`` (``.env`` is the robosuite environment)."""
        return self._env

    @property
    def render_count(self) -> int:
        """Real camera renders so far (one per camera per rendered control step)."""
        return self._gate.renders

    def set_task(self, task_id: int) -> None:
        """Switch to another task of the suite (rebuilds the simulator, ~4 s) ; no-op if unchanged."""
        if task_id == self.task_id and self._env is not None:
            return
        task = suites.get_task(self.suite, task_id)
        self.close()
        start = time.perf_counter()
        with _recording_compiles():
            self._env = self._construct(task)
        #: hard resets reuse the compiled model while the task's XML is unchanged (see _CompiledModel)
        self._model_cache = _CompiledModel(self._env.env) if self.hard_reset else None
        if self.seeding == "once_per_task":
            # openpi _get_libero_env / OFT get_libero_env: env.seed(seed) right after building a task's env
            self._env.seed(self.seed)
        self._stream_resets = 0  # resets since the seed (once_per_task: trial i must be the (i+1)-th)
        # LIBERO seeds numpy's process-global generator; several envs in one worker process would share
        # (and interleave) one stream, so each env keeps its own stream state between its resets
        self._stream_state = np.random.get_state()
        self.timings["construct_s"] = time.perf_counter() - start
        self.task_id, self.task = task_id, task
        self._episode_active = False

    def _construct(self, task: suites.TaskInfo) -> Any:
        from libero.libero.envs.env_wrapper import ControlEnv

        cams = [CAMERAS[c][0] for c in self.cameras_built]
        res = self.options.resolution
        settle = self.settle_steps
        max_steps = self.options.max_episode_steps or self.protocol.max_steps_for(task.suite)
        return ControlEnv(
            bddl_file_name=str(task.bddl_file),
            use_camera_obs=bool(cams),
            has_renderer=False,
            has_offscreen_renderer=bool(cams),
            camera_names=cams or ["agentview"],
            camera_heights=res,
            camera_widths=res,
            hard_reset=self.hard_reset,
            # robosuite raises past its horizon; leave room for settle steps and the policy's limit.
            horizon=max(1000, settle + max_steps + 1),
        )

    def _camera_observables(self) -> list[str]:
        return [f"{CAMERAS[c][0]}_image" for c in self.cameras_built]

    # ------------------------------------------------------------------ episodes

    def reset(
        self, trial_id: int = 0, *, init_state: np.ndarray | None = None, seed: int | None = None
    ) -> dict[str, Any]:
        """Start an episode from init state ``trial_id`` of the current task (or an explicit state).

        Sequence (openpi/OpenVLA evaluators, RLinf ``_reconfigure`` + ``reset``): [``seed``] ->
        ``reset()`` -> ``set_init_state`` -> settle steps. Cameras render only during the last of these.
        ``seed``: with ``every_reset`` seeding, the seed for this reset (None = :attr:`seed`); refused with
        ``once_per_task``, whose stream must not be re-seeded.

        Returns:
            the first observation the policy sees.
        """
        assert self.task is not None
        start = time.perf_counter()
        state = (
            init_state if init_state is not None else suites.init_states(self.suite, self.task_id)[trial_id]
        )
        self._gate.open = False
        self._seed_stream(trial_id, init_state, seed)
        self._robosuite_reset()
        self._after_robosuite_reset(init_state)
        _install_gates(self._env.env, self._camera_observables(), self._gate)  # observables may be new (trap 2)
        self._apply_render_quality()
        self._begin_episode(self._settle(state))
        obs = self.observation()
        self._frames = {}
        if self.options.record_video:
            self._capture(obs)
        self.timings["reset_s"] = time.perf_counter() - start
        return obs

    def _seed_stream(self, trial_id: int, init_state: np.ndarray | None, seed: int | None) -> None:
        """numpy's stream before this reset: seeded (every_reset), or the task's stream at trial ``trial_id``."""
        if self.seeding == "every_reset":
            self._env.seed(self.seed if seed is None else seed)
        elif seed is not None:
            raise EnvError(
                f"Seeding once_per_task seeds a task's simulator once; a per-reset seed ({seed}) would break "
                "its random stream.",
                fix="Pass no seed to reset() (use EnvOptions.seed), or use seeding every_reset.",
            )
        elif init_state is None and self._stream_resets != trial_id:
            self._replay_stream(trial_id)
        if self.seeding == "once_per_task":
            np.random.set_state(self._stream_state)

    def _after_robosuite_reset(self, init_state: np.ndarray | None) -> None:
        self._stream_resets += 1
        self._stream_state = np.random.get_state()
        if self.seeding == "once_per_task" and init_state is None:
            self._known_streams()[self._stream_resets] = self._stream_state
        if not self.hard_reset:
            # A soft reset keeps the gripper model object, whose speed-limited command
            # (robosuite models/grippers/panda_gripper.py format_action: current_action) would carry over
            # from the previous episode; a hard reset rebuilds it as zeros(dof). Measured: without this,
            # settle steps after a previous episode differ from a fresh env (~100 pixels per image).
            for robot in self._env.env.robots:
                if getattr(robot, "gripper", None) is not None:
                    robot.gripper.current_action = np.zeros(robot.gripper.dof)

    def _settle(self, state: np.ndarray) -> dict[str, Any]:
        """``set_init_state``, then the protocol's settle steps; cameras render only in the last of these."""
        settle = self.settle_steps
        self._gate.open = settle == 0 or self.options.record_video
        raw = self._env.set_init_state(np.asarray(state, dtype=np.float64))
        for i in range(settle):
            self._gate.open = i == settle - 1 or self.options.record_video
            raw, _, _, _ = self._env.step(self.protocol_settle_action)
        self._gate.open = False
        return raw

    def _begin_episode(self, raw: dict[str, Any]) -> None:
        self._raw_obs = raw
        self._warnings = _physics_warnings(self._env.sim)
        self._elapsed = 0
        self._return = 0.0
        self._prev_reward_level = 0.0
        self._success_once = False
        self._last_success = False
        self._error = ""
        self._episode_active = True

    def _apply_render_quality(self) -> None:
        """``render_quality`` on the simulator's render context; a hard reset builds a new context (and
        reloads the model, whose ``offsamples`` is back to the XML's), so each new one is set once.

        The context is marked, not referenced: a reference would keep a replaced context alive until it
        is dropped later, and robosuite's ``__del__`` then frees its GL objects in whichever context is
        current, the new one (measured: images 3.4 / 255 off after the second hard reset)."""
        ctx = getattr(self._env.env.sim, "_render_context_offscreen", None)
        quality = self.options.render_quality
        if quality == "exact" or ctx is None or getattr(ctx, "_vlarl_render_quality", None) == quality:
            return
        import mujoco

        _make_current(ctx)
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        if self.options.render_quality == "fast_noaa":
            # multisampling is a property of the offscreen buffer: rebuild it without samples
            ctx.model.vis.quality.offsamples = 0
            ctx.con.free()
            ctx._set_mujoco_context_and_buffers()
        ctx._vlarl_render_quality = quality

    def _robosuite_reset(self) -> None:
        """robosuite's reset; a hard one reuses the compiled model and skips the check renders (_CompiledModel)."""
        if self.hard_reset:
            # robosuite's hard reset frees this simulator's render context in whatever GL context is current
            # (see close_libero_env): with another env's current, that env's GL objects were deleted and its
            # later images went stale (a re-run episode diverged from its first run; the stream replay's
            # resets did the same to the env rendered last)
            _make_current(getattr(self._env.env.sim, "_render_context_offscreen", None))
        cache = self._model_cache
        if cache is not None:
            cache.blank = True
        try:
            self._env.reset()
        finally:
            if cache is not None:
                cache.blank = False
                vars(self._env.env.sim).pop("render", None)

    def _known_streams(self) -> dict[int, Any]:
        """numpy's stream after k resets of this task's seeded simulator, for every k seen in this process."""
        assert self.task is not None
        key = (str(self.task.bddl_file), self.seed, self.hard_reset, self.cameras_built, self.options.resolution)
        return _STREAMS.setdefault(key, {0: None})

    def _replay_stream(self, trial_id: int) -> None:
        """Bring numpy's stream to where openpi's evaluator has it before trial ``trial_id``'s reset.

        openpi / OFT seed a task's env once and reset it for trials 0, 1, ... in order; resets draw
        placement noise, stepping draws nothing, and a hard reset rebuilds the model whatever the state, so
        the stream before trial i depends on the task, the seed and i only. Every env of this process records
        the stream after each of its resets (``_STREAMS``); a replay starts from the nearest recorded point at
        or before ``trial_id`` (else from the seed) and resets the rest of the way (~0.4 s per cheap hard
        reset). Needed when trials run out of order: a resumed evaluation, a task split over envs,
        re-simulation.
        """
        known = self._known_streams()
        start = max(k for k in known if k <= trial_id)
        self._env.seed(self.seed)  # also where a replay from the seed starts
        if known[start] is not None:
            np.random.set_state(known[start])
        for _ in range(trial_id - start):
            self._robosuite_reset()
            known.setdefault(start + 1, np.random.get_state())
            start += 1
        self._stream_resets = trial_id
        self._stream_state = np.random.get_state()

    @property
    def protocol_settle_action(self) -> np.ndarray:
        action = np.asarray(self.protocol.settle_action, dtype=np.float64)
        if not self.options.reset_gripper_open:
            action[-1] = 0.0  # RLinf LiberoEnv.reset: zero actions, gripper -1 only with reset_gripper_open
        return action

    def observation(self) -> dict[str, Any]:
        """The policy observation built from the last raw observation.

        Keys: ``main_images`` / ``wrist_images`` ``[H, W, 3]`` uint8 rotated 180 degrees (only the
        requested cameras), ``states`` ``[8]`` float32, ``task_descriptions`` str, and the raw parts
        ``eef_pos`` [3], ``eef_quat`` [4], ``gripper_qpos`` [2], ``joint_pos`` [7] (float32).
        """
        assert self.task is not None
        raw = self._raw_obs
        obs: dict[str, Any] = {}
        for cam in self.options.cameras:
            libero_name, key = CAMERAS[cam]
            obs[key] = rotate_180(raw[f"{libero_name}_image"])
        obs[keys.STATES] = make_state(
            raw["robot0_eef_pos"], raw["robot0_eef_quat"], raw["robot0_gripper_qpos"]
        )
        if self.options.obs_mode == "state":
            from vlarl_cli.envs.libero.expert import goal_positions

            obs[keys.STATES] = np.concatenate([obs[keys.STATES], goal_positions(self.raw_env.env)]).astype(np.float32)
        obs[keys.TASK_DESCRIPTIONS] = self.task.language
        obs[EEF_POS] = np.asarray(raw["robot0_eef_pos"], np.float32)
        obs[EEF_QUAT] = np.asarray(raw["robot0_eef_quat"], np.float32)
        obs[GRIPPER_QPOS] = np.asarray(raw["robot0_gripper_qpos"], np.float32)
        obs[JOINT_POS] = np.asarray(raw["robot0_joint_pos"], np.float32)
        return obs

    def _capture(self, obs: dict[str, Any]) -> None:
        raw = self._raw_obs
        for cam in CAMERAS:
            libero_name, _ = CAMERAS[cam]
            self._frames.setdefault(cam, []).append(rotate_180(raw[f"{libero_name}_image"]))

    def pop_frames(self) -> dict[str, np.ndarray]:
        """Frames of the current/last episode while recording: ``{"main"|"wrist": [T, H, W, 3] uint8}``."""
        frames = {cam: np.stack(f) for cam, f in self._frames.items() if f}
        self._frames = {}
        return frames

    def check_actions(self, actions: Any) -> str:
        """Return '' if ``actions`` is a finite ``[C, 7]`` array, else a message saying what is wrong."""
        try:
            a = np.asarray(actions, dtype=np.float64)
        except (TypeError, ValueError) as err:
            return f"actions are not numeric ({err})"
        if a.ndim != 2 or a.shape[1] != ACTION_DIM or a.shape[0] < 1:
            return f"actions have shape {list(a.shape)}, expected [chunk, {ACTION_DIM}]"
        if not np.all(np.isfinite(a)):
            bad = np.argwhere(~np.isfinite(a))[0].tolist()
            return f"actions contain NaN/inf (first at chunk step {bad[0]}, dim {bad[1]})"
        return ""

    def step_chunk(self, actions: np.ndarray) -> ChunkResult:
        """Execute ``[C, 7]`` actions step by step (LIBERO convention, gripper -1 = open).

        Stops early when the episode ends (success unless ``ignore_terminations``, or the step limit).
        A malformed action chunk (wrong shape, NaN/inf) fails the episode: ``dones`` all True, the
        episode metrics carry ``error``; nothing is raised, so a worker survives it.

        Returns:
            :class:`ChunkResult` with ``[C]`` rewards, dones, success, truncated.
        """
        if not self._episode_active:
            raise EnvError(
                "step_chunk called before reset() or after the episode ended.", fix="Call reset() first."
            )
        problem = self.check_actions(actions)
        a = np.asarray(actions, dtype=np.float64) if not problem else None
        chunk = a.shape[0] if a is not None else (np.shape(actions)[0] if np.ndim(actions) >= 1 else 1)
        out = _ChunkBuffers.zeros(max(int(chunk), 1))
        if problem:
            out.dones[:] = True
            return self._end(*out, 0, error=f"invalid action chunk: {problem}")
        assert a is not None
        if self.options.clip_actions:
            a = np.clip(a, -1.0, 1.0)
        for c in range(len(out.rewards)):
            ended = self._step_once(a[c], c, out)
            if ended is not None:
                return ended
        self._gate.open = False
        return ChunkResult(self.observation(), *out, len(out.rewards))

    def _step_once(self, action: np.ndarray, c: int, out: _ChunkBuffers) -> ChunkResult | None:
        """Step ``c`` of a chunk: the result when the episode ends here, else None."""
        opts = self.options
        limit = self.max_episode_steps
        # Render only in the step whose observation will be read: the chunk's last, or the step that
        # reaches the step limit (a truncated episode's final observation, for value bootstrapping),
        # or every step while recording. An episode ending early by success keeps a stale image.
        self._gate.open = c == len(out.rewards) - 1 or opts.record_video or self._elapsed + 1 >= limit
        self._raw_obs, _, ok, _ = self._env.step(action)
        self._elapsed += 1
        warnings = _physics_warnings(self._env.sim)
        if warnings != self._warnings or not np.all(np.isfinite(self._env.sim.data.qpos)):
            self._gate.open = False
            out.dones[c:] = True
            return self._end(*out, c + 1, error="physics became unstable (MuJoCo bad qacc/qpos/qvel warning)",
                             unstable=True)
        succ = bool(ok)
        out.success[c] = succ
        reward, self._prev_reward_level = rlinf_step_reward(
            succ, self._prev_reward_level, reward_coef=opts.reward_coef,
            step_penalty=opts.step_penalty, use_rel_reward=opts.use_rel_reward,
        )  # fmt: skip
        out.rewards[c] = reward
        if not self._success_once:  # RLinf _record_metrics: the return stops at the first success
            self._return += reward
        self._success_once |= succ
        self._last_success = succ
        if opts.record_video:
            self._capture(self._raw_obs)
        terminated = succ and not opts.ignore_terminations
        if self._elapsed >= limit:
            out.truncated[c] = not terminated
        if terminated or self._elapsed >= limit:
            self._gate.open = False
            out.dones[c:] = True
            return self._end(*out, c + 1)
        return None

    def _end(
        self,
        rewards: np.ndarray,
        dones: np.ndarray,
        success: np.ndarray,
        truncated: np.ndarray,
        executed: int,
        *,
        error: str = "",
        unstable: bool = False,
    ) -> ChunkResult:
        self._episode_active = False
        failed = bool(error)
        episode = {
            keys.SUCCESS_ONCE: self._success_once and not failed,
            keys.SUCCESS_AT_END: self._last_success and not failed,
            keys.RETURN: float(self._return),
            keys.EPISODE_LEN: int(self._elapsed),
            ERROR: error,
            UNSTABLE: unstable,
        }
        return ChunkResult(self.observation(), rewards, dones, success, truncated, executed, episode)

    @property
    def episode_active(self) -> bool:
        return self._episode_active

    @property
    def elapsed_steps(self) -> int:
        return self._elapsed

    def rebuild(self) -> None:
        """Construct the simulator again (after unstable physics)."""
        task_id = self.task_id
        self.close()
        self.task_id = -1
        self.set_task(task_id)

    def close(self) -> None:
        """Free the simulator and its GL context (avoids EGL errors printed at interpreter exit)."""
        if self._env is not None:
            try:
                close_libero_env(self._env)
            finally:
                self._env = None
