"""Random draws that do not depend on how rows are batched.

A policy's sampling noise is normally drawn for the whole batch from one generator, so env ``e`` gets
different noise when it sits in a batch of 8 on one process than in a batch of 4 on the second of two
processes, or in the second pipeline stage. :class:`RowGenerator` holds one ``torch.Generator`` per row
(per env); every draw takes row ``i``'s values from generator ``i``. The rollout then depends only on
(seed, iteration, global env id), not on the world size, the placement or ``pipeline_stage_num``, which is
what lets a 2-process run reproduce the 1-process run (tests/distributed/test_rl_equivalence.py).

The helpers below accept either a plain ``torch.Generator`` (or None: the global generator), keeping
the usual batched draw, or a :class:`RowGenerator`:

    g = RowGenerator.from_seeds([11, 12, 13, 14])
    randn((4, 10, 7), g)            # row i from generator i; same values as 4 calls of randn((1, 10, 7))
    randn((2, 10, 7), g.rows([1, 3]))   # rows 1 and 3 continue their own streams
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["AnyGenerator", "RowGenerator", "multinomial", "randint", "randn"]


class RowGenerator:
    """One CPU ``torch.Generator`` per batch row. ``rows(ids)`` views a subset that shares the streams."""

    def __init__(self, generators: Sequence[torch.Generator]) -> None:
        self.generators = list(generators)

    @classmethod
    def from_seeds(cls, seeds: Sequence[int]) -> RowGenerator:
        return cls([torch.Generator().manual_seed(int(s)) for s in seeds])

    def rows(self, ids: Sequence[int]) -> RowGenerator:
        return RowGenerator([self.generators[i] for i in ids])

    def __len__(self) -> int:
        return len(self.generators)

    def _check(self, rows: int) -> None:
        if rows != len(self.generators):
            raise ValueError(f"a RowGenerator of {len(self.generators)} rows cannot draw a batch of {rows} rows")


AnyGenerator = torch.Generator | RowGenerator | None


def randn(shape: Sequence[int], generator: AnyGenerator, *, device: torch.device | str | None = None,
          dtype: torch.dtype | None = None) -> Tensor:
    """``torch.randn(shape)``; with a :class:`RowGenerator`, row ``i`` comes from generator ``i``."""
    if not isinstance(generator, RowGenerator):
        return torch.randn(tuple(shape), generator=generator, device=device, dtype=dtype)
    generator._check(shape[0])
    rows = [torch.randn(tuple(shape[1:]), generator=g, dtype=dtype) for g in generator.generators]
    out = torch.stack(rows) if rows else torch.empty(tuple(shape), dtype=dtype)
    return out.to(device) if device is not None else out


def randint(high: int, shape: Sequence[int], generator: AnyGenerator, *,
            device: torch.device | str | None = None) -> Tensor:
    """``torch.randint(0, high, shape)``; with a :class:`RowGenerator`, row ``i`` from generator ``i``."""
    if not isinstance(generator, RowGenerator):
        return torch.randint(0, high, tuple(shape), generator=generator, device=device)
    generator._check(shape[0])
    rows = [torch.randint(0, high, tuple(shape[1:]), generator=g) for g in generator.generators]
    out = torch.stack(rows) if rows else torch.empty(tuple(shape), dtype=torch.long)
    return out.to(device) if device is not None else out


def multinomial(probs: Tensor, generator: AnyGenerator) -> Tensor:
    """One draw per distribution: ``probs [B, ..., V]`` -> ids ``[B, ...]``; with a :class:`RowGenerator`,
    batch row ``i``'s draws come from generator ``i``."""
    v = probs.shape[-1]
    if not isinstance(generator, RowGenerator):
        return torch.multinomial(probs.reshape(-1, v), 1, generator=generator).view(probs.shape[:-1])
    generator._check(probs.shape[0])
    rows = [torch.multinomial(p.reshape(-1, v).cpu(), 1, generator=g).view(p.shape[:-1])
            for p, g in zip(probs, generator.generators, strict=True)]
    out = torch.stack(rows) if rows else torch.empty(probs.shape[:-1], dtype=torch.long)
    return out.to(probs.device)
