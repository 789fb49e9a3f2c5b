"""pi0 / pi0.5 network: presets, masks, cache == no-cache, invariances, parity with transformers' pi0."""

from __future__ import annotations

import math
import time

import pytest
import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.pi0.config import ModelSettings, preset
from vlarl_cli.policies.pi0.modeling import (
    AdaptiveRMSNorm,
    Pi0Model,
    make_att_2d_masks,
    sinusoidal_time_embedding,
)


def test_tiny_builds_fast_and_small():
    Pi0Model(preset("tiny"))  # first build pays the transformers imports
    t0 = time.perf_counter()
    model = Pi0Model(preset("tiny"))
    elapsed = time.perf_counter() - t0
    assert model.num_parameters() < 200_000
    assert elapsed < 2.0  # a smoke bound (milliseconds in practice); speed lives in benchmarks/


# pi0.5 vs pi0 by hand: 37 expert RMSNorms (2 x 18 layers + final) become adaRMS dense layers
# (1024 -> 3 x 1024, with bias) and lose their 1024-d weight; pi0's state_proj (32 -> 1024) and
# action_time_mlp_in/out (2048 -> 1024, 1024 -> 1024) are replaced by time_mlp_in/out (1024 -> 1024 each).
_PI0_FULL = 3_238_048_528
_PI05_DELTA = (37 * (1024 * 3072 + 3072 - 1024) - (32 * 1024 + 1024) - (2048 * 1024 + 1024) - (1024 * 1024 + 1024)
               + 2 * (1024 * 1024 + 1024))


@pytest.mark.parametrize(("variant", "expected"), [("pi0", _PI0_FULL), ("pi05", _PI0_FULL + _PI05_DELTA)])
def test_full_preset_parameter_count_on_meta(variant, expected):
    with torch.device("meta"):
        model = Pi0Model(preset("full", variant, add_value_head=False))
    n = model.num_parameters()
    assert n == expected
    if variant == "pi0":
        assert abs(n / 1e9 - 3.24) < 0.01  # REFERENCE.md: about 3.24B live parameters
    assert all(p.device.type == "meta" for p in model.parameters())


def test_full_preset_component_sizes():
    with torch.device("meta"):
        model = Pi0Model(preset("full", "pi0", add_value_head=False))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert model.vlm.language_model.embed_tokens.weight.shape == (257152, 2048)
    assert 0.40e9 < count(model.vlm.vision_tower) < 0.42e9  # SigLIP So400m
    assert 2.50e9 < count(model.vlm.language_model) < 2.52e9  # Gemma 2B incl. embedding
    assert 0.30e9 < count(model.expert) < 0.32e9  # Gemma 300M without embedding
    assert model.vlm.language_model.layers[0].self_attn.k_proj.weight.shape == (256, 2048)  # 1 KV head x 256
    assert model.expert.layers[0].self_attn.q_proj.weight.shape == (2048, 1024)  # 8 heads x 256


def test_pi05_uses_adaptive_norms_named_dense():
    model = Pi0Model(preset("tiny", "pi05"))
    names = {n for n, _ in model.named_parameters()}
    assert "expert.layers.0.input_layernorm.dense.weight" in names
    assert "expert.layers.1.post_attention_layernorm.dense.bias" in names
    assert "expert.norm.dense.weight" in names
    assert "expert.norm.weight" not in names and "time_mlp_in.weight" in names and "state_proj.weight" not in names
    assert "vlm.language_model.norm.weight" in names  # the VLM keeps plain RMSNorms


def test_block_mask_hand_example():
    # prefix of 3 (last one padding), state token, 2 action tokens: ar = [0, 0, 0, 1, 1, 0]
    pad = torch.tensor([[True, True, False, True, True, True]])
    ar = torch.tensor([[0, 0, 0, 1, 1, 0]])
    m = make_att_2d_masks(pad, ar)[0].int()
    expected = torch.tensor([
        [1, 1, 0, 0, 0, 0],  # prefix: bidirectional among valid prefix, never the suffix
        [1, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],  # padding attends nothing
        [1, 1, 0, 1, 0, 0],  # state: prefix + itself, not the actions
        [1, 1, 0, 1, 1, 1],  # actions: prefix + state + all actions
        [1, 1, 0, 1, 1, 1],
    ])
    assert torch.equal(m, expected)


