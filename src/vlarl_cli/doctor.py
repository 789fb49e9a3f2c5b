"""What a bug report needs, gathered in one place (``vlarl doctor``; LeRobot's ``lerobot-info`` habit).

Versions come from the installed distributions' metadata (nothing heavy is imported for them); torch is
imported for its build and the GPUs; each headless GL backend is probed by rendering one tiny frame in a
subprocess (``envs/libero/setup.py``: a failed GL initialisation cannot be undone inside a process); the
LIBERO asset tree is checked against the committed manifest (sizes; ``--hashes`` adds sha256).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata

#: Distributions whose versions decide whether a bug reproduces (install names, in report order).
PACKAGES = ("vlarl", "torch", "transformers", "numpy", "mujoco", "robosuite", "libero", "bddl",
            "huggingface-hub", "safetensors", "hydra-core", "pydantic", "typer", "rich", "tensorboard", "wandb",
            "swanlab")
GL_VARIABLES = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "EGL_DEVICE_ID", "DISPLAY")


@dataclass
class Report:
    """Sections of ``(label, value)`` lines, and the checks that failed (``problems``)."""

    sections: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, section: str, label: str, value: str) -> None:
        self.sections.setdefault(section, []).append((label, value))

    def text(self) -> str:
        """Markdown, ready to paste into an issue."""
        lines = []
        for section, rows in self.sections.items():
            lines.append(f"### {section}")
            lines += [f"- {label}: {value}" for label, value in rows]
            lines.append("")
        lines.append("### Problems")
        lines += [f"- {p}" for p in self.problems] or ["- none"]
        return "\n".join(lines)


def installed_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _system(report: Report) -> None:
    report.add("System", "python", f"{platform.python_version()} ({sys.executable})")
    report.add("System", "platform", platform.platform())
    report.add("System", "cpus", str(os.cpu_count()))


def _packages(report: Report) -> None:
    for name in PACKAGES:
        report.add("Packages", name, installed_version(name))


def _torch(report: Report) -> None:
    import torch
    import torch.distributed as torch_dist

    report.add("torch", "build", f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})")
    # AVX2 and AVX-512 kernels round differently: a CPU run's numbers move in the last bits between machines
    report.add("torch", "CPU kernels", torch.backends.cpu.get_cpu_capability())
    backends = [b for b in ("gloo", "nccl") if getattr(torch_dist, f"is_{b}_available")()]
    report.add("torch", "distributed backends", ", ".join(backends) or "none")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    report.add("torch", "GPUs", str(count))
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        report.add("torch", f"cuda:{index}", f"{props.name}, {props.total_memory / 2**30:.1f} GiB, "
                                              f"capability {props.major}.{props.minor}")


def _rendering(report: Report) -> None:
    from vlarl_cli.envs.libero.setup import _probe_backend

    for name in GL_VARIABLES:
        report.add("Rendering", name, os.environ.get(name, "(unset)"))
    working = []
    for backend in ("egl", "osmesa"):
        error = _probe_backend(backend)
        report.add("Rendering", f"{backend} renders", "yes" if error is None else f"no ({error})")
        if error is None:
            working.append(backend)
    if not working:
        report.problems.append("no headless GL backend renders: apt-get install libegl1 libegl-mesa0 "
                               "libgl1-mesa-dri libgbm1 (EGL) or libosmesa6 (OSMesa)")
    _configured_backend(report, working)


def _configured_backend(report: Report, working: list[str]) -> None:
    """What the simulators will use: the user's ``MUJOCO_GL`` as it is (with ``PYOPENGL_PLATFORM`` untouched),
    rendering one frame; unset, the first backend that rendered above (``choose_mujoco_gl``)."""
    configured = os.environ.get("MUJOCO_GL")
    if not configured:
        report.add("Rendering", "configured backend", f"{working[0]} (MUJOCO_GL unset: the first that renders)"
                   if working else "none (MUJOCO_GL unset and no backend renders)")
        return
    from vlarl_cli.envs.libero.setup import render_one_frame

    error = render_one_frame(dict(os.environ))
    report.add("Rendering", f"configured backend (MUJOCO_GL={configured}) renders",
               "yes" if error is None else f"no ({error})")
    if error is not None:
        hint = f"set MUJOCO_GL={working[0]}, which renders" if working else "install EGL or OSMesa (above)"
        report.problems.append(f"MUJOCO_GL={configured} cannot render a frame ({error}): every simulator would "
                               f"fail. Fix: unset MUJOCO_GL (vlarl then picks a backend that renders) or {hint}.")


def _libero(report: Report, hashes: bool) -> None:
    from vlarl_cli.envs.libero import setup
    from vlarl_cli.errors import VlarlError

    try:
        package_dir = setup.libero_package_dir()
        report.add("LIBERO", "package", str(package_dir))
        count = setup.verify_assets(package_dir / "assets", hashes=hashes)
        report.add("LIBERO", "assets", f"{count} files match the manifest ({'sha256' if hashes else 'sizes'})")
    except VlarlError as err:
        report.add("LIBERO", "assets", "FAILED")
        report.problems.append(f"LIBERO: {err.problem} Fix: {err.fix or 'vlarl setup-libero'}")


def _simulators(report: Report) -> None:
    """Each simulator of the table: where its workers run and whether that interpreter holds it. This
    interpreter lacking one is information (install it, or build its own environment); an environment built
    by ``vlarl setup-sim NAME`` that cannot host it is a problem."""
    import importlib.util

    from vlarl_cli.envs import interpreter, registry
    from vlarl_cli.errors import EnvError, VlarlError

    for sim in registry.simulators().values():
        missing = [p for p in sim.packages if importlib.util.find_spec(p) is None]
        here = "works" if not missing else f"lacks {', '.join(missing)}"
        report.add("Simulators", f"{sim.name} in this interpreter", here)
        own = interpreter.resolve(sim.name)
        if sim.in_workers and own.parent.parent.exists() and not interpreter.finished(sim.name):
            report.add("Simulators", f"{sim.name} in {own.parent.parent}", "FAILED (unfinished)")
            report.problems.append(f"{sim.name}: its environment {own.parent.parent} was not finished. Fix: "
                                   f"vlarl setup-sim {sim.name}")
        elif sim.in_workers and own.exists():
            try:  # what the workers inherit (LIBERO's config); its failure is reported by its own section
                if sim.prepare is not None:
                    registry.load(sim.prepare)()
            except VlarlError as err:
                report.add("Simulators", f"{sim.name} in {own}", f"not probed ({err.problem})")
                continue
            try:
                probe = interpreter.check(sim.name, sim.name, "train", packages=sim.packages, modules=sim.modules)
                report.add("Simulators", f"{sim.name} in {own}", f"works (python {probe.python}, numpy {probe.numpy})")
            except EnvError as err:
                report.add("Simulators", f"{sim.name} in {own}", "FAILED")
                report.problems.append(f"{sim.name}: {err.problem} Fix: {err.fix}")


def collect(*, gl: bool = True, hashes: bool = False) -> Report:
    """Gather the report. ``gl=False`` skips the two render probes (a second or two each)."""
    report = Report()
    _system(report)
    _packages(report)
    _torch(report)
    if gl:
        _rendering(report)
    _libero(report, hashes)
    _simulators(report)
    return report
