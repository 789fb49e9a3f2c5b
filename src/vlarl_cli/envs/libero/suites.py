"""LIBERO task suites, task languages, init states and the (suite, task_id, trial_id) addressing.

Task lists and init states come from the installed ``libero`` package (its ``benchmark`` module and
``init_files/<suite>/<task>.pruned_init``, byte-identical to the official repository per REFERENCE.md
section 1), with task order index 0 as every evaluator uses. ``libero_130`` is our name for all 130 tasks
in the order spatial, object, goal, 90, 10 (RLinf's, see protocol.SUITE_ORDER).

LIBERO-PRO suites (``libero_goal_swap`` ...) are LIBERO suites here too: their tasks build in this LIBERO from
PRO's bddl files and ``.npz`` init states (``vlarl setup-libero --pro`` fetches and verifies them; the
``_object`` suites need PRO's own object classes, i.e. PRO's package in the workers' interpreter: see
``envs/libero_pro/data.py``). Their
instruction is the bddl's ``(:language ...)`` (PRO's maintained evaluator). ``libero_all`` is the 130 tasks
followed by the runnable PRO suites' (what the evaluation runner addresses).

Addressing: an episode start is ``(suite, task_id, trial_id)`` with ``trial_id`` in ``[0, 50)`` selecting
init state ``trial_id`` of the task. The flat reset-state id is ``task_id * 50 + trial_id`` (task ids are
positions inside the requested suite, so libero_130 ids run 0..6499).

Importing this module is cheap; LIBERO (and torch, which it imports) are loaded on first use.
"""

from __future__ import annotations

import functools
import io
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli.envs.libero.protocol import SUITE_ORDER
from vlarl_cli.errors import EnvError, did_you_mean

#: Every LIBERO task ships exactly this many fixed init states.
TRIALS_PER_TASK = 50
ALL_SUITES = (*SUITE_ORDER, "libero_130")
SUITE_SIZES = {"libero_spatial": 10, "libero_object": 10, "libero_goal": 10, "libero_10": 10, "libero_90": 90}
#: ``check_runnable``'s ``python`` where only the files are checked (the interpreter is checked elsewhere)
PRO_PACKAGE_UNCHECKED = "(checked where the interpreter is known)"
#: every task vlarl's LIBERO runs: libero_130 then the runnable LIBERO-PRO suites (evaluation addressing)
LIBERO_ALL = "libero_all"


@functools.cache
def pro_suite_names() -> tuple[str, ...]:
    """The LIBERO-PRO suites this LIBERO runs (``_lan``, ``_swap``, ``_task`` of the four base suites)."""
    from vlarl_cli.envs.libero_pro.catalog import pro_suites
    from vlarl_cli.envs.libero_pro.data import RUNS_IN_VLARL_LIBERO

    return tuple(n for n, s in pro_suites().items() if s.category.key in RUNS_IN_VLARL_LIBERO)


def plus_suite_names() -> tuple[str, ...]:
    """The LIBERO-Plus suites that run in LIBERO-Plus's own environment here (``envs/libero_plus/suites.py``;
    light / background / layout once its assets.zip is installed)."""
    from vlarl_cli.envs.libero_plus.suites import runnable_suite_names

    return runnable_suite_names()


@functools.cache
def pro_object_suite_names() -> tuple[str, ...]:
    """The LIBERO-PRO ``_object`` suites: they run only in an interpreter holding PRO's own package
    (``env.<split>.python``, ``vlarl setup-sim libero_pro``; ``envs/libero_pro/data.py``)."""
    from vlarl_cli.envs.libero_pro.catalog import pro_suites
    from vlarl_cli.envs.libero_pro.data import NEEDS_PRO_PACKAGE

    return tuple(n for n, s in pro_suites().items() if s.category.key in NEEDS_PRO_PACKAGE)