def test_sinusoidal_embedding_hand_values():
    t = torch.tensor([0.0, 0.5])
    emb = sinusoidal_time_embedding(t, 4, 4e-3, 4.0)
    periods = [4e-3, 4.0]
    expected = torch.tensor([[math.sin(2 * math.pi * tt / p) for p in periods] + [math.cos(2 * math.pi * tt / p)
                              for p in periods] for tt in (0.0, 0.5)])
    # float32 as openpi's JAX posemb_sincos: the argument 2 pi * 0.5 / 4e-3 ~ 785 carries float32 rounding
    # (one ulp is 6e-5 there), so sin(250 pi) comes out ~3e-5 instead of 0
    assert torch.allclose(emb, expected, atol=1e-4)
    assert emb.dtype == torch.float32


def test_adaptive_rmsnorm_hand_example():
    norm = AdaptiveRMSNorm(2, 1, eps=0.0)
    x = torch.tensor([[[3.0, 4.0]]])
    with torch.no_grad():
        norm.dense.weight.zero_()
        norm.dense.bias.copy_(torch.tensor([1.0, 0.0, 0.5, -0.5, 2.0, 3.0]))  # scale, shift, gate
    y, gate = norm(x, torch.zeros(1, 1))
    rms = math.sqrt((9 + 16) / 2)
    assert torch.allclose(y, torch.tensor([[[3 / rms * 2 + 0.5, 4 / rms * 1 - 0.5]]]), atol=1e-6)
    assert torch.equal(gate, torch.tensor([[[2.0, 3.0]]]))


