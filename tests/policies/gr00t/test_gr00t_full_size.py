"""Full-size N1.6: the seed recipe's dry-run model has nvidia/GR00T-N1.6-3B's token counts, image size and
parameter count (numbers and their public sources in tests/fixtures/gr00t/gr00t_n1d6_3b.json)."""

from __future__ import annotations

import json
from pathlib import Path

from vlarl_cli.config.loading import load_config
from vlarl_cli.policies.gr00t.config import preset
from vlarl_cli.training.dry_run import build_meta_policy

REAL = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "gr00t" / "gr00t_n1d6_3b.json").read_text())


def test_full_n16_preset_has_the_real_config_numbers() -> None:
    cfg = preset("full", "n1.6")
    for section in ("eagle", "model"):
        for key, want in REAL[section].items():
            if hasattr(cfg, key):
                assert getattr(cfg, key) == want, key
    assert cfg.select_layer < REAL["eagle"]["llm_layers_in_file"]
    assert (cfg.action_horizon, cfg.state_dim, cfg.action_dim) == (50, 128, 128)
    assert cfg.image_size == REAL["derived"]["image_size"]
    assert cfg.tokens_per_image == REAL["derived"]["tokens_per_image"] == cfg.image_size ** 2 // 784
    assert cfg.prompt_length(2) == REAL["derived"]["rlinf_padding_value"]


def test_seed_recipe_dry_run_matches_gr00t_n16_3b() -> None:
    config = load_config("libero_spatial_ppo_gr00t_n1d6").config
    policy = build_meta_policy(config)
    cfg = policy.config
    assert (cfg.image_size, cfg.tokens_per_image, cfg.prompt_length(len(policy.modality.video_keys))) == (252, 81, 570)
    critic = sum(p.numel() for p in policy.action_head.value_head.parameters())
    head = sum(p.numel() for p in policy.action_head.parameters()) - critic
    backbone = sum(p.numel() for p in policy.backbone.parameters())
    # upstream keeps Qwen3's LM head (vocab x hidden, unused by GR00T); we drop it on load
    lm_head = cfg.vocab_size * cfg.llm_hidden_size
    assert abs((backbone + lm_head) / 1e9 - REAL["checkpoint"]["backbone_params_billions"]) < 0.01
    assert abs(head / 1e9 - REAL["checkpoint"]["action_head_params_billions"]) < 0.005
    assert abs((backbone + lm_head + head) / 1e9 - REAL["checkpoint"]["total_params_billions"]) < 0.005
    assert backbone + head == 2_975_968_192
    # RLinf's critic on 2048 + 1536 features: 3584 -> 1024 -> 512 -> 256 -> 1
    assert critic == 3584 * 1024 + 1024 + 1024 * 512 + 512 + 512 * 256 + 256 + 256 + 1
