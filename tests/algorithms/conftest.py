"""Fixtures for the algorithm tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every test in this folder runs single-threaded (``one_thread``, tests/conftest.py)."""
