"""OftConfig presets, validation, ModelSettings mapping and the full-size parameter count on meta."""

from __future__ import annotations

import time

import pytest
import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.openvla_oft import ModelSettings, OftConfig, build_policy, preset


def _vit_layer(d: int, mlp: int) -> int:
    # two LayerNorms + q/k/v/out projections with bias + MLP with bias
    return 2 * 2 * d + 4 * (d * d + d) + (d * mlp + mlp) + (mlp * d + d)


def expected_full_count() -> dict[str, int]:
    """Hand count of the real OpenVLA-7B (+ transformers' unused DINOv2 mask token and CLS position)."""
    n, p = 256, 14
    d, layers, mlp = 1024, 24, 4096  # DINOv2 ViT-L/14 reg4
    dino = (d + d + 4 * d + (1 + n) * d + (d * 3 * p * p + d)
            + layers * (_vit_layer(d, mlp) + 2 * d) + 2 * d)  # + 2 LayerScales per block, final norm
    d, layers, mlp = 1152, 27, 4304  # SigLIP So400m/14 with its attention-pool head
    head = d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * mlp + mlp) + (mlp * d + d)
    siglip = (d * 3 * p * p + d) + n * d + layers * _vit_layer(d, mlp) + 2 * d + head
    proj = (2176 * 8704 + 8704) + (8704 * 4096 + 4096) + (4096 * 4096 + 4096)
    v, h, i, layers = 32064, 4096, 11008, 32  # Llama-2-7B, vocabulary padded to 32064
    llm = v * h + layers * (4 * h * h + 3 * h * i + 2 * h) + h + v * h
    return {"dino": dino, "siglip": siglip, "projector": proj, "llm": llm}


def test_full_preset_on_meta_has_the_real_parameter_count():
    policy = build_policy(ModelSettings(preset="full", precision="bf16"), "meta")
    counts = {
        "dino": sum(x.numel() for x in policy.vision_backbone.featurizer.parameters()),
        "siglip": sum(x.numel() for x in policy.vision_backbone.fused_featurizer.parameters()),
        "projector": sum(x.numel() for x in policy.projector.parameters()),
        "llm": sum(x.numel() for x in policy.language_model.parameters()),
    }
    assert counts == expected_full_count()
    total = sum(x.numel() for x in policy.parameters())
    assert total == sum(expected_full_count().values()) == 7_541_239_232  # "about 7.5B"
    assert all(x.device.type == "meta" for x in policy.parameters())
    assert policy.projector.fc1.weight.dtype == torch.bfloat16
    # RLinf's critic on the 4096-wide hidden state: (512, 128) GELU MLP, last layer without bias
    with_value = build_policy(ModelSettings(preset="full", add_value_head=True), "meta")
    extra = sum(x.numel() for x in with_value.value_head.parameters())
    assert extra == (4096 * 512 + 512) + (512 * 128 + 128) + 128
    per_action = build_policy(ModelSettings(preset="full", add_value_head=True, value_type="action_level"), "meta")
    assert sum(x.numel() for x in per_action.value_head.parameters()) == extra + 7 * 128  # 8 outputs


def test_full_preset_derived_values():
    cfg = preset("full")
    assert cfg.vision_width == 2176 and cfg.num_patches == 256
    assert cfg.text_vocab_size == 32000 and cfg.action_token_start == 31744
    assert cfg.num_action_tokens == 56 and cfg.temperature == 1.6


def test_tiny_builds_fast_and_matches_its_preset():
    build_policy(ModelSettings(preset="tiny"), "cpu")  # first call pays the transformers import
    t0 = time.perf_counter()
    policy = build_policy(ModelSettings(preset="tiny"), "cpu")
    assert time.perf_counter() - t0 < 5.0  # milliseconds in practice; loose bound for a shared CPU
    assert policy.cfg == preset("tiny", temperature=1.6)
    assert sum(x.numel() for x in policy.parameters()) < 1_000_000
    assert policy.num_action_chunks == 8 and policy.action_dim == 7 and policy.temperature == 1.6


def test_model_settings_map_rl_fields():
    s = ModelSettings(preset="tiny", num_action_chunks=4, action_dim=7, add_value_head=True, is_lora=True,
                      lora_rank=4, unnorm_key="libero_10_no_noops", temperature=0.7, precision="bfloat16",
                      max_prompt_length=200, center_crop=True, attention="action_bidirectional",
                      implement_version="official")
    cfg = s.to_oft_config()
    assert (cfg.num_action_chunks, cfg.add_value_head, cfg.is_lora, cfg.lora_rank) == (4, True, True, 4)
    assert (cfg.unnorm_key, cfg.temperature, cfg.precision) == ("libero_10_no_noops", 0.7, "bf16")
    assert (cfg.max_prompt_len, cfg.center_crop, cfg.attention) == (200, True, "action_bidirectional")


def test_center_crop_follows_what_rlinf_does():
    # RLinf's model yaml says center_crop: True, its processor never crops: reported, not applied
    with pytest.warns(UserWarning, match="never crops"):
        assert ModelSettings(center_crop=True, implement_version="rlinf").to_oft_config().center_crop is False
    assert ModelSettings().to_oft_config().center_crop is False
    assert ModelSettings(center_crop=True, implement_version="official").to_oft_config().center_crop is True
    assert ModelSettings(precision=None).to_oft_config().precision == "fp32"


def test_proprio_and_film_outside_their_variant_are_refused_with_a_fix():
    with pytest.raises(ConfigError, match="no proprio token") as err:
        ModelSettings(use_proprio=True, implement_version="rlinf").to_oft_config()
    assert "implement_version: official" in str(err.value)
    assert ModelSettings(use_proprio=True, implement_version="official").to_oft_config().use_proprio
    with pytest.raises(ConfigError, match="FiLM") as err:
        ModelSettings(use_film=True).to_oft_config()
    assert "use_film: False" in str(err.value)


