"""Camera pixels for GR00T exactly as the two Isaac-GR00T releases prepare them at evaluation time.

N1.5 (``n1.5-release`` ``gr00t/data/transform/video.py`` with RLinf's ``LiberoFrankaDataConfig``):
uint8 -> float / 255 -> torchvision ``CenterCrop(int(side * 0.95))`` (offset ``int(round((side - crop) / 2))``)
-> ``Resize(224, bilinear, antialias=True)`` -> ``VideoToNumpy``: ``(x * 255).to(uint8)`` (truncation) -> the
Eagle 2.5 image processor: ``x / 255``, ``(x - 0.5) / 0.5``. One 224 tile per image (256 tokens).

N1.6 (``n1.6.1-release`` ``gr00t/model/gr00t_n1d6/image_augmentations.py`` eval transform with the checkpoint's
``processor_config.json``: ``shortest_image_edge`` 256, ``crop_fraction`` 0.95, albumentations): letterbox to a
square (black bars), ``SmallestMaxSize(shortest_edge, cv2.INTER_AREA)``, ``FractionalCenterCrop`` (``int(side *
fraction)``, offset ``(side - crop) // 2``), ``SmallestMaxSize`` again, all on uint8; then the Eagle 3 processor's
``fetch_image`` resizes to the nearest multiple of 28 (``smart_resize``, PIL's default bicubic) and normalises
``(x / 255 - 0.5) / 0.5``. A 256 px edge becomes 252 px: 18 x 18 SigLIP-2 patches of 14 px, 9 x 9 = 81 tokens
after the 2 x 2 pixel shuffle (``pixels_per_token`` 784).

OpenCV's INTER_AREA is written out here (``cv::resize``'s area table when shrinking, in float; its area-mode
linear coefficients in 11-bit fixed point when enlarging) so the project does not depend on OpenCV.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["area_resize", "area_weights", "n15_camera_uint8", "n16_camera_uint8", "preprocess_images_n15",
           "preprocess_images_n16", "smart_size"]


def _check(images: Tensor) -> None:
    if images.dim() != 4 or images.shape[-1] != 3 or images.dtype != torch.uint8:
        raise ValueError(f"images must be uint8 [B, H, W, 3], got {images.dtype} {tuple(images.shape)}")


def n15_camera_uint8(images: Tensor, image_size: int = 224, crop_fraction: float = 0.95) -> Tensor:
    """uint8 [B, H, W, 3] -> the uint8 [B, image_size, image_size, 3] frames N1.5 hands its Eagle processor."""
    _check(images)
    x = images.permute(0, 3, 1, 2).float() / 255.0
    h, w = x.shape[-2:]
    ch, cw = int(h * crop_fraction), int(w * crop_fraction)
    top, left = round((h - ch) / 2.0), round((w - cw) / 2.0)  # torchvision center_crop
    x = x[:, :, top: top + ch, left: left + cw]
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False, antialias=True)
    return (x * 255).to(torch.uint8).permute(0, 2, 3, 1)  # VideoToNumpy truncates


def _normalise(frames: Tensor) -> Tensor:
    """uint8 [B, S, S, 3] -> float32 [B, 3, S, S], Eagle image processors' ``(x / 255 - 0.5) / 0.5``."""
    return (frames.permute(0, 3, 1, 2).float() / 255.0 - 0.5) / 0.5


def preprocess_images_n15(images: Tensor, image_size: int = 224, crop_fraction: float = 0.95) -> Tensor:
    """uint8 [B, H, W, 3] -> float32 [B, 3, image_size, image_size] in [-1, 1] (N1.5 pipeline)."""
    return _normalise(n15_camera_uint8(images, image_size, crop_fraction))


@functools.lru_cache(maxsize=64)
def area_weights(src: int, dst: int) -> Tensor:
    """[dst, src] float64 weights of OpenCV ``INTER_AREA`` when shrinking (``computeResizeAreaTab``)."""
    w = torch.zeros(dst, src, dtype=torch.float64)
    scale = src / dst
    for dx in range(dst):
        f1 = dx * scale
        f2 = f1 + scale
        cell = min(scale, src - f1)
        s1, s2 = math.ceil(f1), math.floor(f2)
        s2 = min(s2, src - 1)
        s1 = min(s1, s2)
        if s1 - f1 > 1e-3:
            w[dx, s1 - 1] += (s1 - f1) / cell
        for sx in range(s1, s2):
            w[dx, sx] += 1.0 / cell
        if f2 - s2 > 1e-3:
            w[dx, s2] += min(f2 - s2, 1.0, cell) / cell
    return w


@functools.lru_cache(maxsize=64)
def _enlarge_coefficients(src: int, dst: int) -> tuple[Tensor, Tensor]:
    """OpenCV's area-mode linear coefficients when enlarging, as its fixed-point uint8 path uses them:
    source index [dst] and the two weights [dst, 2] in units of 1/2048 (``INTER_RESIZE_COEF_BITS`` 11)."""
    inv = dst / src
    scale = 1.0 / inv
    index = torch.zeros(dst, dtype=torch.long)
    coef = torch.zeros(dst, 2, dtype=torch.int64)
    for dx in range(dst):
        sx = math.floor(dx * scale)
        fx = float(np.float32((dx + 1) - (sx + 1) * inv))
        fx = 0.0 if fx <= 0 else float(np.float32(fx - math.floor(fx)))
        if sx < 0:
            sx, fx = 0, 0.0
        if sx >= src - 1:
            sx, fx = src - 1, 0.0
        index[dx] = sx
        # saturate_cast<short>(float * 2048): round half to even
        coef[dx, 0] = int(np.rint(np.float32(np.float32(1.0 - fx) * 2048)))
        coef[dx, 1] = int(np.rint(np.float32(np.float32(fx) * 2048)))
    return index, coef


