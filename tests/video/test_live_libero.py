"""A live rollout recorded every step, re-simulated from its recorded actions: identical frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.libero


def test_live_rollout_resimulates_exactly(tmp_path: Path) -> None:
    from PIL import Image

    from vlarl_cli.training.evaluation import load_policy
    from vlarl_cli.video import render
    from vlarl_cli.video.episodes import EpisodeRecord
    from vlarl_cli.video.resim import Simulators, live_episode, resimulate

    policy, _, _ = load_policy(None, "libero_tiny_ppo", [])
    with Simulators() as sims:
        live = live_episode(policy, "libero_spatial", 1, 3, resolution=128, max_steps=12, settle_steps=2, sims=sims)
        assert live.steps == 12 and live.frames["main"].shape == (13, 128, 128, 3)
        assert live.data is not None and live.data.actions.shape == (3, 5, 7)  # 12 steps = 3 chunks of 5
        record = EpisodeRecord("libero_spatial", 1, 3, 53, "t", live.language, live.success, live.steps, seed=7,
                               max_steps=12, settle_steps=2)
        card = {"resolution": 128, "cameras": ["main", "wrist"], "protocol": "standard", "reset": "soft"}
        again = resimulate(record, sims=sims, card=card, data=live.data)
    for cam in ("main", "wrist"):
        assert np.array_equal(again.frames[cam], live.frames[cam])
    assert again.max_state_drift == 0.0
    assert np.array_equal(again.actions, live.actions)
    # the executed actions are the sent ones clipped to [-1, 1], cut at the step limit
    assert np.array_equal(live.actions, np.clip(live.data.actions.reshape(-1, 7)[:12], -1, 1))
    clip = render.annotate(live, title="live")
    Image.fromarray(clip[6]).save(tmp_path / "live_frame.png")
    assert clip.shape[0] == 13


def test_video_cli_live_rollout(tmp_path: Path) -> None:
    import subprocess
    import sys

    import imageio.v2 as imageio

    proc = subprocess.run([sys.executable, "-m", "vlarl_cli.cli.main", "video", "--config", "libero_tiny_ppo",
                           "--suite", "libero_spatial", "--task", "0", "--trial", "2", "--max-steps", "5",
                           "--resolution", "128", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = tmp_path / "live_libero_spatial_task00_trial02.mp4"
    frames = np.stack(list(imageio.get_reader(path).iter_data()))
    assert frames.shape[0] == 6 and frames.shape[2] == 512  # 5 steps + the first frame; 2 x 128 px upscaled x2
