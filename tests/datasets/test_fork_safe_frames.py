"""Frames read in a forked process after the parent read some: what a DataLoader worker of `vlarl sft` does.

PyAV 18 keeps a reformatter per thread whose FFmpeg 8 swscale context owns slice threads; a forked child
inherits the context without its threads and, before the fix, waited for ever in ``sws_scale_frame`` (the test
suite hung there in ``test_vlarl_sft_trains_on_an_independent_v30_dataset``). The child here must finish and
read the same pixels as the parent."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import numpy as np

from vlarl_cli.datasets.frames import VideoReader
from vlarl_cli.datasets.video import decode_frames, encode_frames

FPS = 10


def _child(path: str, queue) -> None:
    queue.put((VideoReader("pyav").frame(path, 0.3), decode_frames(path)[0][3]))


def _read_in_fork(path: str) -> tuple[np.ndarray, np.ndarray]:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(path, queue))
    child.start()
    child.join(60)
    hung = child.is_alive()
    if hung:
        child.kill()
    assert not hung, "the forked reader hung (swscale threads inherited from the parent)"
    assert child.exitcode == 0
    return queue.get(timeout=10)


def test_a_forked_reader_after_the_parent_converted_frames(tmp_path: Path) -> None:
    frames = np.random.default_rng(0).integers(0, 255, (10, 64, 64, 3), dtype=np.uint8)
    path = str(encode_frames(tmp_path / "v.mp4", frames, FPS))
    reader = VideoReader("pyav")
    parent = reader.frame(path, 0.3)  # the parent converts first, through both paths, as a probe would
    decoded = decode_frames(path)[0]
    in_child, decoded_in_child = _read_in_fork(path)
    np.testing.assert_array_equal(in_child, parent)
    np.testing.assert_array_equal(decoded_in_child, decoded[3])
    np.testing.assert_array_equal(reader.frame(path, 0.3), parent)  # the parent's reader still reads