def test_language_embedding_scaled_once(model_inputs):
    model = Pi0Model(preset("tiny")).eval()
    inp = model_inputs(model.cfg)
    embs, pad = model.embed_prefix(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"])
    n_img = 2 * model.cfg.tokens_per_image
    raw = model.vlm.language_model.embed_tokens(inp["tokens"])
    assert torch.equal(embs[:, n_img:], raw * math.sqrt(model.cfg.vlm_width))
    feats = model.vlm.multi_modal_projector.linear(
        model.vlm.vision_tower(pixel_values=inp["images"][:, 0]).last_hidden_state)
    assert torch.allclose(embs[:, : model.cfg.tokens_per_image], feats)  # image features NOT divided
    assert pad.shape == embs.shape[:2]


@pytest.mark.parametrize("variant", ["pi0", "pi05"])
def test_prefix_cache_equals_joint_pass(make_policy, model_inputs, variant):
    model = make_policy(variant)
    inp = model_inputs(model.cfg)
    with torch.no_grad():
        prefix = model.encode_prefix(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"])
        cached = model.expert_forward(model.expert_cache(prefix), inp["state"], inp["x_t"], inp["t"])
        prefix_out, joint = model.joint_forward(inp["images"], inp["image_masks"], inp["tokens"],
                                                inp["token_mask"], inp["state"], inp["x_t"], inp["t"])
    assert torch.allclose(cached, joint, atol=2e-6, rtol=0)
    valid = prefix.pad[..., None]
    assert torch.allclose(prefix.hidden * valid, prefix_out * valid, atol=2e-6, rtol=0)


def test_cached_sampling_reuses_prefix_across_steps(make_policy, model_inputs):
    """sample_actions with the cache equals an Euler loop that recomputes the joint pass every step."""
    model = make_policy("pi0")
    inp = model_inputs(model.cfg)
    k = 3
    with torch.no_grad():
        fast = model.sample_actions(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"],
                                    inp["state"], inp["x_t"], num_steps=k)
        x = inp["x_t"].clone()
        dt, t = -1.0 / k, torch.ones(())  # openpi's float32 time accumulation (t += dt)
        for _ in range(k):
            _, out = model.joint_forward(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"],
                                         inp["state"], x, t.expand(x.shape[0]))
            x = x + dt * model.velocity_from_features(out)
            t = t + dt
    assert torch.allclose(fast, x, atol=1e-5, rtol=0)


def test_padding_and_missing_camera_change_nothing(make_policy, model_inputs):
    model = make_policy("pi0")
    inp = model_inputs(model.cfg)
    with torch.no_grad():
        base = model.sample_actions(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"],
                                    inp["state"], inp["x_t"], num_steps=2)
        # ids under the padding mask are never seen
        tokens = torch.where(inp["token_mask"], inp["tokens"], torch.randint_like(inp["tokens"], 4, 260))
        same = model.sample_actions(inp["images"], inp["image_masks"], tokens, inp["token_mask"],
                                    inp["state"], inp["x_t"], num_steps=2)
        # an extra camera slot masked for everyone (openpi's empty right-wrist slot) is a no-op
        images3 = torch.cat([inp["images"], torch.rand_like(inp["images"][:, :1])], 1)
        masks3 = torch.cat([inp["image_masks"], torch.zeros_like(inp["image_masks"][:, :1])], 1)
        same3 = model.sample_actions(images3, masks3, inp["tokens"], inp["token_mask"], inp["state"],
                                     inp["x_t"], num_steps=2)
        # the prompt does matter (guards against a test that cannot fail)
        other = model.sample_actions(inp["images"], inp["image_masks"], inp["tokens"].flip(0),
                                     inp["token_mask"], inp["state"], inp["x_t"], num_steps=2)
    assert torch.equal(base, same)
    assert torch.allclose(base, same3, atol=1e-6, rtol=0)
    assert not torch.allclose(base, other, atol=1e-4)


def test_pi05_ignores_state_pi0_uses_it(make_policy, model_inputs):
    for variant, uses in (("pi0", True), ("pi05", False)):
        model = make_policy(variant)
        inp = model_inputs(model.cfg)
        with torch.no_grad():
            a = model.sample_actions(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"],
                                     inp["state"], inp["x_t"], num_steps=2)
            b = model.sample_actions(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"],
                                     inp["state"] + 1.0, inp["x_t"], num_steps=2)
        assert torch.equal(a, b) != uses


def test_parity_with_transformers_native_pi0(make_policy, model_inputs, tmp_path):
    """An independent implementation (transformers' PI0ForConditionalGeneration, which attends the
    VLM's DynamicCache) on the SAME weights, exported through our hf_pi0 key map."""
    from transformers import PI0ForConditionalGeneration

    from vlarl_cli.policies.pi0.checkpoint import save_policy

    model = make_policy("pi0", add_value_head=False)
    save_policy(model, tmp_path / "hf", format="hf_pi0")
    ref = PI0ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    inp = model_inputs(model.cfg)
    b, n_img = inp["tokens"].shape[0], 2 * model.cfg.tokens_per_image
    image_token = ref.config.vlm_config.image_token_id
    input_ids = torch.cat([torch.full((b, n_img), image_token), inp["tokens"]], 1)
    attention = torch.cat([torch.ones(b, n_img, dtype=torch.long), inp["token_mask"].long()], 1)
    with torch.no_grad():
        ours = model.sample_actions(inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"],
                                    inp["state"], inp["x_t"], num_steps=4)
        theirs = ref.sample_actions(state=inp["state"], input_ids=input_ids, pixel_values=inp["images"],
                                    noise=inp["x_t"], attention_mask=attention,
                                    pixel_attention_mask=inp["image_masks"], num_steps=4)
    assert ours.abs().max() > 0.1
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=0)


def test_config_errors_name_the_problem():
    with pytest.raises(ConfigError, match='Did you mean "tiny"'):
        preset("tiyn")
    with pytest.raises(ConfigError, match="noise_method"):
        preset("tiny", noise_method="flow_sdee")
    with pytest.raises(ConfigError, match="num_action_chunks"):
        preset("tiny", num_action_chunks=99)
    with pytest.raises(ConfigError, match="not a pi0-family"):
        _ = ModelSettings(model_type="gr00t").variant


def test_model_settings_map_recipe_fields():
    cfg = ModelSettings(model_type="openpi", config_name="pi05_libero", preset="tiny", num_steps=5,
                        noise_method="flow_noise", precision="bfloat16", action_dim=7).to_pi0_config()
    assert cfg.variant == "pi05" and cfg.value_after_vlm and cfg.num_steps == 5
    assert cfg.noise_method == "flow_noise" and cfg.precision == "bf16" and cfg.normalization_mode == "quantile"
    pi0 = ModelSettings(model_type="openpi", config_name="pi0_libero", preset="tiny").to_pi0_config()
    assert pi0.variant == "pi0" and pi0.extra_delta_transform and not pi0.value_after_vlm


def test_build_policy_full_on_meta_allocates_nothing():
    from vlarl_cli.policies.pi0 import build_policy

    policy = build_policy(ModelSettings(model_type="pi0", preset="full", add_value_head=False), torch.device("meta"))
    assert policy.num_parameters() == _PI0_FULL
    assert {p.device.type for p in policy.parameters()} == {"meta"}
