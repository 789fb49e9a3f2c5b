"""LIBERO's own HDF5 demonstrations (layout of LIBERO ``scripts/create_dataset.py``), written with h5py here."""

from __future__ import annotations

import json

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from vlarl_cli import keys  # noqa: E402
from vlarl_cli.errors import VlarlError  # noqa: E402


def _write(path, lengths=(4, 6), instruction="put the black bowl on the plate"):
    rng = np.random.default_rng(0)
    demos = []
    with h5py.File(path, "w") as f:
        grp = f.create_group("data")
        grp.attrs["problem_info"] = json.dumps({"problem_name": "libero_tabletop_manipulation",
                                                "language_instruction": instruction})
        # demo_10 before demo_2 in name order: demos are read in numeric order
        for i, n in zip((2, 10), lengths, strict=True):
            d = {"actions": rng.uniform(-1, 1, (n, 7)), "ee_states": rng.normal(size=(n, 6)),
                 "gripper_states": rng.normal(size=(n, 2)), "joint_states": rng.normal(size=(n, 7)),
                 "agentview_rgb": rng.integers(0, 255, (n, 8, 8, 3), dtype=np.uint8),
                 "eye_in_hand_rgb": rng.integers(0, 255, (n, 8, 8, 3), dtype=np.uint8)}
            g = grp.create_group(f"demo_{i}")
            g.create_dataset("actions", data=d["actions"])
            obs = g.create_group("obs")
            for k in ("ee_states", "gripper_states", "joint_states", "agentview_rgb", "eye_in_hand_rgb"):
                obs.create_dataset(k, data=d[k])
            demos.append(d)
    return demos


def test_libero_hdf5_demos_map_to_the_env_conventions(tmp_path):
    from vlarl_cli.datasets import load_demonstrations

    demos = _write(tmp_path / "task_demo.hdf5")
    episodes, fmt = load_demonstrations(tmp_path)  # a folder of .hdf5 files
    assert fmt == "libero_hdf5" and [len(e) for e in episodes] == [4, 6]
    for d, e in zip(demos, episodes, strict=True):
        assert e.task_description == "put the black bowl on the plate"
        np.testing.assert_array_equal(e.actions, d["actions"].astype(np.float32))
        # state = eef pos + axis-angle (ee_states) + gripper qpos: the 8-d policy state
        np.testing.assert_array_equal(e.states, np.concatenate([d["ee_states"], d["gripper_states"]], 1).astype(np.float32))
        # images as the env returns them: rotated 180 degrees
        np.testing.assert_array_equal(e.images[keys.MAIN_IMAGES], d["agentview_rgb"][:, ::-1, ::-1])
        np.testing.assert_array_equal(e.images[keys.WRIST_IMAGES], d["eye_in_hand_rgb"][:, ::-1, ::-1])


def test_libero_hdf5_errors(tmp_path):
    from vlarl_cli.datasets import load_demonstrations

    _write(tmp_path / "a.hdf5", instruction="")
    with pytest.raises(VlarlError, match="language_instruction"):
        load_demonstrations(tmp_path / "a.hdf5")
    with pytest.raises(VlarlError, match="name LeRobot columns"):
        load_demonstrations(tmp_path / "a.hdf5", state_key="x")
