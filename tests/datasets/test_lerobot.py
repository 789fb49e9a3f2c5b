"""LeRobot datasets written by an independent writer (pyarrow + PyAV used directly, following the layouts
documented in huggingface/lerobot: ``src/lerobot/datasets/utils.py`` path templates and
``scripts/convert_dataset_v21_to_v30.py``), read back by vlarl and trained on through ``vlarl sft``.

Frames are solid colours that encode (episode, step), so a decoded frame identifies which frame the reader
picked even after lossy video compression: neighbouring frames differ by 12 grey levels per channel,
compression error on flat colour is ~1.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
av = pytest.importorskip("av")

from vlarl_cli import keys  # noqa: E402
from vlarl_cli.errors import VlarlError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

FPS = 10
LENGTHS = (7, 5)
TASKS = ("put the bowl on the plate", "pick up the cup")
H = W = 32


def _colour(ep: int, t: int, cam: int) -> np.ndarray:
    return np.array([(40 + 12 * t + 60 * ep) % 250, 90 + 50 * cam, (200 - 12 * t) % 250], np.uint8)


def _frames(ep: int, cam: int) -> np.ndarray:
    return np.stack([np.broadcast_to(_colour(ep, t, cam), (H, W, 3)) for t in range(LENGTHS[ep])])


def _state(ep: int, width: int = 8) -> np.ndarray:
    return (np.arange(LENGTHS[ep] * width, dtype=np.float32).reshape(LENGTHS[ep], width) * 0.01 + ep)


def _action(ep: int) -> np.ndarray:
    a = np.sin(np.arange(LENGTHS[ep] * 7, dtype=np.float32).reshape(LENGTHS[ep], 7) + ep) * 0.5
    a[:, -1] = np.where(np.arange(LENGTHS[ep]) < 3, -1.0, 1.0)
    return a.astype(np.float32)


def _encode(path: Path, frames: np.ndarray, codec: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=FPS)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for k, img in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts, frame.time_base = k, Fraction(1, FPS)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def _vec(rows: np.ndarray) -> pa.Array:
    return pa.array([list(map(float, r)) for r in rows], type=pa.list_(pa.float32()))


def _frame_table(ep: int, first_index: int, state_width: int = 8, names: tuple[str, str] = ("observation.state", "action"),
                 extra: dict | None = None) -> pa.Table:
    n = LENGTHS[ep]
    cols = {names[0]: _vec(_state(ep, state_width)), names[1]: _vec(_action(ep)),
            "timestamp": pa.array(np.arange(n, dtype=np.float32) / FPS), "frame_index": pa.array(np.arange(n)),
            "episode_index": pa.array(np.full(n, ep)), "index": pa.array(np.arange(first_index, first_index + n)),
            "task_index": pa.array(np.full(n, ep))}
    cols.update(extra or {})
    return pa.table(cols)


def _features(state_width: int = 8, cameras: dict[str, str] | None = None) -> dict:
    cameras = cameras if cameras is not None else {"observation.images.image": "video",
                                                   "observation.images.wrist_image": "video"}
    feats = {"observation.state": {"dtype": "float32", "shape": [state_width], "names": None},
             "action": {"dtype": "float32", "shape": [7], "names": None},
             "timestamp": {"dtype": "float32", "shape": [1], "names": None},
             "frame_index": {"dtype": "int64", "shape": [1], "names": None},
             "episode_index": {"dtype": "int64", "shape": [1], "names": None},
             "index": {"dtype": "int64", "shape": [1], "names": None},
             "task_index": {"dtype": "int64", "shape": [1], "names": None}}
    for name, dtype in cameras.items():
        feats[name] = {"dtype": dtype, "shape": [H, W, 3], "names": ["height", "width", "channels"]}
    return feats


def write_v21(root: Path, *, state_width: int = 8, codec: str = "libx264") -> Path:
    """LeRobot v2.1: one parquet and one MP4 per camera per episode, jsonl metadata."""
    cams = ("observation.images.image", "observation.images.wrist_image")
    meta = root / "meta"
    meta.mkdir(parents=True)
    info = {"codebase_version": "v2.1", "robot_type": "panda", "total_episodes": 2, "total_frames": sum(LENGTHS),
            "total_tasks": 2, "total_videos": 4, "total_chunks": 1, "chunks_size": 1000, "fps": FPS,
            "splits": {"train": "0:2"},
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
            "features": _features(state_width)}
    (meta / "info.json").write_text(json.dumps(info))
    (meta / "tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n"
                                              for i, t in enumerate(TASKS)))
    (meta / "episodes.jsonl").write_text("".join(json.dumps({"episode_index": e, "tasks": [TASKS[e]], "length": n}) + "\n"
                                                 for e, n in enumerate(LENGTHS)))
    first = 0
    for ep, n in enumerate(LENGTHS):
        data = root / f"data/chunk-000/episode_{ep:06d}.parquet"
        data.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_frame_table(ep, first, state_width), data)
        for c, cam in enumerate(cams):
            _encode(root / f"videos/chunk-000/{cam}/episode_{ep:06d}.mp4", _frames(ep, c), codec)
        first += n
    return root


def write_v30(root: Path, *, codec: str = "libsvtav1") -> Path:
    """LeRobot v3.0: both episodes in one data file and one MP4 per camera; parquet metadata."""
    cams = ("observation.images.image", "observation.images.wrist_image")
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    info = {"codebase_version": "v3.0", "robot_type": "panda", "total_episodes": 2, "total_frames": sum(LENGTHS),
            "total_tasks": 2, "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
            "fps": FPS, "splits": {"train": "0:2"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "features": _features()}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    # pandas writes a DataFrame indexed by the task string with its index as the column "task"
    pq.write_table(pa.table({"task_index": [0, 1], "task": list(TASKS)}), root / "meta" / "tasks.parquet")
    data = root / "data/chunk-000/file-000.parquet"
    data.parent.mkdir(parents=True)
    pq.write_table(pa.concat_tables([_frame_table(0, 0), _frame_table(1, LENGTHS[0])]), data)
    for c, cam in enumerate(cams):
        _encode(root / f"videos/{cam}/chunk-000/file-000.mp4", np.concatenate([_frames(0, c), _frames(1, c)]), codec)
    starts = [0, LENGTHS[0]]
    rows = {"episode_index": [0, 1], "tasks": [[TASKS[0]], [TASKS[1]]], "length": list(LENGTHS),
            "data/chunk_index": [0, 0], "data/file_index": [0, 0], "dataset_from_index": starts,
            "dataset_to_index": [LENGTHS[0], sum(LENGTHS)], "meta/episodes/chunk_index": [0, 0],
            "meta/episodes/file_index": [0, 0]}
    for cam in cams:
        rows[f"videos/{cam}/chunk_index"] = [0, 0]
        rows[f"videos/{cam}/file_index"] = [0, 0]
        rows[f"videos/{cam}/from_timestamp"] = [s / FPS for s in starts]
        rows[f"videos/{cam}/to_timestamp"] = [(s + n) / FPS for s, n in zip(starts, LENGTHS, strict=True)]
    pq.write_table(pa.table(rows), root / "meta/episodes/chunk-000/file-000.parquet")
    return root


def write_openpi_images(root: Path) -> Path:
    """openpi's LIBERO conversion: v2.0, ``image`` features stored as PNG bytes inside the parquet,
    columns ``state`` / ``actions`` / ``image`` / ``wrist_image``."""
    from io import BytesIO

    from PIL import Image

    def png(img: np.ndarray) -> dict:
        buf = BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        return {"bytes": buf.getvalue(), "path": None}

    feats = _features(cameras={"image": "image", "wrist_image": "image"})
    feats["state"], feats["actions"] = feats.pop("observation.state"), feats.pop("action")
    (root / "meta").mkdir(parents=True)
    info = {"codebase_version": "v2.0", "fps": FPS, "chunks_size": 1000, "features": feats,
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet", "video_path": None}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "meta" / "tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n"
                                                       for i, t in enumerate(TASKS)))
    (root / "meta" / "episodes.jsonl").write_text("".join(json.dumps({"episode_index": e, "length": n}) + "\n"
                                                          for e, n in enumerate(LENGTHS)))
    first = 0
    for ep, n in enumerate(LENGTHS):
        extra = {name: pa.array([png(f) for f in _frames(ep, c)]) for c, name in enumerate(("image", "wrist_image"))}
        path = root / f"data/chunk-000/episode_{ep:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_frame_table(ep, first, names=("state", "actions"), extra=extra), path)
        first += n
    return root


def _check_episodes(episodes: list, *, atol: float = 4) -> None:
    assert [len(e) for e in episodes] == list(LENGTHS)
    assert [e.task_description for e in episodes] == list(TASKS)
    for ep, e in enumerate(episodes):
        np.testing.assert_array_equal(e.states, _state(ep))  # float32 round trip: exact
        np.testing.assert_array_equal(e.actions, _action(ep))
        for c, cam in enumerate((keys.MAIN_IMAGES, keys.WRIST_IMAGES)):
            img = e.images[cam]
            assert img.shape == (LENGTHS[ep], H, W, 3) and img.dtype == np.uint8
            want = np.stack([_colour(ep, t, c) for t in range(LENGTHS[ep])]).astype(float)
            got = img.reshape(LENGTHS[ep], -1, 3).mean(1)
            # the right frame: within atol (< 6) levels of its colour, neighbours are 12 levels away
            np.testing.assert_allclose(got, want, atol=atol)


# AV1 at crf 30 (SVT-AV1): a frame's mean was within 4 levels of its colour with earlier PyAV wheels, 5.0 with
# PyAV 18.1.1 (FFmpeg 8.1.3, 2026-12-07); 5.9 still names the right frame (neighbours are 12 levels away)
@pytest.mark.parametrize(("writer", "atol"), [(write_v21, 4), (write_v30, 5.9)], ids=["v2.1_h264", "v3.0_av1"])
def test_independently_written_lerobot_datasets_read_back_exactly(tmp_path, writer, atol):
    from vlarl_cli.datasets import load_demonstrations

    episodes, fmt = load_demonstrations(writer(tmp_path / "ds"))
    assert fmt == "lerobot"
    _check_episodes(episodes, atol=atol)


def test_openpi_style_image_columns_read_back_losslessly(tmp_path):
    from vlarl_cli.datasets import load_demonstrations

    episodes, _ = load_demonstrations(write_openpi_images(tmp_path / "ds"))
    _check_episodes(episodes, atol=0)


def test_gr00t_modality_json_selects_state_slices(tmp_path):
    """GR00T's meta/modality.json cuts the state column: a 9-d column with an unused dim 6 gives 8-d states."""
    from vlarl_cli.datasets.lerobot import read_lerobot

    root = write_v21(tmp_path / "ds", state_width=9)
    modality = {"state": {"eef": {"start": 0, "end": 6}, "gripper": {"start": 7, "end": 9}},
                "action": {"delta": {"start": 0, "end": 6}, "gripper": {"start": 6, "end": 7}},
                "video": {"image": {"original_key": "observation.images.image"},
                          "wrist_image": {"original_key": "observation.images.wrist_image"}},
                "annotation": {"human.task_description": {"original_key": "task_index"}}}
    (root / "meta" / "modality.json").write_text(json.dumps(modality))
    episodes = read_lerobot(root)
    for ep, e in enumerate(episodes):
        full = _state(ep, 9)
        np.testing.assert_array_equal(e.states, np.concatenate([full[:, :6], full[:, 7:9]], axis=1))
        np.testing.assert_array_equal(e.actions, _action(ep))


