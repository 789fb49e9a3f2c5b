"""The training input pipeline of ``vlarl sft``: peak memory across dataset sizes, and frames/s against lerobot's
own ``LeRobotDataset`` + DataLoader on the same dataset, machine and number of workers, side by side.

    python benchmarks/sft_loader.py --out /tmp/sft_bench                 # both parts, JSON lines
    python benchmarks/sft_loader.py --out /tmp/sft_bench --part rss --episodes 25 200 1600
    python benchmarks/sft_loader.py --out /tmp/sft_bench --part speed --repeats 3
    python benchmarks/sft_loader.py --out /tmp/sft_smoke --smoke        # seconds: the code path only (CI)

Data: a synthetic LeRobot v3.0 dataset of two 256x256 cameras (LIBERO's size, AV1 as lerobot encodes),
episodes of 200 frames. ``--template`` distinct episodes are encoded once by vlarl's writer
(``datasets.lerobot.write_lerobot``); larger datasets reuse their video windows (several episodes pointing
at one window of a v3.0 file, which the format allows), each episode with its own parquet rows, so the
disk stays small while every frame of every episode is decoded on demand. Decoded size = frames x 2 x
256 x 256 x 3 bytes.

``rss``: for each size, a child process runs what ``vlarl sft`` runs before and during training (the index,
the normalisation statistics over all frames, DataLoader workers decoding ``--batches`` micro-batches) while
the parent samples the memory of the child and its workers every 0.1 s (``/proc/<pid>/smaps_rollup``):
``peak_pss_mib`` (proportional set size summed over the processes: memory they use, shared pages counted
once) and ``peak_rss_mib`` (resident sets summed: shared pages counted in every process). ``speed``: our
pipeline and lerobot's (``benchmarks/lerobot_loader.py`` in ``.reference/lerobot_v30``; lerobot decodes
with torchcodec when installed, its default), alternating ``--repeats`` times, same workers, batch size,
chunk and a full permutation of the frames each; the ratio is ours / lerobot's median frames/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _bench import add_smoke, emit, skipped

REPO = Path(__file__).resolve().parents[1]
FRAMES, SIZE, FPS = 200, 256, 20


def _episode(k: int) -> object:
    """Template episode ``k``: smooth moving images (cheap to encode, real decode work), a 8-d state, 7-d actions."""
    from vlarl_cli import keys
    from vlarl_cli.datasets.episodes import Episode

    t = np.arange(FRAMES)[:, None, None]
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    images = {}
    for c, cam in enumerate((keys.MAIN_IMAGES, keys.WRIST_IMAGES)):
        base = (x[None] * (1 + c) + y[None] * 2 + 3 * t + 17 * k) % 256
        square = ((np.abs(x[None] - (40 + t + 5 * k) % SIZE) < 24) & (np.abs(y[None] - 128) < 24)) * 90
        img = np.stack([base, (base + square) % 256, (255 - base + 40 * c) % 256], -1)
        images[cam] = img.astype(np.uint8)
    rng = np.random.default_rng(k)
    actions = rng.uniform(-1, 1, (FRAMES, 7)).astype(np.float32)
    actions[:, -1] = np.sign(actions[:, -1])
    return Episode(states=rng.normal(size=(FRAMES, 8)).astype(np.float32), actions=actions,
                   task_description=f"task {k % 4}", images=images)


def template(out: Path, k: int) -> Path:
    from vlarl_cli.datasets.lerobot import write_lerobot

    root = out / f"template_{k}"
    if not root.exists():
        write_lerobot(root, [_episode(i) for i in range(k)], fps=FPS)
    return root


def expand(tpl: Path, episodes: int, out: Path) -> Path:
    """A v3.0 dataset of ``episodes`` episodes over the template's video windows (module docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = out / f"synthetic_{episodes}"
    if (root / "meta" / "info.json").exists():
        return root
    data = pq.read_table(tpl / "data/chunk-000/file-000.parquet")
    eps = pq.read_table(tpl / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    k, per_file = len(eps), 200
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    os.symlink(tpl / "videos", root / "videos")
    for name in ("tasks.parquet", "stats.json"):
        (root / "meta" / name).write_bytes((tpl / "meta" / name).read_bytes())
    rows, start = [], 0
    for f in range(0, episodes, per_file):
        parts = []
        for e in range(f, min(f + per_file, episodes)):
            src = eps[e % k]
            part = data.slice(src["dataset_from_index"], src["length"])
            n = part.num_rows
            state = np.asarray(part.column("observation.state").to_pylist(), np.float32) + 1e-3 * e
            part = part.set_column(part.column_names.index("observation.state"), "observation.state",
                                   pa.array(list(state), type=pa.list_(pa.float32(), 8)))
            part = part.set_column(part.column_names.index("episode_index"), "episode_index", pa.array(np.full(n, e)))
            part = part.set_column(part.column_names.index("index"), "index", pa.array(np.arange(start, start + n)))
            parts.append(part)
            rows.append({**src, "episode_index": e, "data/file_index": f // per_file, "dataset_from_index": start,
                         "dataset_to_index": start + n})
            start += n
        pq.write_table(pa.concat_tables(parts), root / f"data/chunk-000/file-{f // per_file:03d}.parquet")
    pq.write_table(pa.Table.from_pylist(rows), root / "meta/episodes/chunk-000/file-000.parquet")
    info = json.loads((tpl / "meta/info.json").read_text())
    info.update(total_episodes=episodes, total_frames=start, splits={"train": f"0:{episodes}"})
    (root / "meta/info.json").write_text(json.dumps(info, indent=2))
    return root


def child(root: str, workers: int, batch: int, batches: int, warmup: int, chunk: int) -> None:
    """What vlarl sft runs around its training steps: index, statistics, DataLoader (prints one JSON line)."""
    import torch

    from vlarl_cli.datasets.frames import video_backend
    from vlarl_cli.datasets.loader import make_loader
    from vlarl_cli.datasets.sampling import GlobalOrder, MicroBatches
    from vlarl_cli.datasets.stats import openpi_norm_stats, pi0_model_actions
    from vlarl_cli.datasets.stream import FrameDataset, open_source

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    source = open_source(root)
    index_s = time.perf_counter() - t0
    openpi_norm_stats(source.states, pi0_model_actions(source.actions, source.states, gripper="from_01",
                                                        extra_delta_transform=True))
    data = FrameDataset([source], chunk, video_backend=video_backend("pyav"))
    steps = warmup + batches
    sampler = MicroBatches(GlobalOrder([len(data)], batch, seed=0), rank=0, world=1, micro=batch, first_step=1,
                           last_step=steps)
    it = iter(make_loader(data, sampler, workers=workers, prefetch=2))
    for _ in range(warmup):
        next(it)
    t1 = time.perf_counter()
    for _ in range(batches):
        b = next(it)
    seconds = time.perf_counter() - t1
    assert b.actions.shape == (batch, chunk, 7) and not b.bad
    print(json.dumps({"loader": "vlarl", "frames_per_s": batches * batch / seconds, "seconds": seconds,
                      "frames": len(data), "index_s": index_s, "backend": "pyav", "workers": workers}), flush=True)


def _memory(pid: int) -> tuple[float, float]:
    """(PSS, RSS) in MiB summed over ``pid`` and its descendants."""
    import psutil

    pss = rss = 0.0
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0.0
    for p in procs:
        try:
            text = Path(f"/proc/{p.pid}/smaps_rollup").read_text()
        except OSError:
            continue
        fields = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()[1:] if line.split()}
        pss += fields.get("Pss:", 0.0) / 1024
        rss += fields.get("Rss:", 0.0) / 1024
    return pss, rss


