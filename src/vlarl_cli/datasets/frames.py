"""One frame of a camera, read on demand: MP4 videos (PyAV, or torchcodec where installed) and PNG / JPEG
images stored inside parquet files (openpi's LIBERO conversion, lerobot ``image`` features).

These readers run inside the DataLoader worker processes of :mod:`vlarl_cli.datasets.stream`. Each keeps a
small per-process cache (open video containers, the image column of the last parquet files read), so memory
stays bounded whatever the dataset's size. A frame is matched to its query time by the nearest presentation
time within ``tolerance_s`` (lerobot's ``decode_video_frames`` contract); anything else is a
:class:`FrameError` that names the file and the time.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli.datasets.video import DEFAULT_TOLERANCE_S, rgb24
from vlarl_cli.errors import VlarlError

__all__ = ["BACKENDS", "FrameError", "ImageColumnReader", "VideoReader", "video_backend"]

BACKENDS = ("auto", "pyav", "torchcodec")


class FrameError(VlarlError):
    """A frame that cannot be read (missing or corrupt file, no frame at the time)."""


def video_backend(name: str) -> str:
    """``auto`` -> ``torchcodec`` where it imports, else ``pyav``; an explicit name must be usable."""
    import importlib.util

    if name not in BACKENDS:
        raise VlarlError(f'Unknown video backend "{name}".', f"Use one of {list(BACKENDS)}.")
    has_torchcodec = importlib.util.find_spec("torchcodec") is not None
    if name == "torchcodec" and not has_torchcodec:
        raise VlarlError("sft.video_backend=torchcodec but torchcodec is not installed.",
                         "pip install torchcodec (it needs FFmpeg's shared libraries), or use pyav.")
    if name == "auto":
        return "torchcodec" if has_torchcodec else "pyav"
    return name


class _Lru(OrderedDict[Any, Any]):
    """At most ``size`` entries; ``close(value)`` is called on the ones pushed out."""

    def __init__(self, size: int, close: Any = None) -> None:
        super().__init__()
        self.size, self.close = size, close

    def put(self, key: Any, value: Any) -> Any:
        self[key] = value
        while len(self) > self.size:
            _, old = self.popitem(last=False)
            if self.close is not None:
                self.close(old)
        return value

    def hit(self, key: Any) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value


class VideoReader:
    """``frame(path, t)`` -> uint8 ``[H, W, 3]`` RGB of the frame shown at ``t`` seconds in ``path``.

    PyAV: seek to the keyframe at or before ``t`` and decode forward until the frame nearest ``t``
    (lerobot encodes a keyframe every 2 frames, so about one extra frame is decoded); containers stay
    open (``open_files`` per process), one decoder thread each (the DataLoader workers are the
    parallelism). torchcodec: ``VideoDecoder(seek_mode="approximate").get_frames_played_at``.
    """

    def __init__(self, backend: str = "pyav", *, tolerance_s: float = DEFAULT_TOLERANCE_S, open_files: int = 16) -> None:
        self.backend, self.tolerance_s = backend, tolerance_s
        self._open = _Lru(open_files, close=self._close)
        self._pid = os.getpid()

    @staticmethod
    def _close(handle: Any) -> None:
        close = getattr(handle[0], "close", None)
        if close is not None:
            close()

    def frame(self, path: str, t: float) -> np.ndarray:
        if self._pid != os.getpid():  # forked: the parent's containers share its file offsets; open our own
            self._pid, self._open = os.getpid(), _Lru(self._open.size, close=self._close)
        handle = self._open.hit(path) or self._open.put(path, self._opened(path))
        try:
            return self._torchcodec(handle, path, t) if self.backend == "torchcodec" else self._pyav(handle, path, t)
        except FrameError:
            raise
        except Exception as err:  # decoder errors (av.error.*, RuntimeError from torchcodec)
            self._open.pop(path, None)
            raise FrameError(f"Cannot decode the frame at t={t:.4f} s of {path}: {type(err).__name__}: {err}",
                             "Re-encode or re-download the file.") from None

    def _opened(self, path: str) -> tuple[Any, Any]:
        if not os.path.isfile(path):
            raise FrameError(f"Video file {path} does not exist.", "Re-download the dataset's videos/ folder.")
        try:
            if self.backend == "torchcodec":
                from torchcodec.decoders import VideoDecoder

                return VideoDecoder(path, seek_mode="approximate", num_ffmpeg_threads=1), None
            import av

            container = av.open(path)
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            return container, stream
        except Exception as err:
            raise FrameError(f"Cannot open video {path}: {type(err).__name__}: {err}",
                             "Re-encode or re-download the file.") from None

    def _pyav(self, handle: tuple[Any, Any], path: str, t: float) -> np.ndarray:
        container, stream = handle
        lo = t - self.tolerance_s
        container.seek(max(int(lo / stream.time_base), 0), stream=stream, backward=True)
        best, gap = None, np.inf
        for frame in container.decode(stream):
            if frame.pts is None:
                raise FrameError(f"Video {path} has a frame without a presentation time.",
                                 "Re-encode the file (e.g. with lerobot's encode_video_frames).")
            ft = float(frame.pts * stream.time_base)
            if abs(ft - t) < gap:
                best, gap = frame, abs(ft - t)
            if ft > t + self.tolerance_s:
                break
        if best is None or gap > self.tolerance_s:
            raise FrameError(f"Video {path} has no frame at t={t:.4f} s (tolerance {self.tolerance_s} s).",
                             "Check that the dataset's timestamps agree with its videos, or re-download them.")
        return rgb24(best)

    def _torchcodec(self, handle: tuple[Any, Any], path: str, t: float) -> np.ndarray:
        decoder = handle[0]
        batch = decoder.get_frames_played_at(seconds=[t])
        got = float(batch.pts_seconds[0])
        if abs(got - t) > self.tolerance_s:
            raise FrameError(f"Video {path} has no frame at t={t:.4f} s (nearest {got:.4f} s, tolerance "
                             f"{self.tolerance_s} s).", "Check that the dataset's timestamps agree with its videos.")
        return np.ascontiguousarray(batch.data[0].permute(1, 2, 0).numpy())


class ImageColumnReader:
    """``frame(file, column, row)`` -> uint8 ``[H, W, 3]``: an encoded image cell of a parquet file.

    Parquet has no random access to one row, so the column (encoded bytes, not pixels) of the last
    ``cached_files`` files is kept per process; the data file of one v2 episode is a few MB."""

    def __init__(self, root: Path, cached_files: int = 2) -> None:
        self.root = Path(root)
        self._columns = _Lru(cached_files)

    def frame(self, file: str, column: str, row: int) -> np.ndarray:
        from io import BytesIO

        from PIL import Image

        cells = self._columns.hit((file, column))
        if cells is None:
            cells = self._columns.put((file, column), self._read(file, column))
        cell = cells[row]
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if not data and isinstance(cell, dict) and cell.get("path"):
            from vlarl_cli.checkpoints.integrity import contained

            try:
                data = contained(self.root, cell["path"], f"Image column {column!r} of {file}").read_bytes()
            except VlarlError as err:  # a bad frame like any other (sft.skip_bad_frames decides)
                raise FrameError(err.problem, err.fix) from None
        if not data:
            raise FrameError(f"Image column {column!r} of {file} has an empty cell at row {row}.", "Re-export the dataset.")
        try:
            return np.asarray(Image.open(BytesIO(data)).convert("RGB"), dtype=np.uint8)
        except Exception as err:  # PIL raises UnidentifiedImageError / OSError / SyntaxError on bad bytes
            raise FrameError(f"Cannot decode the image in column {column!r} of {file}, row {row}: "
                             f"{type(err).__name__}: {err}", "Re-export or re-download the dataset.") from None

    @staticmethod
    def _read(file: str, column: str) -> list[Any]:
        import pyarrow.parquet as pq

        try:
            return pq.read_table(file, columns=[column]).column(column).to_pylist()
        except Exception as err:
            raise FrameError(f"Cannot read column {column!r} of {file}: {err}", "Re-download the dataset.") from None
