"""Fixtures for the GR00T tests: tiny policies of both versions and raw env observation batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.policies.gr00t.config import ModelSettings, preset
from vlarl_cli.policies.gr00t.modality import default_modality

VERSIONS = {"n1.5": "gr00t", "n1.6": "gr00t_n1d6"}


def make_policy(version: str = "n1.5", seed: int = 0, **settings: Any) -> Any:
    """A tiny GR00T policy with deterministic random weights."""
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    torch.manual_seed(seed)
    s = ModelSettings(model_type=VERSIONS[version], preset="tiny", **settings)
    cfg = preset("tiny", version)
    return Gr00tPolicy(cfg, s, default_modality(s.effective_embodiment_tag, cfg))


def make_obs(batch: int = 3, seed: int = 0, size: int = 48) -> dict[str, Any]:
    """Raw LIBERO-like observations: uint8 images [B, H, W, 3], states [B, 8], descriptions."""
    g = torch.Generator().manual_seed(seed)
    texts = ["pick up the black bowl and place it on the plate", "open the top drawer", "turn on the stove",
             "put the cream cheese in the bowl"]
    return {
        keys.MAIN_IMAGES: torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8, generator=g),
        keys.WRIST_IMAGES: torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8, generator=g),
        keys.STATES: torch.rand(batch, 8, generator=g) * 2 - 1,
        keys.TASK_DESCRIPTIONS: [texts[i % len(texts)] for i in range(batch)],
    }


@pytest.fixture
def policy_factory() -> Callable[..., Any]:
    return make_policy


@pytest.fixture
def obs_factory() -> Callable[..., dict[str, Any]]:
    return make_obs
