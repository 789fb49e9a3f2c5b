"""GR00T N1.5 / N1.6 policy family (Eagle VLM backbone + flow-matching DiT action head).

    from vlarl_cli.policies.gr00t import ModelSettings, build_policy
    policy = build_policy(ModelSettings(model_type="gr00t", preset="tiny"), "cpu")
    out = policy.sample(obs); ev = policy.evaluate(out.replay)

Modules: ``config`` (presets, ModelSettings), ``modality`` (embodiments, statistics) with ``normalization``
(each release's rules), ``processing`` (prompts, RLinf padding) with ``tokenizer`` (Qwen from vocab + merges)
and ``images`` (each release's pixel pipeline), ``backbone`` / ``action_head`` / ``critic`` (RLinf's value
head) / ``modeling`` (the network and the policy), ``checkpoint`` (vlarl / gr00t_n15 / gr00t_n16 layouts).
Inputs are checked against Isaac-GR00T itself by ``tests/policies/gr00t/test_gr00t_golden.py``. Importing this package is light: model
code (transformers) loads on first use.
"""

from __future__ import annotations

from typing import Any

from vlarl_cli.policies.gr00t.config import (
    FSDP_WRAP_CLASSES,
    Gr00tConfig,
    ModelSettings,
    preset,
)

__all__ = [
    "FORMATS",
    "FSDP_WRAP_CLASSES",
    "Gr00tConfig",
    "Gr00tPolicy",
    "ModelSettings",
    "build_policy",
    "describe",
    "detect_format",
    "load_policy",
    "preset",
    "save_policy",
]

_LAZY = {"Gr00tPolicy": "modeling", "FORMATS": "checkpoint", "describe": "checkpoint",
         "detect_format": "checkpoint", "load_policy": "checkpoint", "save_policy": "checkpoint"}


def build_policy(model: ModelSettings, device: Any = "cpu") -> Any:
    """Build a :class:`~.modeling.Gr00tPolicy` from settings: load ``model_path`` or build ``preset``.

    ``device`` may be ``"meta"`` for the full preset (parameter counting, FSDP init).
    """
    import torch

    from vlarl_cli.precision import resolve_dtype

    device = torch.device(device)
    dtype = resolve_dtype(model.precision or "fp32", device)  # bf16 -> fp32 on CPU
    if model.detach_critic_input:
        import warnings

        warnings.warn("actor.model.detach_critic_input=True is not read by RLinf's GR00T model, whose value loss "
                      "also trains the shared layers (VL layer norm, N1.5's VL self-attention, state encoder); "
                      "vlarl's GR00T does the same, so the critic input is not detached.", stacklevel=2)
    if model.model_path is not None:
        from pathlib import Path

        from vlarl_cli.policies.gr00t.checkpoint import load_policy

        return load_policy(Path(model.model_path), device=device, dtype=dtype, overrides=model.to_dict())
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    cfg = preset(model.preset or "tiny", model.version)
    modality = default_modality(model.effective_embodiment_tag, cfg)
    return Gr00tPolicy(cfg, model, modality, device=device, dtype=dtype)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"vlarl_cli.policies.gr00t.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
