"""vlarl's own demonstration episode files (the :class:`Episode` record every dataset reader returns).

On-disk format (version 1): a folder of ``episode_<nnnnn>.npz`` files, one per episode, each written
atomically (:func:`vlarl_cli.checkpoints.atomic.atomic_open`), read with ``allow_pickle=False``. Arrays,
``T`` = executed env steps:

===================  =======================  ====================================================
key                  dtype / shape            meaning
===================  =======================  ====================================================
``states``           float32 ``[T, S]``       observation state before step ``t`` (LIBERO: 8, toy: 4)
``actions``          float32 ``[T, A]``       env-space action executed at step ``t`` (LIBERO: 7, the
                                              gripper -1 open / +1 close; toy: 2)
``main_images``      uint8 ``[T, H, W, 3]``   optional, one array per camera, named by the observation
``wrist_images``                              key (:mod:`vlarl_cli.keys`), as the env returns them
                                              (LIBERO: already rotated 180 degrees)
``task_description`` str (0-d)                the language instruction ("" for the toy task)
``success``          bool (0-d)               the episode reached the goal
``meta``             str (0-d)                JSON: ``format_version``, ``env_type``, ``suite``,
                                              ``task_id``, ``trial_id``, ``expert`` (informative)
===================  =======================  ====================================================
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.errors import VlarlError

__all__ = ["CAMERA_KEYS", "EPISODE_PATTERN", "FORMAT_VERSION", "Episode", "episode_paths", "load_episode",
           "load_episodes", "next_episode_index", "save_episode"]

FORMAT_VERSION = 1
CAMERA_KEYS = (keys.MAIN_IMAGES, keys.WRIST_IMAGES)
EPISODE_PATTERN = "episode_*.npz"


@dataclass
class Episode:
    """One demonstration episode (shapes in the module docstring)."""

    states: np.ndarray  # float32 [T, S]
    actions: np.ndarray  # float32 [T, A]
    task_description: str = ""
    success: bool = True
    images: dict[str, np.ndarray] = field(default_factory=dict)  # camera key -> uint8 [T, H, W, 3]
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def validate(self, where: str = "episode") -> None:
        """Raise :class:`VlarlError` naming ``where`` when shapes or dtypes are inconsistent."""
        fix = "Re-record the demonstrations (vlarl sft --record N) or fix the writer of this file."
        if self.actions.ndim != 2 or self.states.ndim != 2:
            raise VlarlError(f"{where}: actions and states must be [T, A] / [T, S], got "
                             f"{list(self.actions.shape)} / {list(self.states.shape)}.", fix)
        t = len(self)
        if t < 1 or self.states.shape[0] != t:
            raise VlarlError(f"{where}: {self.states.shape[0]} states for {t} actions (need the same T >= 1).", fix)
        for name, img in self.images.items():
            if name not in CAMERA_KEYS:
                raise VlarlError(f'{where}: unknown camera "{name}".', f"Use the keys {list(CAMERA_KEYS)}.")
            if img.dtype != np.uint8 or img.ndim != 4 or img.shape[0] != t or img.shape[-1] != 3:
                raise VlarlError(f"{where}: {name} must be uint8 [T={t}, H, W, 3], got {img.dtype} "
                                 f"{list(img.shape)}.", fix)
        if not (np.isfinite(self.actions).all() and np.isfinite(self.states).all()):
            raise VlarlError(f"{where}: actions or states contain NaN/inf.", fix)


def save_episode(path: str | Path, episode: Episode) -> Path:
    """Write ``episode`` to ``path`` (``.npz``) atomically: the file appears complete or not at all."""
    from vlarl_cli.checkpoints.atomic import atomic_open

    episode.validate(str(path))
    arrays: dict[str, np.ndarray] = {
        "states": np.asarray(episode.states, np.float32),
        "actions": np.asarray(episode.actions, np.float32),
        "task_description": np.asarray(str(episode.task_description)),
        "success": np.asarray(bool(episode.success)),
        "meta": np.asarray(json.dumps({"format_version": FORMAT_VERSION, **episode.meta}, sort_keys=True)),
    }
    for name, img in episode.images.items():
        arrays[name] = np.ascontiguousarray(img, dtype=np.uint8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
    return path


def load_episode(path: str | Path) -> Episode:
    """Read one episode file (:class:`VlarlError` when it is not a readable version-1 episode)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            files = set(data.files)
            missing = {"states", "actions", "task_description", "success", "meta"} - files
            if missing:
                raise VlarlError(f"{path} is not a vlarl demonstration episode (missing {sorted(missing)}).",
                                 "Record demonstrations with `vlarl sft --record N`.")
            meta = json.loads(str(data["meta"]))
            episode = Episode(states=data["states"].astype(np.float32), actions=data["actions"].astype(np.float32),
                              task_description=str(data["task_description"]), success=bool(data["success"]),
                              images={k: data[k] for k in CAMERA_KEYS if k in files}, meta=meta)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise VlarlError(f"Cannot read demonstration episode {path}: {err}",
                         "Delete the file or re-record the demonstrations.") from None
    if not isinstance(meta, dict):
        raise VlarlError(f"{path}: its meta entry holds a JSON {type(meta).__name__}, not the episode's metadata object.",
                         "Delete the file or re-record the demonstrations.")
    if meta.get("format_version") != FORMAT_VERSION:
        raise VlarlError(f"{path} has demo format_version {meta.get('format_version')}, this vlarl reads "
                         f"{FORMAT_VERSION}.", "Re-record the demonstrations with this vlarl version.")
    episode.validate(str(path))
    return episode


def episode_paths(folder: str | Path) -> list[Path]:
    """The episode files of ``folder``, sorted by name."""
    return sorted(Path(folder).expanduser().glob(EPISODE_PATTERN))


def load_episodes(folder: str | Path, *, successful_only: bool = True) -> list[Episode]:
    """All episodes of ``folder`` (only successful ones by default); :class:`VlarlError` when there are none."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise VlarlError(f"Demonstration folder {folder} does not exist.",
                         "Pass --demos with a folder of episode_*.npz files, or leave --demos out to record "
                         "expert demonstrations first (--record N).")
    paths = episode_paths(folder)
    episodes = [load_episode(p) for p in paths]
    kept = [e for e in episodes if e.success or not successful_only]
    if not kept:
        what = f"no successful episode among {len(paths)} files" if paths else "no episode_*.npz files"
        raise VlarlError(f"Demonstration folder {folder} has {what}.",
                         "Record demonstrations into it (vlarl sft --demos DIR --record N), or point --demos "
                         "at a folder of episodes.")
    return kept


def next_episode_index(folder: Path) -> int:
    """First free episode number in ``folder`` (recording appends to existing episodes)."""
    numbers = [int(p.stem.split("_")[-1]) for p in episode_paths(folder) if p.stem.split("_")[-1].isdigit()]
    return max(numbers, default=-1) + 1
