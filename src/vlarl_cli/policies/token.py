"""Discrete-bin action tokens: binning, temperature sampling, log-probs and entropy.

OpenVLA-style policies predict each action dimension as one of ``n_bins`` uniform bins over
``[low, high]``. RL samples tokens from ``softmax(logits / temperature)`` and scores them under the SAME
temperature (RLinf's OFT recipe uses 1.6 for training and evaluation), so the PPO ratio compares like
with like. The replay record of a token policy is the sampled token ids; ``evaluate`` recomputes
:func:`token_logprobs` of those ids under the current weights.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vlarl_cli.policies import noise as noise_lib
from vlarl_cli.policies.noise import AnyGenerator

__all__ = ["actions_to_tokens", "bin_centers", "sample_tokens", "token_logprobs", "tokens_to_actions"]


def bin_centers(n_bins: int, low: float = -1.0, high: float = 1.0, device: torch.device | None = None) -> Tensor:
    """``[n_bins]`` centres of ``n_bins`` equal bins tiling ``[low, high]``."""
    if n_bins < 2:
        raise ValueError(f"n_bins must be >= 2, got {n_bins}")
    width = (high - low) / n_bins
    return low + width * (torch.arange(n_bins, device=device, dtype=torch.float32) + 0.5)


def tokens_to_actions(tokens: Tensor, n_bins: int, low: float = -1.0, high: float = 1.0) -> Tensor:
    """Token ids ``[...]`` (long, in ``[0, n_bins)``) -> bin-centre actions ``[...]`` float32."""
    return bin_centers(n_bins, low, high, tokens.device)[tokens]


def actions_to_tokens(actions: Tensor, n_bins: int, low: float = -1.0, high: float = 1.0) -> Tensor:
    """Continuous actions -> id of the bin containing them (values outside ``[low, high]`` are clipped)."""
    idx = torch.floor((actions.float() - low) / (high - low) * n_bins).long()
    return idx.clamp(0, n_bins - 1)


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def sample_tokens(logits: Tensor, temperature: float = 1.0, *, deterministic: bool = False,
                  generator: AnyGenerator = None) -> Tensor:
    """Sample ids ``[...]`` from ``logits [..., V]`` at ``temperature``; argmax when ``deterministic``."""
    if deterministic:
        return logits.argmax(-1)
    _check_temperature(temperature)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return noise_lib.multinomial(probs, generator)


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """Log-prob ``[...]`` of ``tokens`` under ``softmax(logits / temperature)`` and that distribution's
    entropy ``[...]`` (both float32)."""
    _check_temperature(temperature)
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and tokens {tuple(tokens.shape)} do not match")
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, tokens.long().unsqueeze(-1)).sum(-1)  # one term: exact, and not a view (FSDP2)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
