"""The index of a LeRobot dataset for streaming (:mod:`vlarl_cli.datasets.stream`): parquet columns only.

Layouts and column choice as in :mod:`vlarl_cli.datasets.lerobot`. Per data file only the low-dimensional
columns are read (state / action, or GR00T ``modality.json`` slices of them, ``timestamp``,
``episode_index``, ``frame_index``, ``task_index``); image columns are left on disk. Every episode is checked
while indexing, so a broken dataset stops before the first training step with the episode named:

* a data file without one of those columns, or whose state / action width differs from the first
  episode's (a dataset whose schema changes between episodes);
* an episode with no rows, or with several tasks, or a task index the task table lacks;
* a missing video file (the camera and the path named).

Frames that exist but do not decode are found while training (:class:`vlarl_cli.datasets.stream.BadFrame`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.datasets.lerobot import (
    DatasetKeys,
    _episode_refs_v2,
    _episode_refs_v3,
    _EpisodeRef,
    _tasks,
    read_info,
    resolve_keys,
)
from vlarl_cli.errors import VlarlError

__all__ = ["index_lerobot"]

_FIX_SCHEMA = "Re-export the dataset so that every episode has the same columns and widths, or train on the episodes that agree."


def _matrix(table: Any, name: str, where: str) -> np.ndarray:
    """A list / fixed-size-list / scalar column -> float32 ``[rows, D]`` without going through Python lists."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name).combine_chunks()
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or pa.types.is_fixed_size_list(column.type):
        widths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        if len(widths) and (widths != widths[0]).any():
            raise VlarlError(f"{where}: column {name!r} has rows of widths {sorted(set(widths.tolist()))}.", _FIX_SCHEMA)
        values = pc.list_flatten(column).to_numpy(zero_copy_only=False)
        return _numeric(values, name, where).reshape(len(column), -1)
    return _numeric(column.to_numpy(zero_copy_only=False), name, where)[:, None]


def _numeric(values: np.ndarray, name: str, where: str) -> np.ndarray:
    try:
        return values.astype(np.float32)
    except (TypeError, ValueError) as err:  # strings or nulls where numbers belong
        raise VlarlError(f"{where}: column {name!r} is not a numeric vector per frame ({err}; first value "
                         f"{str(values[0])[:80] if len(values) else None!r}).", _FIX_SCHEMA) from None


def _part(table: Any, column: str, slices: tuple[tuple[str, int, int], ...], where: str) -> np.ndarray:
    if not slices:
        return _matrix(table, column, where)
    return np.concatenate([_matrix(table, col, where)[:, a:b] for col, a, b in slices], axis=1)


def _columns(k: DatasetKeys) -> list[str]:
    cols = [c for c, _, _ in k.state_slices] or [k.state]
    cols += [c for c, _, _ in k.action_slices] or [k.action]
    return sorted(set(cols) | {"timestamp", "episode_index", "task_index"})


