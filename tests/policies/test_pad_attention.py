"""FlashAttention-2 pad semantics on SDPA (policies/pad_attention.py), against a reference computation.

The reference follows what transformers' FA2 path does with a padded batch: the real tokens of each row run
alone (unpadded, causal, at the positions ``arange(L)`` gives them in the padded row), and a pad position gets a
zero attention output in every layer, so its hidden state is its own embedding through the residual MLPs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from vlarl_cli.policies import pad_attention


def _lm(layers: int = 3) -> Any:
    from transformers import Qwen3Config, Qwen3Model

    torch.manual_seed(0)
    cfg = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, vocab_size=64, max_position_embeddings=128,
                      use_cache=False, attention_dropout=0.0)
    cfg._attn_implementation = pad_attention.register()
    return Qwen3Model(cfg).eval().double()


def _fa2_reference(lm: Any, embeds: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(embeds)
    for b in range(embeds.shape[0]):
        real = valid[b].nonzero().squeeze(1)
        h = lm(inputs_embeds=embeds[b:b + 1, real], position_ids=real[None], use_cache=False).last_hidden_state
        out[b, real] = h[0]
        pads = (~valid[b]).nonzero().squeeze(1)
        h = embeds[b, pads]
        for layer in lm.layers:  # attention branch is exactly 0 at a pad query under FA2
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        out[b, pads] = lm.norm(h)
    return out


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    embeds = torch.randn(4, 10, 64, generator=g, dtype=torch.float64)
    valid = torch.ones(4, 10, dtype=torch.bool)
    valid[1, 6:] = False  # right padding (RLinf pads to padding_value on the right)
    valid[2, :3] = False  # left padding (Isaac-GR00T's processor pads a batch on the left)
    valid[3, :2] = False
    valid[3, 8:] = False  # both
    return embeds, valid


def test_sdpa_with_fa2_pad_semantics_equals_the_reference() -> None:
    lm = _lm()
    embeds, valid = _batch()
    got = lm(inputs_embeds=embeds, attention_mask={"full_attention": pad_attention.padded_causal_mask(valid)},
             query_valid=valid, use_cache=False).last_hidden_state
    ref = _fa2_reference(lm, embeds, valid)
    # measured max |diff| 0 (bit-identical in float64 here); the tolerance allows a few ulp of another BLAS
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-15)
    # control: plain SDPA (causal + key padding, no query zeroing) lets a right-pad query read the prompt before
    # it (measured 0.053 at row 1's pads) while its real tokens agree; its left-pad rows are fully masked
    plain = lm(inputs_embeds=embeds[:2], attention_mask=valid[:2].long(), use_cache=False).last_hidden_state
    torch.testing.assert_close(plain[valid[:2]], ref[:2][valid[:2]], rtol=0, atol=1e-15)
    assert (plain[1, 6:] - ref[1, 6:]).abs().max() > 1e-2


def test_pad_features_do_not_depend_on_the_prompt_and_gradients_are_finite() -> None:
    lm = _lm()
    embeds, valid = _batch()
    other = embeds.clone()
    other[valid] = torch.randn(int(valid.sum()), 64, dtype=torch.float64)  # new prompts, same pads
    other.requires_grad_(True)
    masks = {"full_attention": pad_attention.padded_causal_mask(valid)}
    a = lm(inputs_embeds=embeds, attention_mask=masks, query_valid=valid, use_cache=False).last_hidden_state
    b = lm(inputs_embeds=other, attention_mask=masks, query_valid=valid, use_cache=False).last_hidden_state
    torch.testing.assert_close(a[~valid], b[~valid], rtol=0, atol=1e-15)
    b.sum().backward()  # a left-pad query has every key masked: the mask lets it see itself, no NaN
    assert other.grad is not None and bool(other.grad.isfinite().all())


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_gr00t_backbone_pad_features_are_prompt_independent(version) -> None:
    """The GR00T backbone runs its Qwen3 with these semantics: two prompts with the same right padding (RLinf's
    token 0, mask 0) give identical features at the pad positions, whatever their real tokens."""
    from vlarl_cli.policies.gr00t.backbone import EagleBackbone
    from vlarl_cli.policies.gr00t.config import preset

    torch.manual_seed(0)
    cfg = preset("tiny", version)
    backbone = EagleBackbone(cfg).eval()
    images = cfg.tokens_per_image
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 200, (2, images + 12), generator=g)
    ids[:, 2:2 + images] = cfg.image_token_id
    mask = torch.ones_like(ids)
    ids[:, -4:], mask[:, -4:] = 0, 0
    pixels = torch.randn(2, 1, 3, cfg.image_size, cfg.image_size, generator=g)
    with torch.no_grad():
        feats = backbone(pixels, ids, mask)
    assert (feats[0, :-4] - feats[1, :-4]).abs().max() > 1e-3  # the prompts differ
    torch.testing.assert_close(feats[0, -4:], feats[1, -4:], rtol=0, atol=1e-6)
