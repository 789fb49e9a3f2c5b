"""State / action normalisation from dataset statistics (openpi ``norm_stats.json``).

File format (openpi ``src/openpi/shared/normalize.py``)::

    {"norm_stats": {"state":   {"mean": [...], "std": [...], "q01": [...], "q99": [...]},
                    "actions": {"mean": [...], "std": [...], "q01": [...], "q99": [...]}}}

Two modes, as openpi ``transforms.Normalize`` / ``Unnormalize``:

* ``mean_std`` (pi0):  ``y = (x - mean) / (std + 1e-6)``,  ``x = y * (std + 1e-6) + mean``
* ``quantile`` (pi0.5): ``y = (x - q01) / (q99 - q01 + 1e-6) * 2 - 1``,
  ``x = (y + 1) / 2 * (q99 - q01 + 1e-6) + q01``

Statistics may be shorter than the vector (8-d LIBERO state stats, 32-d padded model vectors) or longer
(stats stored padded to 32): normalisation uses the first ``x.shape[-1]`` entries of the stats, and
un-normalisation only touches the first ``len(stats)`` dims, leaving padding dims as they are (the
behaviour of openpi's quantile path; its mean/std path pads mean with 0 and std with 1, which differs
from ours only by the 1e-6 on padding dims, which are dropped anyway).

Where the file lives: ``assets/<asset_id>/norm_stats.json`` (openpi training output),
``<asset_id>/norm_stats.json`` (RLinf / openpi PyTorch folders, e.g.
``physical-intelligence/libero/norm_stats.json``) or ``norm_stats.json`` at the top (our layout).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vlarl_cli.errors import CheckpointError, ConfigError, did_you_mean

__all__ = [
    "MODES",
    "NORM_STATS_FILE",
    "NormStats",
    "Normalizer",
    "find_norm_stats",
    "load_norm_stats",
    "norm_stats_to_json",
    "save_norm_stats",
]

NORM_STATS_FILE = "norm_stats.json"
MODES = ("mean_std", "quantile", "identity")
_EPS = 1e-6  # openpi transforms.Normalize


@dataclass(frozen=True)
class NormStats:
    """Statistics of one vector quantity (``[dim]`` float64 tensors; q01/q99 optional)."""

    mean: Tensor
    std: Tensor
    q01: Tensor | None = None
    q99: Tensor | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "norm stats") -> NormStats:
        missing = [k for k in ("mean", "std") if k not in d]
        if missing:
            raise CheckpointError(f"{where} lacks {missing} (has {sorted(d)}).",
                                  "Regenerate the norm stats file with mean/std/q01/q99 for each key.")

        def t(name: str) -> Tensor | None:
            v = d.get(name)
            return None if v is None else torch.as_tensor(v, dtype=torch.float64).reshape(-1)

        mean, std = t("mean"), t("std")
        assert mean is not None and std is not None
        return cls(mean=mean, std=std, q01=t("q01"), q99=t("q99"))

    def to_dict(self) -> dict[str, list[float]]:
        out = {"mean": self.mean.tolist(), "std": self.std.tolist()}
        if self.q01 is not None:
            out["q01"] = self.q01.tolist()
        if self.q99 is not None:
            out["q99"] = self.q99.tolist()
        return out

    @property
    def dim(self) -> int:
        return int(self.mean.numel())


def load_norm_stats(path: str | os.PathLike[str]) -> dict[str, NormStats]:
    """Read a ``norm_stats.json`` (with or without the top-level ``"norm_stats"`` wrapper)."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"Norm stats file {p} does not exist.",
                              "Point norm_stats_path at the checkpoint's norm_stats.json.") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"Norm stats file {p} is not valid JSON ({err}).",
                              "Re-download or regenerate it.") from None
    body = raw.get("norm_stats", raw) if isinstance(raw, dict) else None
    if not isinstance(body, dict):
        raise CheckpointError(f"Norm stats file {p} is not a JSON object of statistics.",
                              'Expected {"norm_stats": {"state": {...}, "actions": {...}}}.')
    return {k: NormStats.from_dict(v, where=f"{p} [{k}]") for k, v in body.items() if isinstance(v, dict)}


