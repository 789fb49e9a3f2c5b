"""Device choice, in one place (precision names and dtypes: ``vlarl_cli.precision``).

Everything else receives a ``torch.device`` and never calls ``torch.cuda`` itself, so the same code
runs on CPU with gloo in tests and on GPUs with NCCL in production.
"""

from __future__ import annotations

import os

import torch

from vlarl_cli.precision import resolve_dtype  # the old home of resolve_dtype: keep importable

__all__ = ["default_backend", "default_device", "resolve_dtype"]


def default_device(local_rank: int | None = None) -> torch.device:
    """CUDA device for this local rank when CUDA is usable, else CPU.

    ``VLARL_DEVICE=cpu`` forces the CPU even where a GPU exists.
    """
    forced = os.environ.get("VLARL_DEVICE")
    if forced:
        return torch.device(forced)
    if torch.cuda.is_available():
        if local_rank is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def default_backend(device: torch.device) -> str:
    """torch.distributed backend for a device: NCCL for CUDA tensors (plus gloo for the few CPU tensors:
    metrics, object messages) on GPUs, gloo elsewhere."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
