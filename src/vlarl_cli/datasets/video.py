"""MP4 frames in and out with PyAV (the decoder lerobot uses when torchcodec is absent).

LeRobot stores each camera as MP4 (AV1 by default, ``yuv420p``) whose frame ``k`` of an episode is shown at
``timestamp = k / fps`` (v2.1: one file per episode; v3.0: episodes concatenated, the episode starting at
``videos/<key>/from_timestamp``). A query time is matched to the decoded frame with the nearest
presentation time and refused beyond ``tolerance_s`` (lerobot ``decode_video_frames_pyav``: 1e-4 s by
default), so a dataset whose timestamps do not fit its video is an error, not a silently shifted frame.
"""

from __future__ import annotations

import os
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli.errors import VlarlError

__all__ = ["DEFAULT_TOLERANCE_S", "decode_frames", "encode_frames", "frames_at", "rgb24"]

DEFAULT_TOLERANCE_S = 1e-4  # lerobot LeRobotDataset tolerance_s default


def _av() -> Any:
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole configuration at its default level
    try:
        import av
    except ImportError:
        raise VlarlError("Reading or writing MP4 videos needs PyAV, which is not installed.",
                         "pip install av (a self-contained wheel with its own FFmpeg).") from None
    return av


_REFORMATTERS = threading.local()  # .pid, .reformatter: this thread's, made in this process
_INHERITED: list[Any] = []  # reformatters a forked process inherited: kept, never freed (see rgb24)


def rgb24(frame: Any) -> np.ndarray:
    """A decoded PyAV frame as uint8 RGB, converted as PyAV's ``to_ndarray(format="rgb24")`` converts it (the
    same swscale settings, so the pixels lerobot and openpi decode), by a reformatter made in this process.

    PyAV (18) keeps one reformatter per thread, and FFmpeg 8's swscale gives it a pool of slice threads. A
    DataLoader worker forked from a process that had converted a frame inherits that reformatter but not its
    threads, and waits for them for ever (the test suite hung there). A reformatter made in the worker
    starts its own threads, and the inherited one is kept, never freed (freeing it waits for the same
    threads). (``threads=1`` would avoid the pool too, but it changes pixels by up to 5 / 255.)"""
    mine = _REFORMATTERS
    if getattr(mine, "pid", None) != os.getpid():
        from av.video.reformatter import VideoReformatter

        if getattr(mine, "reformatter", None) is not None:  # the parent's: freeing it would wait for its threads
            _INHERITED.append(mine.reformatter)
        mine.pid, mine.reformatter = os.getpid(), VideoReformatter()
    return np.asarray(mine.reformatter.reformat(frame, format="rgb24").to_ndarray())


def decode_frames(path: str | Path, start_s: float | None = None, end_s: float | None = None, *,
                  margin_s: float = DEFAULT_TOLERANCE_S) -> tuple[np.ndarray, np.ndarray]:
    """The frames of ``path`` shown from ``start_s`` to ``end_s`` seconds (``None``: the file's start / end),
    widened by ``margin_s``: ``(frames uint8 [N, H, W, 3] RGB, times float64 [N] seconds)``.

    A v3.0 file holds many episodes (up to lerobot's ``video_files_size_in_mb``, 200 MB by default: tens of
    thousands of frames, far more than memory holds decoded), so an episode's window is decoded alone:
    seek to the keyframe at or before ``start_s``, decode until past ``end_s``.
    """
    av = _av()
    path = Path(path)
    if not path.is_file():
        raise VlarlError(f"Video file {path} does not exist.", "Check the dataset's videos/ folder and "
                         "meta/info.json video_path template.")
    lo = -np.inf if start_s is None else start_s - margin_s
    hi = np.inf if end_s is None else end_s + margin_s
    frames, times = [], []
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            if start_s is not None and start_s > 0:
                # backward: the keyframe at or before; frames before lo are decoded and dropped below
                container.seek(int(max(lo, 0.0) / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                if frame.pts is None:  # MP4 frames carry one; without it no frame can be matched to a timestamp
                    raise VlarlError(f"Video {path} has a frame without a presentation time.",
                                     "Re-encode the file (e.g. with lerobot's encode_video_frames).")
                t = float(frame.pts * stream.time_base)
                if t > hi:
                    break
                if t >= lo:
                    frames.append(rgb24(frame))
                    times.append(t)
    except av.error.FFmpegError as err:  # type: ignore[attr-defined]
        raise VlarlError(f"Cannot decode video {path}: {err}", "Re-encode or re-download the file.") from None
    if not frames:
        window = "" if start_s is None and end_s is None else f" between {start_s} s and {end_s} s"
        raise VlarlError(f"Video {path} has no frames{window}.", "Re-encode or re-download the file, or check the "
                         "episode's videos/<key>/from_timestamp and to_timestamp in meta/episodes.")
    return np.stack(frames), np.asarray(times, dtype=np.float64)


def frames_at(frames: np.ndarray, times: np.ndarray, query: np.ndarray, *, where: str,
              tolerance_s: float = DEFAULT_TOLERANCE_S) -> np.ndarray:
    """The frames shown at ``query`` seconds ``[T]`` -> ``[T, H, W, 3]``; error beyond ``tolerance_s``."""
    query = np.asarray(query, dtype=np.float64).reshape(-1)
    nearest = np.abs(times[None, :] - query[:, None]).argmin(axis=1)
    gap = np.abs(times[nearest] - query)
    if (gap > tolerance_s).any():
        bad = int(gap.argmax())
        raise VlarlError(f"{where}: no video frame at t={query[bad]:.4f} s (nearest {times[nearest[bad]]:.4f} s, "
                         f"tolerance {tolerance_s} s); the parquet timestamps do not match the video.",
                         "Check that the dataset's fps and timestamps agree with its videos.")
    return frames[nearest]


def encode_frames(path: str | Path, frames: np.ndarray, fps: int, *, codec: str = "libsvtav1",
                  pix_fmt: str = "yuv420p", crf: int = 30) -> Path:
    """Write ``frames`` uint8 ``[N, H, W, 3]`` to ``path`` as MP4, frame ``k`` at ``k / fps`` s.

    Defaults follow lerobot's encoder (``libsvtav1``, ``yuv420p``, crf 30, one keyframe every 2 frames is
    its setting for random access; here every 2nd frame too). H and W must be even for ``yuv420p``.
    """
    av = _av()
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 [N, H, W, 3], got {frames.dtype} {list(frames.shape)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps, options={"crf": str(crf), "g": "2"})
        stream.width, stream.height = int(frames.shape[2]), int(frames.shape[1])
        stream.pix_fmt = pix_fmt
        stream.time_base = Fraction(1, fps)
        for k, img in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = k
            frame.time_base = Fraction(1, fps)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
