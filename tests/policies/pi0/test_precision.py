"""bf16 as openpi runs it, and the SFT loss reduced either our way or exactly openpi's way."""

from __future__ import annotations

import torch

from vlarl_cli.policies.pi0.checkpoint import load_policy, save_policy
from vlarl_cli.policies.pi0.modeling import FP32_PARTS, FP32_PREFIXES


def _kept_fp32(name: str) -> bool:
    return name.startswith(FP32_PREFIXES) or any(p in name for p in FP32_PARTS)


def test_bf16_keeps_openpis_fp32_parameters(make_policy):
    policy = make_policy("pi05").set_precision(torch.bfloat16)
    dtypes = {n: p.dtype for n, p in policy.named_parameters()}
    kept = sorted(n for n, d in dtypes.items() if d == torch.float32)
    # openpi gemma_pytorch.py params_to_keep_float32, in our names
    assert "vlm.vision_tower.embeddings.patch_embedding.weight" in kept
    assert "vlm.vision_tower.embeddings.patch_embedding.bias" in kept
    assert "vlm.vision_tower.embeddings.position_embedding.weight" in kept
    assert "vlm.language_model.layers.0.input_layernorm.weight" in kept
    assert "expert.layers.1.post_attention_layernorm.dense.weight" in kept  # pi0.5 adaRMS
    assert "vlm.language_model.norm.weight" in kept and "expert.norm.dense.bias" in kept
    assert all(_kept_fp32(n) for n in kept)
    others = [d for n, d in dtypes.items() if not _kept_fp32(n)]
    assert others and all(d == torch.bfloat16 for d in others)
    assert "vlm.vision_tower.encoder.layers.0.layer_norm1.weight" not in kept  # SigLIP's own norms go bf16


def test_bf16_runs_close_to_fp32_and_survives_a_round_trip(make_policy, make_obs, tmp_path):
    obs = make_obs(batch=2)
    ref = make_policy("pi0")
    low = make_policy("pi0").set_precision(torch.bfloat16)
    noise = torch.randn(2, ref.cfg.action_horizon, ref.cfg.max_action_dim, generator=torch.Generator().manual_seed(0))
    a = ref.sample(obs, deterministic=True, noise=noise).actions
    b = low.sample(obs, deterministic=True, noise=noise).actions
    assert b.dtype == torch.float32 and torch.isfinite(b).all()
    # bf16 keeps 8 mantissa bits (relative step 2^-8 = 4e-3); 2 + 2 layers and 4 Euler steps stay within 5e-2
    torch.testing.assert_close(b, a, rtol=5e-2, atol=5e-2)
    save_policy(low, tmp_path / "ck", format="openpi")
    loaded = load_policy(tmp_path / "ck", dtype=torch.bfloat16)
    assert {n: p.dtype for n, p in loaded.named_parameters()} == {n: p.dtype for n, p in low.named_parameters()}
    assert torch.equal(loaded.sample(obs, deterministic=True, noise=noise).actions, b)


def test_sft_loss_reductions(make_policy, make_obs):
    """openpi's compute_loss averages over all H x 32 entries; ours over the executed C x A block."""
    obs = make_obs(batch=2)
    g = torch.Generator().manual_seed(0)
    ours = make_policy("pi0", num_action_chunks=3)
    theirs = make_policy("pi0", num_action_chunks=3, sft_loss_reduction="openpi")
    b, h, d = 2, ours.cfg.action_horizon, ours.cfg.max_action_dim
    actions = torch.randn(b, 3, 7, generator=g)
    noise, time = torch.randn(b, h, d, generator=g), torch.rand(b, generator=g)
    with torch.no_grad():
        executed = ours.supervised_loss(obs, actions, noise=noise, time=time)
        full = theirs.supervised_loss(obs, actions, noise=noise, time=time)
        # the per-element errors by hand, from the same model pieces
        inputs = ours.processor.prepare(obs)
        target = torch.zeros(b, h, d)
        target[:, :3, :7] = actions
        target[:, 3:, :7] = actions[:, -1:]  # the horizon is padded by repeating the last step
        x_t = time[:, None, None] * noise + (1 - time[:, None, None]) * target
        cache, state = ours._prefix(inputs)
        err = (ours.velocity_from_features(ours.expert_forward(cache, state, x_t, time)) - (noise - target)) ** 2
    torch.testing.assert_close(executed, err[:, :3, :7].mean(), rtol=1e-6, atol=0)
    torch.testing.assert_close(full, err.mean(), rtol=1e-6, atol=0)
    assert not torch.isclose(executed, full)
