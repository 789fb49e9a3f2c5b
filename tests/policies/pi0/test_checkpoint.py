"""pi0 checkpoints: exact round trips through every layout, key maps, tied embedding, strict reports."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.normalization import NormStats
from vlarl_cli.policies.pi0 import ModelSettings, build_policy
from vlarl_cli.policies.pi0.checkpoint import (
    FORMATS,
    describe,
    detect_format,
    from_external,
    load_policy,
    save_policy,
    to_external,
)

LAYOUTS = [("pi0", f) for f in FORMATS] + [("pi05", f) for f in FORMATS if f != "hf_pi0"]


def _stats(seed: int = 0) -> dict[str, NormStats]:
    g = torch.Generator().manual_seed(seed)

    def one(d: int) -> NormStats:
        mean = torch.randn(d, generator=g, dtype=torch.float64)
        std = torch.rand(d, generator=g, dtype=torch.float64) + 0.5
        return NormStats(mean, std, mean - 2 * std, mean + 2 * std)

    return {"state": one(8), "actions": one(7)}


def _sample(policy, obs, seed: int = 11):
    return policy.sample(obs, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("variant", "fmt"), LAYOUTS)
def test_round_trip_is_exact(make_policy, make_obs, tmp_path, variant, fmt):
    policy = make_policy(variant, num_steps=3)
    policy.set_norm_stats(_stats())
    obs = make_obs(batch=2)
    ref = _sample(policy, obs)
    save_policy(policy, tmp_path / "ck", format=fmt)
    assert detect_format(tmp_path / "ck") == fmt
    loaded = load_policy(tmp_path / "ck")
    assert loaded.cfg == policy.cfg
    assert loaded.load_report.missing == [] and loaded.load_report.initialized == []
    sd, sd2 = policy.state_dict(), loaded.state_dict()
    assert sd.keys() == sd2.keys()
    assert all(torch.equal(sd[k], sd2[k]) for k in sd)
    out = _sample(loaded, obs)
    assert torch.equal(out.actions, ref.actions)  # atol = 0 in fp32
    assert torch.equal(out.logprobs, ref.logprobs)
    assert torch.equal(out.values, ref.values)
    info = describe(tmp_path / "ck")
    assert info["family"] == "pi0" and info["format"] == fmt and info["variant"] == variant
    assert info["norm_stats"] is True


def test_openpi_layout_key_names_and_files(make_policy, tmp_path):
    policy = make_policy("pi0", add_value_head=False)
    policy.set_norm_stats(_stats())
    save_policy(policy, tmp_path / "op", format="openpi", asset_id="physical-intelligence/libero")
    files = sorted(p.relative_to(tmp_path / "op").as_posix() for p in (tmp_path / "op").rglob("*") if p.is_file())
    assert files == ["assets/physical-intelligence/libero/norm_stats.json", "config.json", "model.safetensors"]
    keys = set(load_file(tmp_path / "op" / "model.safetensors"))
    assert "paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings.patch_embedding.weight" in keys
    assert "paligemma_with_expert.paligemma.model.language_model.layers.0.self_attn.q_proj.weight" in keys
    assert "paligemma_with_expert.gemma_expert.model.layers.1.mlp.down_proj.weight" in keys
    assert "paligemma_with_expert.paligemma.model.multi_modal_projector.linear.bias" in keys
    assert {"action_in_proj.weight", "state_proj.bias", "action_time_mlp_out.weight"} <= keys
    # the tied embedding is stored once, under lm_head (as safetensors.save_model writes it)
    assert "paligemma_with_expert.paligemma.lm_head.weight" in keys
    assert "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight" not in keys
    assert "paligemma_with_expert.gemma_expert.lm_head.weight" in keys  # unused upstream, zeros
    cfg = json.loads((tmp_path / "op" / "config.json").read_text())
    assert cfg["paligemma_variant"] == "gemma_2b" and cfg["action_horizon"] == policy.cfg.action_horizon
    n_model = sum(p.numel() for p in policy.parameters())
    assert describe(tmp_path / "op")["num_parameters"] == n_model


def test_key_maps_both_ways():
    cases = {
        "vlm.vision_tower.encoder.layers.3.mlp.fc1.weight": {
            "openpi": "paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.3.mlp.fc1.weight",
            "lerobot": "model.paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.3.mlp.fc1.weight",
            "hf_pi0": "model.vlm.vision_tower.encoder.layers.3.mlp.fc1.weight"},
        "expert.layers.0.input_layernorm.dense.weight": {
            "openpi": "paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm.dense.weight",
            "lerobot": "model.paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm.dense.weight",
            "hf_pi0": "model.dit.layers.0.input_layernorm.dense.weight"},
        "action_time_mlp_in.bias": {"openpi": "action_time_mlp_in.bias", "lerobot": "model.action_time_mlp_in.bias",
                                    "hf_pi0": "embed_action_time.action_time_mlp_in.bias"},
        "vlm.language_model.embed_tokens.weight": {
            "openpi": "paligemma_with_expert.paligemma.lm_head.weight",
            "lerobot": "model.paligemma_with_expert.paligemma.lm_head.weight",
            "hf_pi0": "model.vlm.language_model.embed_tokens.weight"},
    }
    for internal, ext in cases.items():
        for fmt, name in ext.items():
            assert to_external(internal, fmt) == name
            assert from_external(name, fmt) == internal
    # aliases read on load: transformers 5.x re-saved names
    assert from_external("paligemma_with_expert.paligemma.model.language_model.model.layers.0.mlp.up_proj.weight",
                         "hf_pi0") == "vlm.language_model.layers.0.mlp.up_proj.weight"
    assert from_external("paligemma_with_expert.paligemma.model.vision_tower.post_layernorm.bias",
                         "openpi") == "vlm.vision_tower.post_layernorm.bias"
    assert from_external("something.else", "openpi") is None


def test_embedding_key_preferred_over_lm_head(make_policy, tmp_path):
    policy = make_policy("pi0", add_value_head=False)
    save_policy(policy, tmp_path / "op", format="openpi")
    f = tmp_path / "op" / "model.safetensors"
    tensors = load_file(f)
    emb = tensors["paligemma_with_expert.paligemma.lm_head.weight"]
    tensors["paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"] = emb.clone()
    tensors["paligemma_with_expert.paligemma.lm_head.weight"] = torch.zeros_like(emb)  # a stale copy
    save_file(tensors, f)
    loaded = load_policy(tmp_path / "op")
    assert torch.equal(loaded.vlm.language_model.embed_tokens.weight, policy.vlm.language_model.embed_tokens.weight)


def test_strict_loading_names_missing_unexpected_and_mismatched(make_policy, tmp_path, tensor_reads):
    policy = make_policy("pi0", add_value_head=False)
    save_policy(policy, tmp_path / "op", format="openpi")
    f = tmp_path / "op" / "model.safetensors"
    tensors = load_file(f)
    del tensors["paligemma_with_expert.gemma_expert.model.layers.1.mlp.up_proj.weight"]
    tensors["paligemma_with_expert.paligemma.model.extra_thing.weight"] = torch.zeros(2)
    tensors["action_out_proj.bias"] = torch.zeros(5)
    save_file(tensors, f)
    with pytest.raises(CheckpointError) as err:
        load_policy(tmp_path / "op")
    msg = str(err.value)
    assert "expert.layers.1.mlp.up_proj.weight" in msg
    assert "paligemma_with_expert.paligemma.model.extra_thing.weight" in msg
    assert "action_out_proj.bias [5]" in msg
    assert tensor_reads == []  # refused from the header alone: a real checkpoint is 6-15 GB
    loose = load_policy(tmp_path / "op", strict=False)
    assert len(tensor_reads) == loose.load_report.loaded > 0  # the counter sees the reads a load makes
    assert sorted(loose.load_report.missing) == ["action_out_proj.bias", "expert.layers.1.mlp.up_proj.weight"]
    assert torch.equal(loose.action_out_proj.bias, torch.zeros_like(loose.action_out_proj.bias))  # zero-filled


def test_supervised_checkpoint_gets_fresh_rl_heads(make_policy, make_obs, tmp_path):
    sft = make_policy("pi0", add_value_head=False)
    save_policy(sft, tmp_path / "sft", format="openpi")
    rl = load_policy(tmp_path / "sft", overrides={"add_value_head": True, "noise_method": "flow_noise"})
    assert rl.value_head is not None and rl.noise_head is not None
    assert any(k.startswith("value_head.") for k in rl.load_report.initialized)
    assert any(k.startswith("noise_head.") for k in rl.load_report.initialized)
    out = rl.sample(make_obs(batch=2))
    assert rl.value_head.init == "rlinf" and 0 < float(out.values.abs().max()) < 1.0  # N(0, 0.02^2) last layer
    assert torch.isfinite(out.logprobs).all()
    zero = load_policy(tmp_path / "sft", overrides={"add_value_head": True, "value_init": "zero_last"})
    assert torch.equal(zero.sample(make_obs(batch=2)).values, torch.zeros(2))  # the option: values start at 0


def test_transformers_resaved_checkpoint_loads(make_policy, make_obs, tmp_path):
    """transformers 5.x save_pretrained writes its own variant of the names; we read it back exactly."""
    from transformers import PI0ForConditionalGeneration

    policy = make_policy("pi0", add_value_head=False)
    save_policy(policy, tmp_path / "hf", format="hf_pi0")
    PI0ForConditionalGeneration.from_pretrained(tmp_path / "hf").save_pretrained(tmp_path / "hf2")
    loaded = load_policy(tmp_path / "hf2")
    assert loaded.load_report.format == "hf_pi0"
    obs = make_obs(batch=2)
    assert torch.equal(_sample(loaded, obs).actions, _sample(policy, obs).actions)


def test_bf16_and_sharded_saves(make_policy, make_obs, tmp_path):
    policy = make_policy("pi05", num_steps=2)
    save_policy(policy, tmp_path / "bf", dtype=torch.bfloat16)
    loaded = load_policy(tmp_path / "bf", dtype=torch.bfloat16)
    assert loaded.action_in_proj.weight.dtype == torch.bfloat16
    assert torch.equal(loaded.action_in_proj.weight, policy.action_in_proj.weight.to(torch.bfloat16))
    out = loaded.sample(make_obs(batch=2))
    assert torch.allclose(loaded.evaluate(out.replay).logprobs, out.logprobs, atol=1e-5, rtol=0)
    save_policy(policy, tmp_path / "sh", max_shard_bytes=64 * 1024)
    shards = sorted(p.name for p in (tmp_path / "sh").glob("model-*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "sh" / "model.safetensors.index.json").is_file()
    again = load_policy(tmp_path / "sh")
    assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), again.state_dict().values(),
                                                 strict=True))


def test_lora_checkpoints(make_policy, make_obs, tmp_path):
    policy = make_policy("pi0", is_lora=True, lora_rank=4, add_value_head=False)
    obs = make_obs(batch=2)
    ref = _sample(policy, obs)
    save_policy(policy, tmp_path / "own")  # adapters kept unmerged: exact
    assert torch.equal(_sample(load_policy(tmp_path / "own"), obs).actions, ref.actions)
    save_policy(policy, tmp_path / "op", format="openpi")  # merged into the base weights
    assert not any("lora" in k for k in load_file(tmp_path / "op" / "model.safetensors"))
    merged = load_policy(tmp_path / "op", overrides={"is_lora": False})
    assert torch.allclose(_sample(merged, obs).actions, ref.actions, atol=1e-5, rtol=0)


def test_norm_stats_found_in_rlinf_layout(make_policy, tmp_path):
    policy = make_policy("pi0")
    save_policy(policy, tmp_path / "ck", format="openpi")
    rl_dir = tmp_path / "ck" / "physical-intelligence" / "libero"
    rl_dir.mkdir(parents=True)
    stats = _stats(3)
    (rl_dir / "norm_stats.json").write_text(json.dumps({"norm_stats": {k: v.to_dict() for k, v in stats.items()}}))
    loaded = load_policy(tmp_path / "ck")
    assert torch.equal(loaded.processor.normalizer.stats["state"].mean, stats["state"].mean)
    assert loaded.load_report.details["norm_stats"].endswith("physical-intelligence/libero/norm_stats.json")


def test_errors_name_the_problem(make_policy, tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_policy(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="not a recognised pi0"):
        load_policy(tmp_path / "empty")
    with pytest.raises(CheckpointError, match=r"no pi0\.5"):
        save_policy(make_policy("pi05"), tmp_path / "x", format="hf_pi0")
    assert not (tmp_path / "x").exists()
    with pytest.raises(CheckpointError, match='Did you mean "openpi"'):
        save_policy(make_policy("pi0"), tmp_path / "y", format="openpy")


def test_build_policy_applies_recipe_settings_to_a_checkpoint(make_policy, tmp_path):
    save_policy(make_policy("pi0", num_steps=3), tmp_path / "ck", format="openpi")
    policy = build_policy(ModelSettings(model_type="pi0", model_path=str(tmp_path / "ck"), num_steps=5,
                                        noise_method="flow_cps", num_action_chunks=4), "cpu")
    assert policy.cfg.num_steps == 5 and policy.cfg.noise_method == "flow_cps"
    assert policy.num_action_chunks == 4 and policy.cfg.action_horizon == 8


def test_lerobot_processor_norm_stats(make_policy, tmp_path):
    save_policy(make_policy("pi05"), tmp_path / "lr", format="lerobot")
    stats = _stats(5)
    save_file({"observation.state.mean": stats["state"].mean.float(), "observation.state.std": stats["state"].std.float(),
               "observation.state.q01": stats["state"].q01.float(), "observation.state.q99": stats["state"].q99.float(),
               "observation.images.top.mean": torch.zeros(3)},
              tmp_path / "lr" / "policy_preprocessor_step_3_normalizer_processor.safetensors")
    save_file({"action.mean": stats["actions"].mean.float(), "action.std": stats["actions"].std.float(),
               "action.q01": stats["actions"].q01.float(), "action.q99": stats["actions"].q99.float()},
              tmp_path / "lr" / "policy_postprocessor_step_0_unnormalizer_processor.safetensors")
    loaded = load_policy(tmp_path / "lr")
    got = loaded.processor.normalizer.stats
    assert loaded.processor.normalizer.mode == "quantile"  # pi0.5
    assert torch.allclose(got["actions"].q99, stats["actions"].q99.float().double())
    assert torch.allclose(got["state"].mean, stats["state"].mean.float().double())


def test_rlinf_checkpoint_resumes_with_its_critic(make_policy, make_obs, tmp_path):
    """An RLinf-layout pi0.5 checkpoint carrying value_head.mlp.{0,2,4,6}.* (rlinf 0.3.0: ReLU MLP
    1024-512-256 on the mean VLM prefix output for pi05_libero) loads that critic, not a fresh one."""
    save_policy(make_policy("pi05", add_value_head=False), tmp_path / "op", format="openpi")
    f = tmp_path / "op" / "model.safetensors"
    tensors = load_file(f)
    g = torch.Generator().manual_seed(3)
    widths = [64, 1024, 512, 256, 1]  # tiny VLM width 64 in, RLinf's pi05_libero hidden sizes
    rlinf = {}
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        rlinf[f"value_head.mlp.{2 * i}.weight"] = torch.randn(b, a, generator=g) / a**0.5
        rlinf[f"value_head.mlp.{2 * i}.bias"] = torch.randn(b, generator=g) * 0.1
    save_file({**tensors, **rlinf}, f)
    cfg_file = tmp_path / "op" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    del cfg["vlarl_arch"]["value_hidden"], cfg["vlarl_arch"]["add_value_head"]  # as RLinf writes it: no hint
    cfg_file.write_text(json.dumps(cfg))
    policy = build_policy(ModelSettings(model_type="openpi", config_name="pi05_libero", preset="tiny",
                                        model_path=str(tmp_path / "op")), "cpu")
    assert policy.cfg.value_hidden == (1024, 512, 256) and policy.cfg.value_after_vlm
    rl_skipped = [k for k in policy.load_report.skipped if k.startswith(("value_head.", "noise_head."))]
    assert policy.load_report.initialized == [] and rl_skipped == []
    sd = policy.state_dict()
    assert all(torch.equal(sd[k], v) for k, v in rlinf.items())
    # the value is RLinf's: ReLU MLP on the mean over every prefix slot (images + all prompt slots)
    obs = make_obs(batch=2, size=32)
    out = policy.sample(obs, generator=torch.Generator().manual_seed(0))
    inputs = policy.processor.prepare(obs)
    from vlarl_cli.policies.pi0.processing import to_model_images

    with torch.no_grad():
        prefix = policy.encode_prefix(to_model_images(inputs["images"]), inputs["image_masks"], inputs["tokens"],
                                      inputs["token_mask"])
        x = prefix.hidden.mean(dim=1)
        for i in range(4):
            x = x @ rlinf[f"value_head.mlp.{2 * i}.weight"].T + rlinf[f"value_head.mlp.{2 * i}.bias"]
            x = x.relu() if i < 3 else x
    torch.testing.assert_close(out.values, x[:, 0], rtol=1e-5, atol=1e-6)


def test_mismatched_rl_head_is_warned_about_and_fresh(make_policy, tmp_path):
    save_policy(make_policy("pi0", add_value_head=False), tmp_path / "op", format="openpi")
    f = tmp_path / "op" / "model.safetensors"
    save_file({**load_file(f), "noise_head.mlp_logvar.layers.0.weight": torch.zeros(128, 32)}, f)
    with pytest.warns(UserWarning, match="NOT loaded"):
        loaded = load_policy(tmp_path / "op", overrides={"noise_method": "flow_noise"})
    rl_skipped = [k for k in loaded.load_report.skipped if k.startswith(("value_head.", "noise_head."))]
    assert rl_skipped == ["noise_head.mlp_logvar.layers.0.weight"]


def test_checkpoint_with_the_earlier_vlarl_critic_still_loads(make_policy, make_obs, tmp_path):
    """Before the RLinf critic: GELU, parameters value_head.body.<i> / value_head.out, no value_activation."""
    policy = make_policy("pi0", value_hidden=(16, 8), value_activation="gelu", value_init="zero_last",
                         value_pooling="valid")
    save_policy(policy, tmp_path / "ck", format="vlarl")
    f = tmp_path / "ck" / "model.safetensors"
    renamed = {"value_head.mlp.0.": "value_head.body.0.", "value_head.mlp.2.": "value_head.body.2.",
               "value_head.mlp.4.": "value_head.out."}
    old = {}
    for k, v in load_file(f).items():
        for new, legacy in renamed.items():
            k = k.replace(new, legacy)
        old[k] = v
    save_file(old, f)
    vcfg = json.loads((tmp_path / "ck" / "vlarl_config.json").read_text())
    for key in ("value_activation", "value_init", "value_pooling"):
        del vcfg["model"][key]
    (tmp_path / "ck" / "vlarl_config.json").write_text(json.dumps(vcfg))
    loaded = load_policy(tmp_path / "ck")
    assert loaded.cfg == policy.cfg and loaded.load_report.initialized == []
    obs = make_obs(batch=2)
    assert torch.equal(_sample(loaded, obs).values, _sample(policy, obs).values)


def _sparse_safetensors(path, shapes: dict[str, tuple[int, ...]]) -> None:
    """A valid safetensors file of bf16 tensors whose data region is a sparse hole (headers are all
    that detection and describe() read, so full-size layouts cost no disk or memory)."""
    import struct

    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2 * int(torch.tensor(shape).prod()) if shape else 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)


@pytest.mark.parametrize("variant", ["pi0", "pi05"])
def test_full_size_openpi_layout_is_described_from_headers(tmp_path, variant):
    from vlarl_cli.policies.pi0.config import preset
    from vlarl_cli.policies.pi0.modeling import Pi0Model

    with torch.device("meta"):
        model = Pi0Model(preset("full", variant, add_value_head=False))
    shapes = {to_external(k, "openpi"): tuple(v.shape) for k, v in model.state_dict().items()}
    shapes["paligemma_with_expert.gemma_expert.lm_head.weight"] = (257152, 1024)  # unused upstream tensor
    root = tmp_path / "pi_full"
    root.mkdir()
    _sparse_safetensors(root / "model.safetensors", shapes)
    (root / "config.json").write_text(json.dumps({"action_dim": 32, "action_horizon": 10 if variant == "pi05" else 50,
                                                  "paligemma_variant": "gemma_2b",
                                                  "action_expert_variant": "gemma_300m", "precision": "bfloat16"}))
    assert detect_format(root) == "openpi"
    info = describe(root)
    assert info["variant"] == variant and info["image_size"] == 224
    assert info["num_parameters"] == model.num_parameters()  # the unused expert lm_head is not counted
    assert info["action_horizon"] == (10 if variant == "pi05" else 50) and info["dtypes"] == ["BF16"]


def test_hf_pi0_architecture_read_from_transformers_config(make_policy, make_obs, tmp_path):
    """Without our vlarl_arch hint, the architecture comes from transformers' vlm_config / dit_config."""
    policy = make_policy("pi0", add_value_head=False)
    save_policy(policy, tmp_path / "hf", format="hf_pi0")
    cfg_file = tmp_path / "hf" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    del cfg["vlarl_arch"]
    cfg_file.write_text(json.dumps(cfg))
    loaded = load_policy(tmp_path / "hf", overrides={"max_token_len": policy.cfg.max_token_len,
                                                     "add_value_head": False})
    for name in ("vlm_width", "vlm_depth", "vlm_mlp", "num_heads", "num_kv_heads", "head_dim", "vocab_size",
                 "vision_width", "vision_depth", "vision_heads", "patch_size", "image_size", "expert_width",
                 "expert_mlp", "action_horizon"):
        assert getattr(loaded.cfg, name) == getattr(policy.cfg, name), name
    obs = make_obs(batch=2)
    assert torch.equal(_sample(loaded, obs).actions, _sample(policy, obs).actions)


def test_precision_defaults_to_fp32_on_cpu_and_stored_dtype_elsewhere(make_policy, tmp_path):
    from vlarl_cli.policies.pi0 import _stored_precision

    save_policy(make_policy("pi0"), tmp_path / "bf", format="openpi", dtype=torch.bfloat16)
    assert _stored_precision(str(tmp_path / "bf")) == "bf16"
    policy = build_policy(ModelSettings(model_type="pi0", model_path=str(tmp_path / "bf")), "cpu")
    assert policy.action_in_proj.weight.dtype == torch.float32  # CPU always computes in fp32
    save_policy(make_policy("pi0"), tmp_path / "f32", format="openpi")
    assert _stored_precision(str(tmp_path / "f32")) == "fp32"
