"""send_dict / recv_dict / isend_dict: bit-exact round trips of observation dicts between 2 gloo processes."""

from __future__ import annotations

import os
import pickle
import socket
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp

from vlarl_cli.distributed.transport import _aligned, decode, encode


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor in row-major order: equality of these is bitwise equality."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _assert_same(got: Any, want: Any, path: str = "") -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), path
        assert got.dtype == want.dtype and got.shape == want.shape, (path, got.dtype, got.shape)
        assert torch.equal(_bits(got), _bits(want)), path
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), path
        for k in want:
            _assert_same(got[k], want[k], f"{path}.{k}")
    else:
        assert type(got) is type(want) and got == want, (path, got, want)


def _message(seed: int) -> dict[str, Any]:
    """Every kind of value the env <-> rollout traffic carries, with bit patterns that catch any cast."""
    g = torch.Generator().manual_seed(seed)
    wide = torch.randn(3, 8, generator=g)
    wide[0, 0], wide[0, 2], wide[1, 4] = float("nan"), -0.0, float("inf")
    return {
        "images": torch.randint(0, 256, (2, 4, 4, 3), dtype=torch.uint8, generator=g),
        "dones": torch.rand(5, generator=g) > 0.5,
        "states": wide[:, ::2],  # non-contiguous: strides (8, 2)
        "steps": torch.randint(-(2**62), 2**62, (4,), dtype=torch.int64, generator=g),
        "half": torch.randn(3, generator=g).to(torch.bfloat16),
        "scalar": torch.tensor(seed, dtype=torch.int32),
        "empty": torch.empty(0, 7),
        "task": ["put the bowl on the plate", "open the drawer", ""],
        "count": seed,
        "lr": 0.1 + seed,
        "episodes": {"success_once": [1.0, 0.0, 0.5], "inner": {"deep": torch.arange(seed + 1)}},
    }


def test_encode_decode_round_trip_is_bitwise_and_never_pickles_tensors() -> None:
    msg = _message(3)
    assert not msg["states"].is_contiguous()
    header_bytes, message = encode(msg)
    _assert_same(decode(header_bytes, message), msg)
    header = message[:header_bytes].numpy().tobytes()
    # the header carries structure and small values only: the tensor bytes follow it, 64-byte aligned
    assert b"_rebuild_tensor" not in header  # how pickle spells a tensor (torch/_utils.py)
    assert not any(isinstance(v, torch.Tensor) for v in pickle.loads(header)["tree"].values())
    assert header_bytes < 1500 and message.dtype == torch.uint8
    sizes = [96, 5, 12 * 4, 4 * 8, 3 * 2, 4, 0, 4 * 8]  # images, dones, states, steps, half, scalar, empty, deep
    assert message.numel() == -(-header_bytes // 64) * 64 + sum(-(-n // 64) * 64 for n in sizes)


def test_decoded_tensors_own_their_storage() -> None:
    header_bytes, message = encode({"x": torch.arange(6.0).view(2, 3), "y": torch.ones(1000, dtype=torch.uint8)})
    out = decode(header_bytes, message, device="cpu")
    base = _aligned(header_bytes)
    assert torch.equal(message[base:base + 24].view(torch.float32), torch.arange(6.0))  # x sits at offset 0
    assert message[base + 64:base + 64 + 1000].eq(1).all()  # y at the next 64-byte boundary
    message.zero_()  # the message buffer can go: nothing received refers to it
    assert out["x"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and out["x"].is_contiguous()
    assert out["x"].untyped_storage().nbytes() == 24 and int(out["y"].sum()) == 1000
    with pytest.raises(TypeError, match="sends a mapping"):
        encode([torch.ones(1)])  # type: ignore[arg-type]


def _run(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch_dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=30))
    from vlarl_cli.distributed.transport import isend_dict, recv_dict, send_dict

    peer = 1 - rank
    # 1. blocking round trip: 0 -> 1 -> 0 (rank 1 echoes what it received)
    if rank == 0:
        send_dict(_message(0), 1)
        _assert_same(recv_dict(1), _message(0))
    else:
        got = recv_dict(0)
        _assert_same(got, _message(0))
        send_dict(got, 0)
    # 2. overlap: both ranks post two large messages to each other before receiving either. Blocking
    #    sends of 4 MB would deadlock here (each waits for a receive the other has not posted yet).
    big = [{"id": i, "obs": torch.full((1 << 20,), float(10 * rank + i))} for i in range(2)]
    pending = [isend_dict(m, peer) for m in big]
    for i in range(2):  # messages from one sender arrive in the order they were sent
        got = recv_dict(peer)
        assert got["id"] == i
        assert torch.equal(got["obs"], torch.full((1 << 20,), float(10 * peer + i)))
    for p in pending:
        p.wait()
    # 3. a message without tensors sends no payload, and a dict of only tensors no extra values
    if rank == 0:
        send_dict({"only": ["strings"], "n": 1}, 1)
        send_dict({"t": torch.ones(2, dtype=torch.bool)}, 1)
    else:
        assert recv_dict(0) == {"only": ["strings"], "n": 1}
        assert recv_dict(0)["t"].tolist() == [True, True]
    torch_dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_round_trip_and_overlapping_sends() -> None:
    mp.start_processes(_run, args=(_free_port(),), nprocs=2, join=True, start_method="spawn")
