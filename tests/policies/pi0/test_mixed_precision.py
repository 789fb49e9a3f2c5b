"""distributed/mixed_precision.py on pi0: fp32 master weights, bf16 compute with JAX's fp32 modules kept,
float32 gradients on the float32 parameters (FSDP2's MixedPrecisionPolicy on one device)."""

from __future__ import annotations

import torch

from vlarl_cli.distributed.mixed_precision import compute_in
from vlarl_cli.policies.pi0.config import preset
from vlarl_cli.policies.pi0.modeling import Pi0Model


def _batch(cfg, b: int = 2):
    g = torch.Generator().manual_seed(0)
    s = cfg.image_size
    return (torch.rand(b, 2, 3, s, s, generator=g) * 2 - 1, torch.ones(b, 2, dtype=torch.bool),
            torch.randint(0, cfg.vocab_size, (b, 6), generator=g), torch.ones(b, 6, dtype=torch.bool),
            torch.randn(b, 32, generator=g), torch.randn(b, cfg.action_horizon, 32, generator=g))


def test_compute_in_bf16_keeps_fp32_masters_and_fp32_gradients() -> None:
    torch.manual_seed(0)
    cfg = preset("tiny", "pi05")
    model = Pi0Model(cfg)
    images, masks, tokens, token_mask, _, x_t = _batch(cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen: dict[str, torch.dtype] = {}
    hooks = [m.register_forward_pre_hook(lambda mod, args, name=n: seen.setdefault(name, mod.weight.dtype) and None)
             for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    with compute_in(model, torch.bfloat16):
        _, out = model.joint_forward(images, masks, tokens, token_mask, None, x_t, torch.full((2,), 0.5))
        v = model.velocity_from_features(out)
    for h in hooks:
        h.remove()
    assert out.dtype == torch.bfloat16 and v.dtype == torch.float32
    assert seen["expert.layers.0.self_attn.q_proj"] == torch.bfloat16  # computes in bf16
    assert seen["expert.layers.0.input_layernorm.dense"] == torch.bfloat16  # adaRMS dense: bf16 in JAX
    assert seen["action_in_proj"] == seen["time_mlp_in"] == seen["action_out_proj"] == torch.float32  # kept
    v.square().mean().backward()
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and torch.equal(p.detach(), before[name])
        assert p.grad is None or p.grad.dtype == torch.float32
    assert model.expert.layers[0].self_attn.q_proj.weight.grad is not None


def test_fp32_compute_is_a_no_op() -> None:
    torch.manual_seed(0)
    cfg = preset("tiny", "pi0")
    model = Pi0Model(cfg)
    images, masks, tokens, token_mask, state, x_t = _batch(cfg)
    t = torch.full((2,), 0.3)
    with torch.no_grad():
        plain = model.joint_forward(images, masks, tokens, token_mask, state, x_t, t)[1]
        with compute_in(model, torch.float32):
            same = model.joint_forward(images, masks, tokens, token_mask, state, x_t, t)[1]
    assert torch.equal(plain, same)


def test_fsdp_fp32_units_are_the_modules_jax_computes_in_fp32() -> None:
    """FSDP2 under a bf16 param_dtype gives these modules fp32 units (distributed/fsdp.py: fp32_units)."""
    from vlarl_cli.distributed.fsdp import fp32_units

    model = Pi0Model(preset("tiny", "pi05"))
    names = {n for n, m in model.named_modules() if any(m is u for u in fp32_units(model))}
    depth = model.cfg.vlm_depth
    expected = {"vlm.vision_tower.embeddings", "vlm.vision_tower.post_layernorm", "vlm.language_model.embed_tokens",
                "vlm.language_model.norm", "action_in_proj", "action_out_proj", "time_mlp_in", "time_mlp_out",
                "value_head"}
    expected |= {f"vlm.vision_tower.encoder.layers.{i}.layer_norm{k}" for i in range(model.cfg.vision_depth)
                 for k in (1, 2)}
    expected |= {f"vlm.language_model.layers.{i}.{n}" for i in range(depth)
                 for n in ("input_layernorm", "post_attention_layernorm")}
    assert names == expected  # the pi0.5 expert's norms are adaRMS: their dense layers compute in bf16