def all_suite_order() -> tuple[str, ...]:
    """The original suites in ``libero_all`` order: libero_130's five, the PRO suites vlarl's LIBERO runs, the
    LIBERO-Plus suites that need no assets.zip (whether or not it is installed: the ids do not depend on this
    machine), then PRO's ``_object`` suites (appended last: earlier ids stay as they were)."""
    from vlarl_cli.envs.libero_plus.suites import RUNNABLE, all_suite_names

    plus = tuple(name for name, (_, category) in all_suite_names().items() if category in RUNNABLE)
    return (*SUITE_ORDER, *pro_suite_names(), *plus, *pro_object_suite_names())


@dataclass(frozen=True)
class TaskInfo:
    """One LIBERO task.

    Attributes:
        suite: the original suite the task belongs to (never ``libero_130``).
        suite_task_id: index inside that original suite (what ``get_task(i)`` takes).
        name: task name (bddl file stem).
        language: the instruction given to the policy (LIBERO's ``task.language``).
        bddl_file: absolute path of the task's bddl file.
        init_states_file: absolute path of the ``.pruned_init`` file with the 50 init states.
    """

    suite: str
    suite_task_id: int
    name: str
    language: str
    bddl_file: Path
    init_states_file: Path


@dataclass(frozen=True)
class EpisodeAddress:
    """Where an episode starts: ``suite`` (may be libero_130), ``task_id`` inside it, ``trial_id`` < 50."""

    suite: str
    task_id: int
    trial_id: int

    @property
    def reset_state_id(self) -> int:
        return self.task_id * TRIALS_PER_TASK + self.trial_id


def check_suite(suite: str) -> str:
    """Return ``suite`` if known, else raise EnvError with a suggestion (a PRO ``_object`` suite is known here;
    its interpreter is checked where that is set: ``make.check_split``, ``LiberoVectorEnv``)."""
    if suite in ALL_SUITES or suite in pro_suite_names() or suite in pro_object_suite_names() or suite == LIBERO_ALL:
        return suite
    from vlarl_cli.envs.libero_plus import suites as plus

    if plus.is_plus_suite(suite):
        return plus.check_runnable(suite)  # raises for the categories that need LIBERO-Plus's assets.zip
    known = [*ALL_SUITES, *pro_suite_names(), *plus_suite_names(), *pro_object_suite_names()]
    raise EnvError(
        f'Unknown LIBERO suite "{suite}".{did_you_mean(suite, known)}',
        fix=f"Use one of {', '.join(known)}.",
    )


def num_tasks(suite: str) -> int:
    """Number of tasks in ``suite`` (no LIBERO import needed)."""
    check_suite(suite)
    if suite in ("libero_130", LIBERO_ALL):
        return sum(num_tasks(s) for s in (SUITE_ORDER if suite == "libero_130" else all_suite_order()))
    if suite in plus_suite_names():
        from vlarl_cli.envs.libero_plus.suites import num_tasks as plus_tasks

        return plus_tasks(suite)
    return SUITE_SIZES.get(suite, 10)  # every PRO suite has 10 tasks


@functools.cache
def _pro_suite_tasks(suite: str) -> tuple[TaskInfo, ...]:
    """A PRO suite's tasks from vlarl's catalog and the verified files in the cache (missing: the setup command)."""
    from vlarl_cli.envs.libero_pro.catalog import pro_suites
    from vlarl_cli.envs.libero_pro.data import check_runnable, task_files

    pro = pro_suites()[suite]
    # the files only: whether an _object suite has PRO's interpreter is checked where that is known
    root = check_runnable([pro], python=PRO_PACKAGE_UNCHECKED)
    out = []
    for task in pro.tasks:
        bddl, init = task_files(task, root)
        out.append(TaskInfo(suite=suite, suite_task_id=task.task_id, name=task.name, language=task.prompt("bddl"),
                            bddl_file=bddl, init_states_file=init))
    return tuple(out)


