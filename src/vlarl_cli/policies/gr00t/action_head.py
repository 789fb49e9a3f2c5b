"""GR00T flow-matching action head: per-embodiment MLPs, VL self-attention, DiT / AlternateVL-DiT.

Attribute names mirror Isaac-GR00T so state-dict keys match upstream checkpoints one to one
(``gr00t/model/action_head/flow_matching_action_head.py``, ``cross_attention_dit.py``,
``gr00t/model/modules/dit.py``; attention / feed-forward parameter names follow diffusers'
``Attention`` (``to_q``, ``to_k``, ``to_v``, ``to_out.0``) and ``FeedForward`` (``net.0.proj``,
``net.2``)). Written from those architecture facts, not copied.

Shapes: ``B`` batch, ``T`` DiT tokens (1 state + F future + H action), ``S`` VL tokens, ``H`` horizon.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from vlarl_cli.policies.gr00t.config import Gr00tConfig

__all__ = [
    "ActionHead",
    "BasicTransformerBlock",
    "CategorySpecificLinear",
    "CategorySpecificMLP",
    "DiT",
    "MultiEmbodimentActionEncoder",
    "SelfAttentionTransformer",
]


class CategorySpecificLinear(nn.Module):
    """One linear layer per embodiment slot: ``W`` [C, in, out], ``b`` [C, out]."""

    def __init__(self, num_categories: int, input_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.W = nn.Parameter(0.02 * torch.randn(num_categories, input_dim, hidden_dim))
        self.b = nn.Parameter(torch.zeros(num_categories, hidden_dim))

    def forward(self, x: Tensor, cat_ids: Tensor) -> Tensor:
        """``x`` [B, T, in], ``cat_ids`` [B] long -> [B, T, out]."""
        return torch.bmm(x, self.W[cat_ids]) + self.b[cat_ids].unsqueeze(1)


class CategorySpecificMLP(nn.Module):
    """``layer2(relu(layer1(x)))`` with per-embodiment weights (state encoder, action decoder)."""

    def __init__(self, num_categories: int, input_dim: int, hidden_dim: int, output_dim: int) -> None:
        super().__init__()
        self.layer1 = CategorySpecificLinear(num_categories, input_dim, hidden_dim)
        self.layer2 = CategorySpecificLinear(num_categories, hidden_dim, output_dim)

    def forward(self, x: Tensor, cat_ids: Tensor) -> Tensor:
        return self.layer2(F.relu(self.layer1(x, cat_ids)), cat_ids)


def sinusoidal_encoding(timesteps: Tensor, dim: int) -> Tensor:
    """GR00T action-encoder encoding: ``[sin(t w_k), cos(t w_k)]``, ``w_k = 10000^(-k / (dim/2))``.

    ``timesteps`` [B, T] -> [B, T, dim] float32 (``action_encoder.SinusoidalPositionalEncoding``).
    """
    half = dim // 2
    freqs = torch.exp(-torch.arange(half, dtype=torch.float32, device=timesteps.device)
                      * (math.log(10000.0) / half))
    angles = timesteps.float().unsqueeze(-1) * freqs
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


class MultiEmbodimentActionEncoder(nn.Module):
    """``W3(swish(W2([W1(a), enc(tau)])))`` with per-embodiment weights; ``a`` [B, H, A] -> [B, H, w]."""

    def __init__(self, action_dim: int, hidden_size: int, num_embodiments: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.W1 = CategorySpecificLinear(num_embodiments, action_dim, hidden_size)
        self.W2 = CategorySpecificLinear(num_embodiments, 2 * hidden_size, hidden_size)
        self.W3 = CategorySpecificLinear(num_embodiments, hidden_size, hidden_size)

    def forward(self, actions: Tensor, timesteps: Tensor, cat_ids: Tensor) -> Tensor:
        """``actions`` [B, H, A], ``timesteps`` [B] (bucket index), ``cat_ids`` [B]."""
        b, h, _ = actions.shape
        a_emb = self.W1(actions, cat_ids)
        tau = sinusoidal_encoding(timesteps.unsqueeze(1).expand(b, h), self.hidden_size).to(a_emb.dtype)
        x = self.W2(torch.cat([a_emb, tau], dim=-1), cat_ids)
        return self.W3(x * torch.sigmoid(x), cat_ids)


def timestep_features(timesteps: Tensor, channels: int = 256) -> Tensor:
    """diffusers ``Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1)``: ``[cos, sin]`` of
    ``t * exp(-ln(10000) k / (channels/2 - 1))``; ``timesteps`` [B] -> [B, channels] float32."""
    half = channels // 2
    exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / (half - 1)
    angles = timesteps.float()[:, None] * torch.exp(exponent)[None]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class TimestepEmbedding(nn.Module):
    """diffusers ``TimestepEmbedding``: ``linear_2(silu(linear_1(x)))``."""

    def __init__(self, in_channels: int, dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimestepEncoder(nn.Module):
    """Discrete timestep bucket [B] -> conditioning vector [B, dim]."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.timestep_embedder = TimestepEmbedding(256, dim)

    def forward(self, timesteps: Tensor) -> Tensor:
        dtype = self.timestep_embedder.linear_1.weight.dtype
        return self.timestep_embedder(timestep_features(timesteps).to(dtype))


