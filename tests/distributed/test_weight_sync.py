"""WeightSync: bucket plan by hand, then 3 gloo processes (source on rank 2, receivers on 0 and 1).

Rank 2 holds the "actor"; rank 0 an fp32 rollout copy (sync group {0, 2}, rank 1 outside), rank 1 a bf16
rollout copy (sync group {1, 2} passed in as ``group=``, rank 0 outside). The outside rank runs its push
with every torch.distributed communication function replaced by one that fails, so "never communicates"
is checked, not assumed.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from datetime import timedelta

import pytest
import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp
from torch import nn

from vlarl_cli.distributed.weight_sync import WeightSync, first_mismatch, plan_buckets
from vlarl_cli.errors import ConfigError

BUCKET_BYTES = 64


class _Net(nn.Module):
    """Mixed dtypes. state_dict order: low, big, count, mask, lin.weight, lin.bias."""

    def __init__(self, out: int = 3) -> None:
        super().__init__()
        self.low = nn.Parameter(torch.zeros(5, dtype=torch.bfloat16))  # 10 bytes
        self.big = nn.Parameter(torch.zeros(10, 10))  # 400 bytes > one bucket: a bucket of its own
        self.register_buffer("count", torch.zeros(2, dtype=torch.int64))  # 16 bytes
        self.register_buffer("mask", torch.zeros(3, dtype=torch.bool))  # 3 bytes
        self.lin = nn.Linear(4, out)  # 48 + 12 bytes: one shared bucket


def _source_state(version: int) -> dict[str, torch.Tensor]:
    """The actor's weights at ``version``, fully determined by it (every rank can rebuild them)."""
    g = torch.Generator().manual_seed(version)
    big = torch.randn(10, 10, generator=g)
    big[0, 0], big[0, 1] = float("nan"), -0.0  # bit patterns a lossy path would not keep
    return {"low": torch.randn(5, generator=g).to(torch.bfloat16), "big": big,
            "count": torch.tensor([version, -(2**40) - version]), "mask": torch.tensor([True, False, version % 2 == 0]),
            "lin.weight": torch.randn(3, 4, generator=g), "lin.bias": torch.randn(3, generator=g)}


