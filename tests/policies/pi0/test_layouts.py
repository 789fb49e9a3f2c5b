"""Layout detection and architecture inference of foreign pi0 / pi0.5 checkpoints (LeRobot, openpi)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.normalization import NormStats
from vlarl_cli.policies.pi0.checkpoint import detect_format, load_policy, save_policy


def _stats() -> dict[str, NormStats]:
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(8, generator=g, dtype=torch.float64)
    std = torch.rand(8, generator=g, dtype=torch.float64) + 0.5
    act = NormStats(mean[:7], std[:7], mean[:7] - 2 * std[:7], mean[:7] + 2 * std[:7])
    return {"state": NormStats(mean, std, mean - 2 * std, mean + 2 * std), "actions": act}


def _drop_arch_keys(root, *keys: str) -> None:
    cfg_file = root / "config.json"
    cfg = json.loads(cfg_file.read_text())
    for key in keys:
        cfg["vlarl_arch"].pop(key)
    cfg_file.write_text(json.dumps(cfg))


def test_model_type_pi0_beside_lerobot_keys_is_lerobot(make_policy, tmp_path):
    """LeRobot >= 0.4 writes config.json with model_type "pi0" too; the key names decide, not the field."""
    save_policy(make_policy("pi0"), tmp_path / "lr", format="lerobot")
    cfg_file = tmp_path / "lr" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    del cfg["type"]
    cfg["model_type"] = "pi0"
    cfg_file.write_text(json.dumps(cfg))
    assert detect_format(tmp_path / "lr") == "lerobot"
    loaded = load_policy(tmp_path / "lr")
    assert loaded.load_report.missing == [] and loaded.load_report.unexpected == []
    save_policy(make_policy("pi0", add_value_head=False), tmp_path / "hf", format="hf_pi0")
    assert detect_format(tmp_path / "hf") == "hf_pi0"


def test_lerobot_pi05_puts_the_padded_discretised_state_in_the_prompt(make_policy, make_obs, tmp_path):
    policy = make_policy("pi05", max_token_len=200)
    policy.set_norm_stats(_stats())
    with pytest.warns(UserWarning, match="discretised"):
        save_policy(policy, tmp_path / "lr", format="lerobot")
    _drop_arch_keys(tmp_path / "lr", "discrete_state_input", "state_prompt_padded")  # as LeRobot writes it
    loaded = load_policy(tmp_path / "lr")
    assert loaded.cfg.discrete_state_input and loaded.cfg.state_prompt_padded
    obs = make_obs(batch=2)
    inputs = loaded.processor.prepare(obs)
    # LeRobot: quantile-normalise the 8-d state, pad to 32 with zeros, bin on [-1, 1] into 256 bins
    s = _stats()["state"]
    raw = torch.as_tensor(np.asarray(obs["states"]), dtype=torch.float64)
    norm = (raw - s.q01) / (s.q99 - s.q01 + 1e-6) * 2 - 1
    padded = np.concatenate([norm.float().numpy(), np.zeros((2, 24), dtype=np.float32)], axis=1)
    bins = np.digitize(padded, np.linspace(-1, 1, 257)[:-1]) - 1
    text = obs["task_descriptions"][0].strip().replace("_", " ")
    prompt = f"Task: {text}, State: {' '.join(map(str, bins[0]))};\nAction: "
    want = [2, *[b + 4 for b in prompt.encode()]]  # byte tokenizer ids of the tiny model
    assert inputs["tokens"][0, : len(want)].tolist() == want and int(inputs["token_mask"][0].sum()) == len(want)
    assert bins[0, 8:].tolist() == [128] * 24  # the padding dims are in the prompt


def test_openpi_layout_without_hints_infers_every_size(make_policy, make_obs, tmp_path):
    """An openpi-layout 32 px / patch 8 checkpoint with no vlarl_arch: sizes come from the tensors."""
    policy = make_policy("pi0", add_value_head=False)
    save_policy(policy, tmp_path / "op", format="openpi")
    cfg_file = tmp_path / "op" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    del cfg["vlarl_arch"]
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="vision_heads"):  # not in any shape: never guessed
        load_policy(tmp_path / "op", format="openpi")
    hints = {"vision_heads": policy.cfg.vision_heads, "max_token_len": policy.cfg.max_token_len,
             "add_value_head": False}
    loaded = load_policy(tmp_path / "op", format="openpi", overrides=hints)
    for name in ("image_size", "patch_size", "vision_width", "vision_depth", "vision_mlp", "vlm_width", "vlm_depth",
                 "vlm_mlp", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "expert_width", "expert_mlp",
                 "action_horizon", "max_action_dim", "max_state_dim"):
        assert getattr(loaded.cfg, name) == getattr(policy.cfg, name), name
    assert loaded.cfg.image_size == 32 and loaded.cfg.patch_size == 8
    obs = make_obs(batch=2)
    g = torch.Generator
    assert torch.equal(loaded.sample(obs, generator=g().manual_seed(1)).actions,
                       policy.sample(obs, generator=g().manual_seed(1)).actions)


def test_openpi_dummy_variant_is_accepted(make_policy, tmp_path):
    save_policy(make_policy("pi05", add_value_head=False), tmp_path / "op", format="openpi")
    cfg_file = tmp_path / "op" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg.update(paligemma_variant="dummy", action_expert_variant="dummy")
    del cfg["vlarl_arch"]
    cfg_file.write_text(json.dumps(cfg))
    hints = {"vision_heads": 2, "add_value_head": False}
    assert load_policy(tmp_path / "op", overrides=hints).cfg.is_pi05
    cfg["paligemma_variant"] = "gemma_7b"
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="gemma_7b"):
        load_policy(tmp_path / "op", overrides=hints)


def test_value_head_shapes_come_from_the_file(make_policy, tmp_path):
    policy = make_policy("pi0", value_hidden=(12, 6))
    save_policy(policy, tmp_path / "op", format="openpi")
    tensors = load_file(tmp_path / "op" / "model.safetensors")
    assert tensors["value_head.mlp.0.weight"].shape == (12, policy.cfg.expert_width)
    _drop_arch_keys(tmp_path / "op", "value_hidden")
    save_file(tensors, tmp_path / "op" / "model.safetensors")
    assert load_policy(tmp_path / "op").cfg.value_hidden == (12, 6)


def test_openpis_three_camera_slots_change_no_action(make_policy, make_obs):
    """camera_slots = 3 adds openpi's empty, masked right-wrist slot: valid tokens never see it, so the
    actions are those of the 2-slot prefix (only padded prompt rows, hence RLinf's pooled value, differ)."""
    two = make_policy("pi05")
    three = make_policy("pi05", camera_slots=3)
    three.load_state_dict(two.state_dict())
    obs = make_obs(batch=2)
    inputs = three.processor.prepare(obs)
    assert inputs["images"].shape[1] == 3 and inputs["image_masks"][:, 2].sum() == 0
    assert int(inputs["images"][:, 2].abs().sum()) == 0  # openpi fills a missing camera with zeros
    noise = torch.randn(2, two.cfg.action_horizon, two.cfg.max_action_dim, generator=torch.Generator().manual_seed(0))
    a = two.sample(obs, deterministic=True, noise=noise).actions
    b = three.sample(obs, deterministic=True, noise=noise).actions
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
