"""Turn episodes into pictures: both cameras side by side, an info panel, montages, A/B comparisons.

Every function works on uint8 arrays ``[T, H, W, 3]`` and is pure numpy + PIL (PIL's built-in scalable
font, so no font files are needed); :func:`vlarl_cli.video.writer.write_mp4` encodes the result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vlarl_cli.video.writer import compose_frames

GREEN, RED, WHITE, GREY, BG = (80, 220, 100), (240, 80, 80), (235, 235, 235), (160, 160, 160), (24, 24, 28)


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover - Pillow < 10.1 has only the fixed bitmap font
        return ImageFont.load_default()


def _wrap(text: str, font: Any, width: int, draw: Any) -> list[str]:
    words, lines, line = text.split(), [], ""
    for w in words:
        trial = f"{line} {w}".strip()
        if draw.textlength(trial, font=font) <= width or not line:
            line = trial
        else:
            lines.append(line)
            line = w
    return [*lines, line] if line else lines


def upscale(frames: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour upscaling ``[T, H, W, 3] -> [T, H * f, W * f, 3]`` (keeps pixels exact)."""
    if factor == 1:
        return frames
    return frames.repeat(factor, axis=1).repeat(factor, axis=2)


def annotate(episode: Any, *, scale: int | None = None, title: str = "", compact: bool = False) -> np.ndarray:
    """Frames of a :class:`~vlarl_cli.video.resim.SimEpisode` with an info panel underneath.

    Panel: the task instruction, ``step t / S``, the action that led to the frame
    (dx dy dz | droll dpitch dyaw | gripper, LIBERO convention), and the status (green SUCCESS from the
    step it succeeded, red FAILED on the last frame of a failed episode).

    ``compact`` (montage tiles): only the title, the step and the status, in a font sized for small tiles.

    Returns:
        ``[S + 1, H * scale + panel, 2 * W * scale, 3]`` uint8.
    """
    from PIL import Image, ImageDraw

    images = compose_frames(episode.frames)  # [T, H, 2W, 3]
    h = images.shape[1]
    scale = scale if scale is not None else max(1, 256 // h)
    images = upscale(images, scale)
    t_total, height, width = images.shape[:3]
    size = max(11 if compact else 12, width // (24 if compact else 36))
    font = _font(size)
    probe = ImageDraw.Draw(Image.new("RGB", (width, 10)))
    header = ([title] if title else []) + ([] if compact else _wrap(f'"{episode.language}"', font, width - 12, probe))
    line_h = size + 5
    panel_h = line_h * (len(header) + (2 if compact else 3)) + 8
    first_success = int(np.argmax(episode.step_success)) + 1 if episode.step_success.any() else None
    out = np.empty((t_total, height + panel_h, width, 3), np.uint8)
    for t in range(t_total):
        canvas = Image.new("RGB", (width, height + panel_h), BG)
        canvas.paste(Image.fromarray(images[t]), (0, 0))
        draw = ImageDraw.Draw(canvas)
        y = height + 4
        for line in header:
            draw.text((6, y), line, fill=WHITE, font=font)
            y += line_h
        draw.text((6, y), f"step {t} / {episode.steps}", fill=WHITE, font=font)
        y += line_h
        if not compact:
            if t >= 1 and t - 1 < len(episode.actions):
                a = episode.actions[t - 1]
                text = (f"action  {a[0]:+.2f} {a[1]:+.2f} {a[2]:+.2f} | {a[3]:+.2f} {a[4]:+.2f} {a[5]:+.2f} | "
                        f"grip {a[6]:+.2f}")
            else:
                text = "action  (settled start)"
            draw.text((6, y), text, fill=GREY, font=font)
            y += line_h
        if first_success is not None and t >= first_success:
            draw.text((6, y), f"SUCCESS at step {first_success}", fill=GREEN, font=font)
        elif t == t_total - 1 and not episode.success:
            draw.text((6, y), "FAILED (step limit)" if episode.steps else "FAILED", fill=RED, font=font)
        else:
            draw.text((6, y), "running", fill=GREY, font=font)
        out[t] = np.asarray(canvas)
    return out


def pad_time(clip: np.ndarray, length: int) -> np.ndarray:
    """Hold the last frame so ``clip`` has ``length`` frames."""
    if len(clip) >= length:
        return clip[:length]
    return np.concatenate([clip, np.repeat(clip[-1:], length - len(clip), axis=0)])


def _pad_space(clip: np.ndarray, h: int, w: int) -> np.ndarray:
    out = np.full((clip.shape[0], h, w, 3), BG, np.uint8)
    out[:, : clip.shape[1], : clip.shape[2]] = clip
    return out


def montage(clips: list[np.ndarray], cols: int | None = None, gap: int = 4) -> np.ndarray:
    """Tile clips ``[T_i, H_i, W_i, 3]`` in a grid; shorter clips hold their last frame.

    Returns:
        ``[max T_i, rows * (H + gap) - gap, cols * (W + gap) - gap, 3]`` uint8 with H, W the largest sizes.
    """
    if not clips:
        raise ValueError("montage needs at least one clip")
    cols = cols or int(np.ceil(np.sqrt(len(clips))))
    rows = int(np.ceil(len(clips) / cols))
    t = max(len(c) for c in clips)
    h, w = max(c.shape[1] for c in clips), max(c.shape[2] for c in clips)
    grid = np.full((t, rows * (h + gap) - gap, cols * (w + gap) - gap, 3), BG, np.uint8)
    for i, clip in enumerate(clips):
        r, c = divmod(i, cols)
        grid[:, r * (h + gap) : r * (h + gap) + h, c * (w + gap) : c * (w + gap) + w] = \
            _pad_space(pad_time(clip, t), h, w)
    return grid


def side_by_side(a: np.ndarray, b: np.ndarray, gap: int = 6) -> np.ndarray:
    """Two clips next to each other (same time axis; the shorter holds its last frame)."""
    return montage([a, b], cols=2, gap=gap)
