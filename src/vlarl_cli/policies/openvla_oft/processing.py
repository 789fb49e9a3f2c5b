"""Observation -> model inputs and action tokens -> env actions, for OpenVLA-OFT (RLinf RL variant).

Inputs (the env's observation dict, keys from :mod:`vlarl_cli.keys`): ``main_images`` uint8
``[B, H, W, 3]`` (already rotated 180 degrees by the env), ``task_descriptions`` (B strings). The state
and the wrist camera are not used (RLinf's LIBERO recipes: one image, ``use_proprio: False``).

Pipeline (facts from RLinf ``openvla_oft_action_model.py`` / ``prismatic/processing_prismatic.py`` and
openvla-oft ``experiments/robot/openvla_utils.py``):

1. prompt: ``"In: What action should the robot take to {task.lower()}?\\nOut: "``, tokenised as
   ``[BOS] + ids`` and LEFT-padded to ``max_prompt_len`` with BOS kept at position 0 (RLinf moves the
   BOS in front of the padding), so the last prompt token always sits right before the action block.
2. image: resized to ``image_size`` with antialiased bicubic interpolation (the OpenVLA image
   processor: timm data config ``bicubic``, ``TVF.resize(..., antialias=True)``, ``resize-naive``; PIL's
   bicubic is the antialiased reference torchvision matches). Optionally (``center_crop``, the
   openvla-oft LIBERO evaluation; RLinf's LIBERO path does not crop) the central ``sqrt(0.9)`` of each
   side is cropped and resized back (bilinear, openvla-oft ``crop_and_resize``). Stored uint8 in the
   replay, so ``evaluate`` sees exactly what ``sample`` saw.
3. pixel values: ``x / 255`` normalised twice and channel-stacked ``[B, 6, S, S]``: DINOv2 (ImageNet
   mean/std) first, SigLIP (mean 0.5, std 0.5) second (``preprocessor_config.json`` ``means``/``stds``).
4. actions: relative bin index ``k`` in ``[0, n_bins)`` (id ``start + k``) -> OpenVLA's bin centre:
   ``bins = linspace(-1, 1, n_bins)``, 255 centres, ``d = clip(n_bins - 1 - k, 0, n_bins - 2)``
   (``discretized = vocab_size - id``, then ``- 1`` and clip), so id 31999 -> -0.996, ids 31744/31745
   -> +0.996; un-normalised with ``0.5 * (a + 1) * (q99 - q01 + 1e-8) + q01`` where the stats ``mask``
   is True (LIBERO: not the gripper); LIBERO gripper ``g' = -sign(2 g - 1)`` (RLinf
   ``prepare_actions_for_libero``; openvla-oft ``normalize_gripper_action`` + ``invert_gripper_action``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vlarl_cli import keys
from vlarl_cli.errors import CheckpointError, ConfigError, did_you_mean
from vlarl_cli.policies.gripper import gripper_to_env
from vlarl_cli.policies.openvla_oft.config import OftConfig

__all__ = [
    "DATASET_STATISTICS_FILE",
    "DINO_MEAN",
    "DINO_STD",
    "ActionStats",
    "OftProcessor",
    "PromptTokenizer",
    "bin_centers",
    "center_crop",
    "load_dataset_statistics",
    "make_tokenizer",
    "normalize_proprio",
    "openvla_prompt",
    "pixel_values",
    "resize_images",
    "select_unnorm_key",
    "tokens_to_normalized_actions",
    "unnormalize_actions",
]

DATASET_STATISTICS_FILE = "dataset_statistics.json"
DINO_MEAN = (0.485, 0.456, 0.406)  # ImageNet statistics (timm DINOv2 data config)
DINO_STD = (0.229, 0.224, 0.225)
SIGLIP_MEAN = (0.5, 0.5, 0.5)
SIGLIP_STD = (0.5, 0.5, 0.5)
CROP_SCALE = 0.9  # area fraction of the centre crop (openvla-oft center_crop_image)
_UNNORM_EPS = 1e-8  # RLinf _unnormalize_actions


# ---------------------------------------------------------------------------------------- prompt
def openvla_prompt(task: str) -> str:
    """The OpenVLA prompt RLinf builds for a task description (lower-cased, trailing space kept)."""
    return f"In: What action should the robot take to {task.lower()}?\nOut: "


class PromptTokenizer:
    """Prompt -> ``[BOS] + ids`` (no EOS), left-padded batches with BOS at position 0.

    ``PromptTokenizer.byte(bos_id)``: built-in UTF-8 bytes shifted by 4 (the ids of
    :class:`vlarl_cli.policies.tokenization.ByteTokenizer`). ``PromptTokenizer.from_path(path)``: a local
    ``tokenizer.json`` (``tokenizers``) or a folder ``transformers.AutoTokenizer`` opens offline (the
    OpenVLA Llama-2 tokenizer; its BOS id is 1).
    """

    def __init__(self, encode_text: Any, bos_id: int, pad_id: int, vocab_size: int, name: str) -> None:
        self._encode_text = encode_text
        self.bos_id, self.pad_id, self.vocab_size, self.name = bos_id, pad_id, vocab_size, name
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def byte(cls, bos_id: int = 2, pad_id: int = 0) -> PromptTokenizer:
        from vlarl_cli.policies.tokenization import ByteTokenizer

        bt = ByteTokenizer()
        return cls(bt.encode_text, bos_id, pad_id, bt.vocab_size, "byte")

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], bos_id: int = 1, pad_id: int = 32000) -> PromptTokenizer:
        p = Path(path)
        json_file = p if p.is_file() else p / "tokenizer.json"
        if json_file.is_file():
            from tokenizers import Tokenizer as _HFTokenizer

            tok = _HFTokenizer.from_file(os.fspath(json_file))
            return cls(lambda s: list(tok.encode(s, add_special_tokens=False).ids), bos_id, pad_id,
                       tok.get_vocab_size(with_added_tokens=True), os.fspath(json_file))
        if p.is_dir():
            try:
                from transformers import AutoTokenizer

                tok2 = AutoTokenizer.from_pretrained(os.fspath(p), local_files_only=True)
            except Exception as err:  # transformers raises many types for unreadable folders
                raise CheckpointError(f"Could not open a tokenizer in {p}: {err}",
                                      "Point tokenizer_path at the checkpoint's tokenizer.json.") from None
            return cls(lambda s: list(tok2.encode(s, add_special_tokens=False)), bos_id, pad_id, len(tok2),
                       os.fspath(p))
        raise CheckpointError(f"Tokenizer path {p} does not exist.",
                              "Point tokenizer_path at a local tokenizer.json (OpenVLA's Llama-2 tokenizer).")

    def prompt_ids(self, task: str) -> list[int]:
        hit = self._cache.get(task)
        if hit is None:
            hit = [self.bos_id, *self._encode_text(openvla_prompt(task))]
            if len(self._cache) < 4096:  # rollouts repeat a handful of task prompts
                self._cache[task] = hit
        return hit

    def encode(self, tasks: Sequence[str], max_len: int) -> tuple[Tensor, Tensor]:
        """B task descriptions -> ``(ids [B, max_len] long, mask [B, max_len] bool)``.

        Layout per row: ``[BOS, pad, ..., pad, prompt ids]`` (mask False on pads). A prompt longer than
        ``max_len`` raises instead of being silently cut (the model would see a different task).
        """
        if isinstance(tasks, str):
            raise TypeError("encode expects a list of strings, got one string")
        ids = torch.full((len(tasks), max_len), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(tasks), max_len), dtype=torch.bool)
        for i, task in enumerate(tasks):
            seq = self.prompt_ids(task)
            if len(seq) > max_len:
                raise ConfigError(f"The prompt for task {task!r} has {len(seq)} tokens ({self.name} tokenizer), "
                                  f"more than max_prompt_len={max_len}.",
                                  "Raise actor.model.max_prompt_length (RLinf uses 50 with the Llama tokenizer).")
            ids[i, 0], mask[i, 0] = seq[0], True
            body = seq[1:]
            if body:
                ids[i, max_len - len(body):] = torch.tensor(body, dtype=torch.long)
                mask[i, max_len - len(body):] = True
        return ids, mask


def make_tokenizer(cfg: OftConfig) -> PromptTokenizer:
    """The built-in byte tokeniser (``tokenizer="byte"``) or a local tokeniser file / folder."""
    if cfg.tokenizer == "byte":
        tok = PromptTokenizer.byte(cfg.bos_token_id, cfg.pad_token_id)
    else:
        tok = PromptTokenizer.from_path(cfg.tokenizer, cfg.bos_token_id, cfg.pad_token_id)
    if tok.vocab_size > cfg.vocab_size:
        raise ConfigError(f"The tokenizer has {tok.vocab_size} ids but the model vocabulary has only "
                          f"{cfg.vocab_size}.", "Use the tokenizer that belongs to the checkpoint.")
    return tok


# ---------------------------------------------------------------------------------------- images
def _as_uint8(images: Tensor | np.ndarray) -> np.ndarray:
    arr = images.detach().cpu().numpy() if isinstance(images, Tensor) else np.asarray(images)
    if arr.dtype != np.uint8:
        if np.issubdtype(arr.dtype, np.floating):  # floats in [0, 1]
            arr = np.clip(np.rint(255 * arr), 0, 255).astype(np.uint8)
        else:
            raise ValueError(f"images must be uint8 (or float in [0, 1]), got {arr.dtype}")
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"images must be [B, H, W, 3], got {arr.shape}")
    return arr


def resize_images(images: Tensor | np.ndarray, size: int, method: str = "pil") -> Tensor:
    """uint8 ``[B, H, W, 3]`` -> uint8 ``[B, size, size, 3]`` (no-op at the right size).

    ``pil``: PIL's antialiased bicubic (the OFT authors' / OpenVLA processor on PIL images, RLinf's
    ``official`` variant). ``torch``: what RLinf's ``rlinf`` variant does (its ``PrismaticImageProcessor``
    calls ``TVF.resize(..., bicubic, antialias=True)`` on uint8 TENSORS): float bicubic interpolation with
    antialiasing, clamped to [0, 255] and rounded back to uint8. The two differ by a few grey levels.
    """
    arr = _as_uint8(images)
    if arr.shape[1:3] == (size, size):
        return torch.from_numpy(np.ascontiguousarray(arr))
    if method == "torch":
        x = torch.from_numpy(np.ascontiguousarray(arr)).permute(0, 3, 1, 2).float()
        y = torch.nn.functional.interpolate(x, size=(size, size), mode="bicubic", align_corners=False, antialias=True)
        return y.clamp(0, 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()
    if method != "pil":
        raise ValueError(f"unknown resize method {method!r} (pil, torch)")
    from PIL import Image

    out = [np.asarray(Image.fromarray(im).resize((size, size), resample=Image.Resampling.BICUBIC)) for im in arr]
    return torch.from_numpy(np.stack(out))


def center_crop(images: Tensor, scale: float = CROP_SCALE) -> Tensor:
    """uint8 ``[B, S, S, 3]`` -> the centre ``sqrt(scale)`` of each side, resized back to ``S`` (bilinear)."""
    from PIL import Image

    arr = _as_uint8(images)
    _, h, w, _ = arr.shape
    side = math.sqrt(scale)
    ch, cw = h * side, w * side
    top, left = (h - ch) / 2, (w - cw) / 2
    box = (left, top, left + cw, top + ch)
    out = [np.asarray(Image.fromarray(im).resize((w, h), resample=Image.Resampling.BILINEAR, box=box)) for im in arr]
    return torch.from_numpy(np.stack(out))


def pixel_values(images: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """uint8 ``[B, S, S, 3]`` -> ``[B, 6, S, S]``: DINOv2-normalised channels, then SigLIP-normalised;
    ``[B, n, S, S, 3]`` -> ``[B, 6 n, S, S]`` (image by image, as openvla-oft stacks several images)."""
    if images.dim() == 5:
        return torch.cat([pixel_values(images[:, i], dtype) for i in range(images.shape[1])], dim=1)
    x = images.to(torch.float32).permute(0, 3, 1, 2) / 255.0
    parts = []
    for mean, std in ((DINO_MEAN, DINO_STD), (SIGLIP_MEAN, SIGLIP_STD)):
        m = torch.tensor(mean, dtype=torch.float32, device=x.device)[None, :, None, None]
        s = torch.tensor(std, dtype=torch.float32, device=x.device)[None, :, None, None]
        parts.append((x - m) / s)
    return torch.cat(parts, dim=1).to(dtype)


# ---------------------------------------------------------------------------------------- actions
def bin_centers(n_bins: int = 256) -> Tensor:
    """OpenVLA's ``n_bins - 1`` bin centres ``[n_bins - 1]`` (float64): midpoints of ``linspace(-1, 1, n_bins)``."""
    bins = torch.linspace(-1.0, 1.0, n_bins, dtype=torch.float64)
    return (bins[:-1] + bins[1:]) / 2.0