class AdaLayerNorm(nn.Module):
    """``LayerNorm(x) * (1 + scale) + shift`` with ``scale, shift = linear(silu(temb))`` (GR00T DiT)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, 2 * dim)
        self.norm = nn.LayerNorm(dim, eps=eps, elementwise_affine=False)

    def forward(self, x: Tensor, temb: Tensor) -> Tensor:
        scale, shift = self.linear(F.silu(temb)).chunk(2, dim=1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class Attention(nn.Module):
    """Multi-head (cross-)attention with diffusers' parameter names; dropout only on the output."""

    def __init__(self, query_dim: int, heads: int, dim_head: int, dropout: float,
                 cross_attention_dim: int | None = None, bias: bool = True) -> None:
        super().__init__()
        inner = heads * dim_head
        kv_dim = cross_attention_dim or query_dim
        self.heads = heads
        self.to_q = nn.Linear(query_dim, inner, bias=bias)
        self.to_k = nn.Linear(kv_dim, inner, bias=bias)
        self.to_v = nn.Linear(kv_dim, inner, bias=bias)
        self.to_out = nn.ModuleList([nn.Linear(inner, query_dim, bias=True), nn.Dropout(dropout)])

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """``x`` [B, T, d]; ``context`` [B, S, d_kv] (None: self-attention); ``mask`` [B, S] bool."""
        ctx = x if context is None else context
        b, t, _ = x.shape

        def split(y: Tensor) -> Tensor:
            return y.view(b, y.shape[1], self.heads, -1).transpose(1, 2)

        q, k, v = split(self.to_q(x)), split(self.to_k(ctx)), split(self.to_v(ctx))
        attn_mask = None if mask is None else mask[:, None, None, :].to(torch.bool)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        out = out.transpose(1, 2).reshape(b, t, -1)
        for layer in self.to_out:
            out = layer(out)
        return out


class GELUProj(nn.Module):
    """diffusers ``GELU(approximate="tanh")`` activation with its input projection ``proj``."""

    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    """diffusers ``FeedForward(activation_fn="gelu-approximate", final_dropout=True)``, inner 4x."""

    def __init__(self, dim: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.ModuleList([GELUProj(dim, 4 * dim), nn.Dropout(dropout), nn.Linear(4 * dim, dim),
                                  nn.Dropout(dropout)])

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.net:
            x = layer(x)
        return x


class BasicTransformerBlock(nn.Module):
    """Pre-norm block: ``x + drop(attn(norm1(x)))`` then ``x + ff(norm3(x))``.

    ``ada_norm=True`` (DiT): norm1 is :class:`AdaLayerNorm` on the timestep and norm3 has no affine;
    else (VL self-attention) both are affine LayerNorms. ``cross_attention_dim`` set -> the attention
    reads the VL tokens.
    """

    def __init__(self, dim: int, heads: int, dim_head: int, dropout: float, *, ada_norm: bool,
                 cross_attention_dim: int | None = None) -> None:
        super().__init__()
        self.ada_norm = ada_norm
        self.is_cross = cross_attention_dim is not None
        self.norm1: nn.Module = AdaLayerNorm(dim) if ada_norm else nn.LayerNorm(dim, eps=1e-5)
        self.attn1 = Attention(dim, heads, dim_head, dropout, cross_attention_dim)
        self.norm3 = nn.LayerNorm(dim, eps=1e-5, elementwise_affine=not ada_norm)
        self.ff = FeedForward(dim, dropout)
        self.final_dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, temb: Tensor | None = None, context: Tensor | None = None,
                mask: Tensor | None = None) -> Tensor:
        h = self.norm1(x, temb) if self.ada_norm else self.norm1(x)
        x = x + self.final_dropout(self.attn1(h, context, mask))
        return x + self.ff(self.norm3(x))


