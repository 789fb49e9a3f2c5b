"""Observation processing for GR00T: images, prompt tokens, state; and the prompt tokenizers.

``sample(obs)`` receives raw env observations (``keys.MAIN_IMAGES`` / ``WRIST_IMAGES`` uint8
[B, H, W, 3], ``STATES`` [B, 8], ``TASK_DESCRIPTIONS`` list[str]) and this module turns them into model
inputs. Every step is deterministic so the replay can store the raw uint8 images (small) and
``evaluate`` re-derives bit-identical pixel values.

Image pipeline (GR00T LIBERO DataConfig at eval time, RLinf ``modality_config.py``): centre crop to 95 %
of each side, bilinear resize to ``image_size``, scale to [0, 1], SigLIP normalisation ``(x - 0.5) / 0.5``.

Prompt layout, fixed length so replays stack, right-padded: ``plain`` (tiny presets, :class:`ByteTokenizer`
= UTF-8 bytes + 3): ``[<image> x P per camera] [instruction]``; ``eagle_chat`` (real checkpoints, Qwen3
``tokenizer.json`` via :class:`FileTokenizer`): Eagle 2.5's chat template with
``<image i><img><IMG_CONTEXT> x P</img>`` per camera before the instruction (see :data:`EAGLE_HEADER`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from vlarl_cli.errors import ConfigError

__all__ = ["ByteTokenizer", "FileTokenizer", "PromptTokenizer", "build_prompt", "load_tokenizer",
           "preprocess_images"]


class PromptTokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """UTF-8 bytes shifted by 3 (0 = pad, 1 = bos, 2 = eos): ids 3..258. For tiny presets only."""

    offset = 3

    def encode(self, text: str) -> list[int]:
        return [b + self.offset for b in text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        return bytes(i - self.offset for i in ids if i >= self.offset).decode("utf-8", errors="replace")


class FileTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer read from a local ``tokenizer.json``."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise ConfigError(f"No tokenizer.json at {file}.",
                              "Point actor.model.tokenizer_path at a folder with the Qwen3 tokenizer.json "
                              "(Isaac-GR00T ships it in gr00t/model/backbone/eagle2_hg_model).")
        self._tok = Tokenizer.from_file(str(file))

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)


def load_tokenizer(tokenizer_path: str | Path | None, vocab_size: int) -> PromptTokenizer:
    """The byte tokenizer for small vocabularies (tiny presets), else the file tokenizer (required)."""
    if tokenizer_path is not None:
        return FileTokenizer(Path(tokenizer_path))
    if vocab_size < 260:
        raise ConfigError(f"vocab_size {vocab_size} is too small for the byte tokenizer (needs 259 ids).",
                          "Use a larger vocabulary or set tokenizer_path.")
    if vocab_size > 4096:
        raise ConfigError("A real-size GR00T model needs its prompt tokenizer, but tokenizer_path is not set.",
                          "Set actor.model.tokenizer_path to a folder containing the Qwen3 tokenizer.json.")
    return ByteTokenizer()


def preprocess_images(images: Tensor, image_size: int, crop_fraction: float = 0.95) -> Tensor:
    """uint8 [B, H, W, 3] -> float32 [B, 3, image_size, image_size] in [-1, 1]."""
    if images.dim() != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be [B, H, W, 3] uint8, got {tuple(images.shape)} {images.dtype}")
    x = images.permute(0, 3, 1, 2).float() / 255.0
    h, w = x.shape[-2:]
    ch, cw = round(h * crop_fraction), round(w * crop_fraction)
    top, left = (h - ch) // 2, (w - cw) // 2
    x = x[:, :, top: top + ch, left: left + cw]
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False, antialias=True)
    return (x.clamp(0.0, 1.0) - 0.5) / 0.5


def formalize_language(text: str) -> str:
    """Lower-case and drop punctuation (Isaac-GR00T ``gr00t/model/transforms.py`` formalize_language)."""
    return re.sub(r"[^\w\s]", "", text.lower())


#: Eagle 2.5 chat layout (``processing_eagle2_5_vl.py``: ``py_apply_chat_template`` + ``replace_media_placeholder``):
#: default system turn, user turn = one ``<image {i}><img><IMG_CONTEXT> x 256</img>`` per camera, then the
#: instruction, then the assistant generation prompt.
EAGLE_HEADER = "<|im_start|>system\nYou are a helpful assistant.\n<|im_end|>\n<|im_start|>user\n"
EAGLE_FOOTER = "<|im_end|>\n<|im_start|>assistant\n"


def _eagle_chat_rows(tokenizer: PromptTokenizer, texts: list[str], *, num_images: int, tokens_per_image: int,
                     budget: int, image_token_id: int) -> list[list[int]]:
    """Token ids of the Eagle chat prompt per text; the instruction is truncated to fit ``budget``
    non-image tokens. Segments are tokenised separately at special-token / line boundaries."""
    if tokenizer.encode("<IMG_CONTEXT>") != [image_token_id]:
        raise ConfigError(f"The prompt tokenizer does not map <IMG_CONTEXT> to image_token_id {image_token_id}.",
                          "Use the Eagle tokenizer.json shipped with the checkpoint / Isaac-GR00T.")
    prefix = tokenizer.encode(EAGLE_HEADER)
    for i in range(num_images):
        prefix += tokenizer.encode(f"<image {i + 1}><img>") + [image_token_id] * tokens_per_image
        prefix += tokenizer.encode("</img>")
    suffix = tokenizer.encode(EAGLE_FOOTER)
    room = budget - (len(prefix) - num_images * tokens_per_image) - len(suffix)
    if room < 1:
        raise ConfigError(f"max_text_tokens {budget} cannot hold the Eagle chat template "
                          f"({budget - room} tokens) and an instruction.", "Raise max_text_tokens.")
    return [prefix + tokenizer.encode(t)[:room] + suffix for t in texts]


def build_prompt(tokenizer: PromptTokenizer, descriptions: list[str], *, num_images: int, tokens_per_image: int,
                 max_text_tokens: int, image_token_id: int, pad_token_id: int,
                 formalize: bool = False, style: str = "plain") -> tuple[Tensor, Tensor]:
    """Token ids [B, L] long and attention mask [B, L] long, ``L = num_images * tokens_per_image +
    max_text_tokens``, right-padded with ``pad_token_id`` (mask 0).

    ``style="plain"``: image placeholders then the instruction (truncated to ``max_text_tokens``).
    ``style="eagle_chat"``: the Eagle chat template around them (real checkpoints; the template tokens
    count against ``max_text_tokens``). Upstream left-pads inside a batch, which makes Qwen's position ids
    depend on the longest prompt of the batch; right padding keeps each row independent of the others.
    """
    n_img = num_images * tokens_per_image
    texts = [(formalize_language(str(t)) if formalize else str(t)).strip() for t in descriptions]
    ids = torch.full((len(texts), n_img + max_text_tokens), pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    if style == "eagle_chat":
        rows = _eagle_chat_rows(tokenizer, texts, num_images=num_images, tokens_per_image=tokens_per_image,
                                budget=max_text_tokens, image_token_id=image_token_id)
        for row, toks in enumerate(rows):
            if toks.count(image_token_id) != n_img:
                raise ValueError("the task description tokenised to the image placeholder id")
            ids[row, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            mask[row, : len(toks)] = 1
        return ids, mask
    if style != "plain":
        raise ConfigError(f'Unknown prompt_style "{style}".', 'Use "plain" or "eagle_chat".')
    ids[:, :n_img] = image_token_id
    mask[:, :n_img] = 1
    for row, text in enumerate(texts):
        toks = tokenizer.encode(text)[:max_text_tokens]
        if image_token_id in toks:
            raise ValueError("the task description tokenised to the image placeholder id")
        ids[row, n_img: n_img + len(toks)] = torch.tensor(toks, dtype=torch.long)
        # at least one attended text position: N1.6's text-only cross-attention must not be empty
        mask[row, n_img: n_img + max(len(toks), 1)] = 1
    return ids, mask
