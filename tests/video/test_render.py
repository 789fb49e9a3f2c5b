"""Frame composition, info panel, montage, MP4 writing (synthetic frames; no simulator)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vlarl_cli.errors import ConfigError
from vlarl_cli.video import render
from vlarl_cli.video.api import Selection
from vlarl_cli.video.episodes import EpisodeRecord
from vlarl_cli.video.resim import SimEpisode
from vlarl_cli.video.writer import compose_frames, write_mp4


def episode(steps: int = 6, size: int = 32, success_at: int | None = 4) -> SimEpisode:
    rng = np.random.default_rng(0)
    frames = {cam: rng.integers(0, 255, (steps + 1, size, size, 3), dtype=np.uint8) for cam in ("main", "wrist")}
    step_success = np.zeros(steps, bool)
    if success_at is not None:
        step_success[success_at - 1 :] = True
    return SimEpisode(frames, rng.uniform(-1, 1, (steps, 7)).astype(np.float32), step_success,
                      success_at is not None, steps, "put the bowl on the plate", "x")


def test_compose_puts_cameras_side_by_side() -> None:
    ep = episode()
    out = compose_frames(ep.frames)
    assert out.shape == (7, 32, 64, 3)
    assert np.array_equal(out[:, :, :32], ep.frames["main"]) and np.array_equal(out[:, :, 32:], ep.frames["wrist"])


def test_annotate_keeps_pixels_and_adds_panel() -> None:
    ep = episode(size=64)
    out = render.annotate(ep, scale=2)
    assert out.shape[0] == 7 and out.shape[2] == 256 and out.shape[1] > 128
    # the camera area is the exact nearest-neighbour upscale of the frames
    assert np.array_equal(out[:, :128, :128], render.upscale(ep.frames["main"], 2))
    panel = out[:, 128:]
    # the status line turns green from the success step on: green-dominant pixels appear only then
    green = ((panel[..., 1] > 150) & (panel[..., 0] < 140)).reshape(7, -1).any(axis=1)
    assert green.tolist() == [False] * 4 + [True] * 3
    failed = render.annotate(episode(size=64, success_at=None), scale=2)[:, 128:]
    red = ((failed[..., 0] > 200) & (failed[..., 1] < 120)).reshape(7, -1).any(axis=1)
    assert red.tolist() == [False] * 6 + [True]


def test_montage_grid_and_time_padding() -> None:
    clips = [np.full((n, 10, 20, 3), i * 40, np.uint8) for i, n in enumerate([3, 5, 4])]
    grid = render.montage(clips, gap=2)
    assert grid.shape == (5, 2 * 10 + 2, 2 * 20 + 2, 3)
    assert (grid[4, :10, :20] == 0).all()  # clip 0 holds its last frame
    assert (grid[4, :10, 22:] == 40).all() and (grid[:, 12:, :20] == 80).all()
    assert (grid[:, 12:, 22:] == render.BG).all()  # the empty cell
    sbs = render.side_by_side(clips[0], clips[1], gap=0)
    assert sbs.shape == (5, 10, 40, 3)


def test_mp4_round_trip(tmp_path: Path) -> None:
    import imageio.v2 as imageio

    frames = np.zeros((12, 48, 64, 3), np.uint8)
    frames[:, :, :, 0] = np.linspace(0, 255, 12, dtype=np.uint8)[:, None, None]
    path = write_mp4(tmp_path / "a.mp4", frames, fps=20)
    reader = imageio.get_reader(path)
    got = np.stack(list(reader.iter_data()))
    assert reader.get_meta_data()["fps"] == 20
    assert got.shape == (12, 48, 64, 3)
    assert np.abs(got[..., 0].mean(axis=(1, 2)) - frames[..., 0].mean(axis=(1, 2))).max() < 8  # lossy but close
    odd = write_mp4(tmp_path / "b.mp4", np.zeros((3, 33, 31, 3), np.uint8))
    assert np.stack(list(imageio.get_reader(odd).iter_data())).shape == (3, 32, 30, 3)  # cropped to even for yuv420p
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_selection() -> None:
    recs = [EpisodeRecord("libero_10", t, i, t * 50 + i, "n", "l", ok, 5, 7, 10, 2)
            for t, i, ok in [(0, 0, True), (0, 1, False), (1, 0, False)]]
    assert Selection(episode=2).apply(recs) == [recs[2]]
    assert Selection(failures=True).apply(recs) == recs[1:]
    assert Selection(failures=True, task=0).apply(recs) == [recs[1]]
    assert Selection(task=1).apply(recs) == [recs[2]]
    with pytest.raises(ConfigError, match="Which episodes"):
        Selection().apply(recs)
    with pytest.raises(ConfigError, match="out of range"):
        Selection(episode=3).apply(recs)