def tokens_to_normalized_actions(k: Tensor, n_bins: int = 256) -> Tensor:
    """Relative bin indices ``k [...]`` (id - first action id) -> normalised actions ``[...]`` float64.

    OpenVLA ActionTokenizer / RLinf decoding: ``discretized = vocab_size - id = n_bins - k``, then
    ``bin_centers[clip(discretized - 1, 0, n_bins - 2)]``: the HIGHEST id is the most negative action.
    """
    idx = (n_bins - 1 - k.long()).clamp(0, n_bins - 2)
    return bin_centers(n_bins).to(k.device)[idx]


@dataclass(frozen=True)
class ActionStats:
    """Action statistics of one dataset key (``dataset_statistics.json[key]["action"]``), ``[A]`` float64."""

    q01: Tensor
    q99: Tensor
    mask: Tensor  # bool: dims that are normalised (LIBERO: all but the gripper)
    key: str

    @classmethod
    def from_dict(cls, key: str, d: dict[str, Any], name: str = "action") -> ActionStats:
        action = d.get(name) if isinstance(d.get(name), dict) else None
        if action is None or "q01" not in action or "q99" not in action:
            raise CheckpointError(f'dataset statistics "{key}" lack {name} q01/q99 (has {sorted(d)}).',
                                  "Use the dataset_statistics.json written with the checkpoint.")
        cpu = torch.device("cpu")  # explicit: policies are also built under a meta-device context
        q01 = torch.as_tensor(action["q01"], dtype=torch.float64, device=cpu).reshape(-1)
        q99 = torch.as_tensor(action["q99"], dtype=torch.float64, device=cpu).reshape(-1)
        mask_raw = action.get("mask")
        mask = (torch.ones_like(q01, dtype=torch.bool) if mask_raw is None
                else torch.as_tensor(mask_raw, dtype=torch.bool, device=cpu).reshape(-1))
        if not q01.shape == q99.shape == mask.shape:
            raise CheckpointError(f'dataset statistics "{key}": q01 {list(q01.shape)}, q99 {list(q99.shape)} and '
                                  f"mask {list(mask.shape)} differ in length.", "Regenerate the statistics file.")
        return cls(q01=q01, q99=q99, mask=mask, key=key)


