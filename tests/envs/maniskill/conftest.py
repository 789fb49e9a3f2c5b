"""ManiSkill3 needs Vulkan (Mesa 25 lavapipe on CPU machines): tests that build real scenes skip, naming
what is missing, when it cannot run here (``bash scripts/setup_maniskill.sh`` sets it up). The setup is
run by CI (.ci/run) before the tests, so there these tests run; VLARL_REQUIRE_REFERENCE does not turn
their skips into failures (it is about the reference venvs, not about Vulkan)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def maniskill_ready() -> None:
    from vlarl_cli.envs.maniskill.setup import probe

    reason = probe()
    if reason:
        pytest.skip(f"ManiSkill3 not usable ({reason}); run `bash scripts/setup_maniskill.sh`")
