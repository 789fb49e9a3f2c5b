"""Fixtures for the LIBERO environment tests.

Simulator processes are expensive (~1.7 GB and ~4-10 s each), so every simulator fixture is
module-scoped: each test module builds at most two, and they are closed before the next module runs.
Tests that need the simulator carry ``@pytest.mark.libero`` and are skipped when LIBERO cannot run here.
"""

from __future__ import annotations

import importlib.util

import pytest


def _libero_usable() -> str:
    if importlib.util.find_spec("libero") is None or importlib.util.find_spec("robosuite") is None:
        return "libero/robosuite not installed"
    try:
        from vlarl_cli.envs.libero.setup import prepare_libero

        prepare_libero()
    except Exception as err:  # missing assets or no GL backend: skip, with the reason
        return str(err)
    return ""


_REASON = None


def libero_skip_reason() -> str:
    global _REASON
    if _REASON is None:
        _REASON = _libero_usable()
    return _REASON


@pytest.fixture(scope="session")
def libero_ready() -> None:
    reason = libero_skip_reason()
    if reason:
        pytest.skip(f"LIBERO not usable: {reason}")


@pytest.fixture(scope="module")
def spatial_env(libero_ready):
    """libero_spatial task 0, both cameras at 128 px, standard protocol (220 steps, 10 settle steps), but
    seeded before every reset with soft resets, so every episode is reproducible on its own."""
    from vlarl_cli.envs.libero.env import EnvOptions, LiberoEnv

    env = LiberoEnv("libero_spatial", 0, EnvOptions(resolution=128, seeding="every_reset", hard_reset=False))
    yield env
    env.close()
