"""Process-group setup and the rank helpers (the only module that reads RANK / WORLD_SIZE).

Single process:  ``vlarl rl-train --config quickstart``
Multi process:   ``vlarl rl-train --config X --nproc-per-node 2`` (re-launches itself through
                 ``torch.distributed.run``, the launcher behind ``torchrun``), or
                 ``torchrun --nproc-per-node 2 -m vlarl_cli.cli.rl_train --config X`` (:func:`relaunch`).
Multi node:      add ``--nnodes N --node-rank R --master-addr HOST --master-port P`` (same rendezvous as
                 torchrun). NCCL on GPUs and gloo on CPU, chosen by :mod:`vlarl_cli.distributed.device`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist

from vlarl_cli.distributed.device import default_backend, default_device


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def env_world() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from the launcher's environment, (0, 1, 0) when run directly."""
    return (int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")),
            int(os.environ.get("LOCAL_RANK", "0")))


def launched() -> bool:
    """This process was started by torchrun / ``torch.distributed.run`` (one rank of a job)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def launch_world_size(nnodes: int, nproc_per_node: int) -> int:
    """The world size of this launch: the launcher's when started by it, else ``nnodes x nproc_per_node``."""
    return env_world()[1] if launched() else nnodes * nproc_per_node


#: how long a multi-node launch waits for every node to join before it says which did not (torch's own: 600 s)
RENDEZVOUS_TIMEOUT_S = 180


def relaunch(module: str, args: list[str], *, nproc_per_node: int, nnodes: int, node_rank: int, master_addr: str,
             master_port: int, rendezvous_timeout_s: int = RENDEZVOUS_TIMEOUT_S, log_dir: Path | None = None) -> None:
    """Run ``python -m module *args`` on every rank of a new job through ``torch.distributed.run``; a node that
    does not arrive within ``rendezvous_timeout_s`` ends the launch with a message naming it.

    With ``log_dir`` (``<run>/logs``) every rank's stdout and stderr also go to files (torchrun's
    ``--log-dir`` / ``--tee 3``): ``<log_dir>/node<R>/<job id>/attempt_0/<local rank>/{stdout,stderr}.log``;
    the console shows each line once, prefixed with its local rank (``[default0]:``).
    """
    from torch.distributed import run as torch_run

    from vlarl_cli.errors import ConfigError

    _check_master_addr(master_addr, master_port)  # the rendezvous binds or connects there, even on one node
    launch = [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}", f"--node-rank={node_rank}",
              f"--master-addr={master_addr}", f"--master-port={master_port}",
              f"--rdzv-conf=timeout={rendezvous_timeout_s}"]
    logs = ""
    if log_dir is not None:
        from vlarl_cli.checkpoints.atomic import check_writable_folder

        node_logs = Path(log_dir).expanduser() / f"node{node_rank}"
        check_writable_folder(node_logs, "The folder of the rank logs (<runner.logger.log_path>/logs)")
        node_logs.mkdir(parents=True, exist_ok=True)
        launch += [f"--log-dir={node_logs}", "--tee=3"]
        logs = f" Each rank's full output is under {node_logs}/ (<job id>/attempt_0/<local rank>/)."
    try:
        torch_run.main([*launch, "-m", module, *args])
    except Exception as err:  # ChildFailedError: the child printed its own message
        if type(err).__name__ == "SignalException":  # SIGTERM / SIGHUP to the launcher: forwarded to the ranks
            from vlarl_cli.cli.boundary import Terminated

            raise Terminated(str(err)) from None
        if isinstance(err, RuntimeError) and type(err).__name__ in ("DistStoreError", "DistNetworkError"):
            raise _rendezvous_error(err, nnodes=nnodes, node_rank=node_rank, master=f"{master_addr}:{master_port}",
                                    timeout_s=rendezvous_timeout_s) from None
        raise ConfigError(f"The distributed job failed: {type(err).__name__}.{logs}",
                          "Read the per-rank output above; rank 0's message names the problem.") from None


def _check_master_addr(master_addr: str, master_port: int) -> None:
    import socket

    from vlarl_cli.errors import ConfigError

    try:
        socket.getaddrinfo(master_addr, master_port)
    except (OSError, UnicodeError) as err:
        raise ConfigError(f"--master-addr {master_addr} cannot be resolved ({err}); the nodes could never meet.",
                          "Pass the address (or a resolvable host name) of the machine that runs --node-rank 0.") from None


