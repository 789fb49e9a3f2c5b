"""LIBERO-Plus tasks as LIBERO suites of vlarl's LIBERO worker, run in LIBERO-Plus's own environment.

A suite is one base suite under one category, ``libero_plus_<spatial|object|goal|10>_<category>`` (28 names;
:data:`RUNNABLE` categories run with LIBERO's own assets; light / background / layout need LIBERO-Plus's
assets.zip and are refused naming the download until ``vlarl download`` installed it). Its tasks are the
catalog's (``catalog.resolve``) in task-map order. A task builds from its bddl file name as LIBERO-Plus's
``ControlEnv`` reads it: ``<task>_view_<h>_<v>_<scale%>_<rot>_<vert>_initstate_<i>[_noise_<n>]`` (the camera
pose, the robot class ``MountedPanda<i>`` and the agent-view corruption are decoded there, in the worker), the
scene from ``<task>.bddl``; its init states are the file LIBERO-Plus's ``get_task_init_states`` reads
(:func:`init_states_file`: the base task's ``.pruned_init`` for all but the layout tasks), of which the
protocol plays state 0, one episode per task. The instruction is LIBERO-Plus's ``task.language``: the bddl's
``(:language ...)`` for ``_language_`` tasks, else the task name with ``_`` -> space, suffix included.

Files come from the built environment (``install.source_root``); the worker runs LIBERO-Plus's ``libero``
(``env.<split>.python: libero_plus``), never vlarl's LIBERO 0.1.1, whose ``ControlEnv`` reads no suffix.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from vlarl_cli.envs.libero_plus import assets, catalog
from vlarl_cli.envs.robustness import language_from_name, select_categories
from vlarl_cli.errors import EnvError, did_you_mean

PREFIX = "libero_plus_"
#: categories that build from LIBERO-Plus's repository files and LIBERO's own assets; the other three run once
#: ``vlarl download`` installed LIBERO-Plus's assets.zip (``assets.py``, :func:`runnable_categories`)
RUNNABLE = ("camera", "robot", "language", "noise")
PYTHON = "libero_plus"


def suite_name(base: str, category: str) -> str:
    return f"{PREFIX}{base.removeprefix('libero_')}_{category}"


@functools.cache
def all_suite_names() -> dict[str, tuple[str, str]]:
    """Every suite name -> (base suite, category key), base-major in the leaderboard's category order."""
    return {suite_name(b, c.key): (b, c.key) for b in catalog.BASE_SUITES for c in catalog.CATEGORIES}


def runnable_suite_names() -> tuple[str, ...]:
    usable = runnable_categories()
    return tuple(n for n, (_, c) in all_suite_names().items() if c in usable)


def is_plus_suite(name: str) -> bool:
    return name in all_suite_names()


def base_suite(name: str) -> str:
    return all_suite_names()[name][0]


def check_runnable(name: str) -> str:
    """``name`` if it runs here; an :class:`EnvError` naming what it lacks otherwise (the light / background /
    layout suites: LIBERO-Plus's assets.zip installed by ``vlarl download``, ``install.assets_unusable``)."""
    if name not in all_suite_names():
        known = runnable_suite_names()
        raise EnvError(f'Unknown LIBERO-Plus suite "{name}".{did_you_mean(name, known)}',
                       fix=f"Use one of {', '.join(known)}.")
    category = all_suite_names()[name][1]
    why = None if category in RUNNABLE else asset_categories_unusable()
    if why is not None:
        raise EnvError(
            f"{name}: LIBERO-Plus's {category} tasks build scenes or objects from its assets.zip (assets/scenes, "
            f"assets/new_objects, textures; hub dataset {assets.REPO}), and {why}.",
            fix=f"Run `{assets.download_command()}` (it verifies the archive and unpacks it where LIBERO-Plus "
                f"reads it), or run only the categories {', '.join(RUNNABLE)}.")
    return name


def asset_categories_unusable() -> str | None:
    """Why light / background / layout cannot run here, None when they can."""
    from vlarl_cli.envs.libero_plus.install import assets_unusable

    return assets_unusable()


def runnable_categories() -> tuple[str, ...]:
    """The category keys that run here, in the leaderboard's order: all seven with assets.zip installed."""
    usable = asset_categories_unusable() is None
    return tuple(c.key for c in catalog.CATEGORIES if c.key in RUNNABLE or usable)


