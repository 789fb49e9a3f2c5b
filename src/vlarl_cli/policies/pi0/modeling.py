"""The pi0 / pi0.5 network on transformers building blocks (facts: REFERENCE.md section 4).

Structure (openpi ``models_pytorch/pi0_pytorch.py`` + ``gemma_pytorch.py``, read for facts only)::

    prefix  = [SigLIP(image_k) -> projector]_k  ++  Gemma-embed(prompt) * sqrt(width)
    suffix  = pi0:  [state_proj(state)] ++ action_time_mlp(cat(action_in_proj(x_t), sincos(t)))
              pi05: action_in_proj(x_t), with the expert's RMSNorms modulated by time_mlp(sincos(t))
    per layer l: each stream (VLM on the prefix, expert on the suffix) has its own RMSNorms, q/k/v/o
    and MLP; their q/k/v are CONCATENATED along the sequence and attended jointly under the block mask
    velocity = action_out_proj(expert_out[:, -H:])

Block attention mask (big_vision ``make_att_2d_masks``): token i attends token j iff
``cumsum(ar)[j] <= cumsum(ar)[i]`` and both are valid. ``ar`` is 0 on the whole prefix (bidirectional),
1 on the pi0 state token (its own block), 1 on the first action token and 0 on the others (actions see
prefix + state + each other). Positions (RoPE) are ``cumsum(valid) - 1`` over prefix + suffix.

Because the prefix never attends to the suffix, the prefix keys/values of every layer do not depend on
the suffix: they are computed ONCE per observation (:meth:`Pi0Model.encode_prefix`) and reused by every
denoising step (:meth:`Pi0Model.expert_forward`), which runs only the expert. :meth:`Pi0Model.joint_forward`
is the uncached layer-by-layer joint pass (openpi's training forward); tests check both agree.

Embedding scale (the transformers 5.x trap, REFERENCE.md section 4): Gemma multiplies token embeddings
by ``sqrt(width)`` and PaliGemma must NOT divide image features by ``sqrt(width)`` (openpi's patched
4.53 does the former by hand and removes the latter). We hold a plain ``nn.Embedding`` and apply the
scale explicitly, so no library version can apply it twice.

pi0.5 adaptive RMSNorm (openpi's patched ``GemmaRMSNorm`` with ``cond_dim``): a ``dense`` layer maps
the time condition to (scale, shift, gate); ``y = norm(x) * (1 + scale) + shift`` and the residual
becomes ``x + gate * f(y)``. Parameter names ``*.input_layernorm.dense.*`` etc. as upstream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlarl_cli.policies.pi0.config import Pi0Config

__all__ = [
    "AdaptiveRMSNorm",
    "ExpertCache",
    "GemmaStack",
    "NoiseHead",
    "Pi0Model",
    "PrefixCache",
    "build_value_head",
    "make_att_2d_masks",
    "sinusoidal_time_embedding",
]

# Parameters openpi keeps in fp32 when the model runs in bf16 (gemma_pytorch.py params_to_keep_float32),
# in our names: by prefix, and by a name part (the Gemma norms of both stacks).
FP32_PREFIXES = ("vlm.vision_tower.embeddings.patch_embedding.", "vlm.vision_tower.embeddings.position_embedding.",
                 "vlm.language_model.norm.", "expert.norm.")
FP32_PARTS = (".input_layernorm.", ".post_attention_layernorm.")

# What computes in fp32 under openpi's JAX mixed precision (fp32 parameters, Pi0Config.dtype="bfloat16"):
# modules whose fp32 parameters JAX promotes against bf16 activations or that cast to fp32 themselves
# (siglip.py: the stem (conv + position embedding) "in float32", every nn.LayerNorm (its statistics, scale
# and bias in fp32, the output cast); gemma.py: RMSNorm scales, the Embedder table (x * sqrt(width) in
# fp32, then astype(embed_dtype)); pi0.py: the nnx.Linear projections). Everything else (attention and
# MLP kernels of both stacks and of SigLIP, the projector, the adaRMS dense layers) computes in bf16.
# Our RL heads (value / noise) compute in fp32 as well. Read by distributed/mixed_precision.py and fsdp.py.
JAX_FP32_PREFIXES = ("vlm.vision_tower.embeddings.", "vlm.vision_tower.post_layernorm.",
                     "vlm.language_model.embed_tokens.", "action_in_proj.", "action_out_proj.", "state_proj.",
                     "action_time_mlp_in.", "action_time_mlp_out.", "time_mlp_in.", "time_mlp_out.",
                     "value_head.", "noise_head.")
JAX_FP32_SUFFIXES = (".layer_norm1.weight", ".layer_norm1.bias", ".layer_norm2.weight", ".layer_norm2.bias",
                     "layernorm.weight", "norm.weight")

# openpi's additive mask value (pi0_pytorch._prepare_attention_masks_4d); finite so fully masked rows
# (padding queries) give a uniform softmax instead of NaN.
_MASK_VALUE = -2.3819763e38


def make_att_2d_masks(pad: Tensor, ar: Tensor) -> Tensor:
    """``pad [B, S]`` bool, ``ar [B, S]`` int -> ``[B, S, S]`` bool "query i may attend key j"."""
    cum = torch.cumsum(ar.long(), dim=1)
    att = cum[:, None, :] <= cum[:, :, None]
    return att & (pad[:, None, :] & pad[:, :, None])


def _additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """bool ``[B, Sq, Sk]`` -> additive float ``[B, 1, Sq, Sk]``."""
    fill = max(_MASK_VALUE, torch.finfo(dtype).min)  # fp16 cannot hold -2.4e38
    return torch.where(mask[:, None], 0.0, fill).to(dtype)


def sinusoidal_time_embedding(t: Tensor, dim: int, min_period: float, max_period: float) -> Tensor:
    """``t [B]`` -> ``[B, dim]`` float32 = [sin, cos] of ``t * 2 pi / period``, periods log-spaced.

    In float32, operation by operation as openpi's JAX ``posemb_sincos`` (pi0.py lines 47-63: ``linspace``
    as ``iota / (n - 1)``, ``1 / period * 2 * pi``). openpi's PyTorch port computes it in float64 on the CPU;
    the arguments reach ~1.6e3 (period 4e-3), where float32 rounding moves sin / cos by ~1e-4, so the two
    openpi implementations differ by that much and we follow JAX.
    """
    if t.dim() != 1:
        raise ValueError(f"time must be [B], got {tuple(t.shape)}")
    n = dim // 2
    fraction = torch.arange(n, dtype=torch.float32, device=t.device) / max(n - 1, 1)
    period = min_period * (max_period / min_period) ** fraction
    x = t.float()[:, None] * (1.0 / period * 2 * math.pi)[None, :]
    return torch.cat([torch.sin(x), torch.cos(x)], dim=1)


class AdaptiveRMSNorm(nn.Module):
    """pi0.5 adaRMSNorm: ``dense(cond) -> (scale, shift, gate)``; no ``weight`` parameter (as upstream).

    ``dense.weight`` starts at zero (openpi), so at init the norm is a plain unit-scale RMSNorm.
    """

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)
        if self.dense.weight.device.type != "meta":
            nn.init.zeros_(self.dense.weight)

    def forward(self, x: Tensor, cond: Tensor) -> tuple[Tensor, Tensor]:
        """``x [B, S, D]``, ``cond [B, cond_dim]`` -> (``y [B, S, D]``, ``gate [B, 1, D]``)."""
        var = x.float().pow(2).mean(-1, keepdim=True)
        normed = x * torch.rsqrt(var + self.eps)
        # the condition is cast to the dense layer's dtype: fp32 in openpi's PyTorch port under bf16, the
        # compute dtype in JAX (gemma.py RMSNorm: nn.Dense(dtype=x.dtype)); (1 + scale) is formed in that
        # dtype too, then promoted against the fp32 normalised input (JAX gemma.py lines 128-131)
        mod = self.dense(cond.to(self.dense.weight.dtype))[:, None, :]
        scale, shift, gate = mod.chunk(3, dim=-1)
        y = normed * (1 + scale).float() + shift.float()
        return y.to(x.dtype), gate.to(x.dtype)


def _norm(module: nn.Module, x: Tensor, cond: Tensor | None) -> tuple[Tensor, Tensor | None]:
    if isinstance(module, AdaptiveRMSNorm):
        if cond is None:
            raise ValueError("adaptive RMSNorm needs a time condition")
        return module(x, cond)
    return module(x), None


def _residual(x: Tensor, y: Tensor, gate: Tensor | None) -> Tensor:
    return x + y if gate is None else x + y * gate


class GemmaStack(nn.Module):
    """A Gemma decoder stack built from transformers' ``GemmaDecoderLayer`` / ``GemmaRMSNorm``.

    Only the parameters are used through transformers' modules; the forward pass is driven by
    :class:`Pi0Model` (joint attention across stacks). ``adaptive_cond_dim`` swaps every RMSNorm for
    :class:`AdaptiveRMSNorm` (pi0.5 expert); ``vocab_size`` adds a token embedding (the VLM).
    """

    def __init__(self, width: int, depth: int, mlp: int, cfg: Pi0Config, *, vocab_size: int | None = None,
                 adaptive_cond_dim: int | None = None) -> None:
        super().__init__()
        from transformers import GemmaConfig
        from transformers.models.gemma.modeling_gemma import GemmaDecoderLayer, GemmaRMSNorm

        kwargs: dict[str, Any] = {
            "hidden_size": width, "intermediate_size": mlp, "num_hidden_layers": depth,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
            "vocab_size": cfg.vocab_size, "rms_norm_eps": cfg.rms_norm_eps,
            "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False}
        gcfg = GemmaConfig(**kwargs)
        self.width = width
        self.embed_tokens = nn.Embedding(vocab_size, width) if vocab_size else None
        self.layers = nn.ModuleList([GemmaDecoderLayer(gcfg, i) for i in range(depth)])
        if adaptive_cond_dim is not None:
            for layer in self.layers:
                layer.input_layernorm = AdaptiveRMSNorm(width, adaptive_cond_dim, cfg.rms_norm_eps)
                layer.post_attention_layernorm = AdaptiveRMSNorm(width, adaptive_cond_dim, cfg.rms_norm_eps)
            self.norm: nn.Module = AdaptiveRMSNorm(width, adaptive_cond_dim, cfg.rms_norm_eps)
        else:
            self.norm = GemmaRMSNorm(width, eps=cfg.rms_norm_eps)


class _Projector(nn.Module):
    """PaliGemma's multi-modal projector (one linear layer, key ``multi_modal_projector.linear``)."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)


