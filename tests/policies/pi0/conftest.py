"""Fixtures for the pi0 family tests: tiny policies and fake LIBERO observations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from vlarl_cli import keys


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every test in this folder runs single-threaded (``one_thread``, tests/conftest.py)."""


def _randomize_zero_inits(policy: torch.nn.Module, seed: int = 0) -> None:
    """Give zero-initialised parameters (adaRMS dense, value head output, LoRA B) non-zero values so
    tests exercise them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if ".dense." in name or name.startswith("value_head.out") or name.endswith("lora_B"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


@pytest.fixture
def make_policy() -> Callable[..., Any]:
    """``make_policy(variant="pi0", seed=0, **Pi0Config overrides)`` -> eval-mode tiny Pi0Policy."""
    from vlarl_cli.policies.pi0.config import preset
    from vlarl_cli.policies.pi0.policy import Pi0Policy

    def make(variant: str = "pi0", seed: int = 0, randomize: bool = True, **overrides: Any) -> Any:
        torch.manual_seed(seed)
        policy = Pi0Policy(preset("tiny", variant, **overrides)).eval()
        if randomize:
            _randomize_zero_inits(policy, seed)
        return policy

    return make


@pytest.fixture
def make_obs() -> Callable[..., dict[str, Any]]:
    """``make_obs(batch=3, size=40, seed=0, wrist=True)`` -> a LIBERO-like observation dict."""

    def make(batch: int = 3, size: int = 40, seed: int = 0, wrist: bool = True) -> dict[str, Any]:
        g = torch.Generator().manual_seed(seed)
        prompts = ["pick up the black bowl", "open the top drawer of the cabinet", "put_the bowl\non the plate"]
        obs: dict[str, Any] = {
            keys.MAIN_IMAGES: torch.randint(0, 256, (batch, size, size, 3), generator=g, dtype=torch.uint8),
            keys.WRIST_IMAGES: (torch.randint(0, 256, (batch, size, size, 3), generator=g, dtype=torch.uint8)
                                if wrist else None),
            keys.STATES: torch.randn(batch, 8, generator=g),
            keys.TASK_DESCRIPTIONS: [prompts[i % len(prompts)] for i in range(batch)],
        }
        return obs

    return make


@pytest.fixture
def model_inputs() -> Callable[..., dict[str, torch.Tensor]]:
    """Direct model inputs for a tiny config: images in [-1, 1], masks, prompt with padding, state, noise."""

    def make(cfg: Any, batch: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        s, lmax = cfg.image_size, cfg.max_token_len
        token_mask = torch.zeros(batch, lmax, dtype=torch.bool)
        for i in range(batch):
            token_mask[i, : 5 + 3 * i] = True  # different prompt lengths -> padding differs per row
        return {
            "images": torch.rand(batch, 2, 3, s, s, generator=g) * 2 - 1,
            "image_masks": torch.ones(batch, 2, dtype=torch.bool),
            "tokens": torch.randint(4, 260, (batch, lmax), generator=g),
            "token_mask": token_mask,
            "state": torch.randn(batch, cfg.max_state_dim, generator=g),
            "x_t": torch.randn(batch, cfg.action_horizon, cfg.max_action_dim, generator=g),
            "t": torch.rand(batch, generator=g),
        }

    return make
