"""LoRA for OpenVLA-OFT: PEFT adapter folders (RLinf ``lora_path``) merged on load, checked against peft's own
forward; RLinf's LoRA placement for ``is_lora``; export merges."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.lora import LoRALinear, read_peft_adapter
from vlarl_cli.policies.openvla_oft.checkpoint import load_policy, save_policy

# the Llama layers only: there our module names are the upstream ones (the vision towers are named as in
# transformers here, as in timm upstream; the fused-qkv test covers those)
LLM_TARGETS = r".*language_model\.model\.layers\.\d+\.(self_attn\.q_proj|self_attn\.v_proj|mlp\.down_proj)"


def _peft_adapter(base, folder, seed=0, rank=4, alpha=8, targets=LLM_TARGETS):
    """A real PEFT adapter: peft wraps the base policy's Llama, its LoRA factors get random values, and
    ``save_pretrained`` writes the folder; returns peft's model (the base + adapter reference)."""
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets,
                                                 init_lora_weights=False, lora_dropout=0.0))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    peft_model.save_pretrained(folder)
    return peft_model


def test_adapter_folder_merges_to_exactly_base_plus_adapter(make_policy, make_obs, tmp_path):
    base = make_policy(add_value_head=False)
    save_policy(base, tmp_path / "base", format="openvla_hf")
    obs = make_obs(batch=2)
    before = base.sample(obs, deterministic=True)
    peft_model = _peft_adapter(base, tmp_path / "adapter")
    # RLinf's adapter keys: base_model.model.<module path>.lora_A.weight, in the upstream layout
    names = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert names["r"] == 4 and names["lora_alpha"] == 8
    with torch.no_grad():
        reference = peft_model.base_model.model.sample(obs, deterministic=True)  # peft's forward, unmerged
    assert not torch.equal(reference.replay["action_tokens"], before.replay["action_tokens"])
    merged = load_policy(tmp_path / "base", lora_path=tmp_path / "adapter", overrides={"unnorm_key": "libero_10"})
    assert merged.load_report.details["lora_adapter"] == str(tmp_path / "adapter")
    inputs = merged.processor.prepare(obs)
    with torch.no_grad():
        ours, _ = merged._forward(inputs)
        theirs, _ = peft_model.base_model.model._forward(inputs)
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-5)  # fp32 merge vs unmerged: rounding only
    assert torch.equal(merged.sample(obs, deterministic=True).replay["action_tokens"], reference.replay["action_tokens"])
    # train on top with LoRA: the step-0 policy is still base + adapter
    lora = load_policy(tmp_path / "base", lora_path=tmp_path / "adapter",
                       overrides={"unnorm_key": "libero_10", "is_lora": True, "lora_rank": 2})
    with torch.no_grad():
        torch.testing.assert_close(lora._forward(inputs)[0], ours, atol=1e-6, rtol=0)
    # export merges the new LoRA too; the exported folder reloads to the same outputs
    save_policy(lora, tmp_path / "export", format="openvla_hf")
    again = load_policy(tmp_path / "export", overrides={"unnorm_key": "libero_10"})
    with torch.no_grad():
        torch.testing.assert_close(again._forward(inputs)[0], ours, atol=1e-5, rtol=1e-5)


def test_fused_qkv_adapter_merges_before_the_split(make_policy, make_obs, tmp_path):
    """An RLinf adapter on timm's fused ``attn.qkv``: merged in the upstream space, then split into q / k / v."""
    base = make_policy()
    save_policy(base, tmp_path / "base", format="openvla_hf")
    key = "vision_backbone.featurizer.blocks.0.attn.qkv"
    from safetensors import safe_open

    with safe_open(str(tmp_path / "base" / "model.safetensors"), "pt") as f:
        w = f.get_tensor(key + ".weight")
    a, b = torch.randn(2, w.shape[1]), torch.randn(w.shape[0], 2)
    folder = tmp_path / "adapter"
    folder.mkdir()
    save_file({f"base_model.model.{key}.lora_A.weight": a, f"base_model.model.{key}.lora_B.weight": b},
              str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 2,
                                                            "target_modules": ["qkv"]}))
    merged = load_policy(tmp_path / "base", lora_path=folder, overrides={"unnorm_key": "libero_10"})
    fused = w + b @ a  # scaling alpha / r = 1
    d = w.shape[0] // 3
    attn = merged.vision_backbone.featurizer.encoder.layer[0].attention
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        torch.testing.assert_close(getattr(attn, name).weight.detach(), fused[i * d:(i + 1) * d], atol=1e-6, rtol=0)


def test_adapters_that_do_not_fit_are_refused(make_policy, tmp_path):
    save_policy(make_policy(), tmp_path / "base", format="openvla_hf")
    folder = tmp_path / "adapter"
    folder.mkdir()
    save_file({"base_model.model.language_model.model.layers.9.mlp.up_proj.lora_A.weight": torch.ones(2, 64),
               "base_model.model.language_model.model.layers.9.mlp.up_proj.lora_B.weight": torch.ones(128, 2)},
              str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 2}))
    with pytest.raises(CheckpointError, match="does not load"):
        load_policy(tmp_path / "base", lora_path=folder, overrides={"unnorm_key": "libero_10"})
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 2,
                                                            "use_dora": True}))
    with pytest.raises(CheckpointError, match="use_dora"):
        read_peft_adapter(folder)
    with pytest.raises(CheckpointError, match=r"adapter_config\.json"):
        read_peft_adapter(tmp_path / "base")


def test_is_lora_wraps_where_rlinf_does_and_starts_at_the_base(make_policy, make_obs):
    base = make_policy()
    lora = make_policy(is_lora=True, lora_rank=4, randomized=False)
    lora.load_state_dict(base.state_dict(), strict=False)  # same base weights, B = 0
    wrapped = {n for n, m in lora.named_modules() if isinstance(m, LoRALinear)}
    assert "language_model.lm_head" in wrapped and "projector.fc3" in wrapped
    assert "vision_backbone.featurizer.encoder.layer.0.attention.q_proj" in wrapped
    assert "vision_backbone.fused_featurizer.encoder.layers.1.mlp.fc2" in wrapped
    assert not any(n.startswith("value_head") for n in wrapped)
    obs = make_obs(batch=2)
    inputs = base.processor.prepare(obs)
    with torch.no_grad():
        torch.testing.assert_close(lora._forward(inputs)[0], base._forward(inputs)[0], atol=0, rtol=0)
        # a non-zero lm_head update reaches the action logits (only its 256 action rows are computed)
        head = lora.language_model.lm_head
        head.lora_B.normal_()
        logits, hidden = lora._forward(inputs)
        full = torch.nn.functional.linear(hidden, head.merged_weight())
        start = lora.cfg.action_token_start
        torch.testing.assert_close(logits, full[..., start:start + 256].float(), atol=1e-5, rtol=1e-5)
