"""Observation -> model inputs and model output -> env actions, for pi0 / pi0.5 on LIBERO.

Inputs (the env's observation dict, keys from :mod:`vlarl_cli.keys`): ``main_images`` and optional
``wrist_images`` uint8 ``[B, H, W, 3]`` (already rotated 180 degrees by the env), ``states`` ``[B, 8]``
float, ``task_descriptions`` list of B strings.

Pipeline (openpi ``examples/libero/main.py`` + ``policies/libero_policy.py`` + ``transforms.py``, read
for facts):

1. images: resize-with-pad to the model size (PIL bilinear, aspect kept, zero padding; a no-op at the
   right size), kept as uint8 (that is what openpi sends to its server and what the replay stores);
   camera slots ``[main, wrist]``, a missing wrist camera is a zero image with mask False. The model
   sees ``x / 255 * 2 - 1``.
2. prompt: tokenised by the policy's :class:`~vlarl_cli.policies.tokenization.Tokenizer`
   (``[bos] + text + "\\n"``, padded to ``max_token_len``); pi0.5 with ``discrete_state_input`` uses
   openpi's ``"Task: ..., State: <256-bin state>;\\nAction: "`` prompt instead.
3. state: normalised (pi0 mean/std, pi0.5 q01/q99) then zero-padded to ``max_state_dim`` (32). pi0.5
   on LIBERO does not feed the state to the network (``discrete_state_input=False``).
4. output: the ``[B, H, 32]`` chunk is un-normalised, optionally made absolute
   (``extra_delta_transform``: ``actions[:6] += state[:6]``, openpi pi0_libero), cut to the executed
   ``C`` steps and the real ``A`` dims, and mapped to LIBERO's gripper convention (-1 open, +1 close).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from vlarl_cli import keys
from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.gripper import gripper_to_env
from vlarl_cli.policies.normalization import Normalizer
from vlarl_cli.policies.pi0.config import Pi0Config
from vlarl_cli.policies.tokenization import ByteTokenizer, FileTokenizer, Tokenizer

__all__ = ["Pi0Processor", "make_tokenizer", "resize_with_pad", "to_model_images"]


def make_tokenizer(cfg: Pi0Config) -> Tokenizer:
    """The built-in byte tokeniser (``tokenizer="byte"``) or a local tokeniser file / folder."""
    if cfg.tokenizer == "byte":
        tok: Tokenizer = ByteTokenizer()
    else:
        tok = FileTokenizer(cfg.tokenizer)
    if tok.vocab_size > cfg.vocab_size:
        raise ConfigError(f"The tokenizer has {tok.vocab_size} ids but the model vocabulary has only "
                          f"{cfg.vocab_size}.", "Use a tokenizer that matches the checkpoint.")
    return tok


def _resize_one(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """openpi ``image_tools._resize_with_pad_pil``: scale to fit, PIL bilinear, centre on zeros."""
    from PIL import Image

    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
    ratio = max(w / width, h / height)
    rh, rw = int(h / ratio), int(w / ratio)
    resized = np.asarray(Image.fromarray(img).resize((rw, rh), resample=Image.Resampling.BILINEAR))
    out = np.zeros((height, width, img.shape[2]), dtype=img.dtype)
    top, left = max(0, int((height - rh) / 2)), max(0, int((width - rw) / 2))
    out[top: top + rh, left: left + rw] = resized
    return out


def resize_with_pad(images: Tensor | np.ndarray, height: int, width: int) -> Tensor:
    """uint8 ``[B, H, W, 3]`` -> uint8 ``[B, height, width, 3]`` (no-op when already that size)."""
    arr = images.detach().cpu().numpy() if isinstance(images, Tensor) else np.asarray(images)
    if arr.dtype != np.uint8:
        if np.issubdtype(arr.dtype, np.floating):  # openpi convert_to_uint8: floats in [0, 1]
            arr = (255 * arr).astype(np.uint8)
        else:
            raise ValueError(f"images must be uint8 (or float in [0, 1]), got {arr.dtype}")
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"images must be [B, H, W, 3], got {arr.shape}")
    arr = np.ascontiguousarray(arr)  # rotated views (img[::-1, ::-1]) have negative strides
    if arr.shape[1:3] == (height, width):
        return torch.from_numpy(np.ascontiguousarray(arr))
    return torch.from_numpy(np.stack([_resize_one(im, height, width) for im in arr]))


def to_model_images(images: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """uint8 ``[B, N, H, W, 3]`` -> ``[B, N, 3, H, W]`` in [-1, 1] (openpi ``x / 255 * 2 - 1``)."""
    return (images.to(torch.float32) / 255.0 * 2.0 - 1.0).permute(0, 1, 4, 2, 3).to(dtype)


class Pi0Processor:
    """Turns env observations into model inputs and model chunks into env actions."""

    def __init__(self, cfg: Pi0Config, tokenizer: Tokenizer, normalizer: Normalizer) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.normalizer = normalizer

    def prepare(self, obs: dict[str, Any]) -> dict[str, Tensor]:
        """Observation dict -> CPU tensors (all batch-first, stored in the replay):

        ``images`` uint8 ``[B, camera_slots, S, S, 3]``, ``image_masks`` bool ``[B, camera_slots]``, ``tokens`` long ``[B, L]``,
        ``token_mask`` bool ``[B, L]``, ``state`` float32 ``[B, max_state_dim]`` (normalised, padded),
        ``raw_state`` float32 ``[B, state_env_dim]``.
        """
        needed = (keys.STATES, keys.TASK_DESCRIPTIONS) + ((keys.MAIN_IMAGES,) if self.cfg.obs_mode == "rgb" else ())
        for k in needed:
            if k not in obs:
                raise KeyError(f"observation lacks {k!r} (has {sorted(obs)})")
        texts = list(obs[keys.TASK_DESCRIPTIONS])
        images, image_masks = self._images(obs, len(texts))
        b = images.shape[0]
        if len(texts) != b:
            raise ValueError(f"{len(texts)} task descriptions for a batch of {b} observations")
        if len(texts) != b:
            raise ValueError(f"{len(texts)} task descriptions for a batch of {b} observations")
        raw = torch.as_tensor(np.asarray(obs[keys.STATES]), dtype=torch.float32)
        if raw.dim() != 2 or raw.shape[0] != b:
            raise ValueError(f"states must be [B={b}, D], got {tuple(raw.shape)}")
        if raw.shape[1] < self.cfg.state_env_dim:
            raise ConfigError(f"The env gives {raw.shape[1]}-d states but the policy reads {self.cfg.state_env_dim}.",
                              "Use the observation mode the policy was trained with (obs_mode state: 14-d).")
        raw = raw[:, : self.cfg.state_env_dim]
        state = self.normalizer.normalize(raw, "state")
        if self.cfg.discrete_state_input:
            encode_with_state = getattr(self.tokenizer, "encode_with_state", None)
            if encode_with_state is None:
                raise ConfigError("discrete_state_input needs a tokenizer with encode_with_state.",
                                  "Use the built-in or a file tokenizer from vlarl_cli.policies.tokenization.")
            binned = state
            if self.cfg.state_prompt_padded:  # LeRobot: pad to max_state_dim, then bin
                binned = torch.nn.functional.pad(state, (0, self.cfg.max_state_dim - state.shape[-1]))
            tokens, token_mask = encode_with_state(texts, binned, self.cfg.max_token_len)
        else:
            tokens, token_mask = self.tokenizer.encode(texts, self.cfg.max_token_len)
        state = torch.nn.functional.pad(state, (0, self.cfg.max_state_dim - state.shape[-1]))
        return {"images": images, "image_masks": image_masks, "tokens": tokens, "token_mask": token_mask,
                "state": state, "raw_state": raw}

    def _images(self, obs: dict[str, Any], batch: int) -> tuple[Tensor, Tensor]:
        """``images`` uint8 ``[B, slots, S, S, 3]`` and ``image_masks`` bool ``[B, slots]``; openpi: an empty
        slot is zeros and masked. ``obs_mode: state`` masks every slot (the model then skips them all)."""
        s, slots_n = self.cfg.image_size, self.cfg.camera_slots
        if self.cfg.obs_mode == "state":
            return (torch.zeros(batch, slots_n, s, s, 3, dtype=torch.uint8),
                    torch.zeros(batch, slots_n, dtype=torch.bool))
        main = resize_with_pad(obs[keys.MAIN_IMAGES], s, s)
        b = main.shape[0]
        wrist_in = obs.get(keys.WRIST_IMAGES)
        wrist = resize_with_pad(wrist_in, s, s) if wrist_in is not None else torch.zeros_like(main)
        slots = [main, wrist] + [torch.zeros_like(main)] * (slots_n - 2)
        masks = [torch.ones(b, dtype=torch.bool), torch.full((b,), wrist_in is not None, dtype=torch.bool)]
        masks += [torch.zeros(b, dtype=torch.bool)] * (slots_n - 2)
        return torch.stack(slots, dim=1), torch.stack(masks, dim=1)

    def actions_to_env(self, chunk: Tensor, raw_state: Tensor) -> Tensor:
        """Model-space chunk ``[B, H, max_action_dim]`` -> env actions ``[B, C, A]`` float32."""
        cfg = self.cfg
        x = self.normalizer.unnormalize(chunk.float(), "actions")
        if cfg.extra_delta_transform:
            # openpi AbsoluteActions(make_bool_mask(6, -1)): first 6 dims relative to the state.
            d = min(6, raw_state.shape[-1])
            x = x.clone()
            x[..., :d] += raw_state[:, None, :d].to(x)
        x = x[:, : cfg.num_action_chunks, : cfg.action_env_dim]
        g = gripper_to_env(cfg.gripper, x[..., -1])
        return torch.cat([x[..., :-1], g[..., None].to(x.dtype)], dim=-1)
