"""Statistics over a batch that may be split across processes.

Data-parallel training holds ``1/W`` of every batch on each of ``W`` processes. Anything computed over
"the batch" (advantage normalisation, the loss denominators, explained variance, metric means) must use
the whole batch, or a 2-process run differs from the 1-process run with the same global batch. The
algorithms take a :class:`Reduce`: :data:`LOCAL` in one process, ``distributed.dist.CrossRank`` across
processes. Sums are taken in float64 so that the result does not depend on how rows are split (up to
float64 rounding).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch
from torch import Tensor

__all__ = ["LOCAL", "LocalReduce", "Reduce", "masked_moments"]


class Reduce(Protocol):
    """Element-wise reductions over the processes holding parts of a batch."""

    world: int

    def sum(self, t: Tensor) -> Tensor: ...

    def max(self, t: Tensor) -> Tensor: ...


class LocalReduce:
    """The whole batch is here: every reduction is the identity."""

    world = 1

    def sum(self, t: Tensor) -> Tensor:
        return t

    def max(self, t: Tensor) -> Tensor:
        return t


LOCAL: Reduce = LocalReduce()


def masked_moments(pieces: Iterable[tuple[Tensor, Tensor | None]], reduce: Reduce = LOCAL
                   ) -> tuple[int, Tensor, Tensor]:
    """``(count, mean, unbiased variance)`` of the valid entries of all ``(x, mask)`` pieces on all
    processes (mask None = all valid; masks broadcast to ``x``). Two passes in float64; variance 0 for
    fewer than 2 entries."""
    full = [(x, torch.ones_like(x, dtype=torch.bool) if m is None else m.expand_as(x).bool()) for x, m in pieces]
    stats = torch.zeros(2, dtype=torch.float64)
    for x, m in full:
        stats += torch.stack([x[m].double().sum().cpu(), m.sum().double().cpu()])
    total, count = reduce.sum(stats).tolist()
    mean = torch.tensor(total / count if count else 0.0, dtype=torch.float64)
    sq = torch.zeros(1, dtype=torch.float64)
    for x, m in full:
        sq += ((x[m].double().cpu() - mean) ** 2).sum()
    sq = reduce.sum(sq)
    var = sq[0] / (count - 1) if count > 1 else torch.zeros((), dtype=torch.float64)
    return int(count), mean, var