class DiT(nn.Module):
    """Timestep-conditioned transformer over the state/action tokens.

    Even blocks cross-attend to the VL tokens, odd blocks self-attend (``interleave_self_attention``).
    With ``alternate_vl=True`` (N1.6 ``AlternateVLDiT``) the cross-attention blocks alternate between
    non-image tokens (block index divisible by ``2 * attend_text_every_n_blocks``) and image tokens.
    Output: ``proj_out_2(norm_out(x) * (1 + scale) + shift)`` with ``shift, scale`` from ``temb``.
    """

    def __init__(self, cfg: Gr00tConfig) -> None:
        super().__init__()
        dim = cfg.input_embedding_dim
        self.alternate_vl = cfg.alternate_vl_dit
        self.attend_text_every_n_blocks = cfg.attend_text_every_n_blocks
        self.gradient_checkpointing = False  # recompute each block in backward (ModelSettings.gradient_checkpointing)
        self.timestep_encoder = TimestepEncoder(dim)
        self.transformer_blocks = nn.ModuleList([
            BasicTransformerBlock(dim, cfg.dit_num_heads, cfg.dit_head_dim, cfg.dropout, ada_norm=True,
                                  cross_attention_dim=None if i % 2 == 1 else cfg.backbone_embedding_dim)
            for i in range(cfg.dit_num_layers)])
        self.norm_out = nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)
        self.proj_out_1 = nn.Linear(dim, 2 * dim)
        self.proj_out_2 = nn.Linear(dim, cfg.hidden_size)

    def forward(self, x: Tensor, vl: Tensor, timestep: Tensor, vl_mask: Tensor | None = None,
                image_mask: Tensor | None = None) -> Tensor:
        """``x`` [B, T, dim], ``vl`` [B, S, d_vl], ``timestep`` [B] long; masks [B, S] bool -> [B, T, hidden]."""
        temb = self.timestep_encoder(timestep)
        if self.alternate_vl:
            if image_mask is None or vl_mask is None:
                raise ValueError("AlternateVL-DiT needs image_mask and vl_mask [B, S]")
            image_att = image_mask & vl_mask
            text_att = ~image_mask & vl_mask
        recompute = self.gradient_checkpointing and torch.is_grad_enabled()
        for i, block in enumerate(self.transformer_blocks):
            if i % 2 == 1:
                args: tuple = (x, temb)
            elif self.alternate_vl:
                args = (x, temb, vl, text_att if i % (2 * self.attend_text_every_n_blocks) == 0 else image_att)
            else:
                args = (x, temb, vl, vl_mask)
            x = checkpoint(block, *args, use_reentrant=False) if recompute else block(*args)
        shift, scale = self.proj_out_1(F.silu(temb)).chunk(2, dim=1)
        return self.proj_out_2(self.norm_out(x) * (1 + scale[:, None]) + shift[:, None])


