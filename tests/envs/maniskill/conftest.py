"""ManiSkill3 needs Vulkan (Mesa 25 lavapipe on CPU machines): tests that build real scenes skip, naming
what is missing, when it cannot run here (``bash scripts/setup_maniskill.sh`` sets it up). The setup is
not in CI (.ci/run), so VLARL_REQUIRE_REFERENCE does not turn these skips into failures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def maniskill_ready() -> None:
    from vlarl_cli.envs.maniskill.setup import probe

    reason = probe()
    if reason:
        pytest.skip(f"ManiSkill3 not usable ({reason}); run `bash scripts/setup_maniskill.sh`")