def norm_stats_to_json(stats: dict[str, NormStats]) -> dict[str, Any]:
    return {"norm_stats": {k: v.to_dict() for k, v in stats.items()}}


def save_norm_stats(stats: dict[str, NormStats], path: str | os.PathLike[str]) -> Path:
    """Write ``stats`` atomically in the openpi format."""
    from vlarl_cli.checkpoints.atomic import atomic_write_json

    return atomic_write_json(path, norm_stats_to_json(stats))


def find_norm_stats(root: str | os.PathLike[str], asset_id: str | None = None) -> Path | None:
    """Locate ``norm_stats.json`` in a checkpoint folder; None when there is none.

    Order: ``norm_stats.json`` at the top, ``assets/<asset_id>/``, ``<asset_id>/`` (RLinf), then any
    ``norm_stats.json`` up to 4 folders deep (the first in sorted order, so the choice is stable).
    """
    base = Path(root)
    candidates = [base / NORM_STATS_FILE]
    if asset_id:
        candidates += [base / "assets" / asset_id / NORM_STATS_FILE, base / asset_id / NORM_STATS_FILE]
    for c in candidates:
        if c.is_file():
            return c
    found = sorted(p for p in base.rglob(NORM_STATS_FILE)
                   if len(p.relative_to(base).parts) <= 5 and not any(s.startswith(".") for s in p.parts))
    return found[0] if found else None


class Normalizer:
    """Normalises / un-normalises named quantities with one mode.

    Args:
        stats: ``{"state": NormStats, "actions": NormStats}`` (other keys are ignored).
        mode: ``"mean_std"`` (pi0), ``"quantile"`` (pi0.5) or ``"identity"`` (no stats, e.g. tiny tests).
    """

    def __init__(self, stats: dict[str, NormStats] | None, mode: str) -> None:
        if mode not in MODES:
            raise ConfigError(f'Unknown normalisation mode "{mode}".{did_you_mean(mode, MODES)}',
                              f"Use one of {', '.join(MODES)}.")
        self.stats = dict(stats or {})
        self.mode = mode
        if mode == "quantile":
            for k, s in self.stats.items():
                if s.q01 is None or s.q99 is None:
                    raise CheckpointError(f'Norm stats for "{k}" lack q01/q99, needed by quantile '
                                          "normalisation (pi0.5).",
                                          "Use norm stats that include quantiles, or mean_std mode.")

    def has(self, key: str) -> bool:
        return self.mode != "identity" and key in self.stats

    def normalize(self, x: Tensor, key: str) -> Tensor:
        """``x [..., n]`` -> normalised, same shape and dtype (computed in float64)."""
        if not self.has(key):
            return x
        s = self.stats[key]
        d = min(x.shape[-1], s.dim)
        head = x[..., :d].double()
        # the openpi expressions, kept literally (computed in float64)
        if self.mode == "mean_std":
            y = (head - s.mean[:d].to(x.device)) / (s.std[:d].to(x.device) + _EPS)
        else:
            q01, q99 = s.q01[:d].to(x.device), s.q99[:d].to(x.device)  # type: ignore[index]
            y = (head - q01) / (q99 - q01 + _EPS) * 2.0 - 1.0
        return torch.cat([y.to(x.dtype), x[..., d:]], dim=-1)

    def unnormalize(self, y: Tensor, key: str) -> Tensor:
        """Inverse of :meth:`normalize` on the first ``len(stats)`` dims; the rest pass through."""
        if not self.has(key):
            return y
        s = self.stats[key]
        d = min(y.shape[-1], s.dim)
        head = y[..., :d].double()
        if self.mode == "mean_std":
            x = head * (s.std[:d].to(y.device) + _EPS) + s.mean[:d].to(y.device)
        else:
            q01, q99 = s.q01[:d].to(y.device), s.q99[:d].to(y.device)  # type: ignore[index]
            x = (head + 1.0) / 2.0 * (q99 - q01 + _EPS) + q01
        return torch.cat([x.to(y.dtype), y[..., d:]], dim=-1)
