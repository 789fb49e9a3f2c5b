"""Write episode frames to MP4 (imageio + its bundled ffmpeg): main and wrist cameras side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def compose_frames(episode: dict[str, np.ndarray]) -> np.ndarray:
    """``{"main": [T, H, W, 3], "wrist": [T, H, W, 3]}`` -> ``[T, H, W * cams, 3]`` uint8."""
    cams = [episode[k] for k in ("main", "wrist") if k in episode]
    if not cams:
        raise ValueError(f"episode has no camera frames (keys: {sorted(episode)})")
    length = min(len(c) for c in cams)
    return np.concatenate([c[:length] for c in cams], axis=2).astype(np.uint8)


def overlay_text(frames: np.ndarray, lines: list[str]) -> np.ndarray:
    """Draw text lines at the top-left of every frame (PIL's built-in font; no font files needed)."""
    from PIL import Image, ImageDraw

    out = np.empty_like(frames)
    for i, frame in enumerate(frames):
        image = Image.fromarray(frame)
        draw = ImageDraw.Draw(image)
        for j, line in enumerate(lines):
            draw.text((3, 2 + 11 * j), line, fill=(255, 255, 255), stroke_width=1, stroke_fill=(0, 0, 0))
        out[i] = np.asarray(image)
    return out


def write_mp4(path: Path, frames: np.ndarray, fps: int = 20) -> Path:
    """Write ``[T, H, W, 3]`` uint8 frames as H.264 MP4 (atomically: temp name, then rename)."""
    import os

    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.mp4")
    # even sizes for yuv420p; macro_block_size=1 keeps the exact size when it is already even
    h, w = frames.shape[1] - frames.shape[1] % 2, frames.shape[2] - frames.shape[2] % 2
    with imageio.get_writer(tmp, fps=fps, codec="libx264", quality=7, macro_block_size=1,
                            ffmpeg_log_level="error") as writer:
        for frame in frames[:, :h, :w]:
            writer.append_data(frame)  # type: ignore[attr-defined]
    os.replace(tmp, path)
    return path


def write_episode_video(path: Path, episode: dict[str, np.ndarray], fps: int = 20,
                        caption: str | None = None) -> Path:
    frames = compose_frames(episode)
    if caption:
        frames = overlay_text(frames, [caption])
    return write_mp4(path, frames, fps=fps)
