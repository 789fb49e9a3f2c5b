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

# Pi0Config fields that come from the RL recipe even when the architecture comes from a checkpoint.
_RL_FIELDS = ("precision", "num_action_chunks", "action_env_dim", "num_steps", "noise_method", "noise_level",
              "joint_logprob", "noise_logvar_min_std", "noise_logvar_max_std", "add_value_head",
              "value_after_vlm", "is_lora", "lora_rank", "train_expert_only", "extra_delta_transform",
              "tokenizer")


def build_policy(model: ModelSettings, device: torch.device | str = "cpu") -> Pi0Policy:
    """Build a pi0 / pi0.5 policy from the recipe's model settings.

    Without ``model_path``: the preset's architecture with fresh weights (``full`` on the meta device
    would be useless here, so only tiny/small make sense without weights). With ``model_path``: the
    checkpoint's architecture and weights (any supported layout), with the recipe's RL fields applied.
    """
    import torch

    from vlarl_cli.policies.pi0.policy import Pi0Policy

    cfg = model.to_pi0_config()
    if model.model_path:
        from vlarl_cli.policies.pi0.checkpoint import load_policy

        overrides: dict[str, Any] = {k: getattr(cfg, k) for k in _RL_FIELDS}
        if model.value_after_vlm is None:
            overrides.pop("value_after_vlm")
        if model.extra_delta_transform is None and (model.config_name or "").lower() != "pi0_libero":
            overrides.pop("extra_delta_transform")
        if model.action_horizon is not None:
            overrides["action_horizon"] = model.action_horizon
        dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
        return load_policy(model.model_path, format=model.checkpoint_format, device=device, dtype=dtype,
                           overrides=overrides, norm_stats_path=model.norm_stats_path,
                           asset_id=model.asset_id)
    policy = Pi0Policy(cfg)
    if cfg.precision == "bf16":
        policy = policy.to(torch.bfloat16)
    return policy.to(device)
