"""Every core on the right work: one decision of who uses the CPU cores of this rank.

Three consumers share a rank's cores: the simulator worker processes (one core each while they step), the
inference of the rollout / eval process (``policy.sample``) and the trainer's update. Nothing set torch's
thread count before, so inference ran OpenMP on every core while the env workers needed them (issue
figures on a 2-core machine: ``sample()`` at batch 16 took ~11 ms alone and ~466 ms inside ``rl-train``;
one thread instead of two was 2.6-89x faster under contention, 0.89-1.05x on a quiet machine).

The cores of a rank (:func:`usable_cores`): the CPUs of the affinity mask (``os.sched_getaffinity``, which
also reflects a container's cpuset), capped by the container's CPU quota (cgroup v2 ``cpu.max``, v1
``cpu.cfs_quota_us / cpu.cfs_period_us``, rounded up), shared by the ranks of this node
(``LOCAL_WORLD_SIZE``, torchrun's), at least one.

The decision (:func:`decide`), each part overridable by ``cluster.cpu_budget.*``:

- CPU inference: env workers one per core; the inference process gets the cores the workers leave
  (at least one), because with pipelining the workers step while the policy infers, and an idle OpenMP
  pool spinning beside busy workers costs more than a small policy gains from a second thread; the
  trainer gets every core (the update runs while the workers wait).
- GPU inference: the GPU does the math, so the process that drives it keeps one core and one thread;
  env workers take the other cores; the trainer keeps a few threads (``GPU_TRAINER_THREADS``) unless the
  optimizer state is offloaded to the CPU (FSDP ``cpu_offload``), where the optimizer step runs on every core.

Usage::

    budget = decide(device_type="cpu", num_envs=16)       # this machine, this rank
    torch.set_num_threads(budget.trainer_threads)
    with budget.inference():                               # collect / evaluate
        ...
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: torch threads of a trainer whose math runs on a GPU (data movement and small CPU ops only)
GPU_TRAINER_THREADS = 2
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_dirs(proc_cgroup: Path) -> tuple[str, str]:
    """This process's cgroup folder for v2 (``0::/path``) and for v1's cpu controller."""
    v2 = v1 = "/"
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "cpu" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def cgroup_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The container's CPU quota in cores (e.g. 1.5), or None when there is none (or no cgroup files).

    Reads the process's own cgroup first, then the root of the mounted hierarchy (inside a container the
    namespace root is the container's group).
    """
    v2, v1 = _cgroup_dirs(proc_cgroup)
    for folder in (root / v2.lstrip("/"), root):
        text = _read(folder / "cpu.max")
        if text is not None:
            quota, _, period = text.partition(" ")
            return None if quota == "max" else int(quota) / int(period or 100000)
    for controller in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        for folder in (root / controller / v1.lstrip("/"), root / controller):
            quota_s, period_s = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
            if quota_s is not None and period_s is not None:
                return None if int(quota_s) <= 0 else int(quota_s) / int(period_s)
    return None


def affinity_cores() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count`` where the OS has no masks)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def local_world_size() -> int:
    """Ranks of this job on this node (torchrun's ``LOCAL_WORLD_SIZE``; 1 when run directly)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


@dataclass(frozen=True)
class Cores:
    """The cores of one rank and where the figure came from."""

    count: int
    affinity: int
    quota: float | None
    local_ranks: int

    def why(self) -> str:
        quota = "no cgroup CPU quota" if self.quota is None else f"cgroup quota {self.quota:g} cores"
        return f"affinity {self.affinity} CPUs, {quota}, {self.local_ranks} rank(s) on this node"


def share(affinity: int, quota: float | None, local_ranks: int) -> Cores:
    """One rank's cores: ``min(affinity, ceil(quota)) // local_ranks``, at least 1."""
    node = min(affinity, math.ceil(quota)) if quota else affinity
    return Cores(max(1, node // max(1, local_ranks)), affinity, quota, local_ranks)


def usable_cores() -> Cores:
    """This rank's cores on this machine (affinity mask, cgroup quota, ranks on this node)."""
    return share(affinity_cores(), cgroup_quota(), local_world_size())


def workers_for(num_envs: int, requested: int | None, cap: int) -> int:
    """Env worker processes: as requested, else at most ``cap``, always a divisor of ``num_envs``."""
    target = max(1, min(requested or cap, num_envs))
    while num_envs % target:
        target -= 1
    return target


@dataclass(frozen=True)
class CpuBudget:
    """Who uses this rank's cores (:func:`decide`); ``overridden`` names the parts set by the config."""

    cores: Cores
    device_type: str
    env_workers: int
    inference_threads: int
    trainer_threads: int
    overridden: tuple[str, ...] = ()

    def describe(self, who: str = "this rank") -> str:
        """One line for the run plan, the dry-run and the evaluation header."""
        set_by = f"; set by cluster.cpu_budget: {', '.join(self.overridden)}" if self.overridden else ""
        workers = (f"{self.env_workers} env worker process(es)" if self.env_workers
                   else "no env worker process (envs step in this process, or on other ranks)")
        return (f"CPU budget: {self.cores.count} core(s) for {who} ({self.cores.why()}): "
                f"{workers}, {self.inference_threads} inference thread(s) "
                f"({self.device_type}), {self.trainer_threads} trainer thread(s){set_by}")

    def apply_trainer(self) -> None:
        """The process's torch threads for the update (its default between collections)."""
        import torch

        torch.set_num_threads(self.trainer_threads)

    @contextmanager
    def inference(self) -> Iterator[None]:
        """torch threads of the inference while the env workers step; the previous count after."""
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.inference_threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def decide(*, device_type: str, num_envs: int, requested_workers: int | None = None, offload: bool = False,
           cores: int | None = None, env_workers: int | None = None, inference_threads: int | None = None,
           trainer_threads: int | None = None, machine: Cores | None = None) -> CpuBudget:
    """The budget of one rank that hosts ``num_envs`` simulators (0: no env on this rank).

    ``requested_workers`` is the split's ``num_workers`` (used as given); ``cores`` ... ``trainer_threads``
    are the ``cluster.cpu_budget`` overrides (None: decided here); ``machine`` replaces the machine's
    figures (tests).
    """
    given = {"cores": cores, "env_workers": env_workers, "inference_threads": inference_threads,
             "trainer_threads": trainer_threads}
    have = machine or usable_cores()
    if cores is not None:
        have = Cores(cores, have.affinity, have.quota, have.local_ranks)
    n = have.count
    gpu = device_type != "cpu"
    cap = env_workers or (max(1, n - 1) if gpu else n)
    workers = workers_for(num_envs, requested_workers, cap) if num_envs else 0
    if inference_threads is None:
        inference_threads = 1 if gpu else max(1, n - workers)
    if trainer_threads is None:
        trainer_threads = min(n, GPU_TRAINER_THREADS) if gpu and not offload else n
    return CpuBudget(have, device_type, workers, inference_threads, trainer_threads,
                     tuple(k for k, v in given.items() if v is not None))
