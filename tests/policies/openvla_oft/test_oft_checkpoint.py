"""OpenVLA-OFT checkpoints: exact round trips, the timm <-> transformers key map, strict reports."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.openvla_oft import ModelSettings, build_policy
from vlarl_cli.policies.openvla_oft.checkpoint import (
    FORMATS,
    describe,
    detect_format,
    export_state_dict,
    load_policy,
    save_policy,
)
from vlarl_cli.policies.openvla_oft.processing import pixel_values

DINO, SIGLIP = "vision_backbone.featurizer.", "vision_backbone.fused_featurizer."


def _assert_same_state(a: torch.nn.Module, b: torch.nn.Module, skip: tuple[str, ...] = ()) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb)
    for k in sa:
        if k not in skip:
            assert torch.equal(sa[k], sb[k]), k


def _logits(policy, obs):
    inputs = policy.processor.prepare(obs)
    with torch.no_grad():
        return policy.action_outputs(pixel_values(inputs["images"]), inputs["tokens"], inputs["token_mask"])[0]


@pytest.mark.parametrize("lora", [False, True])
def test_vlarl_round_trip_is_exact(make_policy, make_obs, tmp_path, lora):
    policy = make_policy(add_value_head=True, is_lora=lora, lora_rank=4)
    save_policy(policy, tmp_path / "ck")
    assert detect_format(tmp_path / "ck") == "vlarl"
    cfg = json.loads((tmp_path / "ck" / "vlarl_config.json").read_text())
    assert cfg["family"] == "openvla_oft" and cfg["format_version"] == 1 and cfg["model"]["is_lora"] is lora
    loaded = load_policy(tmp_path / "ck")
    _assert_same_state(policy, loaded)  # atol 0
    assert loaded.cfg == policy.cfg and loaded.dataset_statistics == policy.dataset_statistics
    assert loaded.load_report.missing == loaded.load_report.unexpected == []
    obs = make_obs(batch=2)
    out = policy.sample(obs, generator=torch.Generator().manual_seed(0))
    again = loaded.eval().sample(obs, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out.actions, again.actions) and torch.equal(out.logprobs, again.logprobs)


def test_openvla_hf_layout_uses_timm_names_and_fused_qkv(make_policy, tmp_path):
    policy = make_policy()
    ext = export_state_dict(policy, "openvla_hf")
    sd = policy.state_dict()
    d = policy.cfg.dino_width
    qkv = ext[DINO + "blocks.1.attn.qkv.weight"]
    assert qkv.shape == (3 * d, d)
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        assert torch.equal(qkv[i * d:(i + 1) * d], sd[f"{DINO}encoder.layer.1.attention.{name}.weight"])
    assert torch.equal(ext[DINO + "blocks.0.ls2.scale_factor"], sd[DINO + "encoder.layer.0.layer_scale2.lambda1"])
    pos = sd[DINO + "embeddings.position_embeddings"]
    assert torch.equal(ext[DINO + "pos_embed"], pos[:, 1:])  # timm DINOv2-reg: no CLS position
    assert torch.equal(ext[DINO + "cls_token"], sd[DINO + "embeddings.cls_token"] + pos[:, :1])
    assert torch.equal(ext[DINO + "reg_token"], sd[DINO + "embeddings.register_tokens"])
    assert ext[SIGLIP + "pos_embed"].shape == (1, policy.cfg.num_patches, policy.cfg.siglip_width)
    w = policy.cfg.siglip_width
    in_proj = sd[SIGLIP + "head.attention.in_proj_weight"]
    assert torch.equal(ext[SIGLIP + "attn_pool.q.weight"], in_proj[:w])
    assert torch.equal(ext[SIGLIP + "attn_pool.kv.weight"], in_proj[w:])
    assert torch.equal(ext[SIGLIP + "attn_pool.latent"], sd[SIGLIP + "head.probe"])
    assert torch.equal(ext["language_model.lm_head.weight"], sd["language_model.lm_head.weight"])
    assert not any("mask_token" in k or "encoder.layer" in k for k in ext)


def test_openvla_hf_round_trip(make_policy, make_obs, tmp_path):
    policy = make_policy(add_value_head=True)
    save_policy(policy, tmp_path / "hf", format="openvla_hf")
    assert detect_format(tmp_path / "hf") == "openvla_hf"
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["model_type"] == "openvla" and cfg["n_action_bins"] == 256
    assert cfg["text_config"]["vocab_size"] == policy.cfg.vocab_size
    assert json.loads((tmp_path / "hf" / "dataset_statistics.json").read_text()) == policy.dataset_statistics
    loaded = load_policy(tmp_path / "hf")
    assert loaded.load_report.initialized == [DINO + "embeddings.mask_token"]
    # the CLS position is folded into the CLS token: same function, not the same tensors
    torch.testing.assert_close(_logits(loaded, make_obs()), _logits(policy, make_obs()), atol=1e-5, rtol=1e-5)
    fold = (DINO + "embeddings.cls_token", DINO + "embeddings.position_embeddings", DINO + "embeddings.mask_token")
    _assert_same_state(policy, loaded, skip=fold)
    # a second trip through the external layout is exact (atol 0), file for file
    save_policy(loaded, tmp_path / "hf2", format="openvla_hf")
    a, b = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "hf2" / "model.safetensors")
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_exact_round_trip_through_openvla_hf_when_cls_position_is_zero(make_policy, tmp_path):
    policy = make_policy()
    with torch.no_grad():
        policy.vision_backbone.featurizer.embeddings.position_embeddings[:, 0].zero_()
        policy.vision_backbone.featurizer.embeddings.mask_token.zero_()
    save_policy(policy, tmp_path / "hf", format="openvla_hf")
    _assert_same_state(policy, load_policy(tmp_path / "hf"))


def test_lora_is_merged_on_export(make_policy, make_obs, tmp_path):
    policy = make_policy(is_lora=True, lora_rank=4)
    save_policy(policy, tmp_path / "hf", format="openvla_hf")
    ext = load_file(tmp_path / "hf" / "model.safetensors")
    assert not any("lora_" in k for k in ext)
    plain = load_policy(tmp_path / "hf", overrides={"is_lora": False})
    torch.testing.assert_close(_logits(plain, make_obs()), _logits(policy, make_obs()), atol=1e-5, rtol=1e-5)
    relora = load_policy(tmp_path / "hf")  # the saved config asks for LoRA: fresh adapters, B = 0
    assert any(k.endswith("lora_A") for k in relora.load_report.initialized)
    torch.testing.assert_close(_logits(relora, make_obs()), _logits(policy, make_obs()), atol=1e-5, rtol=1e-5)


def test_sharded_bf16_save_and_describe(make_policy, tmp_path):
    policy = make_policy()
    save_policy(policy, tmp_path / "ck", dtype=torch.bfloat16, max_shard_bytes=200_000)
    index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    info = describe(tmp_path / "ck")
    assert info["family"] == "openvla_oft" and info["format"] == "vlarl" and info["dtypes"] == ["BF16"]
    assert info["num_parameters"] == sum(v.numel() for v in policy.state_dict().values())
    assert info["norm_stats"] and info["unnorm_keys"] == ["libero_10_no_noops", "libero_90_no_noops"]
    loaded = load_policy(tmp_path / "ck", dtype=torch.bfloat16)
    for k, v in policy.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v.to(torch.bfloat16)), k


def test_openvla_hf_config_without_vlarl_arch_is_read_from_shapes(make_policy, tmp_path):
    """An upstream-style folder (no vlarl_arch): architecture from config.json text_config + tensor shapes."""
    policy = make_policy()
    save_policy(policy, tmp_path / "hf", format="openvla_hf")
    cfg_file = tmp_path / "hf" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    del cfg["vlarl_arch"]
    cfg_file.write_text(json.dumps(cfg))
    loaded = load_policy(tmp_path / "hf", overrides={
        "tokenizer": "byte", "bos_token_id": 2, "max_prompt_len": 160, "dino_heads": 2, "siglip_heads": 2,
        "dino_mlp_ratio": 2, "unnorm_key": "libero_10"})
    c = loaded.cfg
    assert (c.dino_width, c.dino_depth, c.dino_registers, c.siglip_width, c.siglip_depth, c.siglip_mlp) == \
        (32, 2, 4, 48, 2, 64)
    assert (c.llm_width, c.llm_depth, c.vocab_size, c.image_size, c.patch_size) == (64, 2, 640, 28, 14)
    assert loaded.load_report.missing == []


def test_strict_loading_names_missing_unexpected_and_mismatched_keys(make_policy, tmp_path, tensor_reads):
    policy = make_policy()
    save_policy(policy, tmp_path / "hf", format="openvla_hf")
    f = tmp_path / "hf" / "model.safetensors"
    tensors = load_file(f)
    del tensors["projector.fc3.bias"]
    tensors["some.extra.weight"] = torch.zeros(2)
    tensors["language_model.model.norm.weight"] = torch.zeros(3)
    save_file(tensors, f)
    with pytest.raises(CheckpointError) as err:
        load_policy(tmp_path / "hf")
    msg = str(err.value)
    assert "missing 1: projector.fc3.bias" in msg
    assert "unexpected 1: some.extra.weight" in msg
    assert "wrong shape 1: language_model.model.norm.weight" in msg
    assert tensor_reads == []  # refused from the header alone: a real checkpoint is 15 GB
    loose = load_policy(tmp_path / "hf", strict=False)
    assert loose.load_report.missing == ["projector.fc3.bias"] and len(tensor_reads) > 0  # the counter counts
    # the mis-shaped parameter is not loaded and is zeros, never to_empty memory
    assert torch.equal(loose.language_model.model.norm.weight, torch.zeros_like(loose.language_model.model.norm.weight))
    assert torch.equal(loose.projector.fc3.bias, torch.zeros_like(loose.projector.fc3.bias))


def test_layer_scale_gamma_alias_is_accepted(make_policy, tmp_path):
    policy = make_policy()
    save_policy(policy, tmp_path / "hf", format="openvla_hf")
    f = tmp_path / "hf" / "model.safetensors"
    tensors = load_file(f)
    renamed = {k.replace(".scale_factor", ".gamma"): v for k, v in tensors.items()}
    save_file(renamed, f)
    loaded = load_policy(tmp_path / "hf")
    assert torch.equal(loaded.vision_backbone.featurizer.encoder.layer[1].layer_scale1.lambda1,
                       policy.vision_backbone.featurizer.encoder.layer[1].layer_scale1.lambda1)


def test_value_head_is_fresh_when_absent(make_policy, tmp_path):
    save_policy(make_policy(add_value_head=False), tmp_path / "ck")
    loaded = load_policy(tmp_path / "ck", overrides={"add_value_head": True})
    assert {k for k in loaded.load_report.initialized} == {k for k in loaded.state_dict() if
                                                             k.startswith("value_head.")}
    last = loaded.value_head.mlp[-1].weight  # RLinf name value_head.mlp.4.weight, zero at start
    assert torch.equal(last, torch.zeros_like(last))


def test_detection_and_errors(tmp_path, make_policy):
    assert detect_format(tmp_path / "nope") is None
    (tmp_path / "empty").mkdir()
    assert detect_format(tmp_path / "empty") is None
    with pytest.raises(CheckpointError, match="not a recognised OpenVLA-OFT"):
        load_policy(tmp_path / "empty")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_policy(tmp_path / "nope")
    with pytest.raises(CheckpointError, match='Did you mean "openvla_hf"'):
        save_policy(make_policy(), tmp_path / "x", format="openvla-hf")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "vlarl_config.json").write_text(json.dumps({"family": "pi0"}))
    assert detect_format(tmp_path / "other") is None
    assert FORMATS == ("vlarl", "openvla_hf")


def test_build_policy_from_model_path_applies_recipe_fields(make_policy, tmp_path):
    save_policy(make_policy(), tmp_path / "ck", format="openvla_hf")
    policy = build_policy(ModelSettings(model_path=str(tmp_path / "ck"), num_action_chunks=4, temperature=0.9,
                                        add_value_head=True, unnorm_key="libero_90"), "cpu")
    assert policy.cfg.num_action_chunks == 4 and policy.temperature == 0.9 and policy.value_head is not None
    assert policy.processor.stats.key == "libero_90_no_noops"


def test_shared_detector_agrees(make_policy, tmp_path):
    from vlarl_cli.checkpoints.detect import detect_checkpoint

    save_policy(make_policy(), tmp_path / "hf", format="openvla_hf")
    save_policy(make_policy(), tmp_path / "ours")
    info = detect_checkpoint(tmp_path / "hf")
    assert (info.family, info.format) == ("openvla_oft", "openvla_hf")
    assert detect_checkpoint(tmp_path / "ours").family == "openvla_oft"


def _header_only_safetensors(path, shapes: dict[str, tuple[int, ...]]) -> None:
    """A safetensors file whose header declares ``shapes`` (bf16) and whose data is a sparse hole of the
    declared size (a header-only file is refused as truncated): enough for detection / describe /
    architecture inference, which read headers only."""
    import struct

    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2 * int(torch.tensor(shape).prod().item()) if shape else 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)


def test_full_size_upstream_folder_is_recognised_from_headers(tmp_path):
    """The real OpenVLA-7B layout (timm names, 3 shards, upstream config.json without our vlarl_arch and
    with the short text_config upstream ships) -> the full preset, counted without reading data."""
    from vlarl_cli.policies.openvla_oft.checkpoint import _config_from_checkpoint
    from vlarl_cli.policies.openvla_oft.config import preset

    meta = build_policy(ModelSettings(preset="full"), "meta")
    ext = {k: tuple(v.shape) for k, v in export_state_dict(meta, "openvla_hf").items()}
    names = sorted(ext)
    root = tmp_path / "openvla-7b"
    root.mkdir()
    weight_map = {}
    for i, chunk in enumerate((names[: len(names) // 3], names[len(names) // 3: 2 * len(names) // 3],
                               names[2 * len(names) // 3:])):
        fname = f"model-{i + 1:05d}-of-00003.safetensors"
        _header_only_safetensors(root / fname, {k: ext[k] for k in chunk})
        weight_map.update(dict.fromkeys(chunk, fname))
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps({
        "model_type": "openvla", "vision_backbone_id": "dinosiglip-vit-so-224px", "use_fused_vision_backbone": True,
        "n_action_bins": 256, "pad_to_multiple_of": 64, "pad_token_id": 32000,
        "text_config": {"model_type": "llama", "pad_token_id": 32000, "torch_dtype": "bfloat16", "vocab_size": 32064},
        "norm_stats": {"libero_10_no_noops": {"action": {"q01": [0.0] * 7, "q99": [1.0] * 7}}}}))
    assert detect_format(root) == "openvla_hf"
    shapes = {k: tuple(v) for k, v in ext.items()}
    assert _config_from_checkpoint(root, "openvla_hf", shapes) == preset("full")
    info = describe(root)
    # the file holds no DINOv2 mask token and a CLS-less position table: 1024 + 1024 fewer than ours
    assert info["num_parameters"] == 7_541_239_232 - 2 * 1024
    assert info["norm_stats"] and info["unnorm_keys"] == ["libero_10_no_noops"]
    assert len(info["weight_files"]) == 3 and info["dtypes"] == ["BF16"]
    assert sum(1 for k in ext if k.endswith("attn.qkv.weight")) == 24 + 27


def _timm_vit_features(ext: dict[str, torch.Tensor], prefix: str, img: torch.Tensor, heads: int,
                       n_prefix: int, layer_scale: bool) -> torch.Tensor:
    """A hand-written timm ViT ``get_intermediate_layers(n={depth - 2})`` on the EXTERNAL (timm-named)
    tensors: patch conv, + pos_embed (patches only), prepend CLS/register tokens, pre-norm blocks with
    fused qkv and exact GELU, stop before the last block, drop the prefix tokens."""
    import torch.nn.functional as F

    def t(name: str) -> torch.Tensor:
        return ext[prefix + name]

    x = F.conv2d(img, t("patch_embed.proj.weight"), t("patch_embed.proj.bias"), stride=t("patch_embed.proj.weight").shape[-1])
    x = x.flatten(2).transpose(1, 2) + t("pos_embed")
    b, _, d = x.shape
    tokens = []
    if n_prefix:
        tokens.append(t("cls_token").expand(b, -1, -1))
        if n_prefix > 1:
            tokens.append(t("reg_token").expand(b, -1, -1))
    x = torch.cat([*tokens, x], dim=1)
    depth = 1 + max(int(k[len(prefix) + 7:].split(".")[0]) for k in ext if k.startswith(prefix + "blocks."))
    for n in range(depth - 1):
        def w(name: str, n: int = n) -> torch.Tensor:
            return t(f"blocks.{n}.{name}")

        h = F.layer_norm(x, (d,), w("norm1.weight"), w("norm1.bias"), eps=1e-6)
        qkv = F.linear(h, w("attn.qkv.weight"), w("attn.qkv.bias")).reshape(b, -1, 3, heads, d // heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) * (d // heads) ** -0.5, dim=-1)
        a = F.linear((att @ v).transpose(1, 2).reshape(b, -1, d), w("attn.proj.weight"), w("attn.proj.bias"))
        x = x + (a * w("ls1.scale_factor") if layer_scale else a)
        h = F.layer_norm(x, (d,), w("norm2.weight"), w("norm2.bias"), eps=1e-6)
        m = F.linear(F.gelu(F.linear(h, w("mlp.fc1.weight"), w("mlp.fc1.bias"))), w("mlp.fc2.weight"), w("mlp.fc2.bias"))
        x = x + (m * w("ls2.scale_factor") if layer_scale else m)
    return x[:, n_prefix:]


def test_vision_tower_matches_a_timm_style_reference_on_exported_tensors(make_policy, make_obs):
    """Parity (atol 1e-5) between our transformers towers and a timm-semantics forward on the
    openvla_hf tensors: validates the key map (qkv split, CLS position, LayerScale) functionally."""
    policy = make_policy()
    ext = export_state_dict(policy, "openvla_hf")
    inputs = policy.processor.prepare(make_obs(batch=2))
    px = pixel_values(inputs["images"])
    cfg = policy.cfg
    with torch.no_grad():
        ours = policy.vision_backbone(px)
        dino = _timm_vit_features(ext, DINO, px[:, :3], cfg.dino_heads, 1 + cfg.dino_registers, True)
        siglip = _timm_vit_features(ext, SIGLIP, px[:, 3:], cfg.siglip_heads, 0, False)
    torch.testing.assert_close(ours, torch.cat([dino, siglip], dim=-1), atol=1e-5, rtol=1e-5)
