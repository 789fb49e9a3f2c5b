"""Eagle-style vision-language backbone built from transformers classes.

Upstream (Isaac-GR00T ``gr00t/model/backbone/eagle_backbone.py`` + ``eagle2_hg_model/modeling_eagle2_5_vl.py``
for N1.5; ``gr00t/model/modules/eagle_backbone.py`` for N1.6):

1. the vision tower encodes each camera image to patch tokens (N1.5: ``SiglipVisionModel``; N1.6:
   SigLIP-2, here ``transformers.Siglip2VisionModel`` fed a fixed square patch grid);
2. optional 2x2 pixel shuffle (N1.6), then the ``mlp1`` connector maps them to the LLM width;
3. the image tokens replace the ``<image>`` placeholder embeddings of the prompt;
4. a Qwen3 LM truncated to its first ``select_layer`` layers runs over the sequence; its final hidden
   state (after the model norm) is the VL feature map; N1.5 may project it (``eagle_linear``). Upstream runs
   it with FlashAttention-2; SDPA here gets FA2's pad semantics (:mod:`vlarl_cli.policies.pad_attention`).

Module nesting mirrors upstream so keys match: N1.5 ``backbone.eagle_model.{vision_model, mlp1,
language_model.model}`` (+ ``backbone.eagle_linear``), N1.6 ``backbone.model.{...}``. transformers 5
flattened ``SiglipVisionModel`` (no inner ``vision_model.``); the checkpoint key map restores it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlarl_cli.policies import pad_attention
from vlarl_cli.policies.gr00t.config import Gr00tConfig

__all__ = ["EagleBackbone", "merge_patches", "pixel_shuffle"]


def pixel_shuffle(x: Tensor, scale: float = 0.5) -> Tensor:
    """Eagle / InternVL pixel shuffle: [N, W, H, C] -> [N, W*s, H*s, C/s^2] (space-to-depth for s=0.5)."""
    n, w, h, c = x.shape
    x = x.reshape(n, w, int(h * scale), int(c / scale))
    x = x.permute(0, 2, 1, 3).contiguous()
    x = x.reshape(n, int(h * scale), int(w * scale), int(c / (scale * scale)))
    return x.permute(0, 2, 1, 3).contiguous()


def merge_patches(feats: Tensor, kind: str) -> Tensor:
    """2x2 patch merge of a square patch grid: [M, P, C] -> [M, P/4, 4C].

    ``eagle2``: :func:`pixel_shuffle` on [M, W, H, C] (Eagle 2.5 / InternVL); ``unshuffle``: patches
    (row-major) -> [M, C, H, W] -> ``F.pixel_unshuffle(2)`` (Eagle 3 ``pixel_shuffle_back``), channel
    index ``c * 4 + 2 dy + dx``.
    """
    m, p, c = feats.shape
    side = round(p**0.5)
    if kind == "unshuffle":
        grid = feats.transpose(1, 2).reshape(m, c, side, side)
        return F.pixel_unshuffle(grid, 2).flatten(2).transpose(1, 2)
    out = pixel_shuffle(feats.reshape(m, side, side, c), 0.5)
    return out.reshape(m, -1, out.shape[-1])


def _has_siglip2() -> bool:
    try:
        from transformers import Siglip2VisionModel  # noqa: F401
    except ImportError:
        return False
    return True


class _LanguageModel(nn.Module):
    """Holds the Qwen3 decoder at ``.model`` so keys read ``language_model.model.*`` as upstream."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model


class _Eagle(nn.Module):
    def __init__(self, vision_model: nn.Module, mlp1: nn.Module, language_model: nn.Module) -> None:
        super().__init__()
        self.vision_model = vision_model
        self.mlp1 = mlp1
        self.language_model = _LanguageModel(language_model)


