"""Checkpoint layouts: exact round trips through vlarl / gr00t_n15 / gr00t_n16, key maps, strict reporting."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.gr00t import checkpoint as ck

LAYOUTS = [("n1.5", "vlarl"), ("n1.5", "gr00t_n15"), ("n1.6", "vlarl"), ("n1.6", "gr00t_n16")]


@pytest.mark.parametrize(("version", "fmt"), LAYOUTS)
def test_round_trip_is_exact(version, fmt, tmp_path, policy_factory, obs_factory) -> None:
    policy = policy_factory(version, seed=3)
    with torch.no_grad():  # make the zero-initialised value layer non-trivial so it round-trips visibly
        policy.action_head.value_head.mlp[-1].weight.normal_()
    path = tmp_path / fmt
    ck.save_policy(policy, path, format=fmt, max_shard_bytes=1_500_000)  # forces several shards
    assert ck.detect_format(path) == fmt
    shards = sorted(p.name for p in path.glob("model-*.safetensors"))
    assert len(shards) > 1 and (path / "model.safetensors.index.json").is_file()
    loaded = ck.load_policy(path)
    assert loaded.load_report.ok and loaded.load_report.initialized == []
    a, b = policy.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    assert loaded.modality.to_dict() == policy.modality.to_dict()
    assert loaded.config == policy.config
    obs = obs_factory(2)
    o1 = policy.sample(obs, generator=torch.Generator().manual_seed(0))
    o2 = loaded.sample(obs, generator=torch.Generator().manual_seed(0))
    for x, y in ((o1.actions, o2.actions), (o1.logprobs, o2.logprobs), (o1.values, o2.values)):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_upstream_files_look_like_upstream(tmp_path, policy_factory) -> None:
    p15, p16 = policy_factory("n1.5"), policy_factory("n1.6")
    ck.save_policy(p15, tmp_path / "a", format="gr00t_n15")
    ck.save_policy(p16, tmp_path / "b", format="gr00t_n16")
    cfg15 = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg15["model_type"] == "gr00t_n1_5" and cfg15["backbone_cfg"]["select_layer"] == 2
    assert cfg15["action_head_cfg"]["diffusion_model_cfg"]["num_layers"] == 4
    meta = json.loads((tmp_path / "a" / "experiment_cfg" / "metadata.json").read_text())
    assert meta["libero_franka"]["statistics"]["state"]["gripper"]["min"] == [-1.0, -1.0]
    assert json.loads((tmp_path / "b" / "config.json").read_text())["model_type"] == "Gr00tN1d6"
    for name in ("processor_config.json", "statistics.json", "embodiment_id.json"):
        assert (tmp_path / "b" / name).is_file()
    index = json.loads((tmp_path / "a" / "model.safetensors.index.json").read_text())
    keys15 = set(index["weight_map"])
    assert "backbone.eagle_model.vision_model.vision_model.embeddings.patch_embedding.weight" in keys15
    assert "backbone.eagle_model.language_model.model.layers.1.mlp.down_proj.weight" in keys15
    assert "action_head.model.transformer_blocks.0.attn1.to_k.weight" in keys15
    assert "action_head.vl_self_attention.transformer_blocks.1.ff.net.2.weight" in keys15
    assert "action_head.action_encoder.W2.W" in keys15 and "action_head.future_tokens.weight" in keys15
    keys16 = set(json.loads((tmp_path / "b" / "model.safetensors.index.json").read_text())["weight_map"])
    assert "backbone.model.vision_model.vision_model.encoder.layers.0.self_attn.q_proj.weight" in keys16
    assert "backbone.model.mlp1.3.weight" in keys16 and not any("future_tokens" in k for k in keys16)
    # cross-attention blocks read the VL width, self-attention blocks the DiT width
    shapes = {}
    for f in (tmp_path / "b").glob("model-*.safetensors"):
        shapes.update({k: v.shape for k, v in load_file(f).items()})
    assert shapes["action_head.model.transformer_blocks.0.attn1.to_k.weight"][1] == p16.config.backbone_embedding_dim
    assert shapes["action_head.model.transformer_blocks.1.attn1.to_k.weight"][1] == p16.config.input_embedding_dim


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_key_maps_are_inverse(version, policy_factory) -> None:
    policy = policy_factory(version)
    for key in policy.state_dict():
        assert ck.from_upstream_key(ck.to_upstream_key(key, version), version) == key
    assert ck.from_upstream_key("backbone.eagle_model.language_model.lm_head.weight", "n1.5") is None


def _edit_shard(path: Path, fn) -> None:
    index = json.loads((path / "model.safetensors.index.json").read_text())
    for shard in sorted(set(index["weight_map"].values())):
        tensors = load_file(path / shard)
        new = fn(dict(tensors))
        save_file(new, path / shard)
        index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard}
        index["weight_map"].update(dict.fromkeys(new, shard))
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def test_upstream_checkpoint_without_value_head_and_with_lm_head(tmp_path, policy_factory, obs_factory) -> None:
    policy = policy_factory("n1.5")
    path = tmp_path / "up"
    ck.save_policy(policy, path, format="gr00t_n15")
    emb = "backbone.eagle_model.language_model.model.embed_tokens.weight"

    def edit(t: dict) -> dict:
        out = {k: v for k, v in t.items() if not k.startswith("action_head.value_head.")}
        if emb in out:  # upstream files carry the LM head; tied storage may keep only it
            out["backbone.eagle_model.language_model.lm_head.weight"] = out.pop(emb).clone()
        return out

    _edit_shard(path, edit)
    loaded = ck.load_policy(path)
    r = loaded.load_report
    assert r.ok and r.skipped == ["backbone.eagle_model.language_model.lm_head.weight"]
    assert sorted(r.initialized) == sorted(k for k in policy.state_dict() if k.startswith("action_head.value_head."))
    assert torch.equal(loaded.state_dict()["backbone.eagle_model.language_model.model.embed_tokens.weight"],
                       policy.state_dict()["backbone.eagle_model.language_model.model.embed_tokens.weight"])
    last = loaded.action_head.value_head.mlp[-1]  # fresh RLinf critic: N(0, 0.02) last layer, zero bias
    assert torch.equal(last.bias, torch.zeros(1)) and 0.005 < float(last.weight.detach().std()) < 0.05
    assert all(p.requires_grad for p in loaded.action_head.value_head.parameters())


def test_strict_loading_reports_keys_by_name(tmp_path, policy_factory, tensor_reads) -> None:
    policy = policy_factory("n1.6")
    path = tmp_path / "ck"
    ck.save_policy(policy, path, format="gr00t_n16")
    gone = "action_head.model.proj_out_2.weight"
    _edit_shard(path, lambda t: {**{k: v for k, v in t.items() if k != gone},
                                 **({"action_head.extra.weight": torch.zeros(2)} if gone in t else {})})
    with pytest.raises(CheckpointError) as info:
        ck.load_policy(path)
    msg = str(info.value)
    assert gone in msg and "action_head.extra.weight" in msg and "missing" in msg and "unexpected" in msg
    assert tensor_reads == []  # refused before a tensor is read
    # non-strict: everything else is loaded; the hole is zeros, as in every family (the pipeline's
    # settle_absent): a value that cannot pass for a trained weight, and no full random init of the model
    loaded = ck.load_policy(path, strict=False)
    assert loaded.load_report.missing == [gone] and len(tensor_reads) == loaded.load_report.loaded > 0
    assert torch.equal(loaded.state_dict()[gone], torch.zeros_like(policy.state_dict()[gone]))
    a, b = policy.state_dict(), loaded.state_dict()
    assert torch.equal(a["action_head.model.proj_out_1.weight"], b["action_head.model.proj_out_1.weight"])


def test_shape_mismatch_is_reported(tmp_path, policy_factory) -> None:
    ck.save_policy(policy_factory("n1.5"), tmp_path / "a", format="vlarl")
    cfg = json.loads((tmp_path / "a" / "vlarl_config.json").read_text())
    cfg["model"]["hidden_size"] = 16  # architecture no longer matches the weights
    (tmp_path / "a" / "vlarl_config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="wrong shape"):
        ck.load_policy(tmp_path / "a")


def test_overrides_settings_and_version_check(tmp_path, policy_factory) -> None:
    from vlarl_cli.errors import ConfigError

    ck.save_policy(policy_factory("n1.5"), tmp_path / "a", format="vlarl", dtype=torch.bfloat16)
    assert ck.describe(tmp_path / "a")["dtypes"] == ["BF16"]
    loaded = ck.load_policy(tmp_path / "a", overrides={"num_action_chunks": 2, "noise_method": "flow_noise"})
    assert loaded.num_action_chunks == 2 and "noise_head" in loaded.load_report.initialized[0]
    assert loaded.action_head.model.proj_out_2.weight.dtype == torch.float32
    with pytest.raises(ConfigError, match="gr00t_n1d6"):
        ck.load_policy(tmp_path / "a", overrides={"model_type": "gr00t_n1d6"})
    with pytest.raises(CheckpointError, match='"libero_franka"'):
        ck.load_policy(tmp_path / "a", overrides={"embodiment_tag": "libero_panda"})


def test_detect_describe_and_errors(tmp_path, policy_factory) -> None:
    assert ck.detect_format(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert ck.detect_format(tmp_path) is None
    with pytest.raises(CheckpointError, match="layout"):
        ck.load_policy(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        ck.load_policy(tmp_path / "nope")
    policy = policy_factory("n1.6")
    ck.save_policy(policy, tmp_path / "v", format="vlarl")
    d = ck.describe(tmp_path / "v")
    assert d["family"] == "gr00t" and d["format"] == "vlarl" and d["version"] == "n1.6"
    assert d["num_parameters"] == sum(v.numel() for v in policy.state_dict().values())
    assert d["norm_stats"] and d["embodiment_tags"] == ["libero_panda"] and not d["sharded"]
    assert (tmp_path / "v" / "model.safetensors").is_file()
    with pytest.raises(CheckpointError, match="Cannot save"):
        ck.save_policy(policy, tmp_path / "x", format="gr00t_n15")
    (tmp_path / "v" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="No weights"):
        ck.load_policy(tmp_path / "v")


def test_resave_with_fewer_shards_removes_stale_files(tmp_path, policy_factory) -> None:
    policy = policy_factory("n1.5")
    ck.save_policy(policy, tmp_path / "a", format="vlarl", max_shard_bytes=1_000_000)
    assert len(list((tmp_path / "a").glob("model-*.safetensors"))) > 1
    ck.save_policy(policy, tmp_path / "a", format="vlarl")
    assert sorted(p.name for p in (tmp_path / "a").glob("model*.safetensors")) == ["model.safetensors"]
    assert not (tmp_path / "a" / "model.safetensors.index.json").exists()
    assert ck.load_policy(tmp_path / "a").load_report.ok


def test_describe_lists_the_modality_and_checkpoint_tokenizer_is_used(tmp_path, policy_factory) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from vlarl_cli.policies.gr00t.tokenizer import QwenTokenizer as FileTokenizer

    ck.save_policy(policy_factory("n1.5"), tmp_path / "a", format="gr00t_n15")
    d = ck.describe(tmp_path / "a")
    assert d["modalities"]["libero_franka"]["cameras"] == ["image", "wrist_image"]
    assert d["modalities"]["libero_franka"]["state"]["gripper"] == 2
    assert d["modalities"]["libero_franka"]["action"] == {k: 1 for k in ("x", "y", "z", "roll", "pitch", "yaw",
                                                                         "gripper")}
    tok = Tokenizer(models.WordLevel({"[UNK]": 1, "open": 5, "the": 6, "drawer": 7}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "a" / "tokenizer.json"))
    policy = ck.load_policy(tmp_path / "a")
    assert isinstance(policy.tokenizer, FileTokenizer)
    ids = policy.prepare_inputs({"main_images": torch.zeros(1, 32, 32, 3, dtype=torch.uint8),
                                 "wrist_images": torch.zeros(1, 32, 32, 3, dtype=torch.uint8),
                                 "states": torch.zeros(1, 8), "task_descriptions": ["open the drawer now"]})["input_ids"]
    n_img = 2 * policy.config.tokens_per_image
    assert ids[0, n_img: n_img + 5].tolist() == [5, 6, 7, 1, 0]


def test_upstream_extras_are_skipped_and_missing_vision_head_is_detected(tmp_path, policy_factory, obs_factory) -> None:
    policy = policy_factory("n1.5")
    path = tmp_path / "up"
    ck.save_policy(policy, path, format="gr00t_n15")
    lm = "backbone.eagle_model.language_model.model.layers."
    head = "backbone.eagle_model.vision_model.vision_model.head."

    def edit(t: dict) -> dict:
        out = {k: v for k, v in t.items() if not k.startswith(head)}
        # an un-truncated LLM (layer 2 >= select_layer 2) as a full Eagle checkpoint would carry
        out.update({k.replace(lm + "0.", lm + "2."): v.clone() for k, v in t.items() if k.startswith(lm + "0.")})
        return out

    _edit_shard(path, edit)
    loaded = ck.load_policy(path)
    r = loaded.load_report
    assert r.ok and not loaded.config.vision_use_head
    assert r.skipped and all(k.startswith(lm + "2.") for k in r.skipped)
    assert not any(".head." in k for k in loaded.state_dict() if "vision_model" in k)
    obs = obs_factory(2)
    a = policy.sample(obs, deterministic=True, generator=torch.Generator().manual_seed(0)).actions
    b = loaded.sample(obs, deterministic=True, generator=torch.Generator().manual_seed(0)).actions
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # the attention-pool head never enters the forward
    assert ck.from_upstream_key("action_head.mask_token", "n1.6") is None


@pytest.mark.parametrize(("version", "fmt"), [("n1.5", "gr00t_n15"), ("n1.6", "gr00t_n16")])
def test_backbone_dimensions_are_read_off_the_weights(version, fmt, tmp_path, policy_factory) -> None:
    policy = policy_factory(version)
    path = tmp_path / fmt
    ck.save_policy(policy, path, format=fmt)
    cfg_file = path / "config.json"
    data = json.loads(cfg_file.read_text())
    block = data["backbone_cfg"] if version == "n1.5" else data
    # keep only what shapes cannot tell; every other backbone field must come back from the weights
    keep = ("vision_num_heads", "image_token_id", "pad_token_id", "max_text_tokens", "prompt_style", "rope_theta",
            "padding_value", "prompt_pad_id", "crop_fraction", "shortest_image_edge",
            "rms_norm_eps", "max_position_embeddings", "formalize_language", "pixel_shuffle_kind", "vl_num_heads",
            "vl_head_dim")
    block["eagle_config"] = {k: v for k, v in block["eagle_config"].items() if k in keep}
    cfg_file.write_text(json.dumps(data))
    full = ck.preset("full", version)
    cfg, _ = ck.read_config(path)
    assert cfg == policy.config
    assert policy.config.llm_hidden_size != full.llm_hidden_size  # the tiny dims really were inferred
    assert ck.load_policy(path).load_report.ok


@pytest.mark.parametrize(("version", "fmt"), [("n1.5", "gr00t_n15"), ("n1.6", "gr00t_n16")])
def test_rlinf_checkpoint_resumes_with_its_critic(version, fmt, tmp_path, policy_factory, obs_factory) -> None:
    """An RLinf GR00T checkpoint carries RLinf's ValueHead(3584 -> 1024 -> 512 -> 256 -> 1, ReLU, bias_last)
    as ``action_head.value_head.mlp.{0,2,4,6}``; loading it must restore that critic, not a fresh one."""
    import torch.nn.functional as F

    policy = policy_factory(version)
    path = tmp_path / fmt
    ck.save_policy(policy, path, format=fmt)
    cfg = policy.config
    in_dim = cfg.backbone_embedding_dim + cfg.input_embedding_dim  # RLinf: 2048 + 1536 = 3584 at full size
    g = torch.Generator().manual_seed(7)
    widths = [in_dim, 1024, 512, 256, 1]
    critic = {}
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        critic[f"action_head.value_head.mlp.{2 * i}.weight"] = torch.randn(b, a, generator=g) * a ** -0.5
        critic[f"action_head.value_head.mlp.{2 * i}.bias"] = torch.randn(b, generator=g) * 0.1

    def edit(t: dict) -> dict:  # written the way RLinf names them, replacing ours
        out = {k: v for k, v in t.items() if not k.startswith("action_head.value_head.")}
        return {**out, **critic} if "action_head.model.proj_out_2.weight" in t else out

    _edit_shard(path, edit)
    loaded = ck.load_policy(path)
    assert loaded.load_report.ok and loaded.load_report.initialized == []
    for k, v in critic.items():
        assert torch.equal(loaded.state_dict()[k], v), k
    replay = loaded.prepare_inputs(obs_factory(2))
    with torch.no_grad():
        enc = loaded.encode(replay)
        # RLinf get_value: mean over ALL VL tokens (its 0-padding included) ++ state token -> ReLU MLP
        x = torch.cat([enc["vl"].mean(dim=1), enc["state_feat"].flatten(1)], dim=-1)
        for i in range(4):
            x = F.linear(x, critic[f"action_head.value_head.mlp.{2 * i}.weight"],
                         critic[f"action_head.value_head.mlp.{2 * i}.bias"])
            x = F.relu(x) if i < 3 else x
        assert replay["attention_mask"].eq(0).any()  # the prompt really is padded
        torch.testing.assert_close(loaded.values(enc), x[:, 0], rtol=1e-5, atol=1e-6)


def test_n16_image_settings_come_from_processor_config(tmp_path, policy_factory) -> None:
    policy = policy_factory("n1.6")
    path = tmp_path / "n16"
    ck.save_policy(policy, path, format="gr00t_n16")
    data = json.loads((path / "config.json").read_text())
    keep = ("vision_num_heads", "image_token_id", "pad_token_id", "max_text_tokens", "prompt_style", "rope_theta",
            "padding_value", "prompt_pad_id", "rms_norm_eps", "max_position_embeddings", "pixel_shuffle_kind",
            "vl_num_heads", "vl_head_dim")  # an upstream config.json says nothing about images
    data["eagle_config"] = {k: v for k, v in data["eagle_config"].items() if k in keep}
    (path / "config.json").write_text(json.dumps(data))
    proc_file = path / "processor_config.json"
    proc = json.loads(proc_file.read_text())
    proc["processor_kwargs"].update(shortest_image_edge=48, crop_fraction=0.9, formalize_language=False)
    proc_file.write_text(json.dumps(proc))
    cfg, _ = ck.read_config(path)
    # 48 px edge, 8 px patches with the 2x2 shuffle: tokens cover 16 px, smart_size(48, 16) = 48
    assert (cfg.shortest_image_edge, cfg.image_size, cfg.crop_fraction, cfg.formalize_language) == (48, 48, 0.9, False)
    assert cfg.tokens_per_image == 9
    proc["processor_kwargs"]["use_albumentations"] = False
    proc_file.write_text(json.dumps(proc))
    with pytest.raises(CheckpointError, match="torchvision image path"):
        ck.read_config(path)


def test_n16_trainable_flags_come_from_config_json(tmp_path, policy_factory) -> None:
    """The trainable set is read from the N1.6 config.json as Gr00tN1d6Config reads it: the tune_* keys written
    there, Gr00tN1d6Config's defaults (top 4 LLM layers, the whole head) where a key is absent."""
    path = tmp_path / "n16"
    ck.save_policy(policy_factory("n1.6"), path, format="gr00t_n16")
    data = json.loads((path / "config.json").read_text())
    assert (data["tune_top_llm_layers"], data["tune_llm"], data["tune_vlln"]) == (4, False, True)
    data.update(tune_top_llm_layers=1, tune_vlln=False, tune_visual=True)
    (path / "config.json").write_text(json.dumps(data))
    cfg, _ = ck.read_config(path)
    assert (cfg.tune_top_llm_layers, cfg.tune_vlln, cfg.tune_visual, cfg.tune_llm) == (1, False, True, False)
    loaded = ck.load_policy(path)
    trained = {n for n, p in loaded.named_parameters() if p.requires_grad and n.startswith("backbone.")}
    assert any(".vision_model." in n for n in trained) and any(".mlp1." in n for n in trained)
    assert {n.split(".layers.")[1].split(".")[0] for n in trained if ".layers." in n and "language_model" in n} == {"1"}
    assert not any(p.requires_grad for p in loaded.action_head.vlln.parameters())
    for key in ("tune_top_llm_layers", "tune_vlln", "tune_visual", "tune_llm"):
        del data[key]
    (path / "config.json").write_text(json.dumps(data))
    cfg, _ = ck.read_config(path)
    assert (cfg.tune_top_llm_layers, cfg.tune_vlln, cfg.tune_visual, cfg.tune_llm) == (4, True, False, False)
