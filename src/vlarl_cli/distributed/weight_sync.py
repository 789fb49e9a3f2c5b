"""Actor -> rollout weight sync over torch.distributed: bucketed broadcasts, skipped when nothing changed.

With separated placement (``cluster.component_placement``, e.g. actor on ranks 0-7 and rollout on 4-7)
the rollout copy of the policy must receive the actor's new weights after every update. RLinf does this
with its weight syncer (``weight_syncer/patch_syncer``) and the bucketed broadcast that verl, OpenRLHF and
NeMo-RL share: many tensors packed into a few flat buffers, one collective per buffer, so the cost is
bandwidth rather than per-message latency. This module is the same idea on plain torch.distributed
(gloo on CPU, NCCL on GPU, from the same code).

Protocol of one :meth:`WeightSync.push` (all participants call it, in the same order as every other
collective on the group):

1. ``src`` broadcasts an int64 header ``[version, layout_hash]``. When ``version`` equals the version of
   the last completed push every participant returns ``False``: nothing else moves. When the source
   cannot send its state (a sharded DTensor, a non-tensor value) the hash says so and every participant
   raises.
2. When ``layout_hash`` differs from the one seen last (always on the first push), ``src`` broadcasts its
   layout (names, shapes, dtypes) as bytes; each receiver compares names and shapes with its own
   ``state_dict()`` and the participants agree (one all-reduce) on whether anybody mismatched. If so the
   lowest mismatching rank broadcasts its message and EVERY participant (the source included) raises the
   same :class:`~vlarl_cli.errors.ConfigError`, so nobody is left waiting for buckets that never come.
3. The tensors, grouped by the source's dtype and packed into flat buckets of at most ``bucket_mb``, are
   broadcast one bucket at a time (as raw bytes, so every dtype travels bit-exactly on every backend), with
   the next bucket in flight while the previous one is unpacked. A bucket holding one tensor whose dtype
   and device already match is sent from / received into that tensor directly, without staging copies.
   Receivers ``copy_`` into their own
   parameters and buffers, which casts where the receiver holds another dtype (a bf16 rollout copy of an
   fp32 actor).
"""

from __future__ import annotations

import hashlib
import pickle
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import Tensor, nn

from vlarl_cli.errors import ConfigError

_MB = 1 << 20
_NO_ERROR = 1 << 62  # all-reduce MIN sentinel: "no participant mismatched"
_SOURCE_FAILED = -(1 << 62)  # header layout-hash sentinel: the source could not prepare its state


@dataclass(frozen=True)
class _Slot:
    """One tensor inside a bucket: ``flat[offset:offset + numel].view(shape)``."""

    name: str
    shape: tuple[int, ...]
    offset: int
    numel: int


@dataclass(frozen=True)
class Bucket:
    """One flat buffer of ``numel`` elements of ``dtype`` holding ``slots`` back to back."""

    dtype: torch.dtype
    numel: int
    slots: tuple[_Slot, ...]

    @property
    def nbytes(self) -> int:
        return self.numel * _itemsize(self.dtype)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def plan_buckets(layout: Sequence[tuple[str, tuple[int, ...], torch.dtype]], bucket_bytes: int) -> list[Bucket]:
    """Group tensors by dtype (in order of first appearance) and pack each group into flat buckets.

    Args:
        layout: ``(name, shape, dtype)`` per tensor, in sending order.
        bucket_bytes: capacity of a bucket; a tensor larger than that gets a bucket of its own.
    Returns:
        The buckets in broadcast order; every name appears in exactly one slot.
    """
    by_dtype: dict[torch.dtype, list[tuple[str, tuple[int, ...]]]] = {}
    for name, shape, dtype in layout:
        by_dtype.setdefault(dtype, []).append((name, tuple(shape)))
    buckets: list[Bucket] = []
    for dtype, entries in by_dtype.items():
        item = _itemsize(dtype)
        slots: list[_Slot] = []
        used = 0
        for name, shape in entries:
            numel = 1
            for d in shape:
                numel *= d
            if slots and (used + numel) * item > bucket_bytes:
                buckets.append(Bucket(dtype, used, tuple(slots)))
                slots, used = [], 0
            slots.append(_Slot(name, shape, used, numel))
            used += numel
        if slots:
            buckets.append(Bucket(dtype, used, tuple(slots)))
    return buckets