def _enlarge(images: Tensor, height: int, width: int) -> Tensor:
    """uint8 [B, H, W, C] enlarged with INTER_AREA exactly as OpenCV's fixed-point linear resize does it:
    a horizontal pass into int (value x 2048) and the SIMD vertical pass
    ``((((r0 >> 4) * b0) >> 16) + (((r1 >> 4) * b1) >> 16) + 2) >> 2``."""
    h, w = images.shape[1:3]
    x = images.to(torch.int64)
    xi, xc = _enlarge_coefficients(w, width)
    nxt = (xi + 1).clamp(max=w - 1)
    rows = x[:, :, xi] * xc[:, 0].view(1, 1, -1, 1) + x[:, :, nxt] * xc[:, 1].view(1, 1, -1, 1)  # [B, H, W', C]
    yi, yc = _enlarge_coefficients(h, height)
    ynxt = (yi + 1).clamp(max=h - 1)
    r0, r1 = rows[:, yi] >> 4, rows[:, ynxt] >> 4
    b0, b1 = yc[:, 0].view(1, -1, 1, 1), yc[:, 1].view(1, -1, 1, 1)
    out = (((r0 * b0) >> 16) + ((r1 * b1) >> 16) + 2) >> 2
    return out.clamp(0, 255).to(torch.uint8)


def area_resize(images: Tensor, height: int, width: int) -> Tensor:
    """uint8 [B, H, W, C] -> uint8 [B, height, width, C], OpenCV ``INTER_AREA`` (square scale factors)."""
    b, h, w, c = images.shape
    if (h, w) == (height, width):
        return images.clone()
    if height > h and width > w:
        return _enlarge(images, height, width)
    if h % height == 0 and w % width == 0:  # resizeAreaFast: integer block mean, rounded half up
        ky, kx = h // height, w // width
        total = images.to(torch.int64).view(b, height, ky, width, kx, c).sum(dim=(2, 4))
        return ((total + ky * kx // 2) // (ky * kx)).to(torch.uint8)
    wy, wx = area_weights(h, height), area_weights(w, width)
    x = images.double()
    x = torch.einsum("yh,bhwc->bywc", wy, x)
    x = torch.einsum("xw,bywc->byxc", wx, x)
    return x.round().clamp(0, 255).to(torch.uint8)


def _smallest_max_size(images: Tensor, size: int) -> Tensor:
    h, w = images.shape[1:3]
    scale = size / min(h, w)
    # albumentations 1.4 smallest_max_size: new side = round(side * scale)
    return area_resize(images, round(h * scale), round(w * scale))


def _letterbox(images: Tensor) -> Tensor:
    b, h, w, c = images.shape
    if h == w:
        return images
    side = max(h, w)
    out = torch.zeros(b, side, side, c, dtype=images.dtype)
    top, left = (side - h) // 2, (side - w) // 2
    out[:, top: top + h, left: left + w] = images
    return out


def smart_size(side: int, factor: int) -> int:
    """Eagle 3 ``smart_resize`` of a square side: nearest multiple of ``factor`` within
    [4, 4096] x ``factor``^2 pixels (``processing_eagle3_vl.py``: MIN_PIXELS / MAX_PIXELS)."""
    bar = max(factor, round(side / factor) * factor)
    if bar * bar > 4096 * factor * factor:
        bar = math.floor(bar / math.sqrt(bar * bar / (4096 * factor * factor)) / factor) * factor
    elif bar * bar < 4 * factor * factor:
        bar = math.ceil(side * math.sqrt(4 * factor * factor / (side * side)) / factor) * factor
    return bar


def _pil_resize(images: Tensor, size: int) -> Tensor:
    from PIL import Image

    if images.shape[1] == size and images.shape[2] == size:
        return images  # PIL returns a copy when the size does not change
    out = [np.asarray(Image.fromarray(img.numpy()).resize((size, size))) for img in images.cpu()]
    return torch.from_numpy(np.stack(out))


def n16_camera_uint8(images: Tensor, shortest_edge: int = 256, crop_fraction: float = 0.95) -> Tensor:
    """uint8 [B, H, W, 3] -> the albumentations eval transform's uint8 output (CPU)."""
    _check(images)
    x = _smallest_max_size(_letterbox(images.cpu()), shortest_edge)
    h, w = x.shape[1:3]
    ch, cw = max(1, int(h * crop_fraction)), max(1, int(w * crop_fraction))
    top, left = (h - ch) // 2, (w - cw) // 2
    return _smallest_max_size(x[:, top: top + ch, left: left + cw].contiguous(), shortest_edge)


def preprocess_images_n16(images: Tensor, *, shortest_edge: int = 256, crop_fraction: float = 0.95,
                          factor: int = 28) -> Tensor:
    """uint8 [B, H, W, 3] -> float32 [B, 3, S, S] in [-1, 1], ``S = smart_size(shortest_edge, factor)``."""
    x = _pil_resize(n16_camera_uint8(images, shortest_edge, crop_fraction), smart_size(shortest_edge, factor))
    return _normalise(x).to(images.device)