def _rendezvous_error(err: RuntimeError, *, nnodes: int, node_rank: int, master: str, timeout_s: int) -> Exception:
    import re

    from vlarl_cli.errors import ConfigError

    fix = (f"Start the same command on each of the {nnodes} nodes with its own --node-rank (0..{nnodes - 1}) within "
           f"{timeout_s} s of each other, check that every node reaches {master} (address, firewall), or give "
           "them longer with --rendezvous-timeout.")
    joined = re.search(r"(\d+)/(\d+) clients joined", str(err))
    if node_rank == 0:
        count = f"{joined.group(1)} of {joined.group(2)}" if joined else "not all"
        return ConfigError(f"The rendezvous at {master} timed out after {timeout_s} s: {count} nodes joined (this one, "
                           f"node rank 0, among them); the other node ranks (1..{nnodes - 1}) did not all arrive.", fix)
    return ConfigError(f"This node (node rank {node_rank}) did not reach the rendezvous at {master} within {timeout_s} s "
                       f"(node rank 0 serves it there): {str(err).splitlines()[0]}", fix)


def init_distributed(timeout_s: int = 1800) -> DistContext:
    """Join the process group when launched with several processes; no-op for one process."""
    rank, world_size, local_rank = env_world()
    device = default_device(local_rank)
    if world_size > 1 and not torch_dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch_dist.init_process_group(backend=default_backend(device), timeout=timedelta(seconds=timeout_s))
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def shutdown() -> None:
    if torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def barrier(group: Any = None) -> None:
    if torch_dist.is_initialized():
        torch_dist.barrier(group=group)


def leave_together() -> None:
    """Every rank finished: wait for the others, then tear the process groups down before the interpreter
    exits (gloo's threads destroyed at interpreter teardown can abort a process that already succeeded)."""
    barrier()
    shutdown()


def all_gather_lists(items: list[Any], world_size: int, group: Any = None) -> list[Any]:
    """The picklable ``items`` of every rank of ``group`` (``world_size`` ranks), concatenated in rank order."""
    if world_size <= 1:
        return items
    gathered: list[Any] = [None] * world_size
    torch_dist.all_gather_object(gathered, items, group=group)
    return [x for part in gathered for x in part]


def all_reduce_mean_(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """In-place mean over the ranks of ``group`` (identity for one process)."""
    if torch_dist.is_initialized() and torch_dist.get_world_size(group) > 1:
        torch_dist.all_reduce(tensor, op=torch_dist.ReduceOp.SUM, group=group)
        tensor /= torch_dist.get_world_size(group)
    return tensor


class CrossRank:
    """:class:`vlarl_cli.algorithms.reduction.Reduce` over a process group (the data-parallel ranks).

    Reductions run on a CPU copy (gloo even where the default group also has NCCL, see
    ``device.default_backend``): the tensors are a few numbers."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.world = torch_dist.get_world_size(group) if torch_dist.is_initialized() else 1

    def _reduce(self, t: torch.Tensor, op: Any) -> torch.Tensor:
        if self.world == 1:
            return t
        out = t.detach().cpu().clone()
        torch_dist.all_reduce(out, op=op, group=self.group)
        return out.to(t.device)

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        return self._reduce(t, torch_dist.ReduceOp.SUM)

    def max(self, t: torch.Tensor) -> torch.Tensor:
        return self._reduce(t, torch_dist.ReduceOp.MAX)


def gradient_all_reduce(module: torch.nn.Module, group: Any = None) -> None:
    """Average gradients over the ranks of ``group`` (default: all) in one flat buffer (data-parallel
    without FSDP)."""
    if not (torch_dist.is_initialized() and torch_dist.get_world_size(group) > 1):
        return
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce_mean_(flat, group)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


def broadcast_module_(module: torch.nn.Module, src: int = 0, group: Any = None) -> None:
    """Make the parameters and buffers of every rank of ``group`` equal to (global) rank ``src``'s."""
    if not (torch_dist.is_initialized() and torch_dist.get_world_size(group) > 1):
        return
    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            torch_dist.broadcast(tensor.data, src=src, group=group)


def broadcast_object(obj: Any, src: int) -> Any:
    """``obj`` as (global) rank ``src`` has it, on every rank (a picklable object; identity for one process)."""
    if not torch_dist.is_initialized():
        return obj
    box = [obj]
    torch_dist.broadcast_object_list(box, src=src)
    return box[0]


def print0(*args: object) -> None:
    """print on the main process only."""
    if env_world()[0] == 0:
        print(*args, flush=True)
