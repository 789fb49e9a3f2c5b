"""lerobot's own training input pipeline, for benchmarks/sft_loader.py. Runs in the lerobot reference venv
(``.reference/lerobot_v30``: lerobot 0.4.4):

    .reference/lerobot_v30/bin/python benchmarks/lerobot_loader.py ROOT --workers 2 --batch 32 --batches 40 --chunk 5

``LeRobotDataset(root=ROOT, delta_timestamps={"action": [k / fps for k < chunk]})`` (each sample: the
cameras at its frame, its state, the next ``chunk`` actions, as vlarl's samples) served by
``torch.utils.data.DataLoader(shuffle=True, num_workers=W, batch_size=B)`` (a full permutation of the frames,
lerobot's training script's sampler without episode dropping). Prints one JSON line: frames/s over
``--batches`` batches after ``--warmup`` batches, and lerobot's video backend.

Video decoding: lerobot decodes with torchcodec when it imports, else with its ``pyav`` path
(``decode_video_frames_torchvision``: ``torchvision.io.VideoReader``, seek to the keyframe before the first
query time, decode to the last). Here neither runs as shipped: torchcodec's PyPI wheels link CUDA torch
(``libtorch_cuda.so``, ``libnvrtc``), and torchvision 0.28 (the one for the CPU torch 2.13) no longer has
``VideoReader``. So ``torchvision.io.VideoReader`` is given back as :class:`PyAvVideoReader`, which does
what torchvision's pyav backend did (``container.seek(offset, any_frame=not keyframes_only, backward=True)``,
then one ``{"data": uint8 [3, H, W], "pts": seconds}`` per decoded frame); lerobot's own
``decode_video_frames_torchvision`` runs unchanged on it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from typing import Any

from _bench import add_smoke, emit, skipped


class PyAvVideoReader:
    """torchvision's ``io.VideoReader`` with its pyav backend, as lerobot 0.4.4 calls it."""

    def __init__(self, path: str, stream: str = "video") -> None:
        import av

        self.container = av.open(path)
        self._stream = self.container.streams.video[0]
        self._frames = self.container.decode(video=0)

    def seek(self, time_s: float, keyframes_only: bool = False) -> PyAvVideoReader:
        offset = int(round(time_s / self._stream.time_base))  # noqa: RUF046  (torchvision wrote it so)
        self.container.seek(offset, any_frame=not keyframes_only, backward=True, stream=self._stream)
        self._frames = self.container.decode(video=0)
        return self

    def __iter__(self) -> PyAvVideoReader:
        return self

    def __next__(self) -> dict:
        import torch

        frame = next(self._frames)
        return {"data": torch.as_tensor(frame.to_rgb().to_ndarray()).permute(2, 0, 1),
                "pts": float(frame.pts * frame.time_base)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", help="a LeRobot v3.0 dataset (benchmarks/sft_loader.py writes one)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    add_smoke(ap)
    args = ap.parse_args()
    if importlib.util.find_spec("lerobot") is None:
        skipped("lerobot_loader", "lerobot is not installed in this interpreter: run it with the reference venv "
                "(bash scripts/reference/lerobot.sh, then .reference/lerobot_v30/bin/python)", smoke=args.smoke)
        return
    if args.root is None:
        ap.error("give the dataset folder (ROOT)")
    if args.smoke:
        args.batches, args.warmup, args.batch = 2, 1, 4
    run(args)


def run(args: Any) -> None:
    import torch
    import torchvision
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.video_utils import get_safe_default_codec

    torch.set_num_threads(1)
    if not hasattr(torchvision.io, "VideoReader"):
        torchvision.io.VideoReader = PyAvVideoReader
        torchvision.set_video_backend = lambda backend: None  # 0.28 knows only its own backends
    with open(f"{args.root}/meta/info.json") as f:
        meta_fps = json.load(f)["fps"]
    ds = LeRobotDataset("bench/synthetic", root=args.root,
                        delta_timestamps={"action": [k / meta_fps for k in range(args.chunk)]})
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                                         generator=torch.Generator().manual_seed(args.seed), drop_last=True,
                                         persistent_workers=False, prefetch_factor=2 if args.workers else None)
    it = iter(loader)
    for _ in range(args.warmup):
        next(it)
    t0 = time.perf_counter()
    for _ in range(args.batches):
        batch = next(it)
    seconds = time.perf_counter() - t0
    assert batch["action"].shape[1] == args.chunk
    emit({"benchmark": "lerobot_loader", "loader": "lerobot", "frames_per_s": args.batches * args.batch / seconds,
          "seconds": seconds, "frames": len(ds), "backend": get_safe_default_codec(), "workers": args.workers},
         smoke=args.smoke)


if __name__ == "__main__":
    main()
