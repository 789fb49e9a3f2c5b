"""OpenVLA configuration: the fields RLinf's OFT code reads (norm_stats, n_action_bins, text_config,
pad_to_multiple_of) plus ``vision``: the tower sizes of the (tiny) timm backbones to build."""

from typing import Any

from transformers import LlamaConfig, PretrainedConfig


class OpenVLAConfig(PretrainedConfig):
    model_type = "openvla"

    def __init__(self, norm_stats: Any = None, n_action_bins: int = 256, text_config: Any = None,
                 pad_to_multiple_of: int = 64, vision: Any = None, **kwargs: Any) -> None:
        self.norm_stats, self.n_action_bins = norm_stats, n_action_bins
        self.text_config = text_config if isinstance(text_config, LlamaConfig) else LlamaConfig(**(text_config or {}))
        self.pad_to_multiple_of = pad_to_multiple_of
        self.vision = dict(vision or {})
        super().__init__(**kwargs)
