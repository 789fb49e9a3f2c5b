"""Checks shared by the policy families' tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch


def _split_equals_whole(policy: Any, obs: dict[str, Any], exact_keys: tuple[str, ...] = ()) -> None:
    """Per-env streams: sampling 4 envs at once equals sampling them as 2 + 2 (two pipeline stages or two
    processes), so a rollout does not depend on how envs are split. ``exact_keys``: replay entries that must
    match bit for bit (sampled indices / tokens)."""
    from vlarl_cli.policies.noise import RowGenerator

    whole = policy.sample(obs, generator=RowGenerator.from_seeds(range(4)))
    streams = RowGenerator.from_seeds(range(4))
    parts = [policy.sample({k: v[i:i + 2] for k, v in obs.items()}, generator=streams.rows([i, i + 1]))
             for i in (0, 2)]
    torch.testing.assert_close(torch.cat([p.actions for p in parts]), whole.actions, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat([p.logprobs for p in parts]), whole.logprobs, rtol=1e-5, atol=1e-5)
    for key in exact_keys:
        assert torch.equal(torch.cat([p.replay[key] for p in parts]), whole.replay[key]), key


@pytest.fixture
def split_equals_whole() -> Callable[..., None]:
    return _split_equals_whole
