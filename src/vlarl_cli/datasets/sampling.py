"""The order in which training samples are drawn, as a pure function of (seed, step): resumable, rank-split.

One source (or several without weights): epochs over all ``N`` samples without replacement, epoch ``e``
the permutation drawn from ``(seed, e)``, consecutive global batches taken one after the other across
epoch boundaries, so every sample is drawn once per epoch, over all ranks together.

Several sources with weights (GR00T / openpi recipes mixing suites): each global batch draws how many
samples come from each source, ``Multinomial(B, weights)`` from ``(seed, "mix", step)``, and takes them
from that source's own epoch stream (its permutations drawn from ``(seed, source, epoch)``); the batch is
then shuffled (``(seed, "shuffle", step)``) so that every rank's share mixes the sources. Every frame of a
source is drawn once per epoch of that source.

Rank ``r`` of ``W`` takes positions ``r * B / W .. (r + 1) * B / W`` of every global batch, so a run with
``W`` processes draws exactly the samples of the 1-process run. The position after step ``k`` is known
from ``k`` alone (with weights: by replaying the per-step counts), so a checkpoint at step ``k`` resumes
the same order; no sampler state needs saving beyond the step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["GlobalOrder", "MicroBatches"]

_MIX, _SHUFFLE = 7, 8  # seed-sequence tags


class _Stream:
    """Epochs of permutations of ``range(size)`` drawn from ``(seed, *tag, epoch)``; ``take(n)`` continues."""

    def __init__(self, size: int, seed: int, tag: tuple[int, ...], position: int = 0) -> None:
        self.size, self.seed, self.tag = size, seed, tag
        self.epoch, self.pos = divmod(position, size)
        self.order = self._order(self.epoch)

    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, *self.tag, epoch]).permutation(self.size)

    def take(self, n: int) -> np.ndarray:
        out: list[np.ndarray] = []
        while n > 0:
            if self.pos == self.size:
                self.epoch, self.pos = self.epoch + 1, 0
                self.order = self._order(self.epoch)
            k = min(n, self.size - self.pos)
            out.append(self.order[self.pos:self.pos + k])
            self.pos += k
            n -= k
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


class GlobalOrder:
    """``batch(step)`` -> the ``batch_size`` global sample ids of optimizer step ``step`` (1-based), for
    sources of ``sizes`` samples (ids offset by the sizes before). Steps must be asked in order from
    ``first_step`` on (the constructor places the streams there)."""

    def __init__(self, sizes: Sequence[int], batch_size: int, seed: int, *, weights: Sequence[float] | None = None,
                 first_step: int = 1) -> None:
        self.sizes, self.batch_size, self.seed = [int(s) for s in sizes], batch_size, seed
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.next_step = first_step
        if weights is None:
            self.weights = None
            self.streams = [_Stream(int(self.offsets[-1]), seed, (), (first_step - 1) * batch_size)]
            return
        w = np.asarray(weights, dtype=np.float64)
        if len(w) != len(self.sizes) or (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"weights {list(weights)} must be {len(self.sizes)} non-negative numbers, not all 0")
        self.weights = w / w.sum()
        used = sum((self._counts(k) for k in range(1, first_step)), np.zeros(len(self.sizes), dtype=np.int64))
        self.streams = [_Stream(n, seed, (1000 + i,), int(used[i])) for i, n in enumerate(self.sizes)]

    def _counts(self, step: int) -> np.ndarray:
        assert self.weights is not None
        return np.random.default_rng([self.seed, _MIX, step]).multinomial(self.batch_size, self.weights)

    def batch(self, step: int) -> np.ndarray:
        if step != self.next_step:
            raise ValueError(f"steps are drawn in order: expected step {self.next_step}, asked for {step}")
        self.next_step += 1
        if self.weights is None:
            return self.streams[0].take(self.batch_size)
        parts = [self.streams[i].take(int(n)) + self.offsets[i] for i, n in enumerate(self._counts(step))]
        ids = np.concatenate(parts)
        return ids[np.random.default_rng([self.seed, _SHUFFLE, step]).permutation(len(ids))]


class MicroBatches:
    """What a DataLoader's ``batch_sampler`` yields on rank ``rank`` of ``world``: for each step from
    ``first_step`` to ``last_step``, this rank's share of the global batch in micro-batches of ``micro``."""

    def __init__(self, order: GlobalOrder, *, rank: int, world: int, micro: int, first_step: int, last_step: int) -> None:
        if order.batch_size % (micro * world):
            raise ValueError(f"global batch {order.batch_size} is not divisible by micro {micro} x world {world}")
        self.order, self.rank, self.world, self.micro = order, rank, world, micro
        self.first_step, self.last_step = first_step, last_step
        self.local = order.batch_size // world

    @property
    def per_step(self) -> int:
        return self.local // self.micro

    def __len__(self) -> int:
        return max(0, self.last_step - self.first_step + 1) * self.per_step

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.first_step, self.last_step + 1):
            ids = self.order.batch(step)[self.rank * self.local:(self.rank + 1) * self.local]
            for k in range(0, self.local, self.micro):
                yield ids[k:k + self.micro].tolist()