def left_out(categories: tuple[str, ...] | None) -> str | None:
    """``vlarl eval --suite libero_plus`` without ``--categories``: the categories left out here and why (None:
    none left out, or categories chosen explicitly)."""
    if categories:
        return None
    why = asset_categories_unusable()
    if why is None:
        return None
    skipped = [c.key for c in catalog.CATEGORIES if c.key not in RUNNABLE]
    return (f"LIBERO-Plus's {', '.join(skipped)} categories are left out: {why}; "
            f"`{assets.download_command()}` installs LIBERO-Plus's assets.zip")


@functools.cache
def tasks(name: str) -> tuple[catalog.PlusTask, ...]:
    base, category = all_suite_names()[check_runnable(name)]
    return tuple(catalog.resolve(f"{PREFIX}{base.removeprefix('libero_')}", [category]))


def num_tasks(name: str) -> int:
    return len(tasks(name))


def files(task: catalog.PlusTask, root: Path) -> tuple[Path, Path]:
    """(bddl file name as ControlEnv reads it, the init-state file LIBERO-Plus's ``get_task_init_states``
    reads) under ``root``."""
    return root / "bddl_files" / task.suite / f"{task.name}.bddl", init_states_file(task, root)


def init_states_file(task: catalog.PlusTask, root: Path) -> Path:
    """LIBERO-Plus's ``Benchmark.get_task_init_states`` (benchmark/__init__.py), branch for branch: ``_language_``
    and ``_view_`` tasks read the base task's file; otherwise the ``_table_<n>`` / ``_tb_<n>`` / ``_light_``
    rules apply in that order (a later one wins, as there); ``_add_`` / ``_level`` tasks read their own file
    under ``init_files/libero_newobj`` (one state, reshaped to ``[1, D]`` there)."""
    name = f"{task.name}.pruned_init"
    folder = root / "init_files" / task.suite
    for marker in ("_language_", "_view_"):
        if marker in name:
            return folder / f"{name.split(marker)[0]}.pruned_init"
    path = None
    if "_table_" in name:
        path = folder / re.sub(r"_table_\d+", "", name)
    if "_tb_" in name:
        path = folder / re.sub(r"_tb_\d+", "", name)
    if "_light_" in name:
        path = folder / f"{name.split('_light_')[0]}.pruned_init"
    if "_add_" in name or "_level" in name:
        path = root / "init_files" / "libero_newobj" / task.suite / name
    if path is None:
        raise EnvError(f"{task.name}: LIBERO-Plus's get_task_init_states has no rule for this name.",
                       fix="Report it; the task catalog and LIBERO-Plus's code disagree.")
    return path


def instruction(task: catalog.PlusTask, root: Path) -> str:
    """LIBERO-Plus's ``task.language``: the bddl's ``(:language ...)`` (lower-cased, as LIBERO's parser returns
    it) for ``_language_`` tasks, the name with ``_`` -> space otherwise."""
    if "_language_" not in task.name:
        return language_from_name(task.name)
    bddl = root / "bddl_files" / task.suite / f"{task.name.split('_view_')[0]}.bddl"
    found = re.search(r"\(:language\s+(.*?)\)", bddl.read_text(), flags=re.S)
    if not found:
        raise EnvError(f"{bddl} has no (:language ...).", fix="Rebuild with `vlarl setup-sim libero_plus`.")
    return " ".join(found.group(1).lower().split())


@functools.cache
def task_infos(name: str) -> tuple[Any, ...]:
    """The suite's tasks as ``envs.libero.suites.TaskInfo`` (the LIBERO worker's task record)."""
    from vlarl_cli.envs.libero.suites import TaskInfo
    from vlarl_cli.envs.libero_plus.install import source_root

    root = source_root()
    out = []
    for i, task in enumerate(tasks(name)):
        bddl, init = files(task, root)
        out.append(TaskInfo(suite=name, suite_task_id=i, name=task.name, language=instruction(task, root),
                            bddl_file=bddl, init_states_file=init))
    return tuple(out)


def check_python(split: Any) -> None:
    """A LIBERO-Plus suite runs only in LIBERO-Plus's interpreter (``ValueError`` for the schema)."""
    from vlarl_cli.envs.libero.make import suite_of

    suite = suite_of(split)
    if not is_plus_suite(suite):
        return
    try:
        check_runnable(suite)
    except EnvError as err:
        raise ValueError(str(err)) from None
    if all_suite_names()[suite][1] == "layout":
        raise ValueError(f"{suite}: LIBERO-Plus's layout tasks have one init state each (init_files/libero_newobj), "
                         "and an env split draws from 50 per task; evaluate them with `vlarl eval --suite "
                         f"libero_plus_{base_suite(suite).removeprefix('libero_')} --categories layout` (state 0, "
                         "the protocol) instead")
    if split.python is None:
        raise ValueError(f"{suite} runs only in LIBERO-Plus's own environment (its libero package reads the "
                         "perturbation from the task name); build it with `vlarl setup-sim libero_plus` and set "
                         "python: libero_plus (or env_type: libero_plus)")


