"""Stand-in for openvla-oft's ``OpenVLAForActionPrediction``, written from the architecture facts (not the
upstream code): the parts RLinf's OFT wrappers call, on the upstream building blocks.

* Vision: timm ``VisionTransformer`` towers (DINOv2 with 4 registers and no class-token position;
  SigLIP with the attention-pool head), each read at its second-to-last block through timm's
  ``get_intermediate_layers``, LayerScale ``gamma`` renamed ``scale_factor`` (OpenVLA's HF port), patch
  features concatenated per image and images concatenated along the patch axis.
* Projector ``fc1 -> GELU -> fc2 -> GELU -> fc3``; Llama from transformers with the attention made
  bidirectional (padding-only mask), as the openvla-oft transformers fork does for parallel decoding.
* Sequence helpers: BOS, then the patch (and proprio) tokens, then the rest of the prompt; action
  placeholders + STOP appended; action positions found from fake labels.

Its vision path is timm's while vlarl's is transformers', so the conformance also checks vlarl's timm
key map and its vision towers against timm.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import torch
from oft_towers import tower_kwargs  # type: ignore[import-not-found]
from timm.models.vision_transformer import LayerScale, VisionTransformer
from torch import nn
from transformers import LlamaForCausalLM

from prismatic.training.train_utils import get_current_action_mask, get_next_actions_mask
from prismatic.vla.constants import ACTION_DIM, ACTION_TOKEN_BEGIN_IDX, NUM_ACTIONS_CHUNK, STOP_INDEX

from .configuration_prismatic import OpenVLAConfig


def _rename_layer_scale(tower: nn.Module) -> None:
    for m in tower.modules():
        if isinstance(m, LayerScale):
            m.scale_factor = nn.Parameter(m.gamma.detach().clone())
            del m.gamma
            m.forward = types.MethodType(lambda self, x: x * self.scale_factor, m)


def _second_to_last(tower: VisionTransformer) -> None:
    depth = len(tower.blocks)
    tower.forward = lambda x: tower.get_intermediate_layers(x, n={depth - 2})[0]


class PrismaticVisionBackbone(nn.Module):
    def __init__(self, v: dict[str, Any]) -> None:
        super().__init__()
        self.featurizer = VisionTransformer(**tower_kwargs(v, dino=True))
        self.fused_featurizer = VisionTransformer(**tower_kwargs(v, dino=False))
        for tower in (self.featurizer, self.fused_featurizer):
            _rename_layer_scale(tower)
            _second_to_last(tower)
        self.num_images_in_input = 1

    def get_num_patches(self) -> int:
        return self.featurizer.patch_embed.num_patches

    def get_num_images_in_input(self) -> int:
        return self.num_images_in_input

    def set_num_images_in_input(self, n: int) -> None:
        self.num_images_in_input = n

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        out = []
        for img in torch.split(pixel_values, 6, dim=1):
            a, b = torch.split(img, 3, dim=1)
            out.append(torch.cat([self.featurizer(a), self.fused_featurizer(b)], dim=2))
        return torch.cat(out, dim=1)


class PrismaticProjector(nn.Module):
    def __init__(self, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(vision_dim, 4 * vision_dim)
        self.fc2 = nn.Linear(4 * vision_dim, llm_dim)
        self.fc3 = nn.Linear(llm_dim, llm_dim)
        self.act_fn1, self.act_fn2 = nn.GELU(), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.act_fn2(self.fc2(self.act_fn1(self.fc1(x)))))


def _bidirectional_mask(self: Any, attention_mask: torch.Tensor, input_tensor: torch.Tensor, *args: Any,
                        **kwargs: Any) -> torch.Tensor:
    """A padding-only additive mask [B, 1, S, S]: every query sees every valid key (no causality)."""
    b, s = attention_mask.shape
    keys = attention_mask[:, None, None, :].bool().expand(b, 1, s, s)
    return torch.where(keys, 0.0, torch.finfo(input_tensor.dtype).min).to(input_tensor.dtype)


class OpenVLAForActionPrediction(nn.Module):
    config_class = OpenVLAConfig

    def __init__(self, config: OpenVLAConfig) -> None:
        super().__init__()
        self.config = config
        self.vision_backbone = PrismaticVisionBackbone(config.vision)
        v = config.vision
        self.projector = PrismaticProjector(v["dino_width"] + v["siglip_width"], config.text_config.hidden_size)
        config.text_config._attn_implementation = "eager"
        self.language_model = LlamaForCausalLM(config.text_config)
        self.language_model.model._update_causal_mask = types.MethodType(_bidirectional_mask,
                                                                         self.language_model.model)
        self.llm_dim = config.text_config.hidden_size
        self.norm_stats = config.norm_stats
        self.bins = np.linspace(-1, 1, config.n_action_bins)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0
        self.vocab_size = config.text_config.vocab_size - config.pad_to_multiple_of

    def get_input_embeddings(self) -> nn.Module:
        return self.language_model.get_input_embeddings()

    def _process_vision_features(self, pixel_values, language_embeddings=None, use_film=False):
        assert not use_film
        return self.projector(self.vision_backbone(pixel_values))

    def _process_proprio_features(self, projected_patch_embeddings, proprio, proprio_projector):
        if proprio_projector is None or proprio is None:
            return projected_patch_embeddings
        token = proprio_projector(proprio.reshape(projected_patch_embeddings.shape[0], -1))[:, None]
        return torch.cat([projected_patch_embeddings, token], dim=1)

    def _build_multimodal_attention(self, input_embeddings, projected_patch_embeddings, attention_mask):
        patch_mask = torch.ones(projected_patch_embeddings.shape[:2], dtype=attention_mask.dtype,
                                device=attention_mask.device)
        emb = torch.cat([input_embeddings[:, :1], projected_patch_embeddings, input_embeddings[:, 1:]], dim=1)
        mask = torch.cat([attention_mask[:, :1], patch_mask, attention_mask[:, 1:]], dim=1)
        return emb, mask

    def _process_action_masks(self, labels):
        return get_current_action_mask(labels) | get_next_actions_mask(labels)

    def _prepare_input_for_action_prediction(self, input_ids, attention_mask):
        b, t = input_ids.shape[0], ACTION_DIM * NUM_ACTIONS_CHUNK
        slots = torch.ones(b, t, dtype=input_ids.dtype, device=input_ids.device)
        stop = torch.full((b, 1), STOP_INDEX, dtype=input_ids.dtype, device=input_ids.device)
        input_ids = torch.cat([input_ids, slots, stop], dim=1)
        ext = torch.ones(b, t + 1, dtype=attention_mask.dtype, device=attention_mask.device)
        return input_ids, torch.cat([attention_mask, ext], dim=1)

    def _prepare_labels_for_action_prediction(self, labels, input_ids):
        ext = torch.full((labels.shape[0], input_ids.shape[1] - labels.shape[1]), ACTION_TOKEN_BEGIN_IDX + 1,
                         dtype=labels.dtype, device=labels.device)
        labels = torch.cat([labels, ext], dim=1)
        labels[:, -1] = STOP_INDEX
        return labels

    @staticmethod
    def _check_unnorm_key(norm_stats, unnorm_key):
        if unnorm_key is None:
            assert len(norm_stats) == 1
            return next(iter(norm_stats))
        assert unnorm_key in norm_stats
        return unnorm_key

    def get_action_stats(self, unnorm_key=None):
        return self.norm_stats[self._check_unnorm_key(self.norm_stats, unnorm_key)]["action"]

    def _unnormalize_actions(self, normalized_actions, unnorm_key=None):
        stats = self.get_action_stats(unnorm_key)
        mask = stats.get("mask", np.ones_like(stats["q01"], dtype=bool))
        high, low = np.array(stats["q99"]), np.array(stats["q01"])
        return np.where(mask, 0.5 * (normalized_actions + 1) * (high - low + 1e-8) + low, normalized_actions)