def load_dataset_statistics(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read an OpenVLA ``dataset_statistics.json`` (``{dataset_key: {"action": {...}, ...}}``)."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"Dataset statistics file {p} does not exist.",
                              "Point norm_stats_path at the checkpoint's dataset_statistics.json.") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"Dataset statistics file {p} is not valid JSON ({err}).",
                              "Re-download the checkpoint.") from None
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise CheckpointError(f"{p} is not an OpenVLA dataset statistics file.",
                              'Expected {"<dataset>": {"action": {"q01": [...], "q99": [...]}}}.')
    return raw


def select_unnorm_key(stats: dict[str, Any], key: str | None) -> str:
    """The statistics key to un-normalise with (RLinf: ``key`` or ``key + "_no_noops"``; None: the only key)."""
    if key is None:
        if len(stats) == 1:
            return next(iter(stats))
        raise ConfigError(f"The checkpoint has action statistics for {len(stats)} datasets "
                          f"({', '.join(sorted(stats))}) and no unnorm_key is set.",
                          "Set actor.model.unnorm_key, e.g. libero_10_no_noops.")
    if key in stats:
        return key
    if f"{key}_no_noops" in stats:
        return f"{key}_no_noops"
    raise ConfigError(f'unnorm_key "{key}" is not in the dataset statistics.{did_you_mean(key, list(stats))}',
                      f"Use one of: {', '.join(sorted(stats))}.")


