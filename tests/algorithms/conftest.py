"""Fixtures for the algorithm tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def _one_thread():
    """Tiny tensors: one thread avoids oversubscribing the shared CPU (restored afterwards)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