def _load(net: nn.Module, state: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, tensor in net.state_dict(keep_vars=True).items():
            tensor.copy_(state[name])


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def _assert_bitwise(net: nn.Module, state: dict[str, torch.Tensor]) -> None:
    own = net.state_dict()
    assert list(own) == ["low", "big", "count", "mask", "lin.weight", "lin.bias"]
    for name, tensor in own.items():
        want = state[name].to(tensor.dtype)  # the cast copy_ performs on a bf16 receiver
        assert torch.equal(_bits(tensor), _bits(want)), name


@contextlib.contextmanager
def _no_communication() -> Iterator[None]:
    names = ["broadcast", "all_reduce", "all_gather", "send", "recv", "isend", "irecv", "barrier", "new_group",
             "broadcast_object_list", "all_gather_object", "batch_isend_irecv"]
    saved = {n: getattr(torch_dist, n) for n in names}

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a rank outside the sync group communicated")

    for n in names:
        setattr(torch_dist, n, forbidden)
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(torch_dist, n, fn)


def _run(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch_dist.init_process_group("gloo", rank=rank, world_size=3, timeout=timedelta(seconds=30))
    net = _Net() if rank != 1 else _Net().to(torch.bfloat16)  # bf16 rollout copy: count/mask keep their dtype
    if rank == 2:
        _load(net, _source_state(1))
    bucket_mb = BUCKET_BYTES / 2**20
    main = WeightSync(net, src=2, ranks=[2, 0], bucket_mb=bucket_mb)  # new_group on all three ranks
    g12 = torch_dist.new_group([1, 2])
    bf16 = WeightSync(net, src=2, ranks=[1, 2], bucket_mb=bucket_mb, group=g12)
    assert main.active == (rank != 1) and bf16.active == (rank != 0)

    # 1. first push: receivers equal the source bitwise (bf16 copy: equal to the cast), in 5 buckets
    if rank == 1:
        with _no_communication():
            assert main.push(1) is False and main.stats["skipped"] == 1
    else:
        assert main.push(1) is True
        assert main.stats["buckets"] == 5 and main.stats["bytes"] == 10 + 400 + 16 + 3 + 48 + 12
        assert main.stats["skipped"] == 0
        _assert_bitwise(net, _source_state(1))
    if rank == 0:
        with _no_communication():
            assert bf16.push(1) is False
    else:
        assert bf16.push(1) is True
        _assert_bitwise(net, _source_state(1))

    # 2. same version again: False everywhere and nothing moves (a local perturbation survives)
    if rank == 0:
        with torch.no_grad():
            net.big.add_(5.0)
        perturbed = net.big.detach().clone()
    if rank != 1:
        assert main.push(1) is False
        assert main.stats["skipped"] == 1 and main.stats["bytes"] == 0
    if rank == 0:
        assert torch.equal(_bits(net.big), _bits(perturbed))

    # 3. a new version sent from an explicit state (other key order, values not in the source module)
    if rank == 2:
        state = dict(reversed(list(_source_state(2).items())))
        assert main.push(2, state) is True
        _assert_bitwise(net, _source_state(1))  # the source module itself is untouched
    elif rank == 0:
        assert main.push(2) is True
        _assert_bitwise(net, _source_state(2))

    # 4. a receiver with another architecture: every participant raises, naming the key, nobody hangs
    wrong = _Net(out=2) if rank == 0 else net
    check = WeightSync(wrong, src=2, ranks=[0, 1, 2])  # the whole world: the default group
    with pytest.raises(ConfigError) as err:
        check.push(1)
    message = str(err.value)
    assert 'rank 0: key "lin.weight" has shape [2, 4] here but [3, 4] on the source' in message, message
    torch_dist.barrier()  # still in step after the failure

    # 5. the source cannot send what it was given: it says so in the header and everybody raises
    fresh = WeightSync(net, src=2, ranks=[0, 1, 2])
    with pytest.raises(ConfigError) as err:
        fresh.push(1, {**_source_state(1), "big": "not a tensor"} if rank == 2 else None)  # type: ignore[dict-item]
    expected = '"big" is a str, not a tensor' if rank == 2 else "source rank 2 could not prepare"
    assert expected in str(err.value), str(err.value)
    torch_dist.barrier()
    torch_dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_three_processes_sync_skip_cast_outside_and_mismatch() -> None:
    mp.start_processes(_run, args=(_free_port(),), nprocs=3, join=True, start_method="spawn")


def test_plan_buckets_by_hand() -> None:
    layout = [("low", (5,), torch.bfloat16), ("big", (10, 10), torch.float32), ("count", (2,), torch.int64),
              ("mask", (3,), torch.bool), ("lin.weight", (3, 4), torch.float32), ("lin.bias", (3,), torch.float32)]
    plan = plan_buckets(layout, BUCKET_BYTES)
    # grouped by dtype in order of first appearance; "big" alone; weight (48 B) + bias (12 B) <= 64 B
    assert [(b.dtype, [s.name for s in b.slots]) for b in plan] == [
        (torch.bfloat16, ["low"]), (torch.float32, ["big"]), (torch.float32, ["lin.weight", "lin.bias"]),
        (torch.int64, ["count"]), (torch.bool, ["mask"])]
    assert [(s.offset, s.numel) for s in plan[2].slots] == [(0, 12), (12, 3)]
    assert [b.nbytes for b in plan] == [10, 400, 60, 16, 3]
    assert len(plan_buckets(layout, 59)) == 6  # one byte less than weight + bias splits them
    assert plan_buckets([], 64) == []
    (scalar,) = plan_buckets([("s", (), torch.float64)], 1)  # a 0-dim tensor still has one element
    assert (scalar.dtype, scalar.numel, scalar.nbytes, scalar.slots[0].shape) == (torch.float64, 1, 8, ())


def test_first_mismatch_names_the_key() -> None:
    source = [("a", (2,)), ("b", (3, 4))]
    assert first_mismatch(source, {"a": (2,), "b": (3, 4)}) is None
    assert first_mismatch(source, {"b": (3, 4), "a": (2,)}) is None  # order does not matter
    assert '"b" has shape [4, 3] here but [3, 4]' in str(first_mismatch(source, {"a": (2,), "b": (4, 3)}))
    assert '"b" (source shape [3, 4]) is missing here' in str(first_mismatch(source, {"a": (2,)}))
    assert '"c" (shape [1]) exists here but not' in str(first_mismatch(source, {"a": (2,), "b": (3, 4), "c": (1,)}))


def test_single_process_and_bad_arguments() -> None:
    net = _Net()
    alone = WeightSync(net, src=0, ranks=[0])  # no process group: nothing to send to, version tracked only
    assert alone.push(1) is False and alone.stats["skipped"] == 0
    assert alone.push(1) is False and alone.stats["skipped"] == 1
    with pytest.raises(ConfigError, match="source rank 3 is not among"):
        WeightSync(net, src=3, ranks=[0, 1])
    with pytest.raises(ConfigError, match=r"needs torch\.distributed"):
        WeightSync(net, src=0, ranks=[0, 1])
    with pytest.raises(ConfigError, match="bucket_mb must be positive"):
        WeightSync(net, src=0, ranks=[0], bucket_mb=0)
