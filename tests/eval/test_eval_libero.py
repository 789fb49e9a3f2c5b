"""End to end on the real simulator: CLI eval, resume after an interruption, exact re-simulation, MP4."""

from __future__ import annotations

import csv
import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import EVAL_ARGS, CliRun, run_cli
from vlarl_cli.video.episodes import EpisodeData, read_episodes

pytestmark = pytest.mark.libero


def test_cli_eval_writes_consistent_results(eval_run: CliRun) -> None:
    assert eval_run.returncode == 0, eval_run.stderr[-3000:]
    out = eval_run.out
    records = read_episodes(out / "episodes.jsonl")
    assert sorted(r.key for r in records) == [("libero_spatial", t, i) for t in (0, 1) for i in (0, 1)]
    for r in records:
        assert r.steps <= 10 and r.seed == 7 and r.max_steps == 10 and r.settle_steps == 2 and r.error == ""
        assert r.reset_state_id == r.task * 50 + r.trial
        data = r.load_data()
        chunks = math.ceil(r.steps / 5)  # replan size 5 (tiny pi0 of the quickstart)
        assert data.actions.shape == (chunks, 5, 7) and data.actions.dtype == np.float32
        assert data.robot_states.shape == (chunks + 1, 8)
    assert sum(bool(r.frames) for r in records) == 1  # --live-video 1
    card = json.loads((out / "card.json").read_text())
    assert card["protocol"] == "standard" and card["max_steps"] == {"libero_spatial": 10}
    assert card["settle_steps"] == 2 and card["env_seed"] == 7 and card["replan_size"] == 5
    assert card["action_mode"] == "deterministic" and card["resolution"] == 128
    assert len(card["checkpoint"]["sha256"]) == 64 and card["vlarl_version"]
    assert card["plan"]["episodes"] == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["card"] == card
    by_level = {(r["level"], r["task"]): r for r in summary["rows"]}
    for t in (0, 1):
        row = by_level[("task", t)]
        assert row["n"] == 2 and row["successes"] == sum(r.success for r in records if r.task == t)
    assert by_level[("overall", None)]["n"] == 4
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert len(rows) == 4 and {r["checkpoint_sha256"] for r in rows} == {card["checkpoint"]["sha256"]}
    assert "LIBERO evaluation" in eval_run.stdout and "Wilson" in eval_run.stdout


