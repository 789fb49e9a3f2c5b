"""Presets, settings validation and full-size parameter counts (built on the meta device)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.gr00t import build_policy
from vlarl_cli.policies.gr00t.config import Gr00tConfig, ModelSettings, preset


def _lm_params(c: Gr00tConfig) -> int:
    """Qwen3 truncated to select_layer layers, by hand: embeddings + per-layer attention/MLP/norms + final norm."""
    h, q, kv = c.llm_hidden_size, c.llm_num_heads * c.llm_head_dim, c.llm_num_kv_heads * c.llm_head_dim
    per_layer = h * q + 2 * h * kv + q * h + 2 * c.llm_head_dim + 3 * h * c.llm_intermediate_size + 2 * h
    return c.vocab_size * h + c.select_layer * per_layer + h


def _vision_params(c: Gr00tConfig) -> int:
    d, i, p = c.vision_hidden_size, c.vision_intermediate_size, c.patch_size
    n_pos = c.vision_num_patches or (c.image_size // p) ** 2  # SigLIP-2 resizes its table (N1.6: 256)
    layer = 4 * (d * d + d) + 2 * 2 * d + (d * i + i) + (i * d + d)
    emb = 3 * p * p * d + d + n_pos * d
    head = (d + 3 * d * d + 3 * d + d * d + d + 2 * d + d * i + i + i * d + d) if c.vision_use_head else 0
    return emb + c.vision_num_layers * layer + 2 * d + head


def _head_params(c: Gr00tConfig) -> int:
    """Action head by hand (GR00T flow_matching_action_head + cross_attention_dit), no value head."""
    e, w, hid, vl = c.num_embodiments, c.input_embedding_dim, c.hidden_size, c.backbone_embedding_dim
    state = e * (c.state_dim * hid + hid + hid * w + w)
    act_enc = e * (c.action_dim * w + w + 2 * w * w + w + w * w + w)
    act_dec = e * (hid * hid + hid + hid * c.action_dim + c.action_dim)

    def block(dim: int, kv_dim: int, ada: bool) -> int:
        attn = (dim * dim + dim) + 2 * (kv_dim * dim + dim) + (dim * dim + dim)
        ff = (dim * 4 * dim + 4 * dim) + (4 * dim * dim + dim)
        norms = (dim * 2 * dim + 2 * dim) if ada else 4 * dim
        return attn + ff + norms

    dit = (256 * w + w + w * w + w)  # timestep embedder
    dit += sum(block(w, w if i % 2 else vl, True) for i in range(c.dit_num_layers))
    dit += (w * 2 * w + 2 * w) + (w * hid + hid)
    vl_sa = c.vl_self_attention_layers * block(vl, vl, False)
    return (state + act_enc + act_dec + dit + vl_sa + c.num_future_tokens * w + 2 * vl
            + c.max_seq_len * w)


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_full_preset_parameter_count_on_meta(version: str) -> None:
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    cfg = preset("full", version)
    s = ModelSettings(model_type="gr00t" if version == "n1.5" else "gr00t_n1d6", preset="full",
                      add_value_head=False)
    policy = Gr00tPolicy(cfg, s, default_modality(s.effective_embodiment_tag, cfg), device="meta")
    assert all(p.device.type == "meta" for p in policy.parameters())
    mlp1_in = cfg.vision_hidden_size * (4 if cfg.use_pixel_shuffle else 1)
    mlp1 = (mlp1_in * cfg.llm_hidden_size + cfg.llm_hidden_size if cfg.mlp_connector_layers == 1 else
            2 * mlp1_in + mlp1_in * cfg.llm_hidden_size + cfg.llm_hidden_size + cfg.llm_hidden_size ** 2 + cfg.llm_hidden_size)
    expected_backbone = _vision_params(cfg) + mlp1 + _lm_params(cfg)
    backbone = sum(p.numel() for p in policy.backbone.parameters())
    head = sum(p.numel() for p in policy.action_head.parameters())
    assert backbone == expected_backbone
    assert head == _head_params(cfg)
    total = backbone + head
    # "about 3B": N1.5 2.41B here (+0.31B lm_head that upstream files may carry, unused), N1.6 2.98B
    expected_total = {"n1.5": 2_413_522_880, "n1.6": 2_975_968_192}[version]
    assert total == expected_total
    assert 2.3e9 < total < 3.1e9


def test_tiny_presets_build_fast_and_small(policy_factory) -> None:
    for version in ("n1.5", "n1.6"):
        policy = policy_factory(version)
        assert sum(p.numel() for p in policy.parameters()) < 3_000_000


def test_preset_errors_name_the_fix() -> None:
    with pytest.raises(ConfigError, match='Did you mean "tiny"'):
        preset("tinyy")
    with pytest.raises(ConfigError, match=r"n1\.5"):
        preset("tiny", "n1.7")
    assert preset("tiny", "gr00t_n1d6").version == "n1.6"


def test_config_rules() -> None:
    base = preset("tiny")
    with pytest.raises(ConfigError, match="input_embedding_dim"):
        base.replace(dit_head_dim=13)
    with pytest.raises(ConfigError, match="multiple of patch_size"):
        base.replace(image_size=30)
    with pytest.raises(ConfigError, match="Unknown GR00T config field"):
        Gr00tConfig.from_dict({**base.to_dict(), "dit_layers": 3})
    assert Gr00tConfig.from_dict(base.to_dict()) == base
    assert base.tokens_per_image == 16 and preset("tiny", "n1.6").tokens_per_image == 4


def test_model_settings_validation() -> None:
    with pytest.raises(ConfigError, match="LoRA"):
        ModelSettings(preset="tiny", is_lora=True)
    with pytest.raises(ConfigError, match="not a GR00T model"):
        ModelSettings(model_type="openpi", preset="tiny")
    with pytest.raises(ConfigError, match="model_path"):
        ModelSettings()
    s = ModelSettings(model_type="gr00t_n1d6", preset="tiny", noise_method="reinflow")
    assert s.noise_method == "flow_noise"
    assert s.effective_embodiment_tag == "libero_panda" and s.effective_action_noise_scale == 0.1
    assert ModelSettings(preset="tiny").effective_action_noise_scale == 0.0
    assert ModelSettings.from_dict(s.to_dict()) == s
    assert {f.name for f in dataclasses.fields(ModelSettings)} >= {
        "num_action_chunks", "denoising_steps", "noise_method", "noise_level", "add_value_head",
        "value_after_vlm", "is_lora", "lora_rank", "train_expert_only", "model_path", "preset", "precision"}


def test_build_policy_from_settings() -> None:
    policy = build_policy(ModelSettings(model_type="gr00t_n1d6", preset="tiny", num_action_chunks=3), "cpu")
    assert policy.config.version == "n1.6" and policy.num_action_chunks == 3
    assert policy.fsdp_wrap_class_names() == ("Qwen3DecoderLayer", "Siglip2EncoderLayer", "BasicTransformerBlock")
    with pytest.raises(ConfigError, match="num_action_chunks"):
        build_policy(ModelSettings(preset="tiny", num_action_chunks=17), torch.device("cpu"))


def test_build_policy_precision_on_cpu_is_fp32() -> None:
    policy = build_policy(ModelSettings(preset="tiny", precision="bf16"), "cpu")
    assert {p.dtype for p in policy.parameters()} == {torch.float32}


@pytest.mark.parametrize(("name", "version", "chunks", "noise"), [("libero_spatial_ppo_gr00t", "n1.5", 5, 0.0),
                                                                  ("libero_spatial_ppo_gr00t_n1d6", "n1.6", 16, 0.1)])
def test_recipe_yaml_maps_onto_model_settings(name, version, chunks, noise) -> None:
    """The shipped RLinf-style recipes, with the tiny preset, build the intended GR00T policy."""
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.policies import registry

    cfg = load_config(name, ["actor.model.model_path=null", "actor.model.preset=tiny"]).config
    policy = registry.build_policy(cfg.actor.model, "cpu")
    s = policy.settings
    assert policy.config.version == version and policy.num_action_chunks == chunks and policy.action_dim == 7
    assert (s.noise_method, s.noise_level, s.denoising_steps, s.joint_logprob) == ("flow_sde", 0.5, 4, False)
    assert s.disable_dropout and s.add_value_head and s.train_expert_only is None  # RLinf's GR00T never reads it
    assert cfg.actor.model.setting("train_expert_only") is None
    assert s.effective_action_noise_scale == noise
    assert policy.modality.embodiment_tag == ("libero_franka" if version == "n1.5" else "libero_panda")
    assert not any(isinstance(m, torch.nn.Dropout) for m in policy.modules())
    # the checkpoint config's trainable set (RLinf): N1.6 trains its top LLM layers, N1.5 no backbone tensor here
    trained = {n.split(".layers.")[1].split(".")[0] for n, p in policy.backbone.named_parameters() if p.requires_grad}
    assert trained == (set() if version == "n1.5" else {"0", "1"})
    from vlarl_cli.config.schema import ModelConfig

    pi0 = ModelConfig(model_type="pi0", preset="tiny")
    assert pi0.train_expert_only is None and pi0.setting("train_expert_only") is True  # pi0 keeps its default


def test_rlinf_value_keys_are_checked_not_ignored() -> None:
    """RLinf's rl_head_config.use_vlm_value / value_vlm_mode: the first is value_after_vlm, the second must be
    the pooling GR00T implements (mean_token)."""
    assert ModelSettings(preset="tiny", use_vlm_value=True).value_after_vlm is True
    assert ModelSettings(preset="tiny").value_after_vlm is False
    assert ModelSettings(preset="tiny", value_after_vlm=True, use_vlm_value=True).value_after_vlm is True
    assert ModelSettings(preset="tiny", value_vlm_mode="mean_token").value_vlm_mode == "mean_token"
    with pytest.raises(ConfigError, match="disagree"):
        ModelSettings(preset="tiny", value_after_vlm=True, use_vlm_value=False)
    with pytest.raises(ConfigError, match='value_vlm_mode "last_token" is not implemented') as err:
        ModelSettings(preset="tiny", value_vlm_mode="last_token")
    assert "value_vlm_mode: mean_token" in err.value.fix


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_padding_value_must_be_the_models(version: str) -> None:
    from vlarl_cli.policies.gr00t.modality import default_modality
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    model_type = "gr00t" if version == "n1.5" else "gr00t_n1d6"
    full = preset("full", version)
    assert full.padding_value == 570
    s = ModelSettings(model_type=model_type, preset="full", add_value_head=False, padding_value=570)
    Gr00tPolicy(full, s, default_modality(s.effective_embodiment_tag, full), device="meta")  # accepted
    bad = dataclasses.replace(s, padding_value=600)
    with pytest.raises(ConfigError, match=r"padding_value 600 is not supported.*570 tokens") as err:
        Gr00tPolicy(full, bad, default_modality(bad.effective_embodiment_tag, full), device="meta")
    assert "padding_value: 570" in err.value.fix
    # the tiny preset pads to images + max_text_tokens: no fixed padding_value to ask for
    with pytest.raises(ConfigError, match="has no fixed padding_value"):
        build_policy(ModelSettings(model_type=model_type, preset="tiny", padding_value=570))


def test_rl_head_config_keys_reach_gr00t_and_warn_elsewhere() -> None:
    from vlarl_cli.config.schema import ModelConfig
    from vlarl_cli.policies.registry import make_settings

    head = {"padding_value": 570, "use_vlm_value": True, "value_vlm_mode": "mean_token"}
    s = make_settings(ModelConfig(model_type="gr00t", preset="full", rl_head_config=head))
    assert (s.padding_value, s.use_vlm_value, s.value_after_vlm, s.value_vlm_mode) == (570, True, True, "mean_token")
    with pytest.raises(ConfigError, match="not implemented"):
        make_settings(ModelConfig(model_type="gr00t", preset="tiny", rl_head_config={"value_vlm_mode": "first_token"}))
    with pytest.warns(UserWarning, match=r"rl_head_config.padding_value .*GR00T keys.* not used by model_type pi0"):
        make_settings(ModelConfig(model_type="pi0", preset="tiny", rl_head_config={"padding_value": 570}))
