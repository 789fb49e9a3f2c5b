"""Demonstrations as a stream of training samples: indexed at start, frames decoded on demand.

    sources = [open_source("path/to/lerobot_dataset")]          # reads parquet columns only
    data = FrameDataset(sources, chunk=5)                        # len(data) = frames of all sources
    obs, chunk = data.sample(17)    # obs[keys.STATES] [S], obs[keys.MAIN_IMAGES] [H, W, 3], chunk [C, A]

A :class:`Source` is one dataset. For a LeRobot dataset (v2.0 / v2.1 / v3.0) :func:`open_source` reads only
the low-dimensional parquet columns (state, action, timestamp, episode / frame / task index) and checks
every episode against the first (same columns, same widths) and every video file for existence; the state
and action rows go to an unlinked temporary file mapped into memory (``numpy.memmap``), so they live in the
page cache, shared by the DataLoader workers and evictable, never in the processes' private memory.
Camera frames are decoded when a sample is asked for (:mod:`vlarl_cli.datasets.frames`), in the worker
that asks. The other formats (vlarl episode files, LIBERO HDF5) are read into memory by their readers and
wrapped as a source as they are.

A sample is the observation at step ``t`` of an episode and the action chunk ``actions[t : t + C]``
``[C, A]``, padded past the episode's end by repeating its last action (as
:class:`vlarl_cli.training.demos.ChunkDataset`). A frame that cannot be read is a :class:`BadFrame` naming
the dataset, episode, frame and camera; whoever collates decides to stop or to skip it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.datasets.frames import FrameError, ImageColumnReader, VideoReader
from vlarl_cli.errors import VlarlError

__all__ = ["BadFrame", "FrameDataset", "Source", "memory_source", "open_source"]


@dataclass
class Source:
    """One dataset's index. ``N`` frames in ``E`` episodes, episode ``e`` = rows ``starts[e]:starts[e+1]``.

    ``kind[cam]``: ``video`` (frame at ``video_from[e, k] + timestamps[i]`` of ``video_files[e][k]``),
    ``image`` (row ``rows[i]`` of column ``cameras[cam]`` in ``data_files[e]``) or ``memory``
    (``episodes[e].images[cam][t]``).
    """

    name: str
    format: str
    root: Path
    cameras: dict[str, str]  # our camera key -> the dataset's column
    kind: dict[str, str]
    states: np.ndarray  # [N, S] float32
    actions: np.ndarray  # [N, A] float32
    starts: np.ndarray  # [E + 1] int64
    episode_ids: np.ndarray  # [E] the dataset's episode_index
    tasks: list[str]  # [E]
    timestamps: np.ndarray | None = None  # [N] seconds from the episode start (video sources)
    video_files: list[tuple[str, ...]] = field(default_factory=list)  # [E][camera]
    video_from: np.ndarray | None = None  # [E, cameras] seconds
    data_files: list[str] = field(default_factory=list)  # [E]
    rows: np.ndarray | None = None  # [N] row of the frame in its data file (image sources)
    episodes: list[Any] = field(default_factory=list)  # memory sources: the Episode objects

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def num_episodes(self) -> int:
        return len(self.starts) - 1

    @property
    def state_dim(self) -> int:
        return int(self.states.shape[1])

    @property
    def action_dim(self) -> int:
        return int(self.actions.shape[1])


@dataclass(frozen=True)
class BadFrame:
    """A sample whose camera frame could not be read (``problem``: the reader's message)."""

    index: int  # the global sample index
    where: str  # "<dataset> episode E frame T camera K"
    problem: str


# ------------------------------------------------------------------------------------------------ sources


def memory_source(episodes: Sequence[Any], *, name: str, fmt: str) -> Source:
    """A source over :class:`~vlarl_cli.datasets.episodes.Episode` objects already in memory."""
    if not episodes:
        raise VlarlError(f"No demonstration episodes in {name}.", "Record some with `vlarl sft --record N`.")
    lengths = np.array([len(e) for e in episodes], dtype=np.int64)
    cams = tuple(sorted(episodes[0].images))
    return Source(name=name, format=fmt, root=Path(name), cameras={c: c for c in cams}, kind=dict.fromkeys(cams, "memory"),
                  states=np.concatenate([e.states for e in episodes]).astype(np.float32),
                  actions=np.concatenate([e.actions for e in episodes]).astype(np.float32),
                  starts=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                  episode_ids=np.arange(len(episodes)), tasks=[e.task_description for e in episodes],
                  episodes=list(episodes))


class _Spill:
    """Rows appended to an unlinked temporary file, then mapped read-only (the index never sits in anonymous
    memory, whatever the dataset's size)."""

    def __init__(self, dtype: Any) -> None:
        self.dtype, self.n = np.dtype(dtype), 0
        self.width: tuple[int, ...] | None = None
        self.file = tempfile.TemporaryFile(prefix="vlarl_sft_index_")

    def add(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        self.width = rows.shape[1:] if self.width is None else self.width
        self.file.write(rows.tobytes())
        self.n += rows.shape[0]

    def array(self) -> np.ndarray:
        self.file.flush()
        return np.memmap(self.file, dtype=self.dtype, mode="r", shape=(self.n, *(self.width or ())))


def open_source(path: str | Path, *, state_key: str | None = None, action_key: str | None = None,
                main_camera_key: str | None = None, wrist_camera_key: str | None = None) -> Source:
    """The index of the demonstrations at ``path`` (module docstring); LeRobot datasets stream, the other
    formats are read into memory (``*_key`` names are for LeRobot only)."""
    from vlarl_cli.datasets import demonstration_format, load_demonstrations

    fmt = demonstration_format(path)
    if fmt != "lerobot":
        episodes, fmt = load_demonstrations(path, state_key=state_key, action_key=action_key,
                                            main_camera_key=main_camera_key, wrist_camera_key=wrist_camera_key)
        return memory_source(episodes, name=str(path), fmt=fmt)
    from vlarl_cli.datasets.lerobot_index import index_lerobot

    return index_lerobot(Path(path).expanduser(), state_key=state_key, action_key=action_key,
                         main_camera_key=main_camera_key, wrist_camera_key=wrist_camera_key, spill=_Spill)


# ------------------------------------------------------------------------------------------------ samples


class FrameDataset:
    """Samples ``(obs, chunk [C, A])`` over the frames of several sources (global index: source 0's frames,
    then source 1's, ...). Every source must have the same state / action widths and cameras.

    ``dataset[i]`` (what DataLoader workers call) returns the sample, or a :class:`BadFrame` when a camera
    frame cannot be read. Readers (open video files, cached image columns) are created in the process that
    reads, on first use.
    """

    def __init__(self, sources: Sequence[Source], chunk: int, *, video_backend: str = "pyav",
                 tolerance_s: float | None = None) -> None:
        from vlarl_cli.datasets.video import DEFAULT_TOLERANCE_S

        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if not sources:
            raise VlarlError("No demonstrations to train on.", "Pass --demos PATH (or record with --record N).")
        self.sources, self.chunk = list(sources), chunk
        self.backend, self.tolerance_s = video_backend, DEFAULT_TOLERANCE_S if tolerance_s is None else tolerance_s
        first = self.sources[0]
        self.state_dim, self.action_dim, self.cameras = first.state_dim, first.action_dim, tuple(sorted(first.cameras))
        for s in self.sources[1:]:
            if (s.state_dim, s.action_dim, tuple(sorted(s.cameras))) != (self.state_dim, self.action_dim, self.cameras):
                raise VlarlError(f"{s.name} has {s.state_dim}-d states, {s.action_dim}-d actions and cameras "
                                 f"{sorted(s.cameras)}; {first.name} has {self.state_dim} / {self.action_dim} / "
                                 f"{list(self.cameras)}.", "Train on datasets of one embodiment and camera set "
                                 "together (name the columns with sft.state_key / sft.*_camera_key).")
        self.offsets = np.concatenate([[0], np.cumsum([len(s) for s in self.sources])]).astype(np.int64)
        self._video: VideoReader | None = None
        self._images: dict[int, ImageColumnReader] = {}

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def sizes(self) -> list[int]:
        return [len(s) for s in self.sources]

    @property
    def num_episodes(self) -> int:
        return sum(s.num_episodes for s in self.sources)

    def locate(self, i: int) -> tuple[int, int, int]:
        """Global sample ``i`` -> ``(source, episode, step)``."""
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        local = i - int(self.offsets[k])
        src = self.sources[k]
        e = int(np.searchsorted(src.starts, local, side="right")) - 1
        return k, e, local - int(src.starts[e])

    def where(self, i: int, camera: str | None = None) -> str:
        k, e, t = self.locate(i)
        src = self.sources[k]
        cam = f" camera {src.cameras[camera]}" if camera else ""
        return f"{src.name} episode {int(src.episode_ids[e])} frame {t}{cam}"

    def sample(self, i: int) -> tuple[dict[str, Any], np.ndarray]:
        """Sample ``i``: ``obs`` (``keys.STATES`` [S], camera keys [H, W, 3] uint8, ``keys.TASK_DESCRIPTIONS``)
        and the chunk ``[C, A]`` float32; :class:`FrameError` when a frame cannot be read."""
        k, e, t = self.locate(i)
        src = self.sources[k]
        start, end = int(src.starts[e]), int(src.starts[e + 1])
        rows = np.minimum(np.arange(start + t, start + t + self.chunk), end - 1)
        obs: dict[str, Any] = {keys.STATES: np.asarray(src.states[start + t], dtype=np.float32),
                               keys.TASK_DESCRIPTIONS: src.tasks[e]}
        for j, cam in enumerate(sorted(src.cameras)):
            try:
                obs[cam] = self._frame(src, k, e, t, j, cam)
            except FrameError as err:
                raise FrameError(f"{self.where(i, cam)}: {err.problem}", err.fix) from None
        return obs, np.asarray(src.actions[rows], dtype=np.float32)

    def _frame(self, src: Source, k: int, e: int, t: int, j: int, cam: str) -> np.ndarray:
        kind = src.kind[cam]
        if kind == "memory":
            return np.asarray(src.episodes[e].images[cam][t])
        if kind == "image":
            assert src.rows is not None
            reader = self._images.get(k) or self._images.setdefault(k, ImageColumnReader(src.root))
            return reader.frame(src.data_files[e], src.cameras[cam], int(src.rows[int(src.starts[e]) + t]))
        assert src.timestamps is not None and src.video_from is not None
        if self._video is None:
            self._video = VideoReader(self.backend, tolerance_s=self.tolerance_s)
        time_s = float(src.video_from[e, j]) + float(src.timestamps[int(src.starts[e]) + t])
        return self._video.frame(src.video_files[e][j], time_s)

    def __getitem__(self, i: int) -> tuple[int, dict[str, Any], np.ndarray] | BadFrame:
        try:
            obs, chunk = self.sample(int(i))
        except FrameError as err:
            return BadFrame(int(i), err.problem.split(": ", 1)[0], err.problem)
        return int(i), obs, chunk
