"""Transport and weight-sync speed between two gloo processes on this machine. Prints ONE JSON line.

    python benchmarks/transport.py                    # N = 50 round trips, ~50M-parameter weight sync
    python benchmarks/transport.py --repeats 20 --sync-layers 4 --sync-pushes 3

Observation round trip (rank 0 -> rank 1 -> rank 0) of a LIBERO-sized observation: 8 envs, two uint8
cameras ``[8, 128, 128, 3]``, states ``[8, 8]`` float32, 8 task strings:
  * ``dict_rt_ms``: :func:`send_dict` / :func:`recv_dict`;
  * ``object_rt_ms``: the simplest baseline, ``torch.distributed.send_object_list`` / ``recv_object_list``
    (pickles the tensors);
  * ``object_over_dict`` = object / dict.
Weight sync, actor on rank 0 -> rollout on rank 1, a transformer-like stack of ``--sync-layers`` blocks
(~3.1M parameters and 10 tensors each; 16 blocks = ~50M parameters, 200 MB fp32):
  * ``sync_push_s`` (per ``bucket_mb``): one :meth:`WeightSync.push` with a new version;
  * ``per_tensor_broadcast_s``: one ``broadcast`` per tensor (what ``dist.broadcast_module_`` does);
  * ``sync_skipped_push_ms``: a push with an unchanged version.
``per_tensor_over_push`` and ``sync_gbps`` refer to the first ``--bucket-mb`` (the default 256).
All figures are medians measured on rank 0, the compared variants interleaved repetition by repetition
(the host is shared); one warm-up each; one intra-op thread per process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp
from torch import nn

from _bench import add_smoke, emit


def observation() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {
        "main_images": torch.randint(0, 256, (8, 128, 128, 3), dtype=torch.uint8, generator=g),
        "wrist_images": torch.randint(0, 256, (8, 128, 128, 3), dtype=torch.uint8, generator=g),
        "states": torch.randn(8, 8, generator=g),
        "task_descriptions": [f"pick up the black bowl number {i} and place it on the plate" for i in range(8)],
    }


class _Block(nn.Module):
    """Pre-norm transformer block shapes (hidden 512, MLP 2048): 3.15M parameters in 10 tensors."""

    def __init__(self, hidden: int = 512) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden, bias=False)
        self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden, bias=False)


def _medians(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per function, the functions interleaved so that both see the same host load (the
    machine is shared; sequential blocks of repetitions drift with other processes' load)."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _worker(rank: int, port: int, args: argparse.Namespace, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch_dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=600))
    from vlarl_cli.distributed.transport import recv_dict, send_dict
    from vlarl_cli.distributed.weight_sync import WeightSync

    obs = observation()
    result: dict[str, Any] = {}

    def dict_round_trip() -> None:
        if rank == 0:
            send_dict(obs, 1)
            recv_dict(1)
        else:
            send_dict(recv_dict(0), 0)

    def object_round_trip() -> None:
        box: list[Any] = [obs if rank == 0 else None]
        if rank == 0:
            torch_dist.send_object_list(box, 1)
            torch_dist.recv_object_list(box, 1)
        else:
            torch_dist.recv_object_list(box, 0)
            torch_dist.send_object_list(box, 0)

    rt = _medians({"dict": dict_round_trip, "object": object_round_trip}, args.repeats)
    dict_s, object_s = rt["dict"], rt["object"]
    nbytes = sum(v.numel() * v.element_size() for v in obs.values() if isinstance(v, torch.Tensor))
    result.update(obs_tensor_bytes=nbytes, dict_rt_ms=round(dict_s * 1e3, 3), object_rt_ms=round(object_s * 1e3, 3),
                  object_over_dict=round(object_s / dict_s, 2))

    torch.manual_seed(0)
    model = nn.Sequential(*[_Block() for _ in range(args.sync_layers)])
    state = model.state_dict()
    result.update(sync_parameters=sum(p.numel() for p in model.parameters()), sync_tensors=len(state),
                  sync_bytes=sum(t.numel() * t.element_size() for t in state.values()))
    version = [0]
    syncs = {str(mb): WeightSync(model, src=0, ranks=[0, 1], bucket_mb=mb) for mb in args.bucket_mb}

    def pusher(sync: WeightSync) -> Callable[[], None]:
        def push() -> None:
            version[0] += 1
            assert sync.push(version[0])
        return push

    def per_tensor() -> None:
        with torch.no_grad():
            for tensor in state.values():
                torch_dist.broadcast(tensor, src=0)

    timed = _medians({**{mb: pusher(sync) for mb, sync in syncs.items()}, "per_tensor": per_tensor},
                     args.sync_pushes)
    push_s = {mb: round(timed[mb], 4) for mb in syncs}
    result["sync_push_s"] = push_s
    result["sync_buckets"] = {mb: int(sync.stats["buckets"]) for mb, sync in syncs.items()}
    result["per_tensor_broadcast_s"] = round(timed["per_tensor"], 4)
    default = push_s[str(args.bucket_mb[0])]
    result["per_tensor_over_push"] = round(timed["per_tensor"] / default, 2)  # for the first --bucket-mb
    result["sync_gbps"] = round(result["sync_bytes"] / default / 1e9, 3)
    sync = syncs[str(args.bucket_mb[0])]
    if rank == 0:  # new actor weights, then one real push: the rollout copy must equal them exactly
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.5)
    version[0] += 1
    assert sync.push(version[0])
    fingerprint = torch.stack([t.double().sum() for t in state.values()])
    source = fingerprint.clone()
    torch_dist.broadcast(source, src=0)
    result["sync_verified"] = bool(torch.equal(fingerprint, source))

    def skipped() -> None:
        assert not sync.push(version[0])

    result["sync_skipped_push_ms"] = round(_medians({"skip": skipped}, args.repeats)["skip"] * 1e3, 4)
    torch_dist.barrier()
    if rank == 0:
        Path(out).write_text(json.dumps(result))
    torch_dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50, help="round trips / skipped pushes per median")
    parser.add_argument("--sync-layers", type=int, default=16, help="blocks of 3.15M parameters")
    parser.add_argument("--sync-pushes", type=int, default=7, help="timed pushes per median")
    parser.add_argument("--bucket-mb", type=float, nargs="+", default=[256.0, 32.0])
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.sync_layers, args.sync_pushes, args.bucket_mb = 2, 1, 1, [32.0]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        mp.start_processes(_worker, args=(port, args, out), nprocs=2, join=True, start_method="spawn")
        result = json.loads(Path(out).read_text())
    result = {"benchmark": "transport", "backend": "gloo", "processes": 2, "repeats": args.repeats,
              "arch": platform.machine(), **result}
    emit(result, smoke=args.smoke)


if __name__ == "__main__":
    main()
