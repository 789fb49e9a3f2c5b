"""Fixtures for the OpenVLA-OFT family tests: tiny policies, LIBERO-like observations, statistics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from vlarl_cli import keys

PROMPTS = ["pick up the black bowl", "open the top drawer of the cabinet",
           "put both the alphabet soup and the tomato sauce in the basket", "Turn On the stove"]

# LIBERO-like action statistics: 6 normalised dims, the gripper (mask False) passed through.
STATS: dict[str, Any] = {
    "libero_10_no_noops": {
        "action": {"q01": [-0.5, -0.4, -0.9, -0.1, -0.2, -0.3, 0.0], "q99": [0.5, 0.8, 0.9, 0.1, 0.2, 0.3, 1.0],
                   "mask": [True, True, True, True, True, True, False]},
        "proprio": {"q01": [0.0] * 8, "q99": [1.0] * 8},
        "num_transitions": 10,
    },
    "libero_90_no_noops": {
        "action": {"q01": [-1.0] * 7, "q99": [1.0] * 7, "mask": [True] * 6 + [False]},
    },
}


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every test in this folder runs single-threaded (``one_thread``, tests/conftest.py)."""


def randomize(policy: torch.nn.Module, seed: int = 0, scale: float = 0.05) -> None:
    """Perturb every parameter (zero-initialised ones included: value head output, LoRA B, DINOv2
    mask token) so tests exercise them and logits are far from uniform."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in policy.named_parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


@pytest.fixture
def make_policy() -> Callable[..., Any]:
    """``make_policy(seed=0, stats=True, **OftConfig overrides)`` -> eval-mode tiny OftPolicy."""
    from vlarl_cli.policies.openvla_oft.config import preset
    from vlarl_cli.policies.openvla_oft.policy import OftPolicy

    def make(seed: int = 0, stats: bool = True, randomized: bool = True, **overrides: Any) -> Any:
        torch.manual_seed(seed)
        overrides.setdefault("unnorm_key", "libero_10")
        policy = OftPolicy(preset("tiny", **overrides), dataset_statistics=STATS if stats else None).eval()
        if randomized:
            randomize(policy, seed)
        return policy

    return make


@pytest.fixture
def make_obs() -> Callable[..., dict[str, Any]]:
    """``make_obs(batch=3, size=40, seed=0)`` -> a LIBERO-like observation dict."""

    def make(batch: int = 3, size: int = 40, seed: int = 0) -> dict[str, Any]:
        g = torch.Generator().manual_seed(seed)
        return {
            keys.MAIN_IMAGES: torch.randint(0, 256, (batch, size, size, 3), generator=g, dtype=torch.uint8),
            keys.WRIST_IMAGES: torch.randint(0, 256, (batch, size, size, 3), generator=g, dtype=torch.uint8),
            keys.STATES: torch.randn(batch, 8, generator=g),
            keys.TASK_DESCRIPTIONS: [PROMPTS[i % len(PROMPTS)] for i in range(batch)],
        }

    return make


@pytest.fixture
def oft_stats() -> dict[str, Any]:
    """LIBERO-like OpenVLA dataset statistics (two dataset keys)."""
    import copy

    return copy.deepcopy(STATS)
