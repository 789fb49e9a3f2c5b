"""Map ``actor.model.model_type`` to a family and build its policy (lazily importing the family).

The pydantic :class:`~vlarl_cli.config.schema.ModelConfig` is translated into the family's own plain
``ModelSettings`` dataclass: only the fields the family declares are passed, using the *effective*
values (RLinf's ``openpi:`` / ``rl_head_config:`` blocks override the flat fields).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING, Any

import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.model_types import MODEL_TYPES

if TYPE_CHECKING:
    from vlarl_cli.config.schema import ModelConfig

#: model_type -> family package (from the one table, :mod:`vlarl_cli.model_types`)
FAMILIES: dict[str, str] = {name: t.family for name, t in MODEL_TYPES.items()}


#: rl_head_config fields only the GR00T family reads (RLinf's GR00T RL head keys)
_GR00T_HEAD_ONLY = ("padding_value", "use_vlm_value", "value_vlm_mode")
#: ModelConfig fields only the OpenVLA-OFT family reads (RLinf's OFT model keys)
_OFT_ONLY = ("implement_version", "num_images_in_input", "value_type", "use_film", "proprio_dim", "lora_path",
             "image_size", "vocab_size", "hidden_size")


def family_of(model_type: str) -> str:
    return FAMILIES[model_type]


def family_module(model_type: str) -> Any:
    """The family package (``vlarl_cli.policies.pi0`` ...); clear error when it is not built yet."""
    family = family_of(model_type)
    name = "vlarl_cli.policies.toy" if family == "toy" else f"vlarl_cli.policies.{family}"
    module = importlib.import_module(name)
    if not hasattr(module, "build_policy"):
        supported = sorted(t for t, f in FAMILIES.items() if _has_builder(f))
        raise ConfigError(f'model_type "{model_type}" ({family}) is not supported yet in this version of vlarl.',
                          f"Use one of: {', '.join(supported)}.")
    return module


def _has_builder(family: str) -> bool:
    name = "vlarl_cli.policies.toy" if family == "toy" else f"vlarl_cli.policies.{family}"
    try:
        return hasattr(importlib.import_module(name), "build_policy")
    except ImportError:
        return False


def settings_values(model: ModelConfig) -> dict[str, Any]:
    """Every value a family may want, by the names the families use."""
    openpi = model.openpi
    values: dict[str, Any] = {
        "model_type": model.model_type,
        "model_path": model.model_path,
        "preset": model.preset,
        "precision": model.precision,
        "action_dim": model.action_dim,
        "num_action_chunks": model.num_action_chunks,
        "num_steps": model.effective_denoising_steps,
        "denoising_steps": model.effective_denoising_steps,
        "noise_method": model.effective_noise_method,
        "noise_level": model.effective_noise_level,
        "joint_logprob": model.effective_joint_logprob,
        "add_value_head": model.effective_add_value_head,
        "value_after_vlm": model._nested("value_after_vlm") if model.value_after_vlm is None else model.value_after_vlm,
        "detach_critic_input": model._nested("detach_critic_input") if model.detach_critic_input is None
        else model.detach_critic_input,
        "is_lora": model.is_lora,
        "lora_rank": model.lora_rank,
        "train_expert_only": model._nested("train_expert_only") if model._nested("train_expert_only") is not None
        else model.train_expert_only,
        "disable_dropout": model._nested("disable_dropout") if model._nested("disable_dropout") is not None
        else model.disable_dropout,
        "action_noise_scale": model._nested("action_noise_scale") or model.action_noise_scale,
        "embodiment_tag": model.embodiment_tag,
        "unnorm_key": model.unnorm_key,
        "tokenizer_path": model.tokenizer_path,
        "norm_stats_path": model.norm_stats_path,
        "asset_id": model.asset_id,
        "obs_dim": model.obs_dim,
        "sft_loss_reduction": model.sft_loss_reduction,
        "use_proprio": model.use_proprio,
        "max_prompt_length": model.max_prompt_length,
        "center_crop": model.center_crop,
        "config_name": openpi.config_name if openpi else None,
        "action_horizon": openpi.action_horizon if openpi else None,
        "gradient_checkpointing": model.gradient_checkpointing,
        **{k: getattr(model, k) for k in _OFT_ONLY},
        **{k: model._nested(k) for k in _GR00T_HEAD_ONLY},
    }
    return {k: v for k, v in values.items() if v is not None}


def make_settings(model: ModelConfig, **extra: Any) -> Any:
    """The family's ``ModelSettings`` filled from the config (unknown names are dropped)."""
    module = family_module(model.model_type)
    settings_cls = module.ModelSettings
    names = {f.name for f in dataclasses.fields(settings_cls)}
    values = {**settings_values(model), **extra}
    unused = sorted(k for k in _OFT_ONLY if getattr(model, k) is not None and k not in names)
    unused_head = sorted(k for k in _GR00T_HEAD_ONLY if model._nested(k) is not None and k not in names)
    if unused or unused_head:  # these fields exist for one family; another must not drop them silently
        import warnings

        what = [f"actor.model.{', '.join(unused)} (OpenVLA-OFT keys)"] if unused else []
        what += [f"actor.model.rl_head_config.{', '.join(unused_head)} (GR00T keys)"] if unused_head else []
        warnings.warn(f"{' and '.join(what)} not used by model_type {model.model_type}.", stacklevel=2)
    if model.model_path is not None:
        values.pop("preset", None)  # weights come from the checkpoint; its config decides the size
    return settings_cls(**{k: v for k, v in values.items() if k in names})


def build_policy(model: ModelConfig, device: torch.device | str = "cpu", **extra: Any) -> torch.nn.Module:
    """Build (and load, when ``model_path`` is set) the policy for ``model``."""
    module = family_module(model.model_type)
    return module.build_policy(make_settings(model, **extra), torch.device(device))