def run_child(cmd: list[str]) -> tuple[dict, float, float]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    peak_pss = peak_rss = 0.0
    while proc.poll() is None:
        pss, rss = _memory(proc.pid)
        peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
        time.sleep(0.1)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode:
        raise SystemExit(f"{cmd} failed ({proc.returncode}): {out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1]), peak_pss, peak_rss


def ours_cmd(root: Path, a: argparse.Namespace) -> list[str]:
    return [sys.executable, __file__, "--child", str(root), "--workers", str(a.workers), "--batch", str(a.batch),
            "--batches", str(a.batches), "--warmup", str(a.warmup), "--chunk", str(a.chunk)]


def part_rss(a: argparse.Namespace, tpl: Path) -> None:
    rows = []
    for n in a.episodes:
        root = expand(tpl, n, a.out)
        result, pss, rss = run_child(ours_cmd(root, a))
        decoded = result["frames"] * 2 * SIZE * SIZE * 3 / 2**30
        rows.append({"episodes": n, "frames": result["frames"], "decoded_gib": round(decoded, 2),
                     "peak_pss_mib": round(pss, 1), "peak_rss_mib": round(rss, 1), "index_s": round(result["index_s"], 2),
                     "frames_per_s": round(result["frames_per_s"], 1)})
        print(json.dumps({"part": "rss", **rows[-1]}), flush=True)
    peak = max(r["peak_pss_mib"] for r in rows)
    emit({"benchmark": "sft_loader", "part": "rss_summary", "workers": a.workers, "batch": a.batch,
          "pss_growth_mib": round(rows[-1]["peak_pss_mib"] - rows[0]["peak_pss_mib"], 1),
          "largest_over_peak_pss": round(rows[-1]["decoded_gib"] * 1024 / peak, 1), "rows": rows}, smoke=a.smoke)


def part_speed(a: argparse.Namespace, tpl: Path) -> None:
    root = expand(tpl, a.speed_episodes, a.out)
    ref = REPO / ".reference" / "lerobot_v30" / "bin" / "python"
    if not ref.is_file():
        skipped("sft_loader", f"part speed needs lerobot's reference venv ({ref} is missing: bash "
                "scripts/reference/lerobot.sh)", smoke=a.smoke)
        return
    lerobot_cmd = [str(ref), str(REPO / "benchmarks" / "lerobot_loader.py"), str(root), "--workers", str(a.workers),
                   "--batch", str(a.batch), "--batches", str(a.batches), "--warmup", str(a.warmup), "--chunk", str(a.chunk)]
    ours, theirs = [], []
    for r in range(a.repeats):
        ours.append(run_child(ours_cmd(root, a))[0]["frames_per_s"])
        result = run_child(lerobot_cmd)[0]
        theirs.append(result["frames_per_s"])
        print(json.dumps({"part": "speed_repeat", "repeat": r, "vlarl": ours[-1], "lerobot": theirs[-1]}), flush=True)
    emit({"benchmark": "sft_loader", "part": "speed", "episodes": a.speed_episodes, "frames": a.speed_episodes * FRAMES,
                      "workers": a.workers, "batch": a.batch, "chunk": a.chunk, "lerobot_backend": result["backend"],
                      "vlarl_frames_per_s": float(np.median(ours)), "lerobot_frames_per_s": float(np.median(theirs)),
                      "ratio": float(np.median(ours) / np.median(theirs)), "vlarl_runs": ours, "lerobot_runs": theirs},
         smoke=a.smoke)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/sft_bench"))
    ap.add_argument("--part", choices=("rss", "speed", "both"), default="both")
    ap.add_argument("--episodes", type=int, nargs="+", default=[25, 200, 1600])
    ap.add_argument("--speed-episodes", type=int, default=200)
    ap.add_argument("--template", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    add_smoke(ap)
    a = ap.parse_args()
    if a.smoke:
        a.episodes, a.speed_episodes, a.template, a.batches, a.warmup, a.batch, a.repeats = [1], 1, 1, 2, 1, 4, 1
    if a.child:
        child(a.child, a.workers, a.batch, a.batches, a.warmup, a.chunk)
        return
    a.out.mkdir(parents=True, exist_ok=True)
    tpl = template(a.out, a.template)
    if a.part in ("rss", "both"):
        part_rss(a, tpl)
    if a.part in ("speed", "both"):
        part_speed(a, tpl)


if __name__ == "__main__":
    main()
