"""Observation processing for GR00T as Isaac-GR00T runs it: prompt tokens and camera pixels.

``sample(obs)`` receives raw env observations (uint8 images [B, H, W, 3], states, task strings); every
step here is deterministic so a replay can keep the raw uint8 images and ``evaluate`` re-derives
bit-identical pixels. Tokenizers live in :mod:`.tokenizer`, image resampling in :mod:`.images`.

Prompts (``prompt_style="eagle_chat"``, real checkpoints), one row per sample, tokenised in one go:

* N1.5 (``n1.5-release`` ``gr00t/model/transforms.py`` ``GR00TTransform._apply_vlm_processing`` + the Eagle
  2.5 ``chat_template.json`` / ``processing_eagle2_5_vl.py``): images first, then the instruction, then the
  assistant generation prompt; the default system turn is ``You are a helpful assistant.<|im_end|>`` with no
  newline before ``<|im_end|>`` (that newline exists only in the unused ``py_apply_chat_template``); no
  ``formalize_language`` in RLinf's LIBERO DataConfig.
* N1.6 (``n1.6.1-release`` ``gr00t/model/gr00t_n1d6/processing_gr00t_n1d6.py``): the instruction first,
  then the images, no generation prompt, ``formalize_language`` on (lower-case, punctuation removed).
* Each image becomes ``<image i><img>`` + ``<IMG_CONTEXT>`` x tokens + ``</img>`` (``replace_media_placeholder``).

Padding (RLinf, not Isaac-GR00T): RLinf right-pads ``input_ids`` / ``attention_mask`` with 0 to
``padding_value`` = 570 (``rlinf/models/embodiment/gr00t/gr00t_n1d5/gr00t_action_model.py``
``predict_action_batch``; ``examples/embodiment/config/model/gr00t*.yaml``). Token 0 is a real Qwen token
("!"): N1.5's VL self-attention and DiT cross-attention take no mask, so they see those pad positions,
and so does RLinf's value head (mean over all VL tokens). We follow RLinf for the seed recipes. The Qwen3
runs with FlashAttention-2's pad semantics as upstream (:mod:`vlarl_cli.policies.pad_attention`): a pad
position's feature is its token's embedding through the residual MLPs, the same for every prompt.

Left padding is NOT reproduced, on purpose. Before that right padding, the Eagle processor pads each
rollout batch on the LEFT to its longest prompt (``padding_side="left"``, id 151643 ``<|endoftext|>``, mask
0), so how many left pads a row gets depends on the other prompts of its batch. Under FA2 the real tokens
barely notice (RoPE is relative: shifting every real position by k changes scores only by rounding), but
the k left-pad features are k more tokens that N1.5's unmasked VL self-attention / DiT cross-attention and
both releases' value mean read, so a row's action and value would depend on its batch-mates -- and on how a
vlarl rollout batches envs, which differs from RLinf's worker layout anyway. We process every row as
Isaac-GR00T processes a batch of one (no left pads), so a row never depends on the other rows of its
batch; with prompts of one length in a batch (a LIBERO suite's rows of one task) RLinf adds no left pads
either and the two agree.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.gr00t.config import Gr00tConfig
from vlarl_cli.policies.gr00t.images import preprocess_images_n15, preprocess_images_n16
from vlarl_cli.policies.gr00t.tokenizer import (
    ByteTokenizer,
    PromptTokenizer,
    QwenTokenizer,
    load_tokenizer,
)

__all__ = ["ByteTokenizer", "PromptTokenizer", "QwenTokenizer", "build_prompt", "eagle_prompt_text",
           "formalize_language", "load_tokenizer", "preprocess_images", "preprocess_images_n15",
           "preprocess_images_n16"]

IMG_CONTEXT = "<IMG_CONTEXT>"
SYSTEM_TURN = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


def formalize_language(text: str) -> str:
    """Lower-case and drop punctuation (Isaac-GR00T ``formalize_language``; N1.6 processor)."""
    return re.sub(r"[^\w\s]", "", text.lower())


def _image_block(index: int, tokens: int) -> str:
    return f"<image {index}><img>{IMG_CONTEXT * tokens}</img>"


def eagle_prompt_text(instruction: str, *, version: str, num_images: int, tokens_per_image: int) -> str:
    """The full chat text Isaac-GR00T tokenises for one sample (see the module docstring)."""
    images = "".join(_image_block(i + 1, tokens_per_image) for i in range(num_images))
    if version == "n1.5":
        return f"{SYSTEM_TURN}<|im_start|>user\n{images}{instruction}<|im_end|>\n<|im_start|>assistant\n"
    if version == "n1.6":
        return f"{SYSTEM_TURN}<|im_start|>user\n{instruction}{images}<|im_end|>\n"
    raise ConfigError(f'Unknown GR00T version "{version}" for the prompt.', "Use n1.5 or n1.6.")


def _rows_eagle(tokenizer: PromptTokenizer, texts: list[str], *, version: str, num_images: int,
                tokens_per_image: int, image_token_id: int) -> list[list[int]]:
    if tokenizer.encode(IMG_CONTEXT) != [image_token_id]:
        raise ConfigError(f"The prompt tokenizer does not map {IMG_CONTEXT} to image_token_id {image_token_id}.",
                          "Use the Eagle tokenizer shipped with the checkpoint / Isaac-GR00T (vocab.json + "
                          "merges.txt + added_tokens.json).")
    return [tokenizer.encode(eagle_prompt_text(t, version=version, num_images=num_images,
                                               tokens_per_image=tokens_per_image)) for t in texts]


def _rows_plain(tokenizer: PromptTokenizer, texts: list[str], *, num_images: int, tokens_per_image: int,
                image_token_id: int) -> list[list[int]]:
    # tiny presets: image placeholders then the instruction (at least one text position for N1.6's
    # text-only cross-attention: an empty instruction becomes one pad token that is attended)
    return [[image_token_id] * (num_images * tokens_per_image) + (tokenizer.encode(t) or [0]) for t in texts]


def build_prompt(tokenizer: PromptTokenizer, descriptions: list[str], *, num_images: int, tokens_per_image: int,
                 length: int, image_token_id: int, pad_id: int, formalize: bool = False, style: str = "plain",
                 version: str = "n1.5") -> tuple[Tensor, Tensor]:
    """Token ids [B, length] long and attention mask [B, length] long, right-padded with ``pad_id``
    (mask 0) as RLinf pads to its ``padding_value``. A prompt longer than ``length`` is an error (RLinf's
    negative ``F.pad`` would silently cut its end)."""
    texts = [formalize_language(str(t)) if formalize else str(t) for t in descriptions]
    if style == "eagle_chat":
        rows = _rows_eagle(tokenizer, texts, version=version, num_images=num_images,
                           tokens_per_image=tokens_per_image, image_token_id=image_token_id)
    elif style == "plain":
        rows = _rows_plain(tokenizer, texts, num_images=num_images, tokens_per_image=tokens_per_image,
                           image_token_id=image_token_id)
    else:
        raise ConfigError(f'Unknown prompt_style "{style}".', 'Use "plain" or "eagle_chat".')
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    n_img = num_images * tokens_per_image
    for row, toks in enumerate(rows):
        if len(toks) > length:
            raise ConfigError(f"The GR00T prompt of task {descriptions[row]!r} has {len(toks)} tokens, more than the "
                              f"padded length {length} (RLinf padding_value).",
                              "Shorten the task description or raise max_text_tokens in the GR00T config.")
        if toks.count(image_token_id) != n_img:
            raise ValueError("the task description tokenised to the image placeholder id")
        ids[row, : len(toks)] = torch.tensor(toks, dtype=torch.long)
        mask[row, : len(toks)] = 1
    return ids, mask


def preprocess_images(images: Tensor, cfg: Gr00tConfig) -> Tensor:
    """uint8 [B, H, W, 3] -> float32 [B, 3, S, S] in [-1, 1] with the pipeline of ``cfg.version``."""
    if cfg.version == "n1.5":
        return preprocess_images_n15(images, cfg.image_size, cfg.crop_fraction)
    assert cfg.shortest_image_edge is not None  # Gr00tConfig refuses N1.6 without it
    return preprocess_images_n16(images, shortest_edge=cfg.shortest_image_edge, crop_fraction=cfg.crop_fraction,
                                 factor=cfg.image_factor)
