"""The simulator table: every ``env.<split>.env_type`` vlarl runs, what the rest of the code needs to know of
it, and where its code lives. The one place the trainer, evaluation, the dry run and the config schema ask
about a simulator; nothing outside ``envs/<simulator>/`` compares ``env_type`` strings
(``tests/envs/test_simulator_registry.py`` greps for it).

A simulator is one folder ``envs/<name>/`` with a light ``simulator.py`` that defines ``SIMULATOR`` (a
:class:`Simulator`: plain facts and the dotted names ``"module:function"`` of its code, so config validation
stays instant and nothing is imported before an env is made). What it names:

- ``make_env(split, request: EnvRequest) -> VectorEnv`` (required): its config mapping (an ``env.<split>``
  section -> its vector env) and its vector env factory;
- ``check_split(split) -> None``: load-time checks of an ``env.<split>`` section (raise ``ValueError``);
- ``evaluate``: its evaluation protocol for ``runner.val_check_interval``, called as
  ``(policy, config, *, rank, world_size, out_dir, group) -> dict``, plus ``env`` (the rank's training vector
  env, to evaluate in its simulators) when it takes that keyword (None: the generic deterministic rollout of
  ``training.validate``);
- ``record_demos``: its expert, ``(config, folder, n, *, progress) -> Path`` (None: ``sft`` needs
  ``--demos``);
- ``deviations(name, split) -> list[str]``: settings that differ from the published protocols (run plan);
- ``task_name(split) -> str``: the task a run is named by (None: the ``env_type``).

Functions of upper floors (the evaluation runner, demonstration recording) are named, not imported: the
envs floor imports nothing above it. A simulator from outside the package is an installed package's entry
point in the ``vlarl.simulators`` group (found when the table is first read), or registers itself with
:func:`register` (the fake third simulator of ``tests/envs/fake_simulator.py`` shows the whole of it; docs/adding_a_simulator.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "EnvRequest", "Simulator", "get", "load", "names", "register", "simulators", "unregister"]

#: the simulators of this package, each ``vlarl_cli.envs.<name>.simulator``
BUILTIN: tuple[str, ...] = ("libero", "libero_plus", "libero_pro", "maniskill", "toy")
#: the entry-point group through which an installed package adds a simulator (:func:`_load_installed`)
ENTRY_POINT_GROUP = "vlarl.simulators"


@dataclass(frozen=True)
class Simulator:
    """One simulator.

    Attributes:
        name: the ``env_type`` value.
        make_env: ``"module:function"`` building its vector env (see the module docstring for the others).
        summary: one line for error messages and ``vlarl doctor``.
        check_split, evaluate, record_demos, deviations, task_name: optional ``"module:function"`` names.
        images: renders camera images (image policies can act in it).
        state_policies: gives the state vectors the toy policies read (toy_flow / toy_gaussian run on it).
        only_state_policies: runs nothing but the toy policies.
        action_dim: the action size it takes, when it fixes one (None: the policy's, 7 for the arms).
        in_workers: its envs run in worker subprocesses the CPU budget counts (False: in the rank's process).
        pipelines: supports rollout pipelining (``rollout.pipeline_stage_num`` > 1).
        rank_bytes, env_bytes: host memory of one env rank (fixed part, per env), for the dry run's plan.
        reward_modes: the ``reward_mode`` values it implements.
        default_demos: demonstrations ``sft`` records when none are asked for.
        packages: what its workers' interpreter must hold (import names; ``vlarl doctor``, ``env.<split>.python``).
        modules: what its workers import (a probe of another interpreter imports them: one that dies is named).
        requirements, requirements_no_deps: what ``vlarl setup-sim`` installs into its own environment (pinned
            to this interpreter's versions where installed here); ``setup``: ``"module:function"`` finishing
            that environment, called with its ``bin/python`` (LIBERO: links the verified assets).
        prepare: ``"module:function"`` called (no arguments) before another interpreter is probed, setting what
            the workers inherit (LIBERO: its config path, so importing it never prompts).
        setup_check: ``"module:function"`` called (no arguments) before ``vlarl setup-sim`` installs anything:
            raises when what ``setup`` needs from outside the package index is missing (LIBERO-Plus: its clone,
            ImageMagick's library), so a build never fails after minutes of installing.
    """

    name: str
    make_env: str
    summary: str
    check_split: str | None = None
    evaluate: str | None = None
    record_demos: str | None = None
    deviations: str | None = None
    task_name: str | None = None
    images: bool = True
    state_policies: bool = False
    only_state_policies: bool = False
    action_dim: int | None = None
    in_workers: bool = False
    pipelines: bool = False
    rank_bytes: int = 0
    env_bytes: int = 0
    reward_modes: tuple[str, ...] = ("only_success",)
    default_demos: int = 2
    packages: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    requirements_no_deps: tuple[str, ...] = ()
    setup: str | None = None
    prepare: str | None = None
    setup_check: str | None = None

    def call(self, what: str, *args: Any, **kwargs: Any) -> Any:
        """Call the function this simulator names under ``what`` (``make_env``, ``check_split``, ...)."""
        ref = getattr(self, what)
        if ref is None:
            raise KeyError(f"simulator {self.name} has no {what}")
        return load(ref)(*args, **kwargs)


def load(ref: str) -> Any:
    """The object a ``"package.module:name"`` reference names (imported now)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class EnvRequest:
    """What a rank asks of a simulator beyond its config section: how many envs and how the policy reads them.

    ``chunk``: env steps per policy chunk. ``cameras`` / ``obs_mode`` / ``gripper`` are the policy's declarations (``keys.policy_cameras``,
    ``policy_obs_mode``, ``policy_gripper``); an env never works them out from the model type."""

    num_envs: int
    rank: int = 0
    group_size: int = 1
    chunk: int = 1
    cameras: tuple[str, ...] = ("main", "wrist")
    obs_mode: str = "rgb"
    gripper: str = "libero"
    record_video: bool = False
    stages: int = 1
    workers: int | None = None


_TABLE: dict[str, Simulator] = {}
_BUILTIN_LOADED: list[bool] = []


def register(simulator: Simulator) -> Simulator:
    """Add (or replace) ``simulator`` in the table; returns it."""
    _TABLE[simulator.name] = simulator
    return simulator


def unregister(name: str) -> None:
    """Remove ``name`` from the table (a simulator registered from outside, after its tests)."""
    _TABLE.pop(name, None)


def _load_builtin() -> None:
    if _BUILTIN_LOADED:
        return
    for name in BUILTIN:  # a simulator registered from outside under the same name keeps its row
        simulator = importlib.import_module(f"vlarl_cli.envs.{name}.simulator").SIMULATOR
        _TABLE.setdefault(simulator.name, simulator)
    _BUILTIN_LOADED.append(True)
    _load_installed()


def _load_installed() -> None:
    """Rows of installed packages: each entry point of :data:`ENTRY_POINT_GROUP` names a :class:`Simulator`
    (``fake_hop = my_package.simulator:SIMULATOR`` in its ``[project.entry-points."vlarl.simulators"]``). One
    that fails to load, is not a ``Simulator``, is named apart from its row or takes a row already in the
    table is left out with a printed line (never silently, and never blocking the other simulators)."""
    import sys
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point '{ep.name} = {ep.value}' ({ENTRY_POINT_GROUP}"
        where += f", package {ep.dist.name})" if ep.dist is not None else ")"
        try:
            simulator = ep.load()
        except Exception as exc:  # any import error of a third-party plug-in
            print(f"vlarl: the simulator {where} failed to load ({type(exc).__name__}: {exc}); it is left out of "
                  "the simulator table. Fix or uninstall that package.", file=sys.stderr)
            continue
        problem = ("is not a vlarl_cli.envs.registry.Simulator" if not isinstance(simulator, Simulator)
                   else f"names its row '{simulator.name}'" if simulator.name != ep.name
                   else "takes a name already in the table" if ep.name in _TABLE else None)
        if problem:
            print(f"vlarl: the simulator {where} {problem}; it is left out of the simulator table.", file=sys.stderr)
            continue
        _TABLE[ep.name] = simulator


def simulators() -> dict[str, Simulator]:
    """env_type -> :class:`Simulator`, the built-in ones and those registered from outside."""
    _load_builtin()
    return dict(_TABLE)


def names() -> tuple[str, ...]:
    return tuple(simulators())


def get(env_type: str) -> Simulator:
    """The simulator of ``env_type``; ``KeyError`` naming the known ones (the schema refuses unknown values
    before this is reached)."""
    table = simulators()
    if env_type not in table:
        raise KeyError(f'env_type "{env_type}" is not a registered simulator (known: {", ".join(table)})')
    return table[env_type]
