"""LIBERO-Plus's tasks, perturbation categories and evaluation protocol as data.

Sources (facts only; details in ``docs/benchmarks/libero_pro_plus.md``), sylvestf/LIBERO-plus at commit
4976dc3:

* ``libero/libero/benchmark/task_classification.json``: 10,030 tasks (spatial 2,402, object 2,518, goal
  2,591, 10 2,519), each with a 1-based ``id`` = its position + 1 in ``libero_suite_task_map.py`` (checked
  for all 10,030), a category among seven and a difficulty level 1-5 (121 goal tasks have none). Compacted
  into ``tasks.tsv.gz`` by ``scripts/maintainers/robustness_catalogs.py``.
* The README's protocol: LIBERO's evaluation with ``num_trials_per_task = 1``, so one episode per task from
  init state 0 of the task's init-state file; the leaderboard reports one column per category and a Total
  that is the episode-weighted success over all 10,030 (OpenVLA-OFT's row: 69.6 = weighted, 71.4 would be the
  plain mean of its columns).
* The task name encodes the perturbation (``libero/libero/envs/env_wrapper.py``, ``benchmark/__init__.py``):
  ``<task>_view_<h>_<v>_<scale%>_<rot>_<vert>_initstate_<i>[_noise_<n>]`` moves the agent-view camera,
  replaces the robot by ``MountedPanda<i>`` (another initial joint pose) when ``i != 0`` and blurs / fogs
  the agent-view image (not the wrist image) with corruption ``n`` (1-10 motion, 11-20 gaussian, 21-30 zoom,
  31-40 fog, 41-50 glass blur); ``_language_<n>`` is a rewritten instruction in its own bddl; ``_table_<n>`` /
  ``_tb_<n>`` a scene with other table / wall textures and ``_light_<n>`` other lights (scene XMLs under
  ``assets/scenes``); ``_add_<n>`` / ``_level<k>_sample<j>`` add or move objects (``assets/new_objects``,
  init states under ``init_files/libero_newobj``).
* The instruction: ``task.language`` as LIBERO-Plus's ``benchmark`` builds it: the bddl's ``(:language ...)``
  for ``_language_`` tasks, otherwise the task NAME with ``_`` -> space, suffix included (``... on the plate
  table 1``, ``... view 0 0 100 0 0 initstate 0``). That suffix reaching the prompt is what the README's
  protocol does; :func:`PlusTask.prompt` returns it, :attr:`PlusTask.clean_instruction` the name without it.
"""

from __future__ import annotations

import functools
import gzip
import re
from dataclasses import dataclass
from pathlib import Path

from vlarl_cli.envs.robustness import Category, language_from_name, select_categories, unknown_split
from vlarl_cli.errors import EnvError

BENCHMARK = "LIBERO-Plus"
CATALOG_PATH = Path(__file__).with_name("tasks.tsv.gz")
BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
TRIALS_PER_TASK = 1
TOTAL_TASKS = 10_030

#: Categories in the leaderboard's column order, keyed by the title task_classification.json uses.
CATEGORIES: tuple[Category, ...] = (
    Category("camera", "Camera Viewpoints", "agent-view camera position, orientation and field of view",
             ("images",)),
    Category("robot", "Robot Initial States", "the robot's initial joint pose (MountedPanda<i>)",
             ("state", "images")),
    Category("language", "Language Instructions", "the instruction rewritten by an LLM", ("language",)),
    Category("light", "Light Conditions", "light intensity, direction, colour and shadows", ("images",)),
    Category("background", "Background Textures", "table and wall textures", ("images",)),
    Category("noise", "Sensor Noise", "blur / fog / glass corruption of the agent-view image", ("images",)),
    Category("layout", "Objects Layout", "confounding objects added, target objects displaced",
             ("state", "images")),
)
_BY_TITLE = {c.title: c for c in CATEGORIES}

#: Categories whose scenes or objects come from LIBERO-Plus's assets.zip (assets/scenes, assets/new_objects).
NEEDS_EXTRA_ASSETS = frozenset({"light", "background", "layout"})

#: Step limits: LIBERO's OpenVLA limits of the base suite (the README: "identical to LIBERO").
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520}

_VIEW = re.compile(r"_view_(-?\d+)_(-?\d+)_(\d+)_(-?\d+)_(-?\d+)_initstate_(\d+)(?:_noise_(\d+))?$")