def unnormalize_actions(a: Tensor, stats: ActionStats | None) -> Tensor:
    """Normalised ``[..., A]`` -> env-scale actions (float64): ``0.5 (a + 1)(q99 - q01 + 1e-8) + q01``
    on masked dims (RLinf ``_unnormalize_actions``, BOUNDS_Q99); identity without statistics."""
    if stats is None:
        return a.double()
    if a.shape[-1] != stats.q01.numel():
        raise ValueError(f"actions have {a.shape[-1]} dims but the statistics {stats.key!r} have {stats.q01.numel()}")
    q01, q99, mask = stats.q01.to(a.device), stats.q99.to(a.device), stats.mask.to(a.device)
    x = 0.5 * (a.double() + 1.0) * (q99 - q01 + _UNNORM_EPS) + q01
    return torch.where(mask, x, a.double())


def normalize_proprio(state: Tensor, stats: ActionStats | None) -> Tensor:
    """Robot state ``[B, P]`` -> ``clip(2 (x - q01) / (q99 - q01 + 1e-8) - 1, -1, 1)`` on masked dims, float32
    (RLinf ``openvla_utils.normalize_proprio``, BOUNDS_Q99). The statistics are required: an unnormalised
    state would feed the projector values it never saw in training."""
    if stats is None:
        raise CheckpointError("use_proprio needs the proprio statistics of the unnorm_key (dataset_statistics.json "
                              '"<key>": {"proprio": {"q01", "q99"}}) and none were found.',
                              "Use the dataset_statistics.json written with the checkpoint.")
    x = state.double().cpu()
    if x.shape[-1] != stats.q01.numel():
        raise ValueError(f"states have {x.shape[-1]} dims but the proprio statistics have {stats.q01.numel()}")
    normed = 2.0 * (x - stats.q01) / (stats.q99 - stats.q01 + _UNNORM_EPS) - 1.0
    return torch.where(stats.mask, normed, x).clamp(-1.0, 1.0).float()


