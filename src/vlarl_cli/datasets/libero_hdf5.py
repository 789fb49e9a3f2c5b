"""LIBERO's own HDF5 demonstrations (``<task>_demo.hdf5``) as demonstration episodes.

Layout (LIBERO ``scripts/create_dataset.py``): group ``data`` with attribute ``problem_info`` (JSON holding
``language_instruction``) and one group ``demo_<i>`` per demonstration: ``actions [T, 7]`` (LIBERO's
convention, gripper -1 open / +1 close) and ``obs/``: ``agentview_rgb`` / ``eye_in_hand_rgb``
``[T, H, W, 3]`` uint8 as rendered (upside down), ``ee_states [T, 6]`` (eef position + axis-angle of the eef
quaternion), ``gripper_states [T, 2]``, ``joint_states [T, 7]``.

Mapped to the policy's conventions (REFERENCE.md section 1, openpi's LIBERO conversion): state = ``ee_states``
+ ``gripper_states`` (8-d), images rotated by 180 degrees (``img[:, ::-1, ::-1]``) as every LIBERO evaluator
and our env do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.errors import VlarlError

__all__ = ["hdf5_files", "read_libero_hdf5"]

_CAMERAS = {keys.MAIN_IMAGES: "agentview_rgb", keys.WRIST_IMAGES: "eye_in_hand_rgb"}


def hdf5_files(path: Path) -> list[Path]:
    """``path`` itself when it is an HDF5 file, else the ``*.hdf5`` files of the folder (sorted)."""
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    return sorted(path.glob("*.hdf5")) if path.is_dir() else []


def _demo_number(name: str) -> int:
    tail = name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 1 << 30


def read_libero_hdf5(path: str | Path) -> list[Any]:
    """Every ``demo_<i>`` of the HDF5 file(s) at ``path`` (a file or a folder of files), in file / demo order."""
    try:
        import h5py
    except ImportError:
        raise VlarlError("Reading LIBERO HDF5 demonstrations needs h5py, which is not installed.",
                         "pip install h5py") from None
    from vlarl_cli.datasets.episodes import Episode

    files = hdf5_files(Path(path))
    if not files:
        raise VlarlError(f"{path} holds no LIBERO .hdf5 demonstration file.", "Point --demos at a *_demo.hdf5 "
                         "file or a folder of them.")
    out = []
    for file in files:
        try:
            with h5py.File(file, "r") as f:
                if "data" not in f:
                    raise VlarlError(f"{file} has no 'data' group; it is not a LIBERO demonstration file.",
                                     "Use the *_demo.hdf5 files of the LIBERO datasets.")
                task = _instruction(f["data"], file)
                for name in sorted(f["data"].keys(), key=_demo_number):
                    out.append(_episode(f["data"][name], task, f"{file}:{name}", Episode))
        except OSError as err:
            raise VlarlError(f"Cannot read {file}: {err}", "Re-download the file.") from None
    return out


def _instruction(data: Any, file: Path) -> str:
    """``data.attrs['problem_info']``'s language_instruction (JSON text, as str or bytes)."""
    fix = "Use the *_demo.hdf5 files of the LIBERO datasets."
    raw = data.attrs.get("problem_info", "{}") if hasattr(data, "attrs") else "{}"
    try:
        problem = json.loads(raw.decode() if isinstance(raw, bytes) else raw) if isinstance(raw, str | bytes) else None
    except (ValueError, UnicodeDecodeError) as err:
        raise VlarlError(f"{file}: data.attrs['problem_info'] is not JSON ({err}).", fix) from None
    task = str(problem.get("language_instruction", "")).strip() if isinstance(problem, dict) else ""
    if not task:
        raise VlarlError(f"{file}: data.attrs['problem_info'] has no language_instruction.", fix)
    return task


def _check_shapes(group: Any, obs: Any, where: str) -> None:
    """T x d actions / ee_states / gripper_states of one length, T x H x W x 3 images: else a named error (numpy's
    AxisError / IndexError deep in the conversion otherwise)."""
    arrays = {"actions": group["actions"], "obs/ee_states": obs["ee_states"], "obs/gripper_states": obs["gripper_states"]}
    shapes = {name: tuple(a.shape) for name, a in arrays.items()}
    lengths = {shape[0] if shape else None for shape in shapes.values()}
    if any(len(shape) != 2 for shape in shapes.values()) or len(lengths) != 1:
        raise VlarlError(f"{where}: {shapes} are not T x d arrays of one length T.",
                         "Use LIBERO's create_dataset.py output, or fix the writer of this file.")
    for theirs in _CAMERAS.values():
        if theirs in obs and (len(obs[theirs].shape) != 4 or obs[theirs].shape[-1] != 3):
            raise VlarlError(f"{where}: obs/{theirs} has shape {tuple(obs[theirs].shape)}, not T x H x W x 3.",
                             "Use LIBERO's create_dataset.py output, or fix the writer of this file.")


def _episode(group: Any, task: str, where: str, episode_cls: Any) -> Any:
    obs = group.get("obs") if hasattr(group, "get") else None
    needed = ["ee_states", "gripper_states"]
    if obs is None or not hasattr(obs, "keys") or "actions" not in group or any(k not in obs for k in needed):
        raise VlarlError(f"{where} lacks actions or obs/{needed}.", "Use LIBERO's create_dataset.py output "
                         "(with proprioception).")
    _check_shapes(group, obs, where)
    images = {ours: np.ascontiguousarray(np.asarray(obs[theirs], dtype=np.uint8)[:, ::-1, ::-1])
              for ours, theirs in _CAMERAS.items() if theirs in obs}
    ep = episode_cls(states=np.concatenate([np.asarray(obs["ee_states"]), np.asarray(obs["gripper_states"])],
                                           axis=1).astype(np.float32),
                     actions=np.asarray(group["actions"], dtype=np.float32), task_description=task, success=True,
                     images=images, meta={"source": "libero_hdf5", "demo": where})
    ep.validate(where)
    return ep