class SelfAttentionTransformer(nn.Module):
    """N1.5's 4-layer self-attention over the VL tokens (``vl_self_attention``)."""

    def __init__(self, cfg: Gr00tConfig) -> None:
        super().__init__()
        self.transformer_blocks = nn.ModuleList([
            BasicTransformerBlock(cfg.backbone_embedding_dim, cfg.vl_num_heads, cfg.vl_head_dim, cfg.dropout,
                                  ada_norm=False) for _ in range(cfg.vl_self_attention_layers)])

    def forward(self, x: Tensor) -> Tensor:
        for block in self.transformer_blocks:
            x = block(x)
        return x


class ActionHead(nn.Module):
    """The flow-matching head: VL post-processing, embodiment encoders, DiT, action decoder.

    Velocity convention: GR00T time ``t`` in [0, 1) with 0 = noise; ``velocity`` predicts
    ``d x / d t = data - noise``; ``t`` is discretised into ``num_timestep_buckets`` buckets.
    """

    def __init__(self, cfg: Gr00tConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = DiT(cfg)
        self.state_encoder = CategorySpecificMLP(cfg.num_embodiments, cfg.state_dim, cfg.hidden_size,
                                                 cfg.input_embedding_dim)
        self.action_encoder = MultiEmbodimentActionEncoder(cfg.action_dim, cfg.input_embedding_dim,
                                                           cfg.num_embodiments)
        self.action_decoder = CategorySpecificMLP(cfg.num_embodiments, cfg.hidden_size, cfg.hidden_size,
                                                  cfg.action_dim)
        if cfg.num_future_tokens:
            self.future_tokens = nn.Embedding(cfg.num_future_tokens, cfg.input_embedding_dim)
            nn.init.normal_(self.future_tokens.weight, std=0.02)
        self.vlln: nn.Module = nn.LayerNorm(cfg.backbone_embedding_dim) if cfg.use_vlln else nn.Identity()
        self.vl_self_attention: nn.Module = (SelfAttentionTransformer(cfg) if cfg.vl_self_attention_layers
                                             else nn.Identity())
        if cfg.add_pos_embed:
            self.position_embedding = nn.Embedding(cfg.max_seq_len, cfg.input_embedding_dim)
            nn.init.normal_(self.position_embedding.weight, std=0.02)

    def process_vl(self, vl: Tensor) -> Tensor:
        """Backbone features [B, S, d_vl] -> head VL tokens (LayerNorm, then N1.5's VL self-attention)."""
        return self.vl_self_attention(self.vlln(vl))

    def encode_state(self, state: Tensor, embodiment_id: Tensor) -> Tensor:
        """Padded normalised state [B, state_dim] -> state token [B, 1, input_embedding_dim]."""
        return self.state_encoder(state.unsqueeze(1), embodiment_id)

    def bucket(self, t: Tensor) -> Tensor:
        """Continuous GR00T time [B] in [0, 1) -> bucket index [B] long (``int(t * buckets)`` upstream).

        The 1e-4 guard keeps e.g. ``3/4`` computed as ``1 - 0.25`` in float32 in the same bucket.
        """
        return torch.floor(t.double() * self.cfg.num_timestep_buckets + 1e-4).long().clamp(
            0, self.cfg.num_timestep_buckets - 1)

    def velocity(self, x_t: Tensor, t: Tensor, vl: Tensor, state_features: Tensor, embodiment_id: Tensor,
                 vl_mask: Tensor | None = None, image_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One DiT call. ``x_t`` [B, H, A], ``t`` [B] GR00T time; returns (velocity [B, H, A],
        action-token features [B, H, hidden] for a learned noise head)."""
        ts = self.bucket(t)
        feats = self.action_encoder(x_t.to(vl.dtype), ts, embodiment_id)
        if self.cfg.add_pos_embed:
            feats = feats + self.position_embedding.weight[: feats.shape[1]].unsqueeze(0)
        parts = [state_features]
        if self.cfg.num_future_tokens:
            parts.append(self.future_tokens.weight.unsqueeze(0).expand(x_t.shape[0], -1, -1))
        parts.append(feats)
        out = self.model(torch.cat(parts, dim=1), vl, ts, vl_mask if self.cfg.use_attention_mask else None,
                         image_mask)
        out = out[:, -self.cfg.action_horizon:]
        return self.action_decoder(out, embodiment_id), out
