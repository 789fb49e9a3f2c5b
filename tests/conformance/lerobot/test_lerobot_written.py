"""LeRobot datasets written by huggingface's own ``lerobot`` library, read by vlarl and trained on by ``vlarl sft``;
and the other direction, a dataset written by vlarl served by lerobot's own ``LeRobotDataset``.

The writer is lerobot itself (``LeRobotDataset.create`` / ``add_frame`` / ``save_episode``, see
write_with_lerobot.py), in its isolated reference venvs: lerobot 0.3.3 writes codebase v2.1 and 0.4.4
writes v3.0 (``bash scripts/reference/lerobot.sh``). Layouts: lerobot's names with MP4 camera videos
(lerobot's default encoder: AV1 ``libsvtav1``, ``yuv420p``, crf 30, through PyAV), and openpi's LIBERO
conversion (``state`` / ``actions`` / ``image`` / ``wrist_image``, PNG images inside the parquet). The v3.0
video dataset is written with lerobot's data file-size limit so low that its 3 episodes span 3 data files in
2 chunks, while each camera's episodes are concatenated in one MP4 (episodes 1 and 2 start mid-file, read
by seeking to their ``from_timestamp``), as in real v3.0 datasets.

Frames are two-colour images (a 16x16 top-left square and the rest in another colour) that encode
(episode, step, camera): the colour of frame ``t`` differs from its neighbours' by 24 grey levels in
two channels, so a decoded frame identifies which frame the reader picked even after lossy compression; the
square catches a flip or transpose. States and actions are random float32: they must come back bit-exact.

Needs the reference venvs; skips with the build command without them, fails under
``VLARL_REQUIRE_REFERENCE=1``. About a minute on 2 cores (mostly the reference interpreters' imports).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from vlarl_cli import keys

pytestmark = pytest.mark.usefixtures("one_thread")

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
BUILD = "bash scripts/reference/lerobot.sh"
VENVS = {"v2.1": ROOT / ".reference" / "lerobot_v21", "v3.0": ROOT / ".reference" / "lerobot_v30"}
LEROBOT_VERSIONS = {"v2.1": "0.3.3", "v3.0": "0.4.4"}
FPS = 10
LENGTHS = (6, 4, 5)
TASKS = ("put the bowl on the plate", "pick up the cup", "put the bowl on the plate")  # episode 2 reuses task 0
H = W = 32
SQUARE = 16
# Video tolerance, in grey levels, on the mean of a region 2 pixels inside each colour's area: lerobot's
# AV1 (crf 30, a keyframe every 2 frames) reproduces it within 4.4 levels here (measured max over both
# writers; its inter frames ring), and frame t's colour is 24 levels from frame t +- 1's, so 10 (< 24 / 2)
# is over twice the codec error and still identifies the frame uniquely.
VIDEO_ATOL = 10.0


def _reference_python(version: str) -> Path:
    venv = VENVS[version]
    python, stamp = venv / "bin" / "python", venv / ".vlarl-reference-stamp"
    if python.is_file() and stamp.is_file():
        return python
    message = f"lerobot reference environment {venv} missing; build it with: {BUILD}"
    if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _colours(ep: int, t: int, cam: int) -> tuple[np.ndarray, np.ndarray]:
    """(square colour, background colour) of frame t."""
    square = np.array([(30 + 24 * t + 50 * ep) % 250, 90 + 50 * cam, (220 - 24 * t) % 250], np.uint8)
    return square, (255 - square).astype(np.uint8)


def _frames(ep: int, cam: int) -> np.ndarray:
    out = np.empty((LENGTHS[ep], H, W, 3), np.uint8)
    for t in range(LENGTHS[ep]):
        square, background = _colours(ep, t, cam)
        out[t] = background
        out[t, :SQUARE, :SQUARE] = square
    return out


def _state(ep: int) -> np.ndarray:
    return np.random.default_rng(ep).standard_normal((LENGTHS[ep], 8)).astype(np.float32)


def _action(ep: int) -> np.ndarray:
    a = np.random.default_rng(100 + ep).standard_normal((LENGTHS[ep], 7)).astype(np.float32)
    a[:, -1] = np.where(np.arange(LENGTHS[ep]) < 2, -1.0, 1.0)  # the LIBERO gripper: -1 open / +1 close
    return a


def _write(version: str, jobs: dict[str, Path], base: Path) -> None:
    """Write the episodes above with lerobot ``version``'s writer, once per ``jobs`` case -> folder."""
    python = _reference_python(version)
    source = base / f"source_{version}.npz"
    arrays: dict[str, np.ndarray] = {"fps": np.asarray(FPS)}
    for ep in range(len(LENGTHS)):
        arrays.update({f"state_{ep}": _state(ep), f"action_{ep}": _action(ep), f"main_{ep}": _frames(ep, 0),
                       f"wrist_{ep}": _frames(ep, 1), f"task_{ep}": np.asarray(TASKS[ep])})
    np.savez(source, **arrays)  # type: ignore[arg-type]
    spec = base / f"jobs_{version}.json"
    spec.write_text(json.dumps([{"root": str(root), "layout": CASES[case][1], "small_data_files": CASES[case][2]}
                                for case, root in jobs.items()]))
    # offline, with the hub caches inside tmp; SVT-AV1 prints its whole configuration at its default level
    env = {**os.environ, "HF_HOME": str(base / "hf_home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "SVT_LOG": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    cmd = [str(python), str(HERE / "write_with_lerobot.py"), str(source), str(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    written = json.loads(done.stdout.strip().splitlines()[-1])
    assert written == {"lerobot": LEROBOT_VERSIONS[version], "codebase_version": version}


CASES = {  # id -> (lerobot codebase version, layout, small data files)
    "v2.1_video": ("v2.1", "video", False),
    "v3.0_video_data_in_files": ("v3.0", "video", True),
    "v2.1_openpi_images": ("v2.1", "openpi", False),
    "v3.0_openpi_images": ("v3.0", "openpi", False),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each case's dataset; on first use of a version, lerobot writes all of that version's cases."""
    base = tmp_path_factory.mktemp("lerobot_written")

    class Lazy(dict):
        def __missing__(self, case: str) -> Path:
            version = CASES[case][0]
            jobs = {c: base / c for c, spec in CASES.items() if spec[0] == version}
            _write(version, jobs, base)
            self.update(jobs)
            return self[case]

    return Lazy()


def _region_means(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean colour 2 px inside the square and inside the bottom-right background quadrant, per frame (away
    from the edge, which yuv420p's 2x2 chroma subsampling blurs)."""
    inner = slice(2, SQUARE - 2)
    far = slice(SQUARE + 2, H - 2)
    return img[:, inner, inner].mean((1, 2)), img[:, far, far].mean((1, 2))


def _check_images(got: np.ndarray, ep: int, cam: int, *, video: bool) -> None:
    want = _frames(ep, cam)
    assert got.shape == want.shape and got.dtype == np.uint8
    if not video:
        np.testing.assert_array_equal(got, want)  # PNG is lossless
        return
    got_square, got_background = _region_means(got.astype(np.float64))
    want_square, want_background = _region_means(want.astype(np.float64))
    np.testing.assert_allclose(got_square, want_square, atol=VIDEO_ATOL)
    np.testing.assert_allclose(got_background, want_background, atol=VIDEO_ATOL)
    # each decoded frame is nearest to the frame written at the same step, not a neighbour
    distance = np.abs(got_square[:, None, :] - want_square[None, :, :]).sum(-1)
    np.testing.assert_array_equal(distance.argmin(1), np.arange(LENGTHS[ep]))


@pytest.mark.parametrize("case", list(CASES))
def test_vlarl_reads_what_lerobot_wrote(written, case):
    from vlarl_cli.datasets import load_demonstrations

    version, layout, small = CASES[case]
    root = written[case]
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["codebase_version"] == version
    if small:  # lerobot really spread the frames over files and chunks, and the videos not
        assert len(list((root / "data").glob("chunk-*/file-*.parquet"))) == len(LENGTHS)
        assert len(list((root / "data").glob("chunk-*"))) == 2
        assert len(list((root / "videos").glob("*/chunk-*/file-*.mp4"))) == 2
    episodes, fmt = load_demonstrations(root)
    assert fmt == "lerobot"
    assert [len(e) for e in episodes] == list(LENGTHS)
    assert [e.task_description for e in episodes] == list(TASKS)
    for ep, e in enumerate(episodes):
        np.testing.assert_array_equal(e.states, _state(ep))  # float32 through parquet: bit-exact
        np.testing.assert_array_equal(e.actions, _action(ep))
        assert sorted(e.images) == sorted([keys.MAIN_IMAGES, keys.WRIST_IMAGES])
        for cam, name in enumerate((keys.MAIN_IMAGES, keys.WRIST_IMAGES)):
            _check_images(e.images[name], ep, cam, video=layout == "video")
        assert e.meta["codebase_version"] == version and e.meta["episode_index"] == ep


def _lerobot_state_stats(root: Path, version: str, column: str) -> dict[str, np.ndarray]:
    """lerobot's own mean / std of the state over the dataset (v3.0 ``meta/stats.json``; v2.1: its
    per-episode ``meta/episodes_stats.jsonl`` pooled by count, as lerobot's ``aggregate_stats`` does)."""
    if version == "v3.0":
        stats = json.loads((root / "meta" / "stats.json").read_text())[column]
        return {"mean": np.asarray(stats["mean"]), "std": np.asarray(stats["std"])}
    rows = [json.loads(line)["stats"][column]
            for line in (root / "meta" / "episodes_stats.jsonl").read_text().splitlines() if line.strip()]
    counts = np.array([r["count"][0] for r in rows], np.float64)[:, None]
    means, stds = np.array([r["mean"] for r in rows]), np.array([r["std"] for r in rows])
    mean = (counts * means).sum(0) / counts.sum()
    var = (counts * (stds**2 + (means - mean) ** 2)).sum(0) / counts.sum()
    return {"mean": mean, "std": np.sqrt(var)}


@pytest.mark.parametrize("case", ["v2.1_video", "v3.0_video_data_in_files", "v3.0_openpi_images"])
def test_vlarl_sft_trains_on_what_lerobot_wrote(written, case, tmp_path):
    """`vlarl sft --demos <lerobot-written dataset>` trains a tiny pi0; its norm stats are the data's."""
    from typer.testing import CliRunner

    from vlarl_cli.cli.main import app

    version, layout, _ = CASES[case]
    root, out = written[case], tmp_path / "ckpt"
    result = CliRunner().invoke(app, ["sft", "--config", "sft_quickstart", "--demos", str(root), "--steps", "3",
                                      "-o", str(out), f"runner.logger.log_path={tmp_path / 'run'}",
                                      "actor.micro_batch_size=4", "actor.global_batch_size=4"])
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "norm_stats.json").read_text())["norm_stats"]
    states = np.concatenate([_state(e) for e in range(len(LENGTHS))]).astype(np.float64)
    actions = np.concatenate([_action(e) for e in range(len(LENGTHS))]).astype(np.float64)
    actions[:, :6] -= states[:, :6]  # pi0_libero (the quickstart's openpi config) learns deltas; gripper kept
    np.testing.assert_allclose(stats["state"]["mean"], states.mean(0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(stats["actions"]["std"], actions.std(0), rtol=1e-6)
    np.testing.assert_allclose(stats["actions"]["q01"], np.quantile(actions, 0.01, axis=0), rtol=1e-6, atol=1e-7)
    # the state statistics agree with lerobot's own (float32 sums on lerobot's side: 1e-5)
    theirs = _lerobot_state_stats(root, version, "observation.state" if layout == "video" else "state")
    np.testing.assert_allclose(stats["state"]["mean"], theirs["mean"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["state"]["std"], theirs["std"], rtol=1e-5, atol=1e-6)
    rows = [json.loads(line) for line in (tmp_path / "run" / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(np.isfinite(r["train/sft/loss"]) for r in rows)
    state = json.loads((out / "sft_state.json").read_text())
    assert state["demos_format"] == "lerobot" and state["episodes"] == len(LENGTHS)
    assert (out / "model.safetensors").is_file()


def test_lerobot_reads_what_vlarl_wrote(tmp_path):
    """The other direction: a v3.0 dataset from vlarl's writer (what `vlarl sft --record` / the demo recorder
    produce) served frame by frame by lerobot 0.4.4's own ``LeRobotDataset`` (read_with_lerobot.py)."""
    from vlarl_cli.datasets.episodes import Episode
    from vlarl_cli.datasets.lerobot import read_lerobot, write_lerobot

    python = _reference_python("v3.0")
    episodes = [Episode(states=_state(ep), actions=_action(ep), task_description=TASKS[ep],
                        images={keys.MAIN_IMAGES: _frames(ep, 0), keys.WRIST_IMAGES: _frames(ep, 1)})
                for ep in range(len(LENGTHS))]
    root = write_lerobot(tmp_path / "ds", episodes, fps=FPS)
    out = tmp_path / "served.npz"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": ""}
    done = subprocess.run([str(python), str(HERE / "read_with_lerobot.py"), str(root), str(out)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    served = np.load(out)
    n = sum(LENGTHS)
    episode_of = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    np.testing.assert_array_equal(served["episode_index"], episode_of)
    np.testing.assert_array_equal(served["frame_index"], np.concatenate([np.arange(k) for k in LENGTHS]))
    np.testing.assert_array_equal(served["state"], np.concatenate([_state(ep) for ep in range(len(LENGTHS))]))
    np.testing.assert_array_equal(served["action"], np.concatenate([_action(ep) for ep in range(len(LENGTHS))]))
    # lerobot takes the task string from meta/tasks.parquet's pandas index
    assert [str(served[f"task_{i}"]) for i in range(n)] == [TASKS[ep] for ep in episode_of]
    ours = read_lerobot(root)
    for ep, e in enumerate(ours):
        rows = episode_of == ep
        for cam, (name, col) in enumerate(((keys.MAIN_IMAGES, "observation.images.image"),
                                           (keys.WRIST_IMAGES, "observation.images.wrist_image"))):
            # lerobot picks the same frames from the shared MP4 as vlarl (the same PyAV decode: bit-exact) ...
            np.testing.assert_array_equal(served[col][rows], e.images[name])
            # ... and they are the frames written
            _check_images(served[col][rows], ep, cam, video=True)
    # lerobot's normalisation statistics: the data's, cameras per channel [3, 1, 1] in [0, 1]
    states = np.concatenate([_state(ep) for ep in range(len(LENGTHS))]).astype(np.float64)
    np.testing.assert_allclose(served["stats/observation.state/mean"], states.mean(0), rtol=1e-12)
    np.testing.assert_allclose(served["stats/observation.state/std"], states.std(0), rtol=1e-12)
    for cam, col in enumerate(("observation.images.image", "observation.images.wrist_image")):
        pixels = np.concatenate([_frames(ep, cam) for ep in range(len(LENGTHS))]).reshape(-1, 3) / 255
        assert served[f"stats/{col}/mean"].shape == (3, 1, 1)
        np.testing.assert_allclose(served[f"stats/{col}/mean"].reshape(3), pixels.mean(0), rtol=1e-12)
        np.testing.assert_allclose(served[f"stats/{col}/std"].reshape(3), pixels.std(0), rtol=1e-12, atol=1e-12)
