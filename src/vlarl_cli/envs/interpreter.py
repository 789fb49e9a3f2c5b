"""The Python interpreter a simulator's workers run in (``env.<split>.python``): this one (the default), a
path to another environment's ``bin/python``, or a name made by ``vlarl setup-sim NAME``
(``$VLARL_CACHE/sims/NAME/bin/python``).

The other interpreter sees vlarl through a folder that holds only a link to the ``vlarl_cli`` package (never
the trainer's site-packages), so its workers import numpy, the simulator and vlarl's worker modules from
their own environment; nothing of torch or model code. Before a worker is spawned the interpreter is probed
(:func:`check`): missing, lacking the simulator, another numpy ABI (observations and results cross the pipe
as numpy pickles) or dying at import is one paragraph naming the environment and the command that fixes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlarl_cli.errors import EnvError

PROBE_TIMEOUT_S = 120.0

_PROBE = """
import importlib, importlib.util, json, sys
out = {"python": sys.version.split()[0], "missing": [], "failed": None}
import numpy
out["numpy"] = numpy.__version__
for name in sys.argv[1].split(",") if sys.argv[1] else []:
    if importlib.util.find_spec(name) is None:
        out["missing"].append(name)
if not out["missing"]:
    for name in sys.argv[2].split(",") if sys.argv[2] else []:
        try:
            importlib.import_module(name)
        except Exception as err:
            out["failed"] = f"import {name}: {type(err).__name__}: {err}"
            break
out["torch"] = "torch" in sys.modules
print("VLARL-PROBE " + json.dumps(out))
"""


def sims_dir() -> Path:
    """Where ``vlarl setup-sim NAME`` builds named environments: ``$VLARL_CACHE/sims`` (``~/.cache/vlarl``)."""
    env = os.environ.get("VLARL_CACHE")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "vlarl") / "sims"


def resolve(python: str) -> Path:
    """A path (anything with a ``/``) as given; a bare name: the environment ``vlarl setup-sim NAME`` made."""
    if "/" in python or python.startswith("."):
        return Path(python).expanduser()
    return sims_dir() / python / "bin" / "python"


def vlarl_path() -> Path:
    """A folder holding only a link to this ``vlarl_cli`` package: the other interpreter's ``PYTHONPATH``."""
    package = Path(__file__).resolve().parents[1]
    folder = sims_dir() / ".vlarl-path" / hashlib.sha256(str(package).encode()).hexdigest()[:12]
    link = folder / "vlarl_cli"
    if not link.is_symlink() or link.resolve() != package:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".vlarl_cli.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(package, target_is_directory=True)
        os.replace(tmp, link)  # atomic: a concurrent rank sees the old link or the new one
    return folder


def child_env() -> dict[str, str]:
    """The other interpreter's environment: ours (MUJOCO_GL, LIBERO's config ...) with vlarl on its path only."""
    return {**os.environ, "PYTHONPATH": str(vlarl_path()), "PYTHONNOUSERSITE": "1"}


@dataclass(frozen=True)
class Probe:
    python: str
    numpy: str
    torch: bool


def _fix(simulator: str, key: str) -> str:
    return (f"Build it with `vlarl setup-sim {simulator}` and set {key}={simulator}, or set {key}=null to run "
            "the simulator in this interpreter.")


