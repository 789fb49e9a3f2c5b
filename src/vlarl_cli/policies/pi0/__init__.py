"""pi0 / pi0.5 flow-matching VLA policies (PaliGemma prefix + Gemma action expert).

Usage::

    from vlarl_cli.policies.pi0 import ModelSettings, build_policy

    policy = build_policy(ModelSettings(model_type="pi0", preset="tiny"), "cpu")
    out = policy.sample(obs)                 # obs: main_images / wrist_images / states / task_descriptions
    ev = policy.evaluate(out.replay)         # ev.logprobs == out.logprobs under unchanged weights

Heavy modules (transformers model classes) load only when a policy is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vlarl_cli.policies.pi0.config import ModelSettings, Pi0Config, preset

if TYPE_CHECKING:
    import torch

    from vlarl_cli.policies.pi0.policy import Pi0Policy

__all__ = ["ModelSettings", "Pi0Config", "build_policy", "preset"]

def build_policy(model: ModelSettings, device: torch.device | str = "cpu") -> Pi0Policy:
    """Build a pi0 / pi0.5 policy from the recipe's model settings.

    Without ``model_path``: the preset's architecture with fresh random weights, built directly on
    ``device`` (``torch.device("meta")`` gives a weightless full-size model for dry runs). With ``model_path``: the
    checkpoint's architecture and weights (any supported layout), with the recipe's RL fields applied.
    """
    import torch

    from vlarl_cli.policies.pi0.policy import Pi0Policy
    from vlarl_cli.precision import DTYPES as _DTYPES
    cfg = model.to_pi0_config()
    if model.precision is None and model.model_path and torch.device(device).type not in ("cpu", "meta"):
        cfg = cfg.replace(precision=_stored_precision(model.model_path))
    if model.model_path:
        from vlarl_cli.policies.pi0.checkpoint import load_policy

        # the recipe's fields win over the checkpoint's config; the rest (architecture, a tokenizer.json of its
        # own, ...) stays the checkpoint's
        overrides: dict[str, Any] = {**model.rl_values(), "precision": cfg.precision}
        policy = load_policy(model.model_path, format=model.checkpoint_format, device=device,
                             dtype=_DTYPES[cfg.precision], overrides=overrides,
                             norm_stats_path=model.norm_stats_path, asset_id=model.asset_id)
    else:
        # built directly on the target device: on "meta" (dry runs) the full 3B model costs nothing
        with torch.device(device):
            policy = Pi0Policy(cfg)
        policy = policy.set_precision(_DTYPES[cfg.precision])
        if model.norm_stats_path:
            from vlarl_cli.policies.normalization import load_norm_stats

            policy.set_norm_stats(load_norm_stats(model.norm_stats_path))
    policy.gradient_checkpointing = model.gradient_checkpointing
    return policy


def _stored_precision(path: str) -> str:
    """``bf16`` / ``fp16`` when every floating tensor of the checkpoint is stored so, else ``fp32``."""
    from pathlib import Path

    from vlarl_cli.checkpoints.detect import read_safetensors_header, weight_files

    dtypes: set[str] = set()
    for f in weight_files(Path(path)) if Path(path).is_dir() else []:
        try:
            header = read_safetensors_header(f)
        except (OSError, ValueError):
            continue
        dtypes |= {str(m["dtype"]) for k, m in header.items() if k != "__metadata__"}
    floats = dtypes & {"F32", "F16", "BF16", "F64"}
    return {frozenset({"BF16"}): "bf16", frozenset({"F16"}): "fp16"}.get(frozenset(floats), "fp32")
