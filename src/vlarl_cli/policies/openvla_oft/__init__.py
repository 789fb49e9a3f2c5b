"""OpenVLA-OFT with RLinf's RL head (256 action bins per element, sampled tokens, token log-probs).

Usage::

    from vlarl_cli.policies.openvla_oft import ModelSettings, build_policy

    policy = build_policy(ModelSettings(preset="tiny"), "cpu")
    out = policy.sample(obs)                 # obs: main_images [B, H, W, 3] uint8 / task_descriptions
    ev = policy.evaluate(out.replay)         # ev.logprobs == out.logprobs under unchanged weights

Heavy modules (transformers model classes) load only when a policy is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vlarl_cli.policies.openvla_oft.config import ModelSettings, OftConfig, preset

if TYPE_CHECKING:
    import torch

    from vlarl_cli.policies.openvla_oft.policy import OftPolicy

__all__ = ["ModelSettings", "OftConfig", "build_policy", "preset"]


def build_policy(model: ModelSettings, device: torch.device | str = "cpu") -> OftPolicy:
    """Build an OpenVLA-OFT policy from the recipe's model settings.

    Without ``model_path``: the preset's architecture with fresh weights; on ``torch.device("meta")``
    nothing is allocated (the ``full`` preset for dry runs and parameter counts). With ``model_path``:
    the checkpoint's architecture and weights (``vlarl`` or OpenVLA HF layout), with the recipe's RL
    fields (chunking, temperature, value head, LoRA, unnorm key, ...) applied on top.
    """
    from typing import cast

    import torch

    from vlarl_cli.policies.openvla_oft.policy import OftPolicy

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    dev = torch.device(device)
    rl: dict[str, Any] = model.rl_fields()
    if model.lora_path and not model.model_path and torch.device(device).type != "meta":
        from vlarl_cli.errors import ConfigError

        raise ConfigError("lora_path is set without model_path: a LoRA adapter needs the base checkpoint it was "
                          "trained on.", "Set actor.model.model_path to the base OpenVLA-OFT folder.")
    if model.model_path:
        from vlarl_cli.policies.openvla_oft.checkpoint import load_policy

        policy = cast(OftPolicy, load_policy(model.model_path, format=model.checkpoint_format, device=dev,
                             dtype=dtypes[rl["precision"]], overrides=rl,
                             dataset_statistics_path=model.norm_stats_path, settings=model,
                             lora_path=model.lora_path))
    else:
        cfg = model.to_oft_config()
        stats = None
        if model.norm_stats_path:
            from vlarl_cli.policies.openvla_oft.processing import load_dataset_statistics

            stats = load_dataset_statistics(model.norm_stats_path)
        if dev.type == "meta":
            with torch.device("meta"):
                policy = OftPolicy(cfg, dataset_statistics=stats)
            policy = policy.to(dtype=dtypes[cfg.precision])
        else:
            policy = OftPolicy(cfg, dataset_statistics=stats).to(device=dev, dtype=dtypes[cfg.precision])
    policy.gradient_checkpointing = model.gradient_checkpointing
    return policy