def _language(task: str) -> str:
    """LIBERO's ``grab_language_from_filename`` (libero/libero/benchmark/__init__.py), for a task name."""
    x = task + ".bddl"
    if x[0].isupper():  # LIBERO-100 (libero_90 / libero_10): the scene prefix is not part of the instruction
        language = " ".join(x[x.find("SCENE") + (8 if "SCENE10" in x else 7):].split("_"))
    else:
        language = " ".join(x.split("_"))
    return language[:language.find(".bddl")]


def _task_map() -> dict[str, list[str]]:
    """LIBERO's ``libero_task_map``, read from its file: ``libero.libero.benchmark`` imports torch, and a
    simulator worker (``env.<split>.python``) has none."""
    import importlib.util

    from vlarl_cli.envs.libero.setup import libero_package_dir

    path = libero_package_dir() / "benchmark" / "libero_suite_task_map.py"
    spec = importlib.util.spec_from_file_location("_vlarl_libero_task_map", path)
    if spec is None or spec.loader is None:
        raise EnvError(f"LIBERO's task map {path} is missing.", fix="Reinstall libero==0.1.1 with --no-deps.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.libero_task_map


def _base_init_file(path: Path) -> Path:
    """LIBERO's ``.pruned_init``; in LIBERO-PRO's package (a worker in `vlarl setup-sim libero_pro`'s environment,
    which evaluates the ``original`` category beside ``object``) the base suites ship the same arrays as
    ``.pruned_init.npz`` only (all 130 tasks checked equal to LIBERO 0.1.1's, dtype and shape included, as are
    their bddl files)."""
    npz = path.with_name(path.name + ".npz")
    return npz if not path.exists() and npz.exists() else path


@functools.cache
def _original_suite_tasks(suite: str) -> tuple[TaskInfo, ...]:
    """LIBERO's tasks of ``suite`` at task order index 0 (LIBERO's ``Benchmark``: the task map's order),
    built as ``benchmark.get_benchmark_dict()[suite](0)`` builds them, without importing it (torch)."""
    if suite in pro_suite_names() or suite in pro_object_suite_names():
        return _pro_suite_tasks(suite)
    if suite in plus_suite_names():  # files of LIBERO-Plus's environment (vlarl setup-sim libero_plus)
        from vlarl_cli.envs.libero_plus.suites import task_infos

        return tuple(task_infos(suite))
    from vlarl_cli.envs.libero.setup import prepare_libero

    paths = prepare_libero(check_assets=False)
    tasks = [TaskInfo(suite=suite, suite_task_id=i, name=name, language=_language(name),
                      bddl_file=paths.bddl_dir / suite / f"{name}.bddl",
                      init_states_file=_base_init_file(paths.init_states_dir / suite / f"{name}.pruned_init"))
             for i, name in enumerate(_task_map()[suite])]
    if len(tasks) != SUITE_SIZES[suite]:
        raise EnvError(
            f"The installed libero package lists {len(tasks)} tasks for {suite}, expected {SUITE_SIZES[suite]}.",
            fix="Reinstall libero==0.1.1 with --no-deps.",
        )
    return tuple(tasks)


def suite_tasks(suite: str) -> tuple[TaskInfo, ...]:
    """All tasks of ``suite`` in LIBERO's order (task order index 0); libero_130 concatenates the five,
    libero_all those and the PRO suites."""
    check_suite(suite)
    if suite in ("libero_130", LIBERO_ALL):
        return tuple(t for s in (SUITE_ORDER if suite == "libero_130" else all_suite_order())
                     for t in _original_suite_tasks(s))
    return _original_suite_tasks(suite)


def get_task(suite: str, task_id: int) -> TaskInfo:
    """Task ``task_id`` of ``suite``; out-of-range ids raise EnvError."""
    n = num_tasks(suite)
    if not 0 <= task_id < n:
        raise EnvError(f"task_id {task_id} is out of range for {suite} ({n} tasks).", fix=f"Use 0..{n - 1}.")
    if suite in ("libero_130", LIBERO_ALL):  # only the suite the id falls in is loaded (PRO's files may be absent)
        for original in SUITE_ORDER if suite == "libero_130" else all_suite_order():
            if task_id < num_tasks(original):
                return _original_suite_tasks(original)[task_id]
            task_id -= num_tasks(original)
    return suite_tasks(suite)[task_id]


class _NumpyOnly(pickle.Unpickler):
    """Unpickles numpy arrays and nothing else (the spirit of ``torch.load(weights_only=True)``)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] == "numpy" or (module, name) == ("_codecs", "encode"):  # encode: protocol-2 bytes
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a numpy array")


@functools.lru_cache(maxsize=256)
def _load_init_states(path: str) -> np.ndarray:
    """LIBERO's own loader (``Benchmark.get_task_init_states``) is ``torch.load(weights_only=False)``; the files
    are numpy arrays pickled by ``torch.save`` (a zip holding ``<name>/data.pkl``), read here without torch (a
    simulator worker in its own environment has none)."""
    if path.endswith(".npz"):  # LIBERO-PRO's files: the same arrays, converted to npz (key ``states``)
        with np.load(path, allow_pickle=False) as archive:
            states = np.array(archive["states"])
        states.setflags(write=False)
        return states
    try:
        with zipfile.ZipFile(path) as archive:
            data = archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))
    except (zipfile.BadZipFile, StopIteration):
        raise EnvError(f"{path} is not an init-state file as LIBERO 0.1.1 ships them (a torch.save zip).",
                       fix="Reinstall libero==0.1.1 with --no-deps; its init_files are corrupted.") from None
    states = np.asarray(_NumpyOnly(io.BytesIO(data)).load())
    states.setflags(write=False)
    return states


def num_init_states(suite: str, task_id: int) -> int:
    """How many init states a task has: 50 (LIBERO, LIBERO-PRO, LIBERO-Plus but its layout tasks), or 1
    (LIBERO-Plus's layout tasks, under ``init_files/libero_newobj``)."""
    return 1 if get_task(suite, task_id).init_states_file.parent.parent.name == "libero_newobj" else TRIALS_PER_TASK


def init_states(suite: str, task_id: int) -> np.ndarray:
    """The fixed init states of a task: ``[50, D]`` float64 (D = flattened MuJoCo state, varies by scene)."""
    task = get_task(suite, task_id)
    states = _load_init_states(str(task.init_states_file))
    expected = num_init_states(suite, task_id)
    if expected == 1:  # LIBERO-Plus's layout tasks: one state,
        states = states.reshape(1, -1)  # reshaped (1, -1) as its get_task_init_states does
    if states.ndim != 2 or states.shape[0] != expected:
        raise EnvError(
            f"Init states of {task.suite}/{task.name} have shape {states.shape}, expected [{expected}, D].",
            fix="Reinstall libero==0.1.1 with --no-deps; its init_files are corrupted.",
        )
    return states


def address(suite: str, reset_state_id: int) -> EpisodeAddress:
    """Flat reset-state id -> (suite, task_id, trial_id)."""
    total = num_tasks(suite) * TRIALS_PER_TASK
    if not 0 <= reset_state_id < total:
        raise EnvError(
            f"reset_state_id {reset_state_id} is out of range for {suite} ({total} init states).",
            fix=f"Use 0..{total - 1}.",
        )
    return EpisodeAddress(suite, reset_state_id // TRIALS_PER_TASK, reset_state_id % TRIALS_PER_TASK)


def reset_state_id(suite: str, task_id: int, trial_id: int) -> int:
    """(suite, task_id, trial_id) -> flat reset-state id ``task_id * 50 + trial_id`` (range-checked)."""
    if not 0 <= trial_id < TRIALS_PER_TASK:
        raise EnvError(f"trial_id {trial_id} is out of range.", fix=f"Use 0..{TRIALS_PER_TASK - 1}.")
    n = num_tasks(suite)
    if not 0 <= task_id < n:
        raise EnvError(f"task_id {task_id} is out of range for {suite} ({n} tasks).", fix=f"Use 0..{n - 1}.")
    return task_id * TRIALS_PER_TASK + trial_id
