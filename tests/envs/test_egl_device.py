"""One EGL device per rank: a rank's LIBERO simulators render on its own GPU (MUJOCO_EGL_DEVICE_ID)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlarl_cli.envs.libero.setup import egl_device_id, prepare_libero


def test_the_local_rank_picks_its_gpu() -> None:
    assert egl_device_id({"LOCAL_RANK": "3"}, gpus=8) == "3"
    assert egl_device_id({"LOCAL_RANK": "9"}, gpus=8) == "1"  # more ranks than GPUs: shared round-robin
    # robosuite asserts the id is one of CUDA_VISIBLE_DEVICES; EGL counts every GPU, so the physical id
    assert egl_device_id({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "4,6"}, gpus=8) == "6"


def test_nothing_is_chosen_where_there_is_no_choice_to_make() -> None:
    assert egl_device_id({}, gpus=8) is None  # one process, not launched by torchrun: MuJoCo's default
    assert egl_device_id({"LOCAL_RANK": "1", "MUJOCO_EGL_DEVICE_ID": "0"}, gpus=8) is None  # the user's own
    assert egl_device_id({"LOCAL_RANK": "1"}, gpus=0) is None  # no GPU
    assert egl_device_id({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "GPU-5f2a"}, gpus=1) is None  # UUIDs


def test_prepare_libero_exports_it_for_the_env_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MUJOCO_GL", "egl")  # no probe: the backend is the user's
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    # set, then deleted: monkeypatch then restores the variable's absence after the test (a delenv of an
    # absent variable records nothing, and the 3 exported below leaked into every later LIBERO test)
    monkeypatch.setenv("MUJOCO_EGL_DEVICE_ID", "0")
    monkeypatch.delenv("MUJOCO_EGL_DEVICE_ID")
    prepare_libero(tmp_path, check_assets=False)
    import os

    assert os.environ["MUJOCO_EGL_DEVICE_ID"] == "3"  # spawned workers inherit the environment
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    monkeypatch.delenv("MUJOCO_EGL_DEVICE_ID")
    prepare_libero(tmp_path, check_assets=False)
    assert "MUJOCO_EGL_DEVICE_ID" not in os.environ  # only for EGL
