"""Episode recording and rendering.

- :mod:`~vlarl_cli.video.episodes`: the crash-safe episode log of ``vlarl eval`` (JSONL + per-episode actions).
- :mod:`~vlarl_cli.video.resim`: re-simulate a recorded episode, or run a live one, rendering every step.
- :mod:`~vlarl_cli.video.render`: info panel, montage, side by side (numpy + PIL).
- :mod:`~vlarl_cli.video.writer`: MP4 encoding (imageio + its bundled ffmpeg).
- :mod:`~vlarl_cli.video.api`: what ``vlarl video`` calls.
"""
