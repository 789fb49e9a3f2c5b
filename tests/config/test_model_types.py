"""The one model-type table (model_types.py) and the places that read it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vlarl_cli.checkpoints.detect import FAMILY_MODEL_TYPES
from vlarl_cli.config.presets import _preset_variant
from vlarl_cli.config.schema import ModelConfig
from vlarl_cli.envs.libero.protocol import get_protocol
from vlarl_cli.errors import ConfigError
from vlarl_cli.model_types import MODEL_TYPES, model_types_of
from vlarl_cli.policies.gr00t.config import MODEL_TYPE_TO_VERSION
from vlarl_cli.policies.gr00t.config import ModelSettings as Gr00tSettings
from vlarl_cli.policies.registry import FAMILIES


def test_every_reader_sees_the_same_vocabulary() -> None:
    assert set(FAMILIES) == set(MODEL_TYPES)
    assert FAMILY_MODEL_TYPES == {"pi0": ("openpi", "pi0", "pi05"), "gr00t": ("gr00t", "gr00t_n1d6"),
                                  "openvla_oft": ("openvla_oft",)}
    assert MODEL_TYPE_TO_VERSION == {"gr00t": "n1.5", "gr00t_n1d6": "n1.6"}
    assert model_types_of("toy") == ("toy_flow", "toy_gaussian")


@pytest.mark.parametrize(("model", "expected"), [
    ({"model_type": "openpi", "openpi": {"config_name": "pi05_libero"}}, ("pi0", "pi05")),
    ({"model_type": "openpi", "openpi": {"config_name": "pi0_libero"}}, ("pi0", "pi0")),
    ({"model_type": "pi0", "openpi": {"config_name": "pi05_libero"}}, ("pi0", "pi05")),  # config_name decides
    ({"model_type": "pi05"}, ("pi0", "pi05")),
    ({"model_type": "gr00t"}, ("gr00t", "gr00t_n15")),
    ({"model_type": "gr00t_n1d6"}, ("gr00t", "gr00t_n16")),
    ({"model_type": "openvla_oft"}, ("openvla_oft", "openvla")),
    ({"model_type": "toy_flow"}, (None, None)),  # no checkpoints to match
    ({"model_type": "mlp_policy"}, (None, None)),
])
def test_preset_matching_reads_the_table(model, expected) -> None:
    assert _preset_variant(model) == expected


def test_unknown_names_are_refused_with_a_suggestion() -> None:
    with pytest.raises(ValidationError, match='Did you mean "pi05"'):
        ModelConfig(model_type="pi055")
    with pytest.raises(ConfigError, match='Did you mean "gr00t_n1d6"'):
        Gr00tSettings(model_type="gr00t_n1d5")  # not a model type anywhere in vlarl


def test_evaluation_protocol_entries_follow_the_table() -> None:
    """A model type without an entry of its own takes its family's (openpi is a pi0); none for the rest."""
    std = get_protocol("standard")
    assert std.family("openpi") is std.family("pi0") is not None
    assert std.family("pi05") is not std.family("pi0")  # pi0.5 keeps its own entry
    assert std.family("gr00t_n1d6") is std.family("gr00t") is None  # GR00T: no upstream LIBERO evaluator
    assert std.family("toy_flow") is None and std.family("no_such_model") is None


def test_sft_trainable_head_or_lora_is_for_the_pi0_family_only() -> None:
    from vlarl_cli.training.sft import trainable_model

    for model_type in model_types_of("pi0"):
        model = ModelConfig(model_type=model_type, preset="tiny")
        assert trainable_model(model, "lora").is_lora
    with pytest.raises(ConfigError, match=r"sft\.trainable=head is implemented for the pi0 family"):
        trainable_model(ModelConfig(model_type="openvla_oft", preset="tiny"), "head")