@dataclass(frozen=True)
class PlusTask:
    """One LIBERO-Plus task (one episode under the official protocol).

    Attributes:
        suite: base suite (``libero_goal``).
        task_id: 0-based position in LIBERO-Plus's task map (``get_task(task_id)``); ``id - 1`` of the json.
        name: task name (bddl stem for bddl-defined perturbations).
        category: :class:`~vlarl_cli.envs.robustness.Category` key.
        difficulty: level 1-5, None where the json has none.
    """

    suite: str
    task_id: int
    name: str
    category: str
    difficulty: int | None

    @property
    def camera(self) -> tuple[int, int, float, int, int] | None:
        """(horizontal, vertical, scale, end-point rotation, end-point vertical) of a ``_view_`` task."""
        m = _VIEW.search(self.name)
        if not m:
            return None
        return int(m[1]), int(m[2]), int(m[3]) / 100, int(m[4]), int(m[5])

    @property
    def robot_init(self) -> int:
        """``i`` of ``MountedPanda<i>`` (0 = LIBERO's own robot)."""
        m = _VIEW.search(self.name)
        return int(m[6]) if m else 0

    @property
    def noise(self) -> int:
        """Image corruption level 1-50 of the agent view, 0 for none."""
        m = _VIEW.search(self.name)
        return int(m[7]) if m and m[7] else 0

    @property
    def bddl_stem(self) -> str:
        """The bddl file the task builds its scene from (``_view_...`` tasks reuse another task's)."""
        return self.name.split("_view_")[0]

    def prompt(self) -> str:
        """The instruction under the official protocol, for tasks that are not ``_language_`` ones (those read
        their bddl's ``(:language ...)``, available only with LIBERO-Plus's files)."""
        if "_language_" in self.name:
            raise EnvError(f"{self.name} takes its instruction from its bddl file.",
                           fix="Read it with LIBERO-Plus's own benchmark (task.language).")
        return language_from_name(self.name)

    @property
    def clean_instruction(self) -> str:
        """The task name without LIBERO-Plus's perturbation suffix, ``_`` -> space."""
        return language_from_name(re.split(r"_(?:view|table|tb|light|add|language|moved)_", self.bddl_stem)[0])

    @property
    def max_steps(self) -> int:
        return MAX_STEPS[self.suite]


@functools.cache
def plus_tasks() -> tuple[PlusTask, ...]:
    """All 10,030 tasks, suite by suite in :data:`BASE_SUITES` order, each in task-map order."""
    rows = gzip.decompress(CATALOG_PATH.read_bytes()).decode().splitlines()[1:]
    out = []
    for row in rows:
        suite, ident, name, title, level = row.split("\t")
        out.append(PlusTask(suite, int(ident) - 1, name, _BY_TITLE[title].key, int(level) if level else None))
    return tuple(out)


def split_names() -> tuple[str, ...]:
    """``libero_plus`` (all 10,030 tasks) and ``libero_plus_<base>`` (one base suite's tasks)."""
    return ("libero_plus", *(f"libero_plus_{b.removeprefix('libero_')}" for b in BASE_SUITES))


def is_plus_split(name: str) -> bool:
    return name in split_names()


def resolve(split: str, categories: list[str] | None = None) -> list[PlusTask]:
    """The tasks of ``split`` in the given categories (keys; None = all), in task-map order."""
    if split not in split_names():
        raise unknown_split(BENCHMARK, split, split_names())
    keys = {c.key for c in select_categories(BENCHMARK, CATEGORIES, categories)}
    base = None if split == "libero_plus" else "libero_" + split.removeprefix("libero_plus_")
    return [t for t in plus_tasks() if t.category in keys and (base is None or t.suite == base)]


def unavailable(split: str, categories: list[str] | None = None) -> EnvError:
    """RLinf's ``libero_variant: plus`` (the base suite's tasks and init states, one bddl of a marker category
    swapped in per env, the base instruction; docs/benchmarks/libero_pro_plus.md) is not LIBERO-Plus's protocol,
    and vlarl does not imitate it: the error names the suites vlarl runs instead, after checking ``split``."""
    from vlarl_cli.envs.libero_plus.assets import download_command

    tasks = resolve(split, categories)
    chosen = sorted({t.category for t in tasks})
    return EnvError(
        f"libero_variant plus is RLinf's mix of LIBERO-Plus files into the base suite ({split}: {len(tasks)} "
        f"LIBERO-Plus tasks, categories {', '.join(chosen)}); vlarl runs LIBERO-Plus's own tasks instead, one "
        "suite per base suite and category, in LIBERO-Plus's own environment.",
        fix="Build it with `vlarl setup-sim libero_plus`, then set env_type: libero_plus and task_suite_name: "
            "libero_plus_<spatial|object|goal|10>_<camera|robot|language|noise> (light, background and layout once "
            f"`{download_command()}` installed its assets.zip; vlarl eval --suite libero_plus evaluates them all).")
