"""Demonstration datasets for ``vlarl sft``: one entry point, :func:`load_demonstrations`, for every format.

==============================  =========================================================================
what ``--demos`` points at       read by
==============================  =========================================================================
a folder with ``meta/info.json``  :mod:`.lerobot` (LeRobot v2.0 / v2.1 / v3.0, GR00T ``modality.json``)
a ``.hdf5`` file, or a folder     :mod:`.libero_hdf5` (LIBERO's ``*_demo.hdf5``)
of them
a folder of ``episode_*.npz``     :mod:`vlarl_cli.training.demos` (vlarl's own episode files)
==============================  =========================================================================

Every reader returns :class:`vlarl_cli.training.demos.Episode` objects: states ``[T, S]``, env-space
actions ``[T, A]``, camera images ``[T, H, W, 3]`` in the env's orientation, one instruction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vlarl_cli.errors import VlarlError

__all__ = ["demonstration_format", "load_demonstrations"]


def demonstration_format(path: str | Path) -> str:
    """``lerobot`` | ``libero_hdf5`` | ``episodes`` for what is at ``path``; :class:`VlarlError` otherwise."""
    from vlarl_cli.datasets.episodes import episode_paths
    from vlarl_cli.datasets.lerobot import is_lerobot_dataset
    from vlarl_cli.datasets.libero_hdf5 import hdf5_files

    path = Path(path).expanduser()
    if not path.exists():
        raise VlarlError(f"Demonstrations {path} do not exist.",
                         "Pass --demos with a LeRobot dataset folder, a LIBERO .hdf5 file (or folder of them) or "
                         "a folder of episode_*.npz files; leave --demos out to record expert demonstrations.")
    if path.is_dir() and is_lerobot_dataset(path):
        return "lerobot"
    if hdf5_files(path):
        return "libero_hdf5"
    if path.is_dir() and episode_paths(path):
        return "episodes"
    raise VlarlError(f"{path} is neither a LeRobot dataset (no meta/info.json), nor LIBERO .hdf5 demonstrations, "
                     "nor a folder of episode_*.npz files.", "Point --demos at one of those, or record expert "
                     "demonstrations into a new folder (--record N).")


def load_demonstrations(path: str | Path, *, state_key: str | None = None, action_key: str | None = None,
                        main_camera_key: str | None = None, wrist_camera_key: str | None = None,
                        successful_only: bool = True) -> tuple[list[Any], str]:
    """``(episodes, format)`` of the demonstrations at ``path`` (formats in the module docstring).

    The ``*_key`` names choose LeRobot columns (default: guessed, see :func:`.lerobot.resolve_keys`); they
    are an error for the other formats, whose layout is fixed. ``successful_only`` drops episodes recorded
    as failures (only vlarl's own episode files record failures).
    """
    fmt = demonstration_format(path)
    named = {k: v for k, v in (("state_key", state_key), ("action_key", action_key),
                               ("main_camera_key", main_camera_key), ("wrist_camera_key", wrist_camera_key))
             if v is not None}
    if fmt != "lerobot" and named:
        raise VlarlError(f"{sorted(named)} name LeRobot columns, but {path} is in the {fmt} format.",
                         "Remove those sft.* keys or point --demos at a LeRobot dataset.")
    if fmt == "lerobot":
        from vlarl_cli.datasets.lerobot import read_lerobot

        return read_lerobot(path, state_key=state_key, action_key=action_key, main_camera_key=main_camera_key,
                            wrist_camera_key=wrist_camera_key), fmt
    if fmt == "libero_hdf5":
        from vlarl_cli.datasets.libero_hdf5 import read_libero_hdf5

        return read_libero_hdf5(path), fmt
    from vlarl_cli.datasets.episodes import load_episodes

    return load_episodes(path, successful_only=successful_only), fmt
