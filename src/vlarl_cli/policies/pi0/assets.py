"""What a pi0 / pi0.5 checkpoint needs around its weights: the prompt tokenizer and the norm stats.

Nothing here falls back in silence. A REAL model (a vocabulary larger than :data:`TINY_VOCAB_MAX`,
i.e. PaliGemma's 257152) must get:

* its PaliGemma tokenizer, verified against the model's vocabulary size
  (:func:`vlarl_cli.checkpoints.tokenizer.resolve_tokenizer`: config, checkpoint folder, vlarl's cache,
  an earlier ``vlarl download``, the hub); the built-in byte tokenizer serves only tiny test models,
  whose vocabulary it fits;
* its norm stats (``norm_stats.json`` at the top, ``assets/<asset_id>/``, ``<asset_id>/``, any
  ``norm_stats.json`` up to 4 folders deep, LeRobot's processor files or normalisation buffers), or an
  explicit ``actor.model.norm_stats_path``. A model trained on normalised data and run without them
  acts on unscaled inputs and emits unscaled actions, so a missing file is an error, never identity.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.normalization import NORM_STATS_FILE, NormStats, find_norm_stats, load_norm_stats
from vlarl_cli.policies.pi0.config import Pi0Config

__all__ = ["DEFAULT_ASSET_ID", "TINY_VOCAB_MAX", "is_tiny", "resolve_norm_stats", "resolve_prompt_tokenizer"]

DEFAULT_ASSET_ID = "physical-intelligence/libero"
#: the largest vocabulary of a TEST model (tiny / small presets: 300 / 1024 ids); anything larger is a
#: real checkpoint that needs its own tokenizer and norm stats
TINY_VOCAB_MAX = 1024


def is_tiny(cfg: Pi0Config) -> bool:
    """A test-size model (byte tokenizer and identity normalisation allowed)."""
    return cfg.vocab_size <= TINY_VOCAB_MAX


def resolve_prompt_tokenizer(cfg: Pi0Config, root: Path, *, explicit: str | None
                             ) -> tuple[Pi0Config, dict[str, Any] | None]:
    """``(cfg with tokenizer = the verified file, tokenizer record for the card)``.

    ``explicit``: the config's ``tokenizer_path`` (wins). Otherwise a file in the checkpoint folder, then
    the path a vlarl checkpoint recorded (when it still exists), then the search of
    :func:`~vlarl_cli.checkpoints.tokenizer.resolve_tokenizer`. Tiny models without any file keep the
    byte tokenizer (record None).
    """
    from vlarl_cli.checkpoints.tokenizer import CHECKPOINT_NAMES, resolve_tokenizer, verify_tokenizer

    if explicit is not None:
        info = resolve_tokenizer(cfg.vocab_size, explicit=explicit)
    elif any((root / n).is_file() for n in CHECKPOINT_NAMES):
        info = resolve_tokenizer(cfg.vocab_size, checkpoint_dir=root)
    elif cfg.tokenizer != "byte" and Path(cfg.tokenizer).is_file():
        info = verify_tokenizer(cfg.tokenizer, cfg.vocab_size, source="saved config")
    elif is_tiny(cfg):
        return cfg.replace(tokenizer="byte"), None
    else:
        info = resolve_tokenizer(cfg.vocab_size, checkpoint_dir=root)
    return cfg.replace(tokenizer=info.path), info.to_dict()


def resolve_norm_stats(cfg: Pi0Config, root: Path, fmt: str, header: dict[str, Any], *,
                       explicit: str | os.PathLike[str] | None, asset_id: str | None
                       ) -> tuple[dict[str, NormStats] | None, str | None]:
    """``(stats, where they came from)``; None for a tiny model without any. Raises for a real model."""
    if explicit is not None:
        return load_norm_stats(explicit), os.fspath(explicit)
    aid = asset_id or DEFAULT_ASSET_ID
    found = find_norm_stats(root, aid)
    if found is not None:
        return load_norm_stats(found), os.fspath(found)
    if fmt == "lerobot":
        stats, where = lerobot_norm_stats(root, header)
        if stats:
            return stats, where
    if is_tiny(cfg) or cfg.normalization == "identity":
        return None, None
    raise CheckpointError(
        f"{root} has no norm stats for this {cfg.variant} model. Looked for {root / NORM_STATS_FILE}, "
        f"{root / 'assets' / aid / NORM_STATS_FILE} (openpi), {root / aid / NORM_STATS_FILE} (RLinf / openpi "
        f"PyTorch), any {NORM_STATS_FILE} up to 4 folders deep"
        + (", LeRobot's policy_*_normalizer_processor.safetensors files and normalize_* buffers"
           if fmt == "lerobot" else "")
        + ". Without them the model would see unscaled states and emit unscaled actions.",
        "Give the norm_stats.json the model was trained with: actor.model.norm_stats_path=<file> (a KEY=VALUE "
        "override on the command line, or in the config); if it sits under another asset id in the folder, set "
        "actor.model.asset_id=<id> (e.g. physical-intelligence/libero).")


def _norm_stats_from_lerobot_buffers(shapes: dict[str, tuple[tuple[int, ...], str, Path]]) -> dict[str, NormStats]:
    """Old LeRobot checkpoints keep normalisation buffers in the weights file."""
    from safetensors import safe_open

    found: dict[str, dict[str, Any]] = {}  # stat name -> tensor
    for name, (_, _, f) in shapes.items():
        n = name[len("model."):] if name.startswith("model.") else name
        for feature, ours in (("buffer_observation_state.", "state"), ("buffer_action.", "actions")):
            if n.startswith(("normalize_inputs.", "unnormalize_outputs.", "normalize_targets.")) and feature in n:
                stat = n.split(feature, 1)[1]
                with safe_open(os.fspath(f), "pt") as fh:
                    found.setdefault(ours, {})[stat] = fh.get_tensor(name)
    return {k: NormStats.from_dict({s: t.double().tolist() for s, t in v.items()})
            for k, v in found.items() if "mean" in v and "std" in v}


def _norm_stats_from_lerobot_processors(root: Path) -> dict[str, NormStats]:
    """LeRobot >= 0.4 keeps statistics in ``policy_{pre,post}processor_step_*_{,un}normalizer_processor
    .safetensors`` files with keys ``<feature>.<stat>`` (``observation.state.mean``, ``action.q99``...)."""
    from safetensors.torch import load_file

    found: dict[str, dict[str, list[float]]] = {}
    files = sorted(root.glob("policy_preprocessor_step_*_normalizer_processor.safetensors")) + sorted(
        root.glob("policy_postprocessor_step_*_unnormalizer_processor.safetensors"))
    for f in files:
        for key, value in load_file(os.fspath(f)).items():
            feature, _, stat = key.rpartition(".")
            ours = {"observation.state": "state", "action": "actions"}.get(feature)
            if ours is not None:
                found.setdefault(ours, {}).setdefault(stat, value.double().reshape(-1).tolist())
    return {k: NormStats.from_dict(v, where=f"{root} LeRobot processor [{k}]")
            for k, v in found.items() if "mean" in v and "std" in v}


def lerobot_norm_stats(root: Path, header: dict[str, tuple[tuple[int, ...], str, Path]]
                       ) -> tuple[dict[str, NormStats], str | None]:
    """LeRobot's statistics: its processor files (>= 0.4), else normalisation buffers in the weights."""
    stats = _norm_stats_from_lerobot_processors(root)
    if stats:
        return stats, f"{root} (LeRobot policy_*_normalizer_processor.safetensors)"
    stats = _norm_stats_from_lerobot_buffers(header)
    return stats, (f"{root} (LeRobot normalize_* buffers)" if stats else None)
