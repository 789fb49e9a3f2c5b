"""The OpenVLA-OFT network on transformers building blocks (facts: REFERENCE.md section 4).

Structure (openvla-oft ``prismatic/extern/hf/modeling_prismatic.py``, RLinf
``rlinf/models/embodiment/openvla_oft/rlinf/openvla_oft_action_model.py``; read for facts only)::

    pixels [B, 6, S, S] = DINOv2-normalised image ++ SigLIP-normalised image (channel stack)
    patches = cat(DINOv2(second-to-last block, register + CLS tokens dropped),
                  SigLIP(second-to-last block))                       [B, N, 1024 + 1152]
    prefix  = projector(patches)                                        [B, N, 4096]
    seq     = [emb(BOS), prefix, emb(prompt[1:]), 0 * T]                T = C * A = 56 action slots
    logits for action token j = lm_head(h[position of slot j - 1])     (next-token shift, as upstream)

The action placeholders enter as ZERO embeddings (RLinf multiplies their embeddings by the inverted
action mask) and all T are decoded in ONE forward pass. Attention (``OftConfig.attention``):
``bidirectional`` lets every token attend every valid token (the openvla-oft transformers fork turns
the Llama mask non-causal; moojink/openvla-oft issues #27, #89); ``action_bidirectional`` keeps the
prompt causal and only lets the action block attend bidirectionally among itself. Prompt padding is
masked as keys and skipped by the RoPE positions ``cumsum(valid) - 1``, so a sample's output does not
depend on how much padding it carries.

RL head (RLinf): the logits of the last ``n_action_bins`` ids of the unpadded vocabulary (31744..31999)
are the 256-bin distribution of each action element; they are computed directly as
``h @ lm_head.weight[start : start + 256].T``, which equals RLinf's masked full-vocabulary softmax
(every other id is set to -inf there) at a fraction of the cost.

The vision towers run only up to their second-to-last block (timm ``get_intermediate_layers(n={depth -
2})`` upstream); the last blocks, the final norms and SigLIP's attention-pool head exist only so that
checkpoints load and save unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlarl_cli.policies.openvla_oft.config import OftConfig
from vlarl_cli.policies.openvla_oft.heads import L1RegressionHead, OftCritic, ProprioProjector

__all__ = ["OftModel", "OftProjector", "OftVisionBackbone", "attention_mask_2d"]

_MASK_VALUE = -2.3819763e38  # finite additive mask value: fully masked rows never produce NaN


class OftVisionBackbone(nn.Module):
    """DINOv2 (``featurizer``, with registers when ``dino_registers > 0``) + SigLIP (``fused_featurizer``).

    ``forward(pixels [B, 6, S, S]) -> [B, N, dino_width + siglip_width]``.
    """

    def __init__(self, cfg: OftConfig) -> None:
        super().__init__()
        from transformers import (
            Dinov2Config,
            Dinov2Model,
            Dinov2WithRegistersConfig,
            Dinov2WithRegistersModel,
            SiglipVisionConfig,
            SiglipVisionModel,
        )

        common: dict[str, Any] = {"hidden_size": cfg.dino_width, "num_hidden_layers": cfg.dino_depth,
                  "num_attention_heads": cfg.dino_heads, "mlp_ratio": cfg.dino_mlp_ratio,
                  "image_size": cfg.image_size, "patch_size": cfg.patch_size, "layer_norm_eps": 1e-6,
                  "hidden_act": "gelu", "layerscale_value": 1.0, "attn_implementation": "sdpa"}
        self.num_registers = cfg.dino_registers
        self.featurizer: Any
        if cfg.dino_registers > 0:
            self.featurizer = Dinov2WithRegistersModel(
                Dinov2WithRegistersConfig(num_register_tokens=cfg.dino_registers, **common))
        else:
            self.featurizer = Dinov2Model(Dinov2Config(**common))
        # timm's SigLIP blocks use exact GELU (nn.GELU), not transformers' default tanh approximation.
        siglip: dict[str, Any] = {
            "hidden_size": cfg.siglip_width, "intermediate_size": cfg.siglip_mlp,
            "num_hidden_layers": cfg.siglip_depth, "num_attention_heads": cfg.siglip_heads,
            "image_size": cfg.image_size, "patch_size": cfg.patch_size, "hidden_act": "gelu",
            "layer_norm_eps": 1e-6, "vision_use_head": cfg.siglip_head, "attn_implementation": "sdpa"}
        self.fused_featurizer: Any = SiglipVisionModel(SiglipVisionConfig(**siglip))

    def forward(self, pixels: Tensor) -> Tensor:
        """``pixels [B, 6 n, S, S]`` (n images, each DINOv2 then SigLIP channels) -> ``[B, n N, Dd + Ds]``:
        each image's fused patch features, images concatenated along the patch axis (openvla-oft
        ``PrismaticVisionBackbone.forward`` with ``num_images_in_input = n``)."""
        if pixels.dim() != 4 or pixels.shape[1] % 6:
            raise ValueError(f"pixels must be [B, 6 * images, S, S] (DINOv2 + SigLIP channels), got "
                             f"{tuple(pixels.shape)}")
        return torch.cat([self._one_image(img) for img in pixels.split(6, dim=1)], dim=1)

    def _one_image(self, pixels: Tensor) -> Tensor:
        dino_px, siglip_px = pixels.split(3, dim=1)
        h = self.featurizer.embeddings(dino_px)  # [B, 1 + R + N, Dd]: CLS, registers, patches
        for layer in self.featurizer.encoder.layer[:-1]:
            h = layer(h)
        g = self.fused_featurizer.embeddings(siglip_px)  # [B, N, Ds]
        for layer in self.fused_featurizer.encoder.layers[:-1]:
            g = layer(g, None)
        return torch.cat([h[:, 1 + self.num_registers:], g], dim=-1)


class OftProjector(nn.Module):
    """Fused GELU-MLP ``vision_width -> 4 vision_width -> llm_width -> llm_width`` (OpenVLA ``fused-gelu-mlp``)."""

    def __init__(self, vision_width: int, llm_width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(vision_width, 4 * vision_width)
        self.fc2 = nn.Linear(4 * vision_width, llm_width)
        self.fc3 = nn.Linear(llm_width, llm_width)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


def attention_mask_2d(valid: Tensor, num_action: int, mode: str) -> Tensor:
    """``valid [B, S]`` bool -> ``[B, S, S]`` bool "query i may attend key j".

    The last ``num_action`` positions are the action block. ``bidirectional``: ``valid[j]``.
    ``action_bidirectional``: ``valid[j] and (j <= i or both i and j in the action block)``.
    """
    b, s = valid.shape
    allowed = valid[:, None, :].expand(b, s, s)
    if mode == "bidirectional":
        return allowed
    if mode != "action_bidirectional":
        raise ValueError(f"unknown attention mode {mode!r}")
    idx = torch.arange(s, device=valid.device)
    causal = idx[None, :] <= idx[:, None]
    is_action = idx >= s - num_action
    block = is_action[None, :] & is_action[:, None]
    return allowed & (causal | block)[None]


class OftModel(nn.Module):
    """Vision backbone + projector + Llama; :meth:`action_outputs` is the RL forward pass."""

    def __init__(self, cfg: OftConfig) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        self.cfg = cfg
        self.vision_backbone = OftVisionBackbone(cfg)
        self.projector = OftProjector(cfg.vision_width, cfg.llm_width)
        llama: dict[str, Any] = {
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.llm_width, "intermediate_size": cfg.llm_mlp,
            "num_hidden_layers": cfg.llm_depth, "num_attention_heads": cfg.llm_heads,
            "num_key_value_heads": cfg.llm_kv_heads, "rms_norm_eps": cfg.rms_norm_eps,
            "max_position_embeddings": cfg.max_position_embeddings,
            "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
            "bos_token_id": cfg.bos_token_id, "pad_token_id": cfg.pad_token_id, "attn_implementation": "sdpa"}
        self.language_model: Any = LlamaForCausalLM(LlamaConfig(**llama))
        self.value_head: OftCritic | None = None
        if cfg.add_value_head:
            self.value_head = OftCritic(cfg.llm_width, cfg.value_hidden, cfg.num_values)
        self.proprio_projector: ProprioProjector | None = None
        if cfg.use_proprio:
            self.proprio_projector = ProprioProjector(cfg.llm_width, cfg.proprio_dim)
        self.action_head: L1RegressionHead | None = None
        self.actor_logstd: nn.Parameter | None = None
        if cfg.action_head == "l1_regression":
            self.action_head = L1RegressionHead(cfg.llm_width, cfg.l1_width, cfg.action_dim, cfg.l1_blocks)
            self.actor_logstd = nn.Parameter(torch.full((cfg.action_dim,), float(cfg.logstd_init)),
                                             requires_grad=cfg.learn_std)
        self.gradient_checkpointing = False

    # ------------------------------------------------------------------ helpers
    @property
    def device(self) -> torch.device:
        return self.projector.fc1.weight.device

    def _dtype(self) -> torch.dtype:
        return self.projector.fc1.weight.dtype

    def embed_sequence(self, pixels: Tensor, tokens: Tensor, token_mask: Tensor,
                       proprio: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """-> (embeddings ``[B, S, D]``, valid ``[B, S]`` bool), ``S = P + L + T (+ 1)``.

        Order ``[BOS, patches of every image, (proprio token), prompt[1:], T zero placeholders, (STOP)]``
        (patches inserted after BOS as ``_build_multimodal_attention`` upstream; the proprio token appended
        to the patches as ``_process_proprio_features``; ``</s>`` last in the official layout).
        """
        cfg = self.cfg
        b, length = tokens.shape
        if token_mask.shape != (b, length):
            raise ValueError(f"token_mask {tuple(token_mask.shape)} does not match tokens {tuple(tokens.shape)}")
        if not bool(token_mask[:, 0].all()):
            raise ValueError("the first prompt token (BOS) must be valid in every row")
        emb = self.language_model.get_input_embeddings()(tokens)
        patches = self.projector(self.vision_backbone(pixels.to(self._dtype())))
        if patches.shape[1] != cfg.num_patches * cfg.num_images_in_input:
            raise ValueError(f"expected {cfg.num_patches * cfg.num_images_in_input} patches, got {patches.shape[1]}")
        prefix = [patches.to(emb.dtype)]
        if self.proprio_projector is not None:
            if proprio is None:
                raise ValueError("this model has a proprio projector: the inputs need a proprio [B, P] tensor")
            prefix.append(self.proprio_projector(proprio.to(emb.device)).to(emb.dtype))
        t = cfg.num_action_tokens
        parts = [emb[:, :1], *prefix, emb[:, 1:], emb.new_zeros(b, t, emb.shape[-1])]
        ones = token_mask.new_ones(b, 1)
        valid = [token_mask[:, :1], ones.expand(b, cfg.num_prefix_tokens), token_mask[:, 1:], ones.expand(b, t)]
        if cfg.has_stop_token:
            stop = torch.full((b, 1), cfg.stop_token_id, dtype=tokens.dtype, device=tokens.device)
            parts.append(self.language_model.get_input_embeddings()(stop))
            valid.append(ones)
        return torch.cat(parts, dim=1), torch.cat(valid, dim=1).bool()

    def _layer(self, layer: nn.Module, h: Tensor, **kwargs: Any) -> Tensor:
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(layer, h, use_reentrant=False, **kwargs)
        return layer(h, **kwargs)

    def action_outputs(self, pixels: Tensor, tokens: Tensor, token_mask: Tensor,
                       proprio: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One forward pass -> (bin logits ``[B, T, n_bins]`` float32, action hidden ``[B, T, D]``).

        ``hidden[:, j]`` is the final-norm output at the position that predicts action token ``j`` (the
        slot before it; the last prompt token for ``j = 0``); ``logits[:, j, k]`` scores id ``start + k``.
        The L1-regression head reads the same ``T`` positions (openvla-oft ``predict_action`` slices
        ``NUM_PATCHES + NUM_PROMPT_TOKENS : + ACTION_DIM * NUM_ACTIONS_CHUNK``).
        """
        cfg = self.cfg
        seq, valid = self.embed_sequence(pixels, tokens, token_mask, proprio)
        t = cfg.num_action_tokens
        position_ids = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
        allowed = attention_mask_2d(valid, t + int(cfg.has_stop_token), cfg.attention)
        fill = max(_MASK_VALUE, torch.finfo(seq.dtype).min)
        additive = torch.where(allowed[:, None], 0.0, fill).to(seq.dtype)  # [B, 1, S, S]
        lm = self.language_model.model
        cos_sin = lm.rotary_emb(seq, position_ids=position_ids)
        h = seq
        for layer in lm.layers:
            h = self._layer(layer, h, attention_mask=additive, position_embeddings=cos_sin,
                            position_ids=position_ids)
        h = lm.norm(h)
        first = 1 + cfg.num_prefix_tokens + tokens.shape[1] - 1  # index of the first action slot
        hidden = h[:, first - 1: first - 1 + t]
        if self.action_head is not None:  # the LM head is not used by the regression variant
            return hidden.new_zeros(0), hidden
        start = cfg.action_token_start
        head = self.language_model.lm_head
        weight = head.weight[start: start + cfg.n_action_bins]
        if hasattr(head, "lora_A"):  # a LoRA lm_head: add the update of the 256 action rows only
            weight = weight + (head.lora_B[start: start + cfg.n_action_bins] @ head.lora_A) * head.scaling
        logits = F.linear(hidden, weight).float()
        return logits, hidden

    def values_from_hidden(self, hidden: Tensor) -> Tensor:
        """Action hidden ``[B, T, D]`` -> values ``[B, num_values]`` float32 (zeros without a value head).

        RLinf's ``rlinf`` variant reads its critic at the last prompt token (``value_pooling: first``), and so
        does vlarl for both variants. RLinf's ``official`` variant reads ``last_hidden_states[:, -A*C - 1]`` of
        a sequence that ends with the STOP token and then the row's ``k`` pad tokens: the slot ``k + 1`` after
        the last prompt token, a position that moves with the prompt's length. vlarl does not reproduce that
        on purpose (a row's critic input would depend on how long its prompt is); the policy says so when it is
        built, and ``tests/conformance/rlinf_oft`` asserts both positions on RLinf's own code."""
        if self.value_head is None:
            return torch.zeros(hidden.shape[0], self.cfg.num_values, dtype=torch.float32, device=hidden.device)
        pooled = hidden.mean(dim=1) if self.cfg.value_pooling == "mean" else hidden[:, 0]
        return self.value_head(pooled)
