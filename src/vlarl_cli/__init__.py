"""vlarl: online RL post-training for Vision-Language-Action robot policies."""

__version__ = "0.1.0"