def check(python: str, simulator: str, split: str, *, packages: tuple[str, ...] = (),
          modules: tuple[str, ...] = ()) -> Probe:
    """Probe ``python`` for ``simulator``'s workers (``packages`` found, ``modules`` imported); an
    :class:`EnvError` naming the environment and the fix when it cannot host them. ``split``: ``train`` /
    ``eval``, or the full config key that named the interpreter."""
    from vlarl_cli.envs import registry

    table = registry.simulators()
    if simulator in table and table[simulator].prepare is not None:
        registry.load(str(table[simulator].prepare))()
    exe = resolve(python)
    key = split if "." in split else f"env.{split}.python"
    where = f"{key} {python}" + (f" ({exe})" if str(exe) != python else "")
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise EnvError(f"{where} does not exist: the {simulator} workers have no interpreter to run in.",
                       fix=_fix(simulator, key))
    try:
        done = subprocess.run([str(exe), "-c", _PROBE, ",".join(packages), ",".join(modules)], env=child_env(),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EnvError(f"{where} did not answer within {PROBE_TIMEOUT_S:.0f} s when asked to import the {simulator} "
                       "worker modules.", fix=_fix(simulator, key)) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("VLARL-PROBE ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EnvError(f"{where} dies when it starts the {simulator} workers (exit code {done.returncode}): {tail}",
                       fix=_fix(simulator, key))
    out = json.loads(lines[-1].removeprefix("VLARL-PROBE "))
    if out["missing"] or out["failed"]:
        lacks = f"lacks {', '.join(out['missing'])}" if out["missing"] else f"cannot import the simulator ({out['failed']})"
        raise EnvError(f"{where} {lacks}: it cannot host the {simulator} workers.", fix=_fix(simulator, key))
    ours = _numpy_version()
    if out["numpy"].split(".")[0] != ours.split(".")[0]:
        raise EnvError(f"{where} has numpy {out['numpy']} and this interpreter numpy {ours}: their arrays do not "
                       "cross between the two (another numpy ABI).", fix=_fix(simulator, key))
    return Probe(python=out["python"], numpy=out["numpy"], torch=bool(out["torch"]))


def _numpy_version() -> str:
    import numpy

    return str(numpy.__version__)


def pinned(requirements: tuple[str, ...]) -> list[str]:
    """``name==<this interpreter's version>`` for each requirement installed here (the worker then computes
    what the in-process worker computes), the bare name otherwise."""
    from importlib import metadata

    out = []
    for name in requirements:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(name)
    return out


def finished(name: str) -> bool:
    """``vlarl setup-sim NAME`` completed (its stamp is written last)."""
    return (sims_dir() / name / STAMP).is_file()


STAMP = ".vlarl-setup-sim"


def build(name: str, *, base: str | None = None, log: Any = print) -> Path:
    """``vlarl setup-sim NAME``: a virtual environment holding only what simulator ``name``'s workers import
    (pinned to this interpreter's versions, from the configured package index; no torch), finished by the
    simulator's ``setup`` step and probed. Idempotent: a finished environment is only probed again."""
    from vlarl_cli.envs import registry

    sim = registry.get(name)
    if not sim.requirements:
        able = [s.name for s in registry.simulators().values() if s.requirements]
        raise EnvError(f"{name} has no environment of its own to build (its envs step inside the trainer's process).",
                       fix=f"Build one of: {', '.join(able)}.")
    root = sims_dir() / name
    python, stamp = root / "bin" / "python", root / STAMP
    want = json.dumps({"requirements": pinned(sim.requirements), "no_deps": pinned(sim.requirements_no_deps)})
    if not (stamp.is_file() and stamp.read_text() == want):
        if sim.setup_check is not None:  # what the setup step needs from outside the index, before installing
            registry.load(sim.setup_check)()
        stamp.unlink(missing_ok=True)  # written last: an interrupted build is never taken for a finished one
        _install(root, python, base or str(getattr(sys, "_base_executable", sys.executable)), json.loads(want), log)
        if sim.setup is not None:
            log(registry.load(sim.setup)(python))
        _link_identical(root, log)
        stamp.write_text(want)
    probe = check(name, name, "train", packages=sim.packages, modules=sim.modules)
    log(f"{name} environment ready: {python} (python {probe.python}, numpy {probe.numpy}, torch imported: "
        f"{'yes' if probe.torch else 'no'}). Use it with env.train.python={name} env.eval.python={name}.")
    return python


def _install(root: Path, python: Path, base: str, pins: dict[str, list[str]], log: Any) -> None:
    log(f"building {root} with {base}")
    steps = [[base, "-m", "venv", "--clear", str(root)],
             [str(python), "-m", "pip", "install", "--quiet", *pins["requirements"]],
             [str(python), "-m", "pip", "install", "--quiet", "--no-deps", *pins["no_deps"]]]
    for cmd in steps:
        if not cmd[-1] or cmd[-1] == "--no-deps":
            continue
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise EnvError(f"building {root} failed at: {' '.join(cmd)} (exit code {done.returncode}).",
                           fix="Read pip's message above (a package the index does not have?), then run "
                               "`vlarl setup-sim` again: it starts over.")


def _link_identical(root: Path, log: Any) -> None:
    """Hard-link files identical to this environment's (scripts/link_identical.py, where the checkout has it)."""
    script = Path(__file__).resolve().parents[3] / "scripts" / "link_identical.py"
    if not script.is_file():
        log(f"not hard-linking identical files: {script} is not here (an installed vlarl has no scripts/)")
        return
    done = subprocess.run([sys.executable, str(script), sys.prefix, str(root)], capture_output=True, text=True)
    log(f"hard links: {done.stdout.strip() or done.stderr.strip()}")
