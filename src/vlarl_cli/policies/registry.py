"""Map ``actor.model.model_type`` to a family and build its policy (lazily importing the family).

The pydantic :class:`~vlarl_cli.config.schema.ModelConfig` is translated into the family's own plain
``ModelSettings`` dataclass BY NAME: every field the family declares takes the config's value of that name,
the *effective* one (``ModelConfig.setting``: a key set in RLinf's ``openpi:`` / ``rl_head_config:`` block
wins over the flat field; a config giving both with different values is refused when it is loaded).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING, Any

import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.model_types import CHECKPOINT_FAMILIES, MODEL_TYPES

if TYPE_CHECKING:
    from vlarl_cli.config.schema import ModelConfig

#: model_type -> family package (from the one table, :mod:`vlarl_cli.model_types`)
FAMILIES: dict[str, str] = {name: t.family for name, t in MODEL_TYPES.items()}


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
    """Every value a family may want, by field name: each flat field of ``actor.model`` with its effective value
    (``ModelConfig.setting``: RLinf's nested block wins, a conflicting config was refused at load), the nested
    blocks' keys without a flat field (``config_name``, ``action_horizon``, ``padding_value`` ...), and
    ``num_steps`` / ``denoising_steps`` under both names. None values are left out (the family's default)."""
    blocks = ("openpi", "rl_head_config")
    values = {name: model.setting(name) for name in type(model).model_fields if name not in blocks}
    values.update(model.nested_only)
    values["num_steps"] = values["denoising_steps"] = model.effective_denoising_steps
    return {k: v for k, v in values.items() if v is not None}


#: how a warning names a family's keys
_FAMILY_NAMES = {"pi0": "pi0", "gr00t": "GR00T", "openvla_oft": "OpenVLA-OFT"}


def _unused(model: ModelConfig, names: set[str]) -> list[str]:
    """Keys the config sets that exactly one OTHER family's ``ModelSettings`` declares (an OpenVLA-OFT key on a
    pi0 run, a GR00T head key on OFT ...), as ``"<path> (<family> keys)"``: derived from the families' own
    fields, not a hand-kept list. The toy policies take a handful of fields and are not checked."""
    family = family_of(model.model_type)
    if family == "toy":
        return []
    owners: dict[str, set[str]] = {}
    for other in CHECKPOINT_FAMILIES:
        module = family_module(next(t for t, f in FAMILIES.items() if f == other))
        for f in dataclasses.fields(module.ModelSettings):
            owners.setdefault(f.name, set()).add(other)
    nested = {k: v[0] for k, v in model._nested_values().items()}
    # a saved config.yaml (every checkpoint's) sets every key; one at its default changes nothing in any family
    fields = type(model).model_fields
    given = {k for k in model.model_fields_set if getattr(model, k) is not None
             and getattr(model, k) != fields[k].get_default(call_default_factory=True)} | set(model.nested_only)
    found = sorted(k for k in given - names if len(owners.get(k, ())) == 1 and family not in owners[k])
    return [f"{nested.get(k, f'actor.model.{k}')} ({_FAMILY_NAMES.get(next(iter(owners[k])), '')} keys)" for k in found]


def make_settings(model: ModelConfig, **extra: Any) -> Any:
    """The family's ``ModelSettings`` filled by name from the config (names it does not declare are dropped;
    a key that only another family reads is reported)."""
    module = family_module(model.model_type)
    settings_cls = module.ModelSettings
    names = {f.name for f in dataclasses.fields(settings_cls)}
    values = {**settings_values(model), **extra}
    unused = _unused(model, names)
    if unused:  # these keys exist for another family; this one must not drop them silently
        import warnings

        warnings.warn(f"{', '.join(unused)} not used by model_type {model.model_type} (only another family reads "
                      "them).", stacklevel=2)
    if model.model_path is not None:
        values.pop("preset", None)  # weights come from the checkpoint; its config decides the size
    return settings_cls(**{k: v for k, v in values.items() if k in names})


def build_policy(model: ModelConfig, device: torch.device | str = "cpu", **extra: Any) -> torch.nn.Module:
    """Build (and load, when ``model_path`` is set) the policy for ``model``."""
    module = family_module(model.model_type)
    return module.build_policy(make_settings(model, **extra), torch.device(device))