def test_our_v3_writer_round_trips_through_the_reader(tmp_path):
    from vlarl_cli.datasets.lerobot import read_lerobot, write_lerobot

    episodes = read_lerobot(write_v21(tmp_path / "in"))
    episodes[1].success = False
    write_lerobot(tmp_path / "out", episodes, fps=FPS)
    again = read_lerobot(tmp_path / "out")
    _check_episodes(again, atol=5.9)  # encoded twice (h264, then AV1 at crf 30)
    assert [e.success for e in again] == [True, False]
    info = json.loads((tmp_path / "out" / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_frames"] == sum(LENGTHS)
    stats = json.loads((tmp_path / "out" / "meta" / "stats.json").read_text())
    all_actions = np.concatenate([_action(0), _action(1)]).astype(np.float64)  # stats are float64
    np.testing.assert_allclose(stats["action"]["mean"], all_actions.mean(0), rtol=1e-6)
    with pytest.raises(VlarlError, match="already exists"):
        write_lerobot(tmp_path / "out", episodes, fps=FPS)


def test_reader_errors_name_the_problem(tmp_path):
    from vlarl_cli.datasets import load_demonstrations

    root = write_v21(tmp_path / "ds")
    info = json.loads((root / "meta" / "info.json").read_text())
    with pytest.raises(VlarlError, match="no feature \"nope\"") as err:
        load_demonstrations(root, state_key="nope")
    assert "sft.state_key" in err.value.fix
    info["codebase_version"] = "v1.6"
    (root / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(VlarlError, match=r"v1\.6"):
        load_demonstrations(root)
    with pytest.raises(VlarlError, match="neither a LeRobot"):
        load_demonstrations(tmp_path)
    v3 = write_v30(tmp_path / "v3")
    # timestamps that do not fit the video are refused, not mapped to a wrong frame
    table = pq.read_table(v3 / "data/chunk-000/file-000.parquet")
    shifted = table.set_column(table.column_names.index("timestamp"), "timestamp",
                               pa.array(table.column("timestamp").to_numpy() + 0.05))
    pq.write_table(shifted, v3 / "data/chunk-000/file-000.parquet")
    with pytest.raises(VlarlError, match="no video frame"):
        load_demonstrations(v3)


def test_vlarl_sft_trains_on_an_independent_v30_dataset(tmp_path):
    """`vlarl sft --demos <LeRobot v3.0>` trains a tiny pi0 whose norm stats are the data's (openpi format)."""
    from typer.testing import CliRunner

    from vlarl_cli.cli.main import app

    ds = write_v30(tmp_path / "ds")
    out = tmp_path / "ckpt"
    result = CliRunner().invoke(app, ["sft", "--config", "sft_quickstart", "--demos", str(ds), "--steps", "3",
                                      "-o", str(out), f"runner.logger.log_path={tmp_path / 'run'}",
                                      "actor.micro_batch_size=4", "actor.global_batch_size=4"])
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "norm_stats.json").read_text())["norm_stats"]
    states = np.concatenate([_state(0), _state(1)]).astype(np.float64)
    actions = np.concatenate([_action(0), _action(1)]).astype(np.float64)
    # pi0_libero (the quickstart's openpi config) learns deltas: actions[:6] - state[:6]; gripper kept (-1/+1)
    actions[:, :6] -= states[:, :6]
    np.testing.assert_allclose(stats["state"]["mean"], states.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats["actions"]["std"], actions.std(0), rtol=1e-6)
    np.testing.assert_allclose(stats["actions"]["q99"], np.quantile(actions, 0.99, axis=0), rtol=1e-6)
    rows = [json.loads(line) for line in (tmp_path / "run" / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(np.isfinite(r["train/sft/loss"]) for r in rows)
    state = json.loads((out / "sft_state.json").read_text())
    assert state["demos_format"] == "lerobot" and state["episodes"] == 2 and "openpi" in state["norm_stats"]
    # -o never replaces an existing folder
    again = CliRunner().invoke(app, ["sft", "--config", "sft_quickstart", "--demos", str(ds), "--steps", "1",
                                     "-o", str(out), f"runner.logger.log_path={tmp_path / 'run2'}"])
    assert again.exit_code != 0 and "already exists" in str(again.exception)
    assert json.loads((out / "sft_state.json").read_text()) == state


def test_decode_frames_decodes_only_the_window(tmp_path):
    """A v3.0 MP4 holds many episodes: an episode's window is decoded alone (seek to the keyframe before it),
    with the same pixels a decode of the whole file gives at those times."""
    from vlarl_cli.datasets.video import decode_frames, encode_frames

    frames = np.concatenate([_frames(0, 0), _frames(1, 1), _frames(0, 1)])  # 19 frames, 0.1 s apart
    path = encode_frames(tmp_path / "v.mp4", frames, FPS)
    all_frames, all_times = decode_frames(path)
    np.testing.assert_allclose(all_times, np.arange(len(frames)) / FPS, atol=1e-9)
    got, times = decode_frames(path, 0.7, 1.2)  # frames 7..12 (the end frame is the next episode's first)
    np.testing.assert_allclose(times, np.arange(7, 13) / FPS, atol=1e-9)
    np.testing.assert_array_equal(got, all_frames[7:13])
    with pytest.raises(VlarlError, match="no frames between"):
        decode_frames(path, 5.0, 6.0)


def test_lerobot_libero_camera_names_resolve(tmp_path):
    """lerobot's LIBERO datasets call the wrist camera observation.images.image2 (lerobot envs/libero.py)."""
    from vlarl_cli.datasets.lerobot import resolve_keys

    feats = _features(cameras={"observation.images.image": "video", "observation.images.image2": "video"})
    k = resolve_keys(tmp_path, {"features": feats})
    assert (k.main_camera, k.wrist_camera) == ("observation.images.image", "observation.images.image2")
