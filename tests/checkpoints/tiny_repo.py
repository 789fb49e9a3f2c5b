"""A tiny pi0.5 (openpi/RLinf layout) model repository used by the download tests."""

from __future__ import annotations

import json

REPO_ID = "acme/tiny-pi05"


def tiny_safetensors() -> bytes:
    """A small safetensors file with openpi/RLinf pi0.5 key names (a few hundred floats)."""
    import torch
    from safetensors.torch import save

    g = torch.Generator().manual_seed(0)
    tensors = {
        "paligemma_with_expert.paligemma.model.language_model.layers.0.mlp.up_proj.weight":
            torch.randn(8, 4, generator=g),
        "paligemma_with_expert.gemma_expert.model.layers.0.mlp.up_proj.weight": torch.randn(6, 4, generator=g),
        "action_in_proj.weight": torch.randn(4, 32, generator=g),
        "action_out_proj.weight": torch.randn(32, 4, generator=g),
        "time_mlp_in.weight": torch.randn(4, 4, generator=g),
        "time_mlp_out.weight": torch.randn(4, 4, generator=g),
    }
    return save(tensors)


TINY_PARAMS = 8 * 4 + 6 * 4 + 4 * 32 + 32 * 4 + 16 + 16


def tiny_repo_files() -> dict[str, bytes]:
    norm = {"norm_stats": {"actions": {"mean": [0.0] * 7, "std": [1.0] * 7, "q01": [-1.0] * 7,
                                       "q99": [1.0] * 7}}}
    return {
        "config.json": json.dumps({"pi05": True, "action_horizon": 10}).encode(),
        "model.safetensors": tiny_safetensors(),
        "physical-intelligence/libero/norm_stats.json": json.dumps(norm).encode(),
        "README.md": b"# tiny pi0.5 test repo\n",
        "big.bin": bytes(range(256)) * 40,  # pickle-suffixed; skipped unless --allow-pickle
    }