class EagleBackbone(nn.Module):
    """``forward(pixel_values [B, N_img, 3, H, W], input_ids [B, L], attention_mask [B, L])`` ->
    VL features [B, L, backbone_embedding_dim]."""

    def __init__(self, cfg: Gr00tConfig) -> None:
        super().__init__()
        from transformers import Qwen3Config, Qwen3Model

        self.cfg = cfg
        self.inner_name = "eagle_model" if cfg.version == "n1.5" else "model"
        self.vision_kind = cfg.vision_kind
        if cfg.vision_kind == "siglip2" and not _has_siglip2():
            # older transformers: a fixed-resolution SigLIP tower of the same size (patch embedding is then a
            # Conv2d, so N1.6 checkpoints will not load strictly; presets and tests still work)
            self.vision_kind = "siglip"
        if self.vision_kind == "siglip2":
            from transformers import Siglip2VisionConfig, Siglip2VisionModel

            v2cfg = Siglip2VisionConfig(
                hidden_size=cfg.vision_hidden_size, intermediate_size=cfg.vision_intermediate_size,
                num_hidden_layers=cfg.vision_num_layers, num_attention_heads=cfg.vision_num_heads,
                patch_size=cfg.patch_size, num_patches=cfg.vision_num_patches or (cfg.image_size // cfg.patch_size) ** 2,
                vision_use_head=cfg.vision_use_head, attention_dropout=0.0)
            v2cfg._attn_implementation = "sdpa"
            vision: nn.Module = Siglip2VisionModel(v2cfg)
        else:
            from transformers import SiglipVisionConfig, SiglipVisionModel

            vcfg = SiglipVisionConfig(
                hidden_size=cfg.vision_hidden_size, intermediate_size=cfg.vision_intermediate_size,
                num_hidden_layers=cfg.vision_num_layers, num_attention_heads=cfg.vision_num_heads,
                image_size=cfg.image_size, patch_size=cfg.patch_size, vision_use_head=cfg.vision_use_head,
                attention_dropout=0.0, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
            vcfg._attn_implementation = "sdpa"
            vision = SiglipVisionModel(vcfg)
        vit_out = cfg.vision_hidden_size * (4 if cfg.use_pixel_shuffle else 1)
        if cfg.mlp_connector_layers == 2:
            mlp1 = nn.Sequential(nn.LayerNorm(vit_out), nn.Linear(vit_out, cfg.llm_hidden_size), nn.GELU(),
                                 nn.Linear(cfg.llm_hidden_size, cfg.llm_hidden_size))
        else:
            mlp1 = nn.Sequential(nn.Linear(vit_out, cfg.llm_hidden_size))
        lcfg = Qwen3Config(
            hidden_size=cfg.llm_hidden_size, intermediate_size=cfg.llm_intermediate_size,
            num_hidden_layers=cfg.select_layer, num_attention_heads=cfg.llm_num_heads,
            num_key_value_heads=cfg.llm_num_kv_heads, head_dim=cfg.llm_head_dim, vocab_size=cfg.vocab_size,
            rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta}, rms_norm_eps=cfg.rms_norm_eps,
            max_position_embeddings=cfg.max_position_embeddings, attention_dropout=0.0, use_cache=False,
            pad_token_id=cfg.pad_token_id, tie_word_embeddings=False)
        lcfg._attn_implementation = pad_attention.register()  # SDPA with FlashAttention-2's pad semantics
        # Only the first `select_layer` decoder layers are built: upstream pops the rest after loading.
        setattr(self, self.inner_name, _Eagle(vision, mlp1, Qwen3Model(lcfg)))
        if cfg.project_to_dim is not None:
            self.eagle_linear = nn.Linear(cfg.llm_hidden_size, cfg.project_to_dim)

    @property
    def eagle(self) -> _Eagle:
        return getattr(self, self.inner_name)

    def image_features(self, pixel_values: Tensor) -> Tensor:
        """[M, 3, H, W] normalised pixels -> [M, tokens_per_image, llm_hidden]."""
        cfg = self.cfg
        vision = self.eagle.vision_model
        if self.vision_kind == "siglip2":
            m, c, h, w = pixel_values.shape
            p = cfg.patch_size
            gh, gw = h // p, w // p
            # patchify row-major into [M, gh*gw, p*p*c] with channels last inside a patch (HF Siglip2
            # image processor layout), a full-attention mask and the grid as spatial shape
            patches = pixel_values.reshape(m, c, gh, p, gw, p).permute(0, 2, 4, 3, 5, 1).reshape(m, gh * gw, p * p * c)
            mask = torch.ones(m, gh * gw, dtype=torch.long, device=pixel_values.device)
            shapes = torch.tensor([[gh, gw]] * m, dtype=torch.long, device=pixel_values.device)
            feats = vision(pixel_values=patches, pixel_attention_mask=mask, spatial_shapes=shapes).last_hidden_state
        else:
            feats = vision(pixel_values=pixel_values).last_hidden_state
        if cfg.use_pixel_shuffle:
            feats = merge_patches(feats, cfg.pixel_shuffle_kind)
        return self.eagle.mlp1(feats)

    def forward(self, pixel_values: Tensor, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        b, n_img = pixel_values.shape[:2]
        vit = self.image_features(pixel_values.flatten(0, 1))  # [B*N_img, P, d_llm]
        lm: Any = self.eagle.language_model.model
        embeds = lm.get_input_embeddings()(input_ids)  # [B, L, d_llm]
        is_image = input_ids == self.cfg.image_token_id
        expected = n_img * vit.shape[1]
        counts = is_image.sum(dim=1)
        if bool((counts != expected).any()):
            raise ValueError(f"every prompt needs {expected} image tokens ({n_img} images x {vit.shape[1]}), "
                             f"got {counts.tolist()}")
        # scatter image features into the placeholder positions, row-major per sample (upstream order)
        embeds = embeds.masked_scatter(is_image.unsqueeze(-1), vit.reshape(b, expected, -1).to(embeds.dtype))
        # FlashAttention-2's pad semantics, as upstream and RLinf run Qwen3: a pad query's attention output is 0
        # (pad features never depend on the prompt), real queries never see pad keys (policies/pad_attention.py)
        masks = {"full_attention": pad_attention.padded_causal_mask(attention_mask)}
        out = lm(inputs_embeds=embeds, attention_mask=masks, use_cache=False,
                 query_valid=attention_mask.bool()).last_hidden_state
        if self.cfg.project_to_dim is not None:
            out = self.eagle_linear(out)
        return out