@pytest.mark.parametrize(("key", "value"), [("image_size", [256, 256]), ("vocab_size", 32000), ("hidden_size", 4096)])
def test_rlinf_architecture_keys_must_match_the_model(key, value):
    # the full preset has 224 px images, a 32000-id text vocabulary and width 4096
    wrong = {"image_size": [256, 256], "vocab_size": 32064, "hidden_size": 2048}[key]
    with pytest.raises(ConfigError, match=key):
        ModelSettings(preset="full", **{key: wrong}).to_oft_config()
    ModelSettings(**{key: value}).to_oft_config()  # the tiny preset replaces the described architecture
    full = ModelSettings(preset="full", image_size=[224, 224], vocab_size=32000, hidden_size=4096)
    assert full.to_oft_config().llm_width == 4096


@pytest.mark.parametrize(("field", "value", "match"), [
    ("attention", "causal", "attention mode"),
    ("precision", "fp8", "precision"),
    ("value_pooling", "max", "value_pooling"),
    ("gripper", "binary", "gripper"),
    ("image_size", 30, "multiple of patch_size"),
    ("temperature", 0.0, "temperature"),
    ("n_action_bins", 1000, "n_action_bins"),
    ("dino_depth", 1, "at least 2"),
])
def test_invalid_values_raise_config_errors(field, value, match):
    with pytest.raises(ConfigError, match=match):
        preset("tiny", **{field: value})


def test_unknown_preset_and_field_suggest_names():
    with pytest.raises(ConfigError, match='Did you mean "tiny"'):
        preset("tiyn")
    with pytest.raises(ConfigError, match='Did you mean "temperature"'):
        preset("tiny", temperatur=1.0)


def test_config_dict_round_trip():
    cfg = preset("tiny", value_hidden=(8, 4), is_lora=True)
    assert OftConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="saved config"):
        OftConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_registry_builds_the_tiny_policy_from_the_pydantic_config():
    from vlarl_cli.config.schema import ModelConfig
    from vlarl_cli.policies.registry import build_policy as registry_build

    model = ModelConfig(model_type="openvla_oft", preset="tiny", use_proprio=False, num_action_chunks=8,
                        add_value_head=True, precision="fp32", unnorm_key="libero_10_no_noops", is_lora=False)
    policy = registry_build(model, "cpu", temperature=1.3)  # the runner passes temperature_train as an extra
    assert type(policy).__name__ == "OftPolicy"
    assert policy.cfg.num_action_chunks == 8 and policy.value_head is not None and policy.temperature == 1.3
    assert policy.cfg.unnorm_key == "libero_10_no_noops"
    meta = registry_build(model.model_copy(update={"preset": "full"}), "meta")
    assert sum(p.numel() for p in meta.parameters()) > 7.5e9


# Every actor/rollout model key in RLinf's published OpenVLA-OFT recipes and model yaml (examples/embodiment/
# config/*openvlaoft*.yaml, model/openvla_oft.yaml, evaluations/*/*openvlaoft*_eval.yaml at RLinf a3816b5).
RLINF_OFT_MODEL_KEYS = (
    "action_dim", "add_value_head", "attn_implementation", "center_crop", "hidden_size", "image_size",
    "implement_version", "is_lora", "lora_path", "lora_rank", "low_cpu_mem_usage", "max_prompt_length",
    "model_path", "model_type", "num_action_chunks", "num_images_in_input", "policy_setup", "precision",
    "proprio_dim", "trust_remote_code", "unnorm_key", "use_film", "use_proprio", "value_type", "vocab_size")


def test_no_rlinf_oft_key_is_silently_dropped():
    """A key is either read by the OpenVLA-OFT settings (through the schema field and the registry), or
    listed as accepted-not-used by the loader with the reason it changes nothing here."""
    import dataclasses

    from vlarl_cli.config.schema import ModelConfig
    from vlarl_cli.policies.openvla_oft.config import INERT_RLINF_KEYS
    from vlarl_cli.policies.registry import settings_values

    consumed = {f.name for f in dataclasses.fields(ModelSettings)}
    passed = set(settings_values(ModelConfig(model_type="openvla_oft", preset="tiny", implement_version="rlinf",
                                             num_images_in_input=1, value_type="action_level", use_film=False,
                                             lora_path="x", image_size=[224, 224], vocab_size=32000,
                                             hidden_size=4096, proprio_dim=8, use_proprio=False,
                                             unnorm_key="libero_10_no_noops", center_crop=False,
                                             max_prompt_length=50, model_path="m", precision="bf16")))
    for key in RLINF_OFT_MODEL_KEYS:
        used = key in passed and key in consumed
        inert = key in ModelConfig.rlinf_ignored and key in INERT_RLINF_KEYS
        assert used or inert, key


def test_oft_keys_reach_the_policy_through_the_config():
    from vlarl_cli.config.schema import ModelConfig
    from vlarl_cli.policies.registry import build_policy as build_from_config

    cfg = ModelConfig(model_type="openvla_oft", preset="tiny", add_value_head=True, value_type="action_level",
                      implement_version="official", num_images_in_input=2, num_action_chunks=8)
    policy = build_from_config(cfg)
    assert policy.cfg.value_type == "action_level" and policy.value_head.num_values == 8
    assert policy.cfg.implement_version == "official" and policy.cfg.num_images_in_input == 2
    with pytest.raises(ConfigError, match="FiLM"):
        build_from_config(ModelConfig(model_type="openvla_oft", preset="tiny", use_film=True))
