"""Runs in the lerobot 0.4.4 reference venv (.reference/lerobot_v30): loads a v3.0 dataset with lerobot's
own ``LeRobotDataset(repo_id, root=...)`` and dumps every frame it serves (``dataset[i]``) to an npz.

    python read_with_lerobot.py ROOT OUT.npz

Video decoding: lerobot 0.4.4 decodes with torchcodec, else through ``torchvision.io.VideoReader``, which
torchvision 0.28 (the one matching the CPU torch 2.13 here) no longer has, and torchcodec needs system
FFmpeg libraries this machine lacks. So ``decode_video_frames`` is replaced by a PyAV decoder with lerobot's
contract (lerobot ``video_utils.decode_video_frames_torchvision`` with the pyav backend: the frames nearest
to the query timestamps, refused beyond ``tolerance_s``; float32 CHW in [0, 1]). Everything else is
lerobot's: metadata loading, episode / file resolution, ``from_timestamp`` shifting, the parquet reading.
Arrays in OUT.npz, per frame i: ``state``, ``action``, ``episode_index``, ``frame_index``, ``task_i``,
``<camera>`` uint8 [N, H, W, 3]; and ``stats/<feature>/<name>``: the statistics lerobot loaded from
``meta/stats.json`` (``dataset.meta.stats``, what its policies normalise with).
"""

from __future__ import annotations

import sys
from pathlib import Path

import av
import numpy as np
import torch
from lerobot.datasets import lerobot_dataset
from lerobot.datasets.lerobot_dataset import LeRobotDataset


def decode_video_frames(video_path: Path | str, timestamps: list[float], tolerance_s: float,
                        backend: str | None = None) -> torch.Tensor:
    frames, times = [], []
    with av.open(str(video_path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray(format="rgb24"))
            times.append(float(frame.pts * stream.time_base))
    query = torch.tensor(timestamps, dtype=torch.float64)
    dist = torch.cdist(query[:, None], torch.tensor(times, dtype=torch.float64)[:, None], p=1)
    min_, argmin_ = dist.min(1)
    if not bool((min_ < tolerance_s).all()):
        raise AssertionError(f"query timestamps {timestamps} not within {tolerance_s} of {times} in {video_path}")
    picked = torch.from_numpy(np.stack([frames[int(i)] for i in argmin_]))
    return picked.permute(0, 3, 1, 2).float() / 255  # lerobot: [N, C, H, W] float32 in [0, 1]


def main() -> None:
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    lerobot_dataset.decode_video_frames = decode_video_frames
    ds = LeRobotDataset("vlarl/written_by_vlarl", root=root)
    arrays: dict[str, list] = {"state": [], "action": [], "episode_index": [], "frame_index": []}
    cams: dict[str, list] = {k: [] for k in ds.meta.video_keys}
    for i in range(len(ds)):
        item = ds[i]
        arrays["state"].append(item["observation.state"].numpy())
        arrays["action"].append(item["action"].numpy())
        arrays["episode_index"].append(int(item["episode_index"]))
        arrays["frame_index"].append(int(item["frame_index"]))
        arrays[f"task_{i}"] = [item["task"]]
        for k in cams:  # back to the uint8 HWC that was decoded (exact: x / 255 * 255 rounds back)
            cams[k].append((item[k].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))
    stats = {f"stats/{feature}/{name}": np.asarray(value) for feature, values in ds.meta.stats.items()
             for name, value in values.items()}
    np.savez(out, **{k: np.asarray(v) if not k.startswith("task_") else np.asarray(v[0]) for k, v in arrays.items()},
             **{k: np.stack(v) for k, v in cams.items()}, **stats)
    print(len(ds))


if __name__ == "__main__":
    main()