class PaliGemmaPrefix(nn.Module):
    """SigLIP vision tower + linear projector + Gemma language model (the VLM)."""

    def __init__(self, cfg: Pi0Config) -> None:
        super().__init__()
        from transformers import SiglipVisionConfig, SiglipVisionModel

        vcfg = SiglipVisionConfig(hidden_size=cfg.vision_width, intermediate_size=cfg.vision_mlp,
                                  num_hidden_layers=cfg.vision_depth, num_attention_heads=cfg.vision_heads,
                                  image_size=cfg.image_size, patch_size=cfg.patch_size, num_channels=3,
                                  hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, vision_use_head=False)
        vcfg._attn_implementation = "sdpa"
        self.vision_tower = SiglipVisionModel(vcfg)
        self.multi_modal_projector = _Projector(cfg.vision_width, cfg.vlm_width)
        self.language_model = GemmaStack(cfg.vlm_width, cfg.vlm_depth, cfg.vlm_mlp, cfg,
                                         vocab_size=cfg.vocab_size)


class NoiseHead(nn.Module):
    """flow_noise: expert token features ``[B, H, W]`` -> raw log-variance ``[B, H, D]`` (ReinFlow).

    Tanh MLP as RLinf's ExploreNoiseNet; the shared sampler squashes the output into the std range.
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        w = in_dim
        for h in hidden:
            layers += [nn.Linear(w, h), nn.Tanh()]
            w = h
        layers.append(nn.Linear(w, out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, features: Tensor) -> Tensor:
        first: Any = self.net[0]
        return self.net(features.to(first.weight.dtype))


@dataclass
class PrefixCache:
    """Per-observation prefix state reused by every denoising step.

    ``keys`` / ``values``: per layer ``[B, kv_heads, P, head_dim]`` (RoPE applied); ``pad`` ``[B, P]``;
    ``hidden``: final-normed VLM output ``[B, P, vlm_width]`` (for the value head after the VLM).
    """

    keys: list[Tensor]
    values: list[Tensor]
    pad: Tensor
    hidden: Tensor


@dataclass
class ExpertCache:
    """Suffix-side constants of one observation: mask and positions for the cached expert pass."""

    prefix: PrefixCache
    mask: Tensor  # additive [B, 1, S_suffix, P + S_suffix]
    positions: Tensor  # [B, S_suffix]


class Pi0Model(nn.Module):
    """pi0 / pi0.5 network: prefix encoding, cached or joint expert pass, velocity."""

    def __init__(self, cfg: Pi0Config) -> None:
        super().__init__()
        self.cfg = cfg
        we = cfg.expert_width
        self.vlm = PaliGemmaPrefix(cfg)
        self.expert = GemmaStack(we, cfg.vlm_depth, cfg.expert_mlp, cfg,
                                 adaptive_cond_dim=we if cfg.is_pi05 else None)
        self.action_in_proj = nn.Linear(cfg.max_action_dim, we)
        self.action_out_proj = nn.Linear(we, cfg.max_action_dim)
        if cfg.is_pi05:
            self.time_mlp_in = nn.Linear(we, we)
            self.time_mlp_out = nn.Linear(we, we)
        else:
            self.state_proj = nn.Linear(cfg.max_state_dim, we)
            self.action_time_mlp_in = nn.Linear(2 * we, we)
            self.action_time_mlp_out = nn.Linear(we, we)
        self.value_head: nn.Module | None = None
        if cfg.add_value_head:
            self.value_head = build_value_head(cfg)
        self.noise_head = (NoiseHead(we, cfg.max_action_dim, cfg.noise_hidden)
                           if cfg.noise_method == "flow_noise" else None)
        #: recompute each joint layer in backward (saves activation memory when training the VLM)
        self.gradient_checkpointing = False

    # ------------------------------------------------------------------ helpers
    def set_precision(self, dtype: torch.dtype) -> Self:
        """Cast to ``dtype``; under bf16 / fp16 keep what openpi keeps in fp32 (``gemma_pytorch.py``
        ``to_bfloat16_for_selected_params``): SigLIP's patch and position embeddings and every Gemma RMSNorm
        (input / post-attention / final, the pi0.5 adaRMS ``dense`` layers included)."""
        self.to(dtype=dtype)
        if dtype in (torch.bfloat16, torch.float16):
            for name, p in self.named_parameters():
                if name.startswith(FP32_PREFIXES) or any(part in name for part in FP32_PARTS):
                    p.data = p.data.float()
        return self

    @staticmethod
    def mixed_precision_fp32(name: str) -> bool:
        """True for a parameter that stays fp32 in compute under JAX's mixed precision (see
        ``JAX_FP32_PREFIXES``); the adaRMS ``.dense.`` layers are not among them."""
        return name.startswith(JAX_FP32_PREFIXES) or (name.endswith(JAX_FP32_SUFFIXES) and ".dense." not in name)

    @property
    def suffix_len(self) -> int:
        return self.cfg.action_horizon + (0 if self.cfg.is_pi05 else 1)

    def _dtype(self) -> torch.dtype:
        """The compute dtype of the Gemma streams: the dtype their projections run in at call time (fp32;
        bf16 after :meth:`set_precision`; bf16 under a mixed-precision policy whose fp32 master weights are
        cast for compute, :mod:`vlarl_cli.distributed.mixed_precision`, as in JAX's ``dtype="bfloat16"``)."""
        layer: Any = self.expert.layers[0]
        return layer.self_attn.q_proj.weight.dtype

    def _rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """positions ``[B, S]`` -> cos, sin ``[B, S, head_dim]`` (Gemma default RoPE, float32 math)."""
        # inverse frequencies rebuilt in float32 on every call (a buffer would be cast by .to(bf16))
        hd = self.cfg.head_dim
        exponent = torch.arange(0, hd, 2, dtype=torch.int64, device=positions.device).float() / hd
        inv_freq = 1.0 / (self.cfg.rope_theta ** exponent)
        freqs = positions.float()[..., None] * inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    # ------------------------------------------------------------------ embeddings
    def embed_images(self, images: Tensor) -> Tensor:
        """``images [N, 3, H, W]`` in [-1, 1] -> ``[N, tokens_per_image, vlm_width]``.

        SigLIP's steps one by one so that, under bf16, the patch / position embeddings run in fp32 (their
        parameters stay fp32, :meth:`set_precision`) and the encoder gets their sum cast to its own dtype,
        as openpi's patched ``SiglipVisionTransformer.forward`` does.
        """
        tower = self.vlm.vision_tower
        emb = tower.embeddings(images.to(tower.embeddings.patch_embedding.weight.dtype))
        hidden = tower.encoder(inputs_embeds=emb.to(self._dtype())).last_hidden_state
        return self.vlm.multi_modal_projector.linear(tower.post_layernorm(hidden))

    def embed_prefix(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor
                     ) -> tuple[Tensor, Tensor]:
        """Prefix embeddings and validity.

        Args:
            images: ``[B, N, 3, H, W]`` float in [-1, 1] (N camera slots).
            image_masks: ``[B, N]`` bool, False for a missing camera (its tokens are masked out).
            tokens: ``[B, L]`` long prompt ids; token_mask: ``[B, L]`` bool.
        Returns:
            ``(embs [B, P, vlm_width], pad [B, P] bool)`` with ``P = N_used * tokens_per_image + L``.
            With ``camera_slots == 2``, slots masked for the WHOLE batch are skipped: their tokens are
            invalid, attended by no valid token and do not advance positions, so dropping them changes no
            valid output. With 3 (openpi's layout) every slot is kept, as openpi does: then even the
            outputs of padded prompt rows (which attend uniformly to every key) are openpi's.
        """
        b, n = images.shape[:2]
        if image_masks.shape != (b, n):
            raise ValueError(f"image_masks must be [B={b}, N={n}], got {tuple(image_masks.shape)}")
        keep_all = self.cfg.camera_slots > 2
        used = [k for k in range(n) if keep_all or bool(image_masks[:, k].any())]
        embs: list[Tensor] = []
        pads: list[Tensor] = []
        if used:
            flat = images[:, used].flatten(0, 1)
            img = self.embed_images(flat).unflatten(0, (b, len(used)))  # [B, n_used, T, W]
            t = img.shape[2]
            embs.append(img.flatten(1, 2))
            pads.append(image_masks[:, used, None].expand(b, len(used), t).flatten(1, 2))
        lm = self.vlm.language_model
        assert lm.embed_tokens is not None
        lang = lm.embed_tokens(tokens)
        # scaled in the table's dtype, then cast to the compute dtype (JAX gemma.py Embedder.encode and
        # Module.embed: fp32 table, x * sqrt(width), astype(embed_dtype))
        embs.append((lang * math.sqrt(lang.shape[-1])).to(self._dtype()))
        pads.append(token_mask.bool())
        return torch.cat([e.to(self._dtype()) for e in embs], dim=1), torch.cat(pads, dim=1)

    def embed_suffix(self, state: Tensor | None, x_t: Tensor, t: Tensor
                     ) -> tuple[Tensor, Tensor, Tensor | None]:
        """``(embs [B, S_suffix, We], ar [S_suffix] long, adarms_cond [B, We] | None)``."""
        # The projections run in their own weights' dtype: fp32 in JAX's mixed precision (nnx.Linear with
        # fp32 parameters promotes, pi0.py embed_suffix), bf16 in openpi's PyTorch port under bf16; the
        # suffix enters the Gemma stack in the compute dtype (gemma.py Module.__call__ astype(embed_dtype))
        time_emb = sinusoidal_time_embedding(t, self.cfg.expert_width, self.cfg.min_period, self.cfg.max_period)
        action_emb = _linear(self.action_in_proj, x_t)
        h = self.cfg.action_horizon
        if self.cfg.is_pi05:
            cond = F.silu(_linear(self.time_mlp_out, F.silu(_linear(self.time_mlp_in, time_emb))))
            ar = torch.zeros(h, dtype=torch.long, device=x_t.device)
            ar[0] = 1
            return action_emb.to(self._dtype()), ar, cond
        if state is None:
            raise ValueError("pi0 needs the (normalised, padded) state")
        state_emb = _linear(self.state_proj, state)[:, None, :]
        te = time_emb.to(action_emb.dtype)[:, None, :].expand_as(action_emb)
        hidden = F.silu(_linear(self.action_time_mlp_in, torch.cat([action_emb, te], dim=2)))
        at = _linear(self.action_time_mlp_out, hidden)
        ar = torch.zeros(h + 1, dtype=torch.long, device=x_t.device)
        ar[:2] = 1  # state: own block; first action token opens the action block
        return torch.cat([state_emb.to(at.dtype), at], dim=1).to(self._dtype()), ar, None

    # ------------------------------------------------------------------ the layer loop
    def _run_layers(self, streams: list[Tensor | None], conds: list[Tensor | None], positions: Tensor,
                    mask: Tensor, past: PrefixCache | None = None, keep_kv: bool = False
                    ) -> tuple[list[Tensor | None], list[Tensor], list[Tensor]]:
        """Run all layers on the active streams ([vlm_stream, expert_stream], None = absent).

        ``positions [B, S_active]``; ``mask`` additive ``[B, 1, S_active, S_past + S_active]``;
        ``past`` supplies prefix keys/values in front of the active ones. Returns the final-normed
        stream outputs and (if ``keep_kv``) per-layer keys/values of the active tokens.
        """
        stacks = [self.vlm.language_model, self.expert]
        cos, sin = self._rope(positions, torch.float32)
        cos, sin = cos[:, None], sin[:, None]
        hs = list(streams)
        keys_out: list[Tensor] = []
        values_out: list[Tensor] = []
        use_ckpt = self.gradient_checkpointing and torch.is_grad_enabled()
        for li in range(self.cfg.vlm_depth):
            past_kv = None if past is None else (past.keys[li], past.values[li])
            if use_ckpt:
                from torch.utils.checkpoint import checkpoint

                hs, k, v = checkpoint(self._layer, li, hs, conds, cos, sin, mask, past_kv, use_reentrant=False)
            else:
                hs, k, v = self._layer(li, hs, conds, cos, sin, mask, past_kv)
            if keep_kv:
                keys_out.append(k)
                values_out.append(v)
        outs: list[Tensor | None] = []
        for i, h in enumerate(hs):
            outs.append(None if h is None else _norm(stacks[i].norm, h, conds[i])[0])
        return outs, keys_out, values_out

    def _layer(self, li: int, hs: list[Tensor | None], conds: list[Tensor | None], cos: Tensor, sin: Tensor,
               mask: Tensor, past_kv: tuple[Tensor, Tensor] | None
               ) -> tuple[list[Tensor | None], Tensor, Tensor]:
        """One joint layer: per-stream norms and q/k/v, ONE attention over the concatenated streams (plus
        cached prefix keys/values), per-stream o_proj, residuals and MLP. Returns (streams, k, v) with
        k / v of the active tokens (RoPE applied)."""
        stacks = [self.vlm.language_model, self.expert]
        cfg = self.cfg
        hd = cfg.head_dim
        layer: Any
        qs, ks, vs, lens = [], [], [], []
        gates: list[Tensor | None] = []
        for i, h in enumerate(hs):
            if h is None:
                gates.append(None)
                continue
            layer = stacks[i].layers[li]
            x, g = _norm(layer.input_layernorm, h, conds[i])
            gates.append(g)
            b, s, _ = x.shape
            attn = layer.self_attn
            qs.append(attn.q_proj(x).view(b, s, -1, hd).transpose(1, 2))
            ks.append(attn.k_proj(x).view(b, s, -1, hd).transpose(1, 2))
            vs.append(attn.v_proj(x).view(b, s, -1, hd).transpose(1, 2))
            lens.append(s)
        q, k_new, v_new = torch.cat(qs, 2), torch.cat(ks, 2), torch.cat(vs, 2)
        # RoPE (rotate-half form, as transformers' Gemma)
        # RoPE computed in float32 and cast back (JAX gemma.py _apply_rope, lines 424-440); openpi's PyTorch
        # port multiplies in the compute dtype (cos / sin cast to bf16): the same in fp32
        q = (q.float() * cos + _rotate_half(q).float() * sin).to(q.dtype)
        k_new = (k_new.float() * cos + _rotate_half(k_new).float() * sin).to(k_new.dtype)
        k, v = k_new, v_new
        if past_kv is not None:
            k = torch.cat([past_kv[0].to(k.dtype), k], 2)
            v = torch.cat([past_kv[1].to(v.dtype), v], 2)
        att = self._attend(q, k, v, mask)
        out_hs: list[Tensor | None] = list(hs)
        start = 0
        j = 0
        for i, h in enumerate(hs):
            if h is None:
                continue
            layer = stacks[i].layers[li]
            end = start + lens[j]
            out = layer.self_attn.o_proj(att[:, start:end].to(h.dtype))
            out = _residual(h, out, gates[i])
            y, g2 = _norm(layer.post_attention_layernorm, out, conds[i])
            out_hs[i] = _residual(out, layer.mlp(y), g2)
            start = end
            j += 1
        return out_hs, k_new, v_new

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """Scaled dot-product attention of the joint streams' queries over keys / values (prefix cache
        included): (batch, heads, tokens, head_dim) in, (batch, tokens, heads * head_dim) out."""
        cfg = self.cfg
        hd = cfg.head_dim
        gqa = cfg.num_heads != cfg.num_kv_heads
        if gqa and q.is_cuda and q.dtype == torch.float32:
            # on CUDA, grouped-query SDPA in fp32 runs the math kernel, which keeps the attention scores for the
            # backward (an H200 kept 2.6x the planned activations, docs/gpu); keys / values expanded to the query
            # heads (as transformers' repeat_kv) run the memory-efficient kernel: the same attention. In bf16
            # cuDNN's kernel takes grouped queries with the mask as they are (measured there too).
            k = k.repeat_interleave(cfg.num_heads // cfg.num_kv_heads, dim=1)
            v = v.repeat_interleave(cfg.num_heads // cfg.num_kv_heads, dim=1)
            gqa = False
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), scale=hd**-0.5, enable_gqa=gqa)
        return att.transpose(1, 2).reshape(att.shape[0], -1, cfg.num_heads * hd)

    # ------------------------------------------------------------------ public passes
    def encode_prefix(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor
                      ) -> PrefixCache:
        """Run the VLM once on the prefix and keep every layer's keys/values."""
        embs, pad = self.embed_prefix(images, image_masks, tokens, token_mask)
        ar = torch.zeros_like(pad, dtype=torch.long)
        mask = _additive(make_att_2d_masks(pad, ar), embs.dtype)
        positions = torch.cumsum(pad.long(), dim=1) - 1
        outs, keys, values = self._run_layers([embs, None], [None, None], positions, mask, keep_kv=True)
        assert outs[0] is not None
        return PrefixCache(keys, values, pad, outs[0])

    def expert_cache(self, prefix: PrefixCache) -> ExpertCache:
        """Mask and positions of the suffix, constant across denoising steps."""
        b, p = prefix.pad.shape
        s = self.suffix_len
        dev = prefix.pad.device
        ar = torch.zeros(s, dtype=torch.long, device=dev)
        ar[: 1 if self.cfg.is_pi05 else 2] = 1
        suffix_pad = torch.ones(b, s, dtype=torch.bool, device=dev)
        suffix_att = make_att_2d_masks(suffix_pad, ar[None].expand(b, s))
        full = torch.cat([prefix.pad[:, None, :].expand(b, s, p), suffix_att], dim=2)
        positions = prefix.pad.long().sum(-1, keepdim=True) + torch.cumsum(suffix_pad.long(), dim=1) - 1
        return ExpertCache(prefix, _additive(full, self._dtype()), positions)

    def expert_forward(self, cache: ExpertCache, state: Tensor | None, x_t: Tensor, t: Tensor) -> Tensor:
        """Cached path: expert output for the action tokens ``[B, H, We]`` at noisy actions ``x_t``."""
        embs, _, cond = self.embed_suffix(state, x_t, t)
        outs, _, _ = self._run_layers([None, embs], [None, cond], cache.positions, cache.mask,
                                      past=cache.prefix)
        assert outs[1] is not None
        return outs[1][:, -self.cfg.action_horizon:]

    def joint_forward(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor,
                      state: Tensor | None, x_t: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """Uncached path (prefix and suffix in one layer-by-layer pass).

        Returns ``(prefix_out [B, P, Wv], action_out [B, H, We])``.
        """
        pre, pad = self.embed_prefix(images, image_masks, tokens, token_mask)
        suf, ar_s, cond = self.embed_suffix(state, x_t, t)
        b, s = suf.shape[:2]
        full_pad = torch.cat([pad, torch.ones(b, s, dtype=torch.bool, device=pad.device)], dim=1)
        ar = torch.cat([torch.zeros_like(pad, dtype=torch.long), ar_s[None].expand(b, s)], dim=1)
        mask = _additive(make_att_2d_masks(full_pad, ar), pre.dtype)
        positions = torch.cumsum(full_pad.long(), dim=1) - 1
        outs, _, _ = self._run_layers([pre, suf], [None, cond], positions, mask)
        assert outs[0] is not None and outs[1] is not None
        return outs[0], outs[1][:, -self.cfg.action_horizon:]

    def velocity_from_features(self, action_out: Tensor) -> Tensor:
        """Expert action-token output ``[B, H, We]`` -> velocity ``[B, H, max_action_dim]`` (float32)."""
        return _linear(self.action_out_proj, action_out).float()

    # ------------------------------------------------------------------ value
    def prefix_value(self, prefix_hidden: Tensor, pad: Tensor) -> Tensor:
        """Value from the mean VLM prefix output (``value_after_vlm``) -> ``[B]``.

        ``value_pooling="rlinf"``: the mean over the first two camera slots and EVERY prompt slot, padded
        ones included (RLinf's ``get_value_from_vlm`` "mean_token", ``num_images_in_input = 2``); exact
        with ``camera_slots = 3`` (see :meth:`embed_prefix`); ``"valid"``: only the tokens of the pad mask.
        """
        assert self.value_head is not None
        if self.cfg.detach_critic_input:
            prefix_hidden = prefix_hidden.detach()
        if self.cfg.value_pooling == "rlinf":
            if self.cfg.camera_slots > 2:  # RLinf's mask: the first 2 camera slots and every prompt slot
                t = self.cfg.tokens_per_image
                prefix_hidden = torch.cat([prefix_hidden[:, : 2 * t], prefix_hidden[:, self.cfg.camera_slots * t:]], 1)
            return self.value_head(prefix_hidden.float().mean(dim=1))
        w = pad.to(prefix_hidden.dtype)[..., None]
        pooled = (prefix_hidden * w).sum(1) / w.sum(1).clamp(min=1.0)
        return self.value_head(pooled.float())

    def expert_value(self, action_out: Tensor) -> Tensor:
        """Value from the mean action-token expert output (pi0 style) -> ``[B]``."""
        assert self.value_head is not None
        if self.cfg.detach_critic_input:
            action_out = action_out.detach()
        return self.value_head(action_out.float().mean(dim=1))

    # ------------------------------------------------------------------ plain inference
    @torch.no_grad()
    def sample_actions(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor,
                       state: Tensor | None, noise: Tensor, num_steps: int = 10) -> Tensor:
        """openpi's Euler ODE sampling, prefix cached: ``[B, H, max_action_dim]``.

        Time as openpi keeps it (JAX pi0.py sample_actions, lines 228 and 271-278; the PyTorch port alike):
        ``t = 1``, then ``t += dt`` in float32 with ``dt = -1/K`` while ``t >= -dt / 2``, so the grid drifts
        from ``1 - i/K`` by float32 rounding (~1e-7 for K = 10). The RL sampler
        (:mod:`vlarl_cli.policies.flow_matching`) uses RLinf's ``linspace(1, 1/K, K)`` grid instead.
        """
        cache = self.expert_cache(self.encode_prefix(images, image_masks, tokens, token_mask))
        x = noise.float()
        b = x.shape[0]
        dt = -1.0 / num_steps
        t = torch.ones((), dtype=torch.float32, device=x.device)
        while bool(t >= -dt / 2):
            v = self.velocity_from_features(self.expert_forward(cache, state, x, t.expand(b)))
            x = x + dt * v
            t = t + dt
        return x

    def num_parameters(self) -> int:
        """Live parameters (each tensor once; the tied LM head does not exist here)."""
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        return f"variant={self.cfg.variant}"


def build_value_head(cfg: Pi0Config) -> nn.Module:
    """The critic: RLinf's MLP on the VLM width (``value_after_vlm``) or the expert width (pi0 style)."""
    from vlarl_cli.policies.value_head import build_mlp_critic

    width = cfg.vlm_width if cfg.value_after_vlm else cfg.expert_width
    return build_mlp_critic(width, cfg.value_hidden, cfg.value_activation, cfg.value_init)


def _linear(layer: nn.Module, x: Tensor) -> Tensor:
    """``layer(x)`` with ``x`` cast to the layer's weight dtype (JAX's promotion for an fp32 head on a bf16
    input; a cast down for openpi's PyTorch port, whose heads are bf16 under bf16)."""
    weight: Any = layer.weight
    return layer(x.to(weight.dtype))


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