def _read_file(path: Path, k: DatasetKeys, where: str) -> tuple[Any, np.ndarray, np.ndarray]:
    """(table of the needed columns, row order by (episode, frame), episode ids in that order)."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise VlarlError(f"{where}: parquet file {path} is missing.", "Check that the LeRobot dataset is complete.")
    present = set(pq.read_schema(path).names)
    missing = [c for c in _columns(k) if c not in present]
    if missing:
        raise VlarlError(f"{where}: {path} has no column(s) {missing} (it has {sorted(present)}); the dataset's "
                         "schema changes between episodes, or the key is not in the data.", _FIX_SCHEMA)
    cols = _columns(k) + (["frame_index"] if "frame_index" in present else [])
    table = _read_parquet_columns(path, cols)
    episodes = table.column("episode_index").to_numpy()
    frames = table.column("frame_index").to_numpy() if "frame_index" in cols else np.arange(len(episodes))
    order = np.lexsort((frames, episodes))
    return table, order, episodes[order]


def _read_parquet_columns(path: Path, cols: list[str]) -> Any:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, columns=cols)
    except Exception as err:  # pyarrow raises ArrowInvalid / OSError subclasses for corrupt files
        raise VlarlError(f"Cannot read parquet file {path}: {err}", "Re-download the dataset.") from None


class _Builder:
    """Collects the episodes' rows into spilled arrays (see ``stream._Spill``) and their bookkeeping."""

    def __init__(self, root: Path, k: DatasetKeys, tasks: dict[int, str], cams: dict[str, str], spill: Callable[..., Any]):
        self.root, self.k, self.task_table, self.cams = root, k, tasks, cams
        self.states, self.actions, self.times, self.rows = spill(np.float32), spill(np.float32), spill(np.float64), spill(np.int64)
        self.lengths: list[int] = []
        self.ids: list[int] = []
        self.tasks: list[str] = []
        self.files: list[str] = []
        self.videos: list[tuple[str, ...]] = []
        self.video_from: list[list[float]] = []
        self.widths: tuple[int, int] | None = None

    def add(self, ref: _EpisodeRef, table: Any, rows: np.ndarray) -> None:
        where = f"{self.root} episode {ref.index}"
        if len(rows) == 0:
            raise VlarlError(f"{where}: no rows in {ref.data_file}.", "Check meta/episodes against data/.")
        part = table.take(rows)
        states, actions = _part(part, self.k.state, self.k.state_slices, where), _part(part, self.k.action, self.k.action_slices, where)
        widths = (states.shape[1], actions.shape[1])
        if self.widths is None:
            self.widths = widths
        elif widths != self.widths:
            raise VlarlError(f"{where} ({ref.data_file}) has {widths[0]}-d states and {widths[1]}-d actions; the first "
                             f"episode has {self.widths[0]} / {self.widths[1]}: the schema changes between episodes.", _FIX_SCHEMA)
        if not (np.isfinite(states).all() and np.isfinite(actions).all()):
            raise VlarlError(f"{where}: states or actions contain NaN/inf.", "Fix or drop that episode.")
        self.tasks.append(self._task(part, where))
        for spill, value in ((self.states, states), (self.actions, actions), (self.rows, rows[:, None]),
                             (self.times, part.column("timestamp").to_numpy().astype(np.float64)[:, None])):
            spill.add(value)
        self.lengths.append(len(rows))
        self.ids.append(ref.index)
        self.files.append(str(ref.data_file))
        self._videos(ref, where)

    def _task(self, part: Any, where: str) -> str:
        ids = np.unique(part.column("task_index").to_numpy())
        if len(ids) != 1:
            raise VlarlError(f"{where} has {len(ids)} tasks ({ids.tolist()}); vlarl trains on one instruction per "
                             "episode.", "Split the episode or pick episodes with one task.")
        if int(ids[0]) not in self.task_table:
            raise VlarlError(f"{where}: task_index {int(ids[0])} is not in the dataset's task table.", "Check meta/tasks.")
        return self.task_table[int(ids[0])]

    def _videos(self, ref: _EpisodeRef, where: str) -> None:
        files, starts = [], []
        for cam in sorted(self.cams):
            col = self.cams[cam]
            path = ref.video_files.get(col)
            if path is None:
                files.append("")
                starts.append(0.0)
                continue
            if not os.path.isfile(path):
                raise VlarlError(f"{where}: the video of camera {col} is missing ({path}).",
                                 "Re-download the dataset's videos/ folder (or drop the episode).")
            files.append(str(path))
            window = ref.video_windows.get(col)
            starts.append(float(window[0]) if window else 0.0)
        self.videos.append(tuple(files))
        self.video_from.append(starts)


def index_lerobot(root: Path, *, state_key: str | None, action_key: str | None, main_camera_key: str | None,
                  wrist_camera_key: str | None, spill: Callable[..., Any]) -> Any:
    """The :class:`~vlarl_cli.datasets.stream.Source` of the LeRobot dataset at ``root`` (module docstring)."""
    from vlarl_cli.datasets.stream import Source

    info = read_info(root)
    version = info["codebase_version"]
    k = resolve_keys(root, info, state_key=state_key, action_key=action_key, main_camera_key=main_camera_key,
                     wrist_camera_key=wrist_camera_key)
    cams = {ours: col for ours, col in ((keys.MAIN_IMAGES, k.main_camera), (keys.WRIST_IMAGES, k.wrist_camera))
            if col is not None}
    kind = {ours: "video" if info["features"][col]["dtype"] == "video" else "image" for ours, col in cams.items()}
    video_cols = [cams[c] for c in cams if kind[c] == "video"]
    refs = [r for r in (_episode_refs_v2 if version.startswith("v2") else _episode_refs_v3)(root, info, video_cols)
            if r.success]
    if not refs:
        raise VlarlError(f"LeRobot dataset {root} has no (successful) episodes.", "Point --demos at a dataset with episodes.")
    build = _Builder(root, k, _tasks(root, version), cams, spill)
    by_file: dict[Path, list[_EpisodeRef]] = {}
    for ref in refs:
        by_file.setdefault(ref.data_file, []).append(ref)
    for path, file_refs in by_file.items():
        table, order, sorted_eps = _read_file(path, k, f"{root} episode {file_refs[0].index}")
        for ref in file_refs:
            lo, hi = np.searchsorted(sorted_eps, ref.index, "left"), np.searchsorted(sorted_eps, ref.index, "right")
            build.add(ref, table, order[lo:hi])
    lengths = np.asarray(build.lengths, dtype=np.int64)
    video_from = np.asarray(build.video_from, dtype=np.float64).reshape(len(lengths), len(cams))
    return Source(name=str(root), format="lerobot", root=root, cameras=cams, kind=kind, states=build.states.array(),
                  actions=build.actions.array(), starts=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                  episode_ids=np.asarray(build.ids, dtype=np.int64), tasks=build.tasks,
                  timestamps=build.times.array()[:, 0], video_files=build.videos, video_from=video_from,
                  data_files=build.files, rows=build.rows.array()[:, 0])

