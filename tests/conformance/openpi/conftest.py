"""Locate openpi's reference environment (.reference/openpi, built by scripts/reference/openpi.sh).

Missing environment: the tests skip with the build command, unless ``VLARL_REQUIRE_REFERENCE=1`` (CI),
then they fail.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from openpi_ref import BUILD, REFERENCE_PYTHON, STAMP


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Single-threaded on our side too (tests/conftest.py)."""


@pytest.fixture(scope="session")
def openpi_python() -> Path:
    if not (REFERENCE_PYTHON.is_file() and STAMP.is_file()):
        msg = f"openpi reference environment missing ({REFERENCE_PYTHON}); build it with: {BUILD}"
        if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return REFERENCE_PYTHON
