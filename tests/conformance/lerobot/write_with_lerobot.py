"""Runs in the lerobot reference venv (.reference/lerobot_v21 or lerobot_v30): writes a LeRobot dataset with
lerobot's own recording API (``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` / ``finalize``),
the way lerobot's record script and openpi's ``examples/libero/convert_libero_data_to_lerobot.py`` do.

    python write_with_lerobot.py SOURCE.npz JOBS.json

JOBS.json: a list of ``{"root": folder, "layout": LAYOUT, "small_data_files": bool}``, each written from the
same episodes (one interpreter for all: importing torch and lerobot is most of the time).

SOURCE.npz holds, per episode ``e``: ``state_e`` float32 [T, 8], ``action_e`` float32 [T, 7], ``main_e`` /
``wrist_e`` uint8 [T, H, W, 3], ``task_e`` (str); and ``fps``. LAYOUT:

* ``video``: lerobot's names (``observation.state``, ``action``, ``observation.images.image`` /
  ``observation.images.wrist_image``), cameras as ``video`` features (MP4, lerobot's default codec).
* ``openpi``: openpi's LIBERO conversion (``state``, ``actions``, ``image``, ``wrist_image``), cameras as
  ``image`` features (PNG bytes inside the parquet).

``small_data_files`` (v3.0 only): lerobot's data file-size limit set so low that every episode starts a
new data file, and ``chunks_size`` 2, so the frames span several files and chunks as large datasets' do;
the videos keep lerobot's default limit, so each camera's episodes are concatenated in one MP4 (episode k
starting at its ``from_timestamp``), as in every real v3.0 dataset.
Prints one JSON line: the lerobot version and the codebase version it wrote.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import lerobot
import numpy as np
from lerobot.datasets.lerobot_dataset import CODEBASE_VERSION, LeRobotDataset


def features(layout: str, h: int, w: int) -> tuple[dict, dict[str, str]]:
    """lerobot feature specs and our-name -> column mapping for ``layout``."""
    if layout == "video":
        cols = {"state": "observation.state", "action": "action", "main": "observation.images.image",
                "wrist": "observation.images.wrist_image"}
        cam = {"dtype": "video", "shape": (h, w, 3), "names": ["height", "width", "channels"]}
        state_names = [f"s{i}" for i in range(8)]
        action_names = [f"a{i}" for i in range(7)]
    elif layout == "openpi":  # openpi examples/libero/convert_libero_data_to_lerobot.py
        cols = {"state": "state", "action": "actions", "main": "image", "wrist": "wrist_image"}
        cam = {"dtype": "image", "shape": (h, w, 3), "names": ["height", "width", "channel"]}
        state_names, action_names = ["state"], ["actions"]
    else:
        raise SystemExit(f"unknown layout {layout!r}")
    feats = {cols["main"]: dict(cam), cols["wrist"]: dict(cam),
             cols["state"]: {"dtype": "float32", "shape": (8,), "names": state_names},
             cols["action"]: {"dtype": "float32", "shape": (7,), "names": action_names}}
    return feats, cols


def write(data: np.lib.npyio.NpzFile, root: Path, layout: str, small_data_files: bool) -> None:
    fps = int(data["fps"])
    n_episodes = sum(1 for k in data.files if k.startswith("state_"))
    h, w = data["main_0"].shape[1:3]
    feats, cols = features(layout, h, w)
    ds = LeRobotDataset.create(repo_id="vlarl/conformance", fps=fps, features=feats, root=root, robot_type="panda",
                               use_videos=layout == "video")
    if small_data_files:
        if CODEBASE_VERSION != "v3.0":
            raise SystemExit("small_data_files needs a v3.0 writer")
        ds.meta.info.update(chunks_size=2, data_files_size_in_mb=1e-6)
    task_is_argument = "task" in inspect.signature(ds.add_frame).parameters  # lerobot 0.3: add_frame(frame, task)
    for e in range(n_episodes):
        task = str(data[f"task_{e}"])
        for t in range(len(data[f"state_{e}"])):
            frame = {cols["state"]: data[f"state_{e}"][t], cols["action"]: data[f"action_{e}"][t],
                     cols["main"]: data[f"main_{e}"][t], cols["wrist"]: data[f"wrist_{e}"][t]}
            if task_is_argument:
                ds.add_frame(frame, task=task)
            else:
                ds.add_frame({**frame, "task": task})
        ds.save_episode()
    if hasattr(ds, "finalize"):  # lerobot 0.4: closes the parquet writers (footers)
        ds.finalize()


def main() -> None:
    data = np.load(sys.argv[1])
    for job in json.loads(Path(sys.argv[2]).read_text()):
        write(data, Path(job["root"]), job["layout"], bool(job["small_data_files"]))
    print(json.dumps({"lerobot": lerobot.__version__, "codebase_version": CODEBASE_VERSION}))


if __name__ == "__main__":
    main()
