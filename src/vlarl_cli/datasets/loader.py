"""The training input pipeline: DataLoader workers decode samples of a
:class:`~vlarl_cli.datasets.stream.FrameDataset` in the order of a
:class:`~vlarl_cli.datasets.sampling.MicroBatches` sampler, with a bounded prefetch.

    loader = make_loader(dataset, sampler, workers=4, prefetch=2)
    for batch in loader:          # one micro-batch: batch.obs (policy layout), batch.actions [B, C, A]
        ...

At most ``workers x prefetch`` micro-batches are decoded ahead of the trainer (torch's DataLoader
``prefetch_factor``), so memory is bounded by the batch size, not the dataset. Workers are forked: they
share the parent's index (memory-mapped) and open their own video files. Each worker runs torch with one
thread: the workers themselves are the parallelism.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from vlarl_cli import keys
from vlarl_cli.datasets.stream import BadFrame

__all__ = ["Batch", "collate", "make_loader"]


@dataclass
class Batch:
    """A micro-batch: ``obs`` (``keys.STATES`` [B, S], cameras [B, H, W, 3] uint8, a list of B task
    descriptions), ``actions`` [B, C, A] float32, the global ids of its samples, and the samples that could
    not be read (left out of ``obs`` / ``actions``)."""

    obs: dict[str, Any]
    actions: torch.Tensor
    ids: list[int]
    bad: list[BadFrame] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


def collate(samples: Sequence[Any]) -> Batch:
    """Stack the readable samples; keep the :class:`BadFrame` records beside them."""
    good = [s for s in samples if not isinstance(s, BadFrame)]
    bad = [s for s in samples if isinstance(s, BadFrame)]
    if not good:
        return Batch({}, torch.zeros(0), [], bad)
    obs: dict[str, Any] = {keys.TASK_DESCRIPTIONS: [o[keys.TASK_DESCRIPTIONS] for _, o, _ in good]}
    for name in good[0][1]:
        if name != keys.TASK_DESCRIPTIONS:
            obs[name] = torch.from_numpy(np.stack([o[name] for _, o, _ in good]))
    actions = torch.from_numpy(np.stack([c for _, _, c in good]))
    return Batch(obs, actions, [i for i, _, _ in good], bad)


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)


def make_loader(dataset: Any, sampler: Any, *, workers: int, prefetch: int = 2) -> torch.utils.data.DataLoader:
    """A DataLoader over ``dataset`` with ``batch_sampler=sampler`` (``workers`` 0: in this process)."""
    kwargs: dict[str, Any] = {}
    if workers > 0:
        import multiprocessing as mp

        kwargs = {"prefetch_factor": prefetch, "worker_init_fn": _worker_init,
                  "multiprocessing_context": mp.get_context("fork")}
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers, collate_fn=collate,
                                       **kwargs)