def _with_python(split: Any) -> Any:
    return split if split.python is not None else split.model_copy(update={"python": PYTHON})


def make_env(split: Any, request: Any) -> Any:
    """``env_type: libero_plus``: LIBERO's vector env in LIBERO-Plus's environment (python defaults to it)."""
    from vlarl_cli.envs.libero.make import make_env as libero_make_env

    return libero_make_env(_with_python(split), request)


def check_split(split: Any) -> None:
    """``env_type: libero_plus``: a LIBERO-Plus suite, the environment built, then LIBERO's checks."""
    from vlarl_cli.envs.interpreter import resolve
    from vlarl_cli.envs.libero.make import check_split as libero_check_split
    from vlarl_cli.envs.libero.make import suite_of

    if not is_plus_suite(suite_of(split)):
        raise ValueError(f'env_type libero_plus runs LIBERO-Plus suites; "{suite_of(split)}" is not one '
                         f"(known: {', '.join(runnable_suite_names())})")
    split = _with_python(split)
    if not resolve(split.python).is_file():
        raise ValueError(f"python {split.python}: {resolve(split.python)} does not exist; build LIBERO-Plus's "
                         "environment with `vlarl setup-sim libero_plus`")
    libero_check_split(split)


def expand(split: str, categories: tuple[str, ...] | None) -> tuple[str, ...]:
    """``vlarl eval --suite``: a LIBERO-Plus split (``libero_plus``, ``libero_plus_<base>``) -> its suites in the
    chosen categories (None: the runnable ones; a category that needs assets.zip is refused naming it), or one
    suite name -> itself."""
    if is_plus_suite(split):
        return (check_runnable(split),)
    keys = [c.key for c in select_categories(catalog.BENCHMARK, catalog.CATEGORIES, categories)] \
        if categories else list(runnable_categories())
    catalog.resolve(split, keys)  # the split's name checked
    bases = catalog.BASE_SUITES if split == "libero_plus" else ("libero_" + split.removeprefix(PREFIX),)
    return tuple(check_runnable(suite_name(b, k)) for b in bases for k in keys)


def card(suite_names: list[str]) -> dict[str, Any]:
    """The protocol card's ``libero_plus`` part for the LIBERO-Plus suites among ``suite_names`` (empty if none):
    the environment's provenance, init states, instruction and what each category perturbs."""
    import json

    from vlarl_cli.envs.interpreter import pinned
    from vlarl_cli.envs.libero_plus.install import PROVENANCE, env_root
    from vlarl_cli.envs.libero_plus.simulator import REQUIREMENTS

    ours = [s for s in suite_names if is_plus_suite(s)]
    if not ours:
        return {}
    record = env_root() / PROVENANCE
    by_key = {c.key: c for c in catalog.CATEGORIES}
    return {"libero_plus": {
        "environment": json.loads(record.read_text()) if record.is_file() else None,
        "simulator": [r for r in pinned(REQUIREMENTS) if r.split("==")[0] in ("mujoco", "robosuite", "wand")],
        "init_states": "the file LIBERO-Plus's get_task_init_states reads (the base task's .pruned_init; layout "
                       "tasks: init_files/libero_newobj, one state); the README's protocol plays init state 0 "
                       "(one trial per task)",
        "assets": _assets_card(),
        "instruction": "LIBERO-Plus's task.language: the bddl's (:language) for _language_ tasks, else the task "
                       "name with _ -> space, suffix included",
        "categories": {s: f"{by_key[all_suite_names()[s][1]].title}: {by_key[all_suite_names()[s][1]].changes}"
                       for s in ours},
    }}


def _assets_card() -> str:
    """The card's word on the asset tree: assets.zip's (its sha256) or why light / background / layout cannot run."""
    why = asset_categories_unusable()
    installed = assets.installed()
    if why is None and installed is not None:
        return f"LIBERO-Plus's assets.zip, sha256 {installed.sha256} ({installed.folder})"
    return f"LIBERO's own; light, background and layout cannot run here: {why}"
