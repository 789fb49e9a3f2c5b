"""Device and dtype choice, in one place.

Everything else receives a ``torch.device`` and never calls ``torch.cuda`` itself, so the same code
runs on CPU with gloo in tests and on GPUs with NCCL in production.
"""

from __future__ import annotations

import os

import torch


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


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """Map a precision name to a dtype; bf16 falls back to fp32 on CPU (slow and inexact there)."""
    table = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
             "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
    if name not in table:
        from vlarl_cli.errors import ConfigError, did_you_mean

        raise ConfigError(f'Unknown precision "{name}".{did_you_mean(name, list(table))}',
                          "Use one of fp32, bf16, fp16.")
    dtype = table[name]
    if device.type == "cpu" and dtype is not torch.float32:
        return torch.float32
    return dtype