def test_resume_skips_finished_episodes(eval_run: CliRun, tmp_path: Path) -> None:
    assert eval_run.returncode == 0
    copy = tmp_path / "results"
    shutil.copytree(eval_run.out, copy)
    lines = (copy / "episodes.jsonl").read_text().splitlines(keepends=True)
    # an interruption at a random point: `kept` episodes committed, the next one torn in the middle of its line
    kept = random.Random().randint(0, 3)
    (copy / "episodes.jsonl").write_text("".join(lines[:kept]) + lines[kept][:40])
    for name in ("summary.json", "summary.csv"):
        (copy / name).unlink()
    run = run_cli([*EVAL_ARGS, "--out", str(copy)], cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"4 episodes planned, {kept} already finished, {4 - kept} to run" in run.stdout
    assert "torn last line" in run.stdout
    assert run.stdout.count("[rank 0] ") == 4 - kept
    before = {r.key: r for r in read_episodes(eval_run.out)}
    after = read_episodes(copy)
    assert len(after) == 4 and {r.key for r in after} == set(before)
    for r in after:  # noise seeded per episode: the resumed episodes equal the uninterrupted ones
        a, b = r.load_data(), before[r.key].load_data()
        assert (r.success, r.steps) == (before[r.key].success, before[r.key].steps), f"{r.key} (cut after {kept})"
        assert np.array_equal(a.actions, b.actions), f"{r.key}: actions differ (cut after {kept})"
        assert np.array_equal(a.robot_states, b.robot_states), f"{r.key}: states differ (cut after {kept})"
    assert json.loads((copy / "summary.json").read_text())["complete"]


def test_resume_refuses_a_different_setup(eval_run: CliRun, tmp_path: Path) -> None:
    copy = tmp_path / "results"
    shutil.copytree(eval_run.out, copy)
    args = [*EVAL_ARGS, "--out", str(copy)]
    args[args.index("--max-steps") + 1] = "15"
    run = run_cli(args, cwd=tmp_path)
    assert run.returncode == 2
    assert "different setup" in run.stderr and "max_steps" in run.stderr and "Traceback" not in run.stderr


def test_resimulated_episode_equals_live_recording(eval_run: CliRun, tmp_path: Path) -> None:
    import imageio.v2 as imageio
    from PIL import Image

    from vlarl_cli.video.api import Selection, render_videos
    from vlarl_cli.video.resim import Simulators, resimulate

    records = read_episodes(eval_run.out)
    live = next(r for r in records if r.frames)
    live_frames = live.load_frames()
    assert live_frames is not None
    with Simulators() as sims:
        ep = resimulate(live, sims=sims)
        assert set(ep.frames) == {"main", "wrist"}
        for cam in ("main", "wrist"):
            assert ep.frames[cam].shape == (live.steps + 1, 128, 128, 3)
            assert np.array_equal(ep.frames[cam], live_frames[cam]), f"{cam} frames differ"
        assert ep.max_state_drift == 0.0 and (ep.success, ep.steps) == (live.success, live.steps)
        paths = render_videos(eval_run.out, selection=Selection(task=0), out=tmp_path / "videos", sims=sims)
        # A/B on the same init state (here the folder against itself): two annotated clips side by side
        ab = render_videos(eval_run.out, selection=Selection(episode=0), against=eval_run.out, out=tmp_path / "ab",
                           sims=sims)
    assert [p.name for p in ab] == [f"{records[0].label}_vs.mp4"]
    ab_frames = np.stack(list(imageio.get_reader(ab[0]).iter_data()))
    assert ab_frames.shape[0] == records[0].steps + 1 and ab_frames.shape[2] == 2 * 512 + 6
    assert [p.name for p in paths] == ["libero_spatial_task00_trial00.mp4", "libero_spatial_task00_trial01.mp4",
                                       "montage_episodes_task00.mp4"]
    reader = imageio.get_reader(paths[0])
    frames = np.stack(list(reader.iter_data()))
    first = next(r for r in records if r.key == ("libero_spatial", 0, 0))
    assert frames.shape[0] == first.steps + 1
    assert frames.shape[2] == 2 * 256  # two 128 px cameras upscaled x2, side by side
    # the camera area of the MP4 is close to the (upscaled) simulator frame: H.264 is lossy
    if first.key == live.key:
        ref = np.concatenate([live_frames["main"][3], live_frames["wrist"][3]], axis=1).repeat(2, 0).repeat(2, 1)
        assert np.abs(frames[3, :256].astype(int) - ref).mean() < 6
    Image.fromarray(frames[min(5, len(frames) - 1)]).save(tmp_path / "frame.png")
    EpisodeData.load(first.root / first.data)  # the data file is readable on its own


@pytest.mark.slow  # 2 ranks x (policy + 1 simulator worker): more processes than the default run should start
def test_two_ranks_split_the_episodes(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    out = tmp_path / "results"
    i = EVAL_ARGS.index("--live-video")
    args = EVAL_ARGS[:i] + EVAL_ARGS[i + 2 :]  # no live video
    args[args.index("--num-envs") + 1] = "1"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m",
                           "vlarl_cli.cli.main", *args, "--out", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_episodes(out)
    assert sorted(r.key for r in records) == [("libero_spatial", t, i) for t in (0, 1) for i in (0, 1)]
    assert {r.rank for r in records} == {0, 1}  # contiguous halves: rank 0 task 0, rank 1 task 1
    assert {(r.task, r.rank) for r in records} == {(0, 0), (1, 1)}
    assert json.loads((out / "summary.json").read_text())["complete"]