# ---------------------------------------------------------------------------------------- processor
class OftProcessor:
    """Turns env observations into model inputs and sampled bin indices into env actions."""

    def __init__(self, cfg: OftConfig, tokenizer: PromptTokenizer, stats: ActionStats | None,
                 proprio_stats: ActionStats | None = None) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.stats = stats
        self.proprio_stats = proprio_stats

    def normalized_to_env(self, a: Tensor) -> Tensor:
        """Normalised actions ``[B, C, A]`` (bin centres or the L1 head's output) -> env actions float32."""
        x = unnormalize_actions(a, self.stats)
        x = torch.cat([x[..., :-1], gripper_to_env(self.cfg.gripper, x[..., -1:])], dim=-1)
        return x.float()

    def prepare(self, obs: dict[str, Any]) -> dict[str, Tensor]:
        """Observation dict -> CPU tensors (batch-first, stored in the replay):

        ``images`` uint8 ``[B, S, S, 3]`` (one image) or ``[B, n, S, S, 3]`` (``num_images_in_input = n``:
        the third-person image then the wrist image(s)), resized (and centre-cropped when configured);
        ``tokens`` long ``[B, L]``, ``token_mask`` bool ``[B, L]`` (L = ``max_prompt_len``); with
        ``use_proprio`` also ``proprio`` float32 ``[B, P]`` (normalised, see :func:`normalize_proprio`).
        """
        cfg = self.cfg
        for k in (keys.MAIN_IMAGES, keys.TASK_DESCRIPTIONS):
            if k not in obs:
                raise KeyError(f"observation lacks {k!r} (has {sorted(obs)})")
        views = [obs[keys.MAIN_IMAGES]]
        if cfg.num_images_in_input > 1:
            if keys.WRIST_IMAGES not in obs:
                raise KeyError(f"num_images_in_input={cfg.num_images_in_input} needs {keys.WRIST_IMAGES!r} in the "
                               f"observation (has {sorted(obs)})")
            wrist = obs[keys.WRIST_IMAGES]
            wrist = wrist if wrist.ndim == 5 else wrist[:, None]  # [B, W, H, W, 3]
            if wrist.shape[1] < cfg.num_images_in_input - 1:
                raise ValueError(f"{wrist.shape[1]} wrist image(s) for num_images_in_input={cfg.num_images_in_input}")
            views += [wrist[:, i] for i in range(cfg.num_images_in_input - 1)]
        images = [self._image(v) for v in views]
        texts = list(obs[keys.TASK_DESCRIPTIONS])
        if len(texts) != images[0].shape[0]:
            raise ValueError(f"{len(texts)} task descriptions for a batch of {images[0].shape[0]} observations")
        tokens, token_mask = self.tokenizer.encode(texts, cfg.max_prompt_len)
        out = {"images": images[0] if len(images) == 1 else torch.stack(images, dim=1),
               "tokens": tokens, "token_mask": token_mask}
        if cfg.use_proprio:
            if keys.STATES not in obs:
                raise KeyError(f"use_proprio needs {keys.STATES!r} in the observation (has {sorted(obs)})")
            out["proprio"] = normalize_proprio(torch.as_tensor(obs[keys.STATES]), self.proprio_stats)
        return out

    def _image(self, images: Any) -> Tensor:
        method = "torch" if self.cfg.implement_version == "rlinf" else "pil"  # as each upstream processor
        out = resize_images(images, self.cfg.image_size, method)
        return center_crop(out) if self.cfg.center_crop else out

    def actions_to_env(self, k: Tensor) -> Tensor:
        """Relative bin indices ``[B, C, A]`` -> env actions ``[B, C, A]`` float32."""
        return self.normalized_to_env(tokens_to_normalized_actions(k, self.cfg.n_action_bins))
