"""Fixtures shared by every test folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run single-threaded, then restore. Tiny models and tensors gain nothing from intra-op threads: on a
    shared 2-core machine spinning worker threads make them up to 100x slower, and one thread keeps float
    sums reproducible for the fixed seeds of the learning tests."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tensor_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the tensors a checkpoint load reads from its safetensors files, in order: every family
    streams through :class:`vlarl_cli.checkpoints.pipeline.TensorReader`, whose ``get`` is wrapped to record."""
    from vlarl_cli.checkpoints import pipeline

    reads: list[str] = []
    real = pipeline.TensorReader.get

    def get(self: pipeline.TensorReader, file: object, name: str) -> torch.Tensor:
        reads.append(name)
        return real(self, file, name)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline.TensorReader, "get", get)
    return reads
