"""State / action (un)normalisation exactly as the two Isaac-GR00T releases do it.

N1.5 (``n1.5-release``, ``gr00t/data/transform/state_action.py`` ``Normalizer``), per key one mode:

* ``min_max``: ``2 (x - min) / (max - min) - 1``, 0 where ``min != max`` is false (exact compare); NOT
  clipped; inverse ``(x + 1) / 2 (max - min) + min``, NOT clipped either.
* ``q99``: the same with q01 / q99 as bounds, clipped to [-1, 1] (inverse unclipped); where
  ``q01 == q99`` the input passes through.
* ``mean_std``: ``(x - mean) / std``, passed through where ``std == 0``.

N1.6 (``n1.6.1-release``, ``gr00t/data/state_action/state_action_processor.py`` + ``gr00t/data/utils.py``):

* min-max with bounds min/max, or q01/q99 when the processor has ``use_percentiles``; 0 where
  ``isclose(max, min)``; the result is clipped to [-1, 1] when ``clip_outliers`` (default True);
  the inverse always clips its input to [-1, 1] first.
* keys listed in ``mean_std_embedding_keys`` use mean/std (passed through where ``std == 0``); actions
  are clipped after it too when ``clip_outliers``; states are not.

Relative actions (``use_relative_action`` with RELATIVE action configs) and sin/cos state encoding
need the raw reference state and are refused when a checkpoint asks for them (see ``modality.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["MODES", "normalize", "unnormalize"]

#: per-key normalisation modes
MODES = ("min_max", "q99", "mean_std")


def _stat(stats: dict[str, list[float]], name: str, like: Tensor) -> Tensor:
    return torch.tensor(stats[name], dtype=torch.float64, device=like.device)


def normalize(x: Tensor, stats: dict[str, list[float]], mode: str, *, convention: str, use_percentiles: bool = False,
              clip: bool = False) -> Tensor:
    """Normalise ``x [..., D]`` of one key with its statistics ``{min, max, mean, std, q01, q99}``.

    ``convention`` "n1.5" / "n1.6" picks the zero-span test and the clipping rules above; ``clip`` is
    N1.6's ``clip_outliers`` for this key (callers pass False for N1.6 mean/std states).
    Computed in float64, returned in float32.
    """
    v = x.double()
    if mode == "mean_std":
        mean, std = _stat(stats, "mean", v), _stat(stats, "std", v)
        ok = std != 0
        out = torch.where(ok, (v - mean) / torch.where(ok, std, torch.ones_like(std)), v)
    else:
        q = mode == "q99" or use_percentiles
        lo, hi = _stat(stats, "q01" if q else "min", v), _stat(stats, "q99" if q else "max", v)
        ok = ~torch.isclose(hi, lo, rtol=1e-5, atol=1e-8) if convention == "n1.6" else hi != lo
        span = torch.where(ok, hi - lo, torch.ones_like(hi))
        scaled = 2.0 * (v - lo) / span - 1.0
        # N1.5 q99 passes the raw value through where q01 == q99; every other zero span gives 0
        fill = v if (convention == "n1.5" and mode == "q99") else torch.zeros_like(v)
        out = torch.where(ok, scaled, fill)
        if convention == "n1.5" and mode == "q99":
            out = out.clamp(-1.0, 1.0)
    if clip:
        out = out.clamp(-1.0, 1.0)
    return out.float()


def unnormalize(x: Tensor, stats: dict[str, list[float]], mode: str, *, convention: str,
                use_percentiles: bool = False) -> Tensor:
    """Inverse of :func:`normalize` for one key, ``x [..., D]`` -> float32 in data units."""
    v = x.double()
    if mode == "mean_std":
        mean, std = _stat(stats, "mean", v), _stat(stats, "std", v)
        return torch.where(std != 0, v * std + mean, v).float()
    q = mode == "q99" or use_percentiles
    lo, hi = _stat(stats, "q01" if q else "min", v), _stat(stats, "q99" if q else "max", v)
    if convention == "n1.6":
        v = v.clamp(-1.0, 1.0)  # unnormalize_values_minmax clips its input
    return ((v + 1.0) / 2.0 * (hi - lo) + lo).float()
