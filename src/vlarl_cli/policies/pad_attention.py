"""FlashAttention-2's pad semantics on PyTorch SDPA, for transformers decoders run over padded batches.

Isaac-GR00T and RLinf run GR00T's Qwen3 with ``flash_attention_2`` (Eagle 3's modeling asserts it for N1.6;
N1.5's backbone config sets ``use_flash_attention``). transformers' FA2 path unpads the batch
(``_upad_input``), runs the variable-length kernel on the real tokens only and pads the output back with
ZEROS (``pad_input``): a pad query's attention output is 0, so a pad position's hidden state is its own
embedding pushed through the residual MLPs only and never depends on the prompt. PyTorch SDPA with the usual
causal + key-padding mask instead lets a right-pad query attend to every real token before it (and gives a
left-pad query, whose every key is masked, a NaN or an arbitrary row). vlarl runs SDPA (CPU and GPU, no
flash-attn wheel needed), so this module restores FA2's semantics exactly:

* :func:`padded_causal_mask` builds the 4-D boolean mask (causal, pad keys masked) and lets a pad query see
  only itself, so no row is fully masked (finite forward and backward);
* :data:`ATTENTION` names an attention function (registered in transformers' ``AttentionInterface``) that
  runs transformers' own ``sdpa_attention_forward`` and multiplies the output by the query mask (``query_valid``
  keyword, [B, L] bool) -- the zero FA2 writes at pad queries. With a bias-free ``o_proj`` (Qwen3) the layer's
  attention branch is then exactly 0 at pads, as under FA2.

Real (non-pad) queries are untouched: their mask row equals the causal + key-padding row SDPA had before.
Position ids stay ``arange(L)`` for every row, as transformers' FA2 path uses them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["ATTENTION", "padded_causal_mask", "register"]

#: the ``_attn_implementation`` name of the FA2-pad-semantics SDPA function
ATTENTION = "vlarl_sdpa_fa2_pads"


def padded_causal_mask(attention_mask: Tensor) -> Tensor:
    """[B, L] padding mask (1 = real) -> [B, 1, L, L] bool (True = attend): causal, pad keys masked; a pad
    query attends to itself only (its output is zeroed afterwards, see :func:`_zero_pad_query_sdpa`)."""
    valid = attention_mask.bool()
    length = valid.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=valid.device).tril()
    mask = causal & valid[:, None, None, :]
    eye = torch.eye(length, dtype=torch.bool, device=valid.device)
    return mask | (eye & ~valid[:, None, :, None])


def _zero_pad_query_sdpa(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                         query_valid: Tensor | None = None, **kwargs: Any) -> tuple[Tensor, Any]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if query_valid is not None:  # out: [B, L, heads, head_dim]
        out = out * query_valid[:, :, None, None].to(out.dtype)
    return out, weights


def register() -> str:
    """Register :data:`ATTENTION` with transformers (idempotent) and return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, _zero_pad_query_sdpa)
    # a caller passing a 2-D mask still gets SDPA's causal + key-padding mask (an unknown name gets none at all)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    return ATTENTION
