"""Precision names, in one place: the short names configs use, their long aliases, and the torch dtypes.

``fp32`` / ``bf16`` / ``fp16`` are the names (RLinf's ``actor.model.precision``); ``float32`` / ``bfloat16``
/ ``float16`` (torch's and HF ``config.json``'s spelling) are accepted as aliases everywhere. torch is
imported only when a dtype is asked for, so config validation stays instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vlarl_cli.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    import torch

PRECISIONS = ("fp32", "bf16", "fp16")
PRECISION_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # long name -> short name
_TORCH_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def torch_dtypes() -> dict[str, torch.dtype]:
    """``{short name: torch dtype}`` (also importable as the module attribute ``DTYPES``)."""
    import torch

    return {short: getattr(torch, long) for short, long in _TORCH_NAMES.items()}


def __getattr__(name: str) -> Any:  # DTYPES without importing torch at module import (PEP 562)
    if name == "DTYPES":
        return torch_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def canonical(name: str) -> str:
    """The short name of a precision (``bfloat16`` -> ``bf16``); ConfigError for an unknown one."""
    short = PRECISION_ALIASES.get(name, name)
    if short not in _TORCH_NAMES:
        known = [*PRECISIONS, *PRECISION_ALIASES]
        raise ConfigError(f'Unknown precision "{name}".{did_you_mean(name, known)}',
                          f"Use one of {', '.join(PRECISIONS)}.")
    return short


def to_dtype(name: str) -> torch.dtype:
    """The torch dtype of a precision name (short or long)."""
    return torch_dtypes()[canonical(name)]


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The dtype to compute in on ``device``: bf16 / fp16 fall back to fp32 on the CPU (slow and inexact
    there)."""
    import torch

    dtype = to_dtype(name)
    if device.type == "cpu" and dtype is not torch.float32:
        return torch.float32
    return dtype