def _layout_hash(layout: Sequence[tuple[str, tuple[int, ...], torch.dtype]]) -> int:
    raw = pickle.dumps([(n, tuple(s), str(d)) for n, s, d in layout], protocol=4)
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little", signed=True)


def first_mismatch(source: Sequence[tuple[str, tuple[int, ...]]], own: Mapping[str, tuple[int, ...]]
                   ) -> str | None:
    """Describe the first key where the source layout and this rank's state differ, or None when they match.

    Keys are compared in the source's order first (missing here or another shape), then keys only this
    rank has.
    """
    seen = set()
    for name, shape in source:
        seen.add(name)
        if name not in own:
            return f'key "{name}" (source shape {list(shape)}) is missing here'
        if tuple(own[name]) != tuple(shape):
            return f'key "{name}" has shape {list(own[name])} here but {list(shape)} on the source'
    for name, shape in own.items():
        if name not in seen:
            return f'key "{name}" (shape {list(shape)}) exists here but not on the source'
    return None


def _module_device(module: nn.Module) -> torch.device:
    for param in module.parameters():
        return param.device
    for buffer in module.buffers():
        return buffer.device
    return torch.device("cpu")


class WeightSync:
    """Actor -> rollout weights over torch.distributed: bucketed broadcasts, skipped when nothing changed.

    Construct on EVERY rank of the world (creating the sub-group is collective over the whole world);
    ranks outside ``ranks`` get an inert object whose :meth:`push` returns False without communicating.

    Args:
        module: this rank's copy of the model (the actor on ``src``, the rollout copy on receivers).
        src: global rank that sends.
        ranks: global ranks taking part, ``src`` among them (any order).
        bucket_mb: capacity of one flat bucket in MiB.
        group: an existing process group over exactly ``ranks``; created with ``new_group`` when None
            (the default group when ``ranks`` is the whole world).
        device: where the buckets (and the 16-byte header) live; default the module's device. Every
            participant must use the same device type: with a ``cpu:gloo,cuda:nccl`` group a CPU receiver
            and a CUDA source would talk to different backends, so pass e.g. the rollout's CUDA device on an
            actor whose parameters are offloaded to the CPU.

    ``stats`` describes the last push: ``bytes``, ``buckets``, ``seconds``, ``skipped`` (0/1).
    """

    def __init__(self, module: nn.Module, *, src: int, ranks: Sequence[int], bucket_mb: float = 256.0,
                 group: torch_dist.ProcessGroup | None = None, device: torch.device | str | None = None) -> None:
        members = sorted(set(int(r) for r in ranks))
        if src not in members:
            raise ConfigError(f"WeightSync source rank {src} is not among the participating ranks {members}.",
                              "Place the actor's sending rank in the same sync group as the rollout ranks.")
        if bucket_mb <= 0:
            raise ConfigError(f"WeightSync bucket_mb must be positive, got {bucket_mb}.",
                              "Use e.g. 256 (MiB per broadcast).")
        self.module = module
        self.src = src
        self.ranks = members
        self.bucket_bytes = max(1, int(bucket_mb * _MB))
        self.device = torch.device(device) if device is not None else None
        self.stats: dict[str, float] = {"bytes": 0.0, "buckets": 0.0, "seconds": 0.0, "skipped": 1.0}
        self._last_version: int | None = None
        self._layout_hash: int | None = None
        self._plan: list[Bucket] = []
        self._buffers: list[Tensor] = []
        initialized = torch_dist.is_available() and torch_dist.is_initialized()
        if not initialized:
            if len(members) > 1 or src != 0:
                raise ConfigError(f"WeightSync over ranks {members} needs torch.distributed to be initialised.",
                                  "Launch with several processes (vlarl rl-train --nproc-per-node N) or "
                                  "call vlarl_cli.distributed.dist.init_distributed() first.")
            self.rank = 0
        else:
            self.rank = torch_dist.get_rank()
            world = torch_dist.get_world_size()
            if members[-1] >= world or members[0] < 0:
                raise ConfigError(f"WeightSync ranks {members} are outside the world of {world} processes.",
                                  f"Use ranks between 0 and {world - 1}.")
            if group is None and members != list(range(world)):
                group = torch_dist.new_group(members)  # collective over the whole world
        self.group = group
        self.active = self.rank in members
        # a group of one has nobody to talk to: pushes only track the version
        self._alone = len(members) == 1

    # ------------------------------------------------------------------ helpers
    def _own_state(self) -> dict[str, Tensor]:
        return {k: v for k, v in self.module.state_dict(keep_vars=True).items() if isinstance(v, Tensor)}

    def _broadcast_bytes(self, data: bytes | None, src: int, device: torch.device) -> bytes:
        size = torch.tensor([len(data) if data is not None else 0], dtype=torch.int64, device=device)
        torch_dist.broadcast(size, src=src, group=self.group)
        n = int(size.item())
        if n == 0:
            return b""
        if data is not None:
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
        else:
            buf = torch.empty(n, dtype=torch.uint8, device=device)
        torch_dist.broadcast(buf, src=src, group=self.group)
        return data if data is not None else buf.cpu().numpy().tobytes()

    def _check_layout(self, layout: list[tuple[str, tuple[int, ...], torch.dtype]] | None,
                      device: torch.device) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        """Send the source layout; every participant raises the same ConfigError when any receiver differs."""
        is_src = self.rank == self.src
        raw = self._broadcast_bytes(pickle.dumps(layout, protocol=4) if is_src else None, self.src, device)
        source_layout: list[tuple[str, tuple[int, ...], torch.dtype]] = (
            layout if is_src and layout is not None else pickle.loads(raw))
        problem = None
        if not is_src:
            own = {k: tuple(v.shape) for k, v in self._own_state().items()}
            problem = first_mismatch([(n, s) for n, s, _ in source_layout], own)
        flag = torch.tensor([self.rank if problem else _NO_ERROR], dtype=torch.int64, device=device)
        torch_dist.all_reduce(flag, op=torch_dist.ReduceOp.MIN, group=self.group)
        culprit = int(flag.item())
        if culprit != _NO_ERROR:
            text = f"rank {self.rank}: {problem}" if self.rank == culprit and problem else None
            message = self._broadcast_bytes(text.encode() if text else None, culprit, device).decode()
            raise ConfigError(f"WeightSync from rank {self.src}: the receiving model does not match the "
                              f"source model ({message}).",
                              "Build the rollout model from the same model config (architecture, action "
                              "dim, LoRA settings) as the actor.")
        return source_layout

    # ------------------------------------------------------------------ push
    def push(self, version: int, state: Mapping[str, Tensor] | None = None) -> bool:
        """Send the source's weights to every receiver when ``version`` is new; True when weights moved.

        Args:
            version: monotone id of the source weights (e.g. the global step); equal to the last pushed
                version means "unchanged" and only 16 bytes move.
            state: on ``src``, the full (unsharded) state dict to send; None means ``module.state_dict()``.
                Ignored on receivers.
        """
        t0 = time.perf_counter()
        self.stats = {"bytes": 0.0, "buckets": 0.0, "seconds": 0.0, "skipped": 1.0}
        if not self.active:
            return False
        if self._alone:
            changed = version != self._last_version
            self._last_version = version
            self.stats["skipped"] = float(not changed)
            return False
        device = self.device or _module_device(self.module)
        is_src = self.rank == self.src
        send: dict[str, Tensor] = {}
        layout: list[tuple[str, tuple[int, ...], torch.dtype]] | None = None
        header = torch.zeros(2, dtype=torch.int64, device=device)
        failure: ConfigError | None = None
        if is_src and version != self._last_version:
            try:
                send = self._source_state(state)
                layout = [(k, tuple(v.shape), v.dtype) for k, v in send.items()]
                header[1] = _layout_hash(layout)
            except ConfigError as err:  # tell the receivers before raising, so that nobody waits for buckets
                failure, header[1] = err, _SOURCE_FAILED
        if is_src:
            header[0] = version
        torch_dist.broadcast(header, src=self.src, group=self.group)
        got_version, got_hash = (int(x) for x in header.tolist())
        if got_version == self._last_version:
            self.stats["seconds"] = time.perf_counter() - t0
            return False
        if got_hash == _SOURCE_FAILED:
            raise failure or ConfigError(f"WeightSync: the source rank {self.src} could not prepare the weights of "
                                         f"version {got_version} (its own error says why).",
                                         "Read the error of the source rank.")
        if got_hash != self._layout_hash:
            checked = self._check_layout(layout, device)
            self._plan = plan_buckets(checked, self.bucket_bytes)
            self._layout_hash = got_hash
        with torch.no_grad():
            if is_src:
                self._send(send, device)
            else:
                self._receive(self._own_state(), device)
        self._last_version = got_version
        self.stats = {"bytes": float(sum(b.nbytes for b in self._plan)), "buckets": float(len(self._plan)),
                      "seconds": time.perf_counter() - t0, "skipped": 0.0}
        return True

    def _source_state(self, state: Mapping[str, Tensor] | None) -> dict[str, Tensor]:
        """The tensors to send, in the module's own ``state_dict()`` order (the receivers' order), then any
        extra keys of ``state``; raises ConfigError for values that cannot be sent as they are."""
        own = self._own_state()
        if state is None:
            send = own
        else:
            send = {k: state[k] for k in own if k in state}
            send.update({k: v for k, v in state.items() if k not in send})
        from torch.distributed.tensor import DTensor

        for name, value in send.items():
            if isinstance(value, DTensor):
                raise ConfigError(f'WeightSync was given the sharded tensor "{name}" (an FSDP DTensor).',
                                  "Pass the gathered full state on the source rank: "
                                  "push(version, fsdp.full_model_state(model)).")
            if not isinstance(value, Tensor):
                raise ConfigError(f'WeightSync state value "{name}" is a {type(value).__name__}, not a tensor.',
                                  "Pass a state dict of tensors (module.state_dict()).")
        return send

    def _staging(self, i: int, bucket: Bucket, device: torch.device) -> Tensor:
        """Flat view of ``bucket.numel`` elements in staging buffer ``i % 2``.

        With at most two buckets in flight, bucket ``i - 2`` (the previous user of the buffer) is complete.
        """
        if len(self._buffers) != 2:
            self._buffers = [torch.empty(0, dtype=torch.uint8, device=device) for _ in range(2)]
        buffer = self._buffers[i % 2]
        if buffer.numel() < bucket.nbytes or buffer.device != device:  # grows to the largest staged bucket
            buffer = self._buffers[i % 2] = torch.empty(bucket.nbytes, dtype=torch.uint8, device=device)
        return buffer[:bucket.nbytes].view(bucket.dtype)

    @staticmethod
    def _direct(tensor: Tensor, bucket: Bucket, device: torch.device) -> Tensor | None:
        """The tensor itself as the wire buffer when a bucket holds only it and no copy is needed."""
        t = tensor.detach()
        if t.dtype == bucket.dtype and t.device == device and t.is_contiguous():
            return t.reshape(-1)
        return None

    def _send(self, state: Mapping[str, Tensor], device: torch.device) -> None:
        pending: list[Any] = []
        for i, bucket in enumerate(self._plan):
            if bucket.numel == 0:
                continue
            flat = self._direct(state[bucket.slots[0].name], bucket, device) if len(bucket.slots) == 1 else None
            if flat is None:
                flat = self._staging(i, bucket, device)
                for slot in bucket.slots:
                    flat[slot.offset:slot.offset + slot.numel].view(slot.shape).copy_(state[slot.name])
            # raw bytes: exact for every dtype and supported by gloo and NCCL alike
            pending.append(torch_dist.broadcast(flat.view(torch.uint8), src=self.src, group=self.group,
                                                async_op=True))
            if len(pending) > 1:  # at most two buckets in flight: packing overlaps the previous broadcast
                pending.pop(0).wait()
        for work in pending:
            work.wait()

    def _receive(self, own: Mapping[str, Tensor], device: torch.device) -> None:
        buckets = [(i, b) for i, b in enumerate(self._plan) if b.numel > 0]

        def post(i: int, bucket: Bucket) -> tuple[Any, Tensor, bool]:
            # a lone tensor of the right dtype is received in place: no staging copy
            flat = self._direct(own[bucket.slots[0].name], bucket, device) if len(bucket.slots) == 1 else None
            direct = flat is not None
            if flat is None:
                flat = self._staging(i, bucket, device)
            work = torch_dist.broadcast(flat.view(torch.uint8), src=self.src, group=self.group, async_op=True)
            return work, flat, direct

        inflight = post(*buckets[0]) if buckets else None
        for k, (_, bucket) in enumerate(buckets):
            assert inflight is not None
            work, flat, direct = inflight
            inflight = post(*buckets[k + 1]) if k + 1 < len(buckets) else None
            work.wait()
            if not direct:
                for slot in bucket.slots:
                    own[slot.name].copy_(flat[slot.offset:slot.offset + slot.numel].view(slot.shape))
