"""GR00T N1.5 / N1.6 configuration: architecture dataclass with ``tiny`` / ``full`` presets, and the
RL-facing :class:`ModelSettings` that the lead's pydantic ``actor.model`` section maps onto.

Architecture facts (REFERENCE.md section 4; Isaac-GR00T ``gr00t/model/gr00t_n1.py``,
``gr00t/model/action_head/flow_matching_action_head.py``, ``gr00t/configs/model/gr00t_n1d6.py``):

* N1.5: Eagle 2.5 = SigLIP vision (1152 wide, 27 layers, 224 px / 14 px patches, no pixel shuffle,
  one-layer ``mlp1`` connector) + Qwen3-1.7B truncated to ``select_layer=12`` (2048 wide); action head =
  VL LayerNorm + 4-layer VL self-attention (32 x 64) + 16-layer DiT (32 heads x 48 = 1536) with
  cross-attention to VL tokens on even blocks, 32 future tokens, 32 embodiment slots, state 64, action 32.
* N1.6: Eagle 3 = SigLIP-2 (``Siglip2VisionModel``) + Qwen3 truncated at ``select_layer=16`` with the
  top 4 LLM layers tunable upstream; 32-layer AlternateVL-DiT (cross-attention alternates between text and
  image tokens); no VL self-attention, no future tokens; 128-d state/action space.

This module imports nothing heavy: building happens in :mod:`.modeling`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vlarl_cli.errors import ConfigError, did_you_mean, refuse_unknown
from vlarl_cli.model_types import MODEL_TYPES

__all__ = [
    "FSDP_WRAP_CLASSES",
    "MODEL_TYPE_TO_VERSION",
    "PRESETS",
    "TUNE_FLAGS",
    "VERSIONS",
    "Gr00tConfig",
    "ModelSettings",
    "preset",
    "trainability",
]

VERSIONS = ("n1.5", "n1.6")
PRESETS = ("tiny", "full")
#: the critic's pooling of the VL tokens (RLinf ``value_vlm_mode``): the only one implemented
VALUE_VLM_MODE = "mean_token"
#: RLinf ``model_type`` -> our version name (from the one table, :mod:`vlarl_cli.model_types`).
MODEL_TYPE_TO_VERSION: dict[str, str] = {name: t.version for name, t in MODEL_TYPES.items()
                                         if t.family == "gr00t" and t.version is not None}
#: Transformer layer classes FSDP wraps one by one (RLinf ``fsdp_config.wrap_policy``); the DiT/VL
#: blocks are our own ``BasicTransformerBlock``.
FSDP_WRAP_CLASSES = ("Qwen3DecoderLayer", "Siglip2EncoderLayer", "SiglipEncoderLayer", "BasicTransformerBlock")


@dataclass(frozen=True)
class Gr00tConfig:
    """Architecture of one GR00T model. Frozen; :meth:`validate` runs on construction."""

    version: str = "n1.5"  # "n1.5" | "n1.6"

    # --- vision tower (SigLIP for N1.5 as upstream Eagle 2.5 builds it; SigLIP-2 for N1.6) ---
    vision_kind: str = "siglip"  # "siglip" (SiglipVisionModel) | "siglip2" (Siglip2VisionModel)
    vision_hidden_size: int = 1152
    vision_intermediate_size: int = 4304
    vision_num_layers: int = 27
    vision_num_heads: int = 16
    image_size: int = 224  # square side the vision tower sees (N1.6: smart_size(shortest_image_edge, 28) = 252)
    patch_size: int = 14
    crop_fraction: float = 0.95  # centre crop before the resize (N1.5 VideoCrop scale, N1.6 crop_fraction)
    shortest_image_edge: int | None = None  # N1.6 processor_config.json shortest_image_edge (256); None for N1.5
    vision_num_patches: int | None = None  # SigLIP-2 position table size (N1.6: 256 = 16 x 16); None: the grid
    vision_use_head: bool = True  # SigLIP attention-pool head: kept as weights, never used in forward
    use_pixel_shuffle: bool = False  # Eagle: 2x2 pixel shuffle before mlp1 (downsample_ratio 0.5)
    # channel order of the 2x2 merge: "eagle2" (InternVL-style pixel_shuffle on [N, W, H, C], Eagle 2.5) or
    # "unshuffle" (torch pixel_unshuffle on [N, C, H, W], Eagle 3 ``pixel_shuffle_back``)
    pixel_shuffle_kind: str = "eagle2"
    mlp_connector_layers: int = 1  # 1: Linear; 2: LayerNorm-Linear-GELU-Linear

    # --- language model (Qwen3), truncated to the first `select_layer` decoder layers ---
    llm_hidden_size: int = 2048
    llm_intermediate_size: int = 6144
    llm_num_heads: int = 16
    llm_num_kv_heads: int = 8
    llm_head_dim: int = 128
    vocab_size: int = 151680
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 40960
    select_layer: int = 12  # decoder layers kept (upstream pops the rest)
    image_token_id: int = 151669
    pad_token_id: int = 151643  # Qwen's <|endoftext|>: the LM's padding_idx (upstream left-padding id)
    prompt_pad_id: int = 0  # id RLinf right-pads the prompt with (F.pad value 0), attention mask 0
    padding_value: int | None = None  # RLinf rl_head_config.padding_value (570 in the full presets): fixed
    #                                   prompt length; None: images + max_text_tokens
    project_to_dim: int | None = None  # N1.5 backbone.eagle_linear (None = identity)
    max_text_tokens: int = 58  # non-image prompt tokens when padding_value is None (570 = 512 + 58 for N1.5)
    formalize_language: bool = False  # lower-case + strip punctuation (GR00TTransform; N1.6 default True)
    prompt_style: str = "eagle_chat"  # "eagle_chat" (Eagle chat template, real tokenizer) | "plain" (tiny)

    # --- action head ---
    action_dim: int = 32  # max action dim of the model (7-d LIBERO actions are zero-padded)
    state_dim: int = 64  # max state dim
    action_horizon: int = 16
    hidden_size: int = 1024  # embodiment MLP hidden width and DiT output width
    input_embedding_dim: int = 1536  # token width inside the DiT (= dit_num_heads * dit_head_dim)
    backbone_embedding_dim: int = 2048  # VL token width seen by the head (cross-attention dim)
    dit_num_layers: int = 16
    dit_num_heads: int = 32
    dit_head_dim: int = 48
    dropout: float = 0.2  # DiT / VL-attention dropout (replaced by Identity when disable_dropout)
    vl_self_attention_layers: int = 4  # N1.5 only; 0 disables
    vl_num_heads: int = 32
    vl_head_dim: int = 64
    use_vlln: bool = True
    num_future_tokens: int = 32  # N1.5 only; 0 for N1.6
    add_pos_embed: bool = True
    max_seq_len: int = 1024
    num_embodiments: int = 32
    num_timestep_buckets: int = 1000
    alternate_vl_dit: bool = False  # N1.6: cross-attention alternates non-image / image tokens
    attend_text_every_n_blocks: int = 2
    use_attention_mask: bool = False  # N1.5's DiT ignores the VL padding mask upstream; N1.6 uses it
    # The trainable set. N1.6: the checkpoint config.json's flags (Gr00tN1d6Config defaults below), applied by
    # Isaac-GR00T's EagleBackbone / Gr00tN1d6ActionHead.set_trainable_parameters (RLinf's fork, n1.6.1-release
    # 5dc80c4a; N1.5: n1.5-release 4af2b622 gr00t_n1.py from_pretrained); RLinf (a3816b59,
    # rlinf/models/embodiment/gr00t/gr00t_n1d6/__init__.py) passes none and its optimiser takes every tensor that
    # requires grad. N1.5: RLinf passes tune_visual=False, tune_llm=False and GR00T_N1_5.from_pretrained's
    # defaults tune_projector / tune_diffusion_model True apply (the config.json's flags are not read there).
    tune_llm: bool = False
    tune_visual: bool = False  # vision tower and mlp1
    tune_top_llm_layers: int | None = None  # N1.6 top LLM layers trained; None: 4 for N1.6 (its default), 0 for N1.5
    tune_projector: bool = True  # state / action encoders, action decoder, position embedding
    tune_diffusion_model: bool = True  # the DiT
    tune_vlln: bool = True  # N1.6's VL LayerNorm (N1.5 always trains it)

    def __post_init__(self) -> None:
        if self.tune_top_llm_layers is None:
            object.__setattr__(self, "tune_top_llm_layers", 4 if self.version == "n1.6" else 0)  # frozen dataclass
        self.validate()

    def validate(self) -> None:
        """Check cross-field rules; raises :class:`ConfigError` naming the rule and the values."""
        if self.version not in VERSIONS:
            raise ConfigError(f'Unknown GR00T version "{self.version}".{did_you_mean(self.version, VERSIONS)}',
                              f"Use one of {', '.join(VERSIONS)}.")
        if self.pixel_shuffle_kind not in ("eagle2", "unshuffle"):
            raise ConfigError(f'pixel_shuffle_kind must be "eagle2" or "unshuffle", got "{self.pixel_shuffle_kind}".',
                              "Fix pixel_shuffle_kind in the GR00T config.")
        if self.vision_kind not in ("siglip", "siglip2"):
            raise ConfigError(f'vision_kind must be "siglip" or "siglip2", got "{self.vision_kind}".',
                              "Fix vision_kind in the GR00T config.")
        if self.version == "n1.6":
            from vlarl_cli.policies.gr00t.images import smart_size

            if self.shortest_image_edge is None:
                raise ConfigError("GR00T N1.6 needs shortest_image_edge (processor_config.json).",
                                  "Set shortest_image_edge (256 for the released checkpoints).")
            want = smart_size(self.shortest_image_edge, self.image_factor)
            if self.image_size != want:
                raise ConfigError(f"N1.6 image_size {self.image_size} does not match its processor: shortest edge "
                                  f"{self.shortest_image_edge} resized to a multiple of {self.image_factor} is {want}.",
                                  f"Set image_size: {want}.")
        if not 0.0 < self.crop_fraction <= 1.0:
            raise ConfigError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}.", "Fix crop_fraction.")
        if self.image_size % self.patch_size:
            raise ConfigError(f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}.",
                              "Choose an image_size divisible by the patch size.")
        grid = self.image_size // self.patch_size
        if self.use_pixel_shuffle and grid % 2:
            raise ConfigError(f"pixel shuffle needs an even patch grid, got {grid}x{grid}.",
                              "Change image_size / patch_size or disable use_pixel_shuffle.")
        if self.dit_num_heads * self.dit_head_dim != self.input_embedding_dim:
            raise ConfigError(
                f"DiT width dit_num_heads*dit_head_dim = {self.dit_num_heads}*{self.dit_head_dim} must equal "
                f"input_embedding_dim = {self.input_embedding_dim}.", "Make the three numbers consistent.")
        vl_width = self.project_to_dim or self.llm_hidden_size
        if vl_width != self.backbone_embedding_dim:
            raise ConfigError(f"backbone_embedding_dim {self.backbone_embedding_dim} must equal the backbone "
                              f"output width {vl_width} (project_to_dim or llm_hidden_size).",
                              "Set backbone_embedding_dim to the backbone output width.")
        if self.vl_self_attention_layers and self.vl_num_heads * self.vl_head_dim != self.backbone_embedding_dim:
            raise ConfigError(f"VL self-attention width {self.vl_num_heads}*{self.vl_head_dim} must equal "
                              f"backbone_embedding_dim {self.backbone_embedding_dim}.",
                              "Fix vl_num_heads / vl_head_dim.")
        if self.alternate_vl_dit and self.dit_num_layers % 2:
            raise ConfigError("alternate_vl_dit needs an even number of DiT layers (cross / self pairs), got "
                              f"{self.dit_num_layers}.", "Use an even dit_num_layers.")
        if not 1 <= self.select_layer:
            raise ConfigError(f"select_layer must be >= 1, got {self.select_layer}.", "Keep at least one LLM layer.")
        if self.image_token_id >= self.vocab_size or self.pad_token_id >= self.vocab_size:
            raise ConfigError(f"image_token_id {self.image_token_id} / pad_token_id {self.pad_token_id} must be "
                              f"< vocab_size {self.vocab_size}.", "Fix the token ids or the vocabulary size.")
        if self.prompt_style not in ("plain", "eagle_chat"):
            raise ConfigError(f'prompt_style must be "plain" or "eagle_chat", got "{self.prompt_style}".',
                              "Fix prompt_style in the GR00T config.")
        if self.max_text_tokens < 1:
            raise ConfigError(f"max_text_tokens must be >= 1, got {self.max_text_tokens}.",
                              "Reserve at least one prompt token for the task description.")
        if self.action_horizon + 1 + self.num_future_tokens > self.max_seq_len:
            raise ConfigError("state + future + action tokens exceed max_seq_len.", "Raise max_seq_len.")

    @property
    def image_factor(self) -> int:
        """Side of the pixel block one VL token covers: patch x 2 with the pixel shuffle (Eagle 3: 28)."""
        return self.patch_size * (2 if self.use_pixel_shuffle else 1)

    def prompt_length(self, num_images: int) -> int:
        """Padded prompt length: RLinf's fixed ``padding_value``, else images + ``max_text_tokens``."""
        if self.padding_value is not None:
            return self.padding_value
        return num_images * self.tokens_per_image + self.max_text_tokens

    @property
    def tokens_per_image(self) -> int:
        """VL tokens one camera image contributes: ``(image_size / patch)^2``, / 4 with pixel shuffle."""
        grid = self.image_size // self.patch_size
        return grid * grid // (4 if self.use_pixel_shuffle else 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Gr00tConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise a ConfigError with a suggestion."""
        refuse_unknown(data, (f.name for f in dataclasses.fields(cls)), "GR00T config field",
                       "Remove or rename the field.")
        return cls(**data)

    def replace(self, **changes: Any) -> Gr00tConfig:
        refuse_unknown(changes, (f.name for f in dataclasses.fields(self)), "GR00T config field",
                       "Check the spelling against vlarl_cli.policies.gr00t.config.Gr00tConfig.")
        return dataclasses.replace(self, **changes)


def _full_n15() -> Gr00tConfig:
    return Gr00tConfig(version="n1.5", padding_value=570)


def _full_n16() -> Gr00tConfig:
    # nvidia/GR00T-N1.6-3B as Isaac-GR00T n1.6.1-release builds it (numbers and sources in
    # tests/fixtures/gr00t/gr00t_n1d6_3b.json): Eagle-Block2A-2B-v2 = SigLIP-2 (patch 14, 256-entry position
    # table, 2x2 pixel shuffle, 2-layer mlp1) + Qwen3-1.7B cut at layer 16; the processor's 256 px shortest
    # edge becomes 252 px (18 x 18 patches, 81 tokens per image); AlternateVL-DiT 32 x (32 x 48); the
    # checkpoint's config.json: action_horizon 50, max_state_dim / max_action_dim 128 (fine-tuned
    # checkpoints keep them; LIBERO reads the first 16 steps and 7 dims).
    return Gr00tConfig(
        version="n1.6", vision_kind="siglip2", image_size=252, patch_size=14, shortest_image_edge=256,
        vision_num_patches=256, use_pixel_shuffle=True,
        pixel_shuffle_kind="unshuffle", mlp_connector_layers=2, select_layer=16, formalize_language=True,
        action_dim=128, state_dim=128, action_horizon=50, dit_num_layers=32, vl_self_attention_layers=0,
        num_future_tokens=0, alternate_vl_dit=True, use_attention_mask=True, padding_value=570)


_TINY_COMMON: dict[str, Any] = dict(
    vision_hidden_size=32, vision_intermediate_size=64, vision_num_layers=2, vision_num_heads=2,
    image_size=32, patch_size=8,
    llm_hidden_size=64, llm_intermediate_size=128, llm_num_heads=4, llm_num_kv_heads=2, llm_head_dim=16,
    vocab_size=320, image_token_id=300, pad_token_id=0, max_position_embeddings=512, select_layer=2,
    max_text_tokens=160,  # the byte-level tiny tokenizer: every LIBERO instruction (<= ~120 chars) fits
    prompt_style="plain", hidden_size=32, input_embedding_dim=48, backbone_embedding_dim=64,
    dit_num_layers=4, dit_num_heads=4, dit_head_dim=12, vl_num_heads=4, vl_head_dim=16,
    max_seq_len=64, num_timestep_buckets=1000)


def _tiny_n15() -> Gr00tConfig:
    return Gr00tConfig(version="n1.5", vl_self_attention_layers=2, num_future_tokens=4, **_TINY_COMMON)


def _tiny_n16() -> Gr00tConfig:
    return Gr00tConfig(
        version="n1.6", vision_kind="siglip2", use_pixel_shuffle=True, pixel_shuffle_kind="unshuffle",
        mlp_connector_layers=2, shortest_image_edge=32,
        formalize_language=True, action_dim=128, state_dim=128, vl_self_attention_layers=0, num_future_tokens=0,
        alternate_vl_dit=True, use_attention_mask=True, **_TINY_COMMON)


_PRESET_TABLE = {("tiny", "n1.5"): _tiny_n15, ("full", "n1.5"): _full_n15,
                 ("tiny", "n1.6"): _tiny_n16, ("full", "n1.6"): _full_n16}


def preset(name: str, version: str = "n1.5") -> Gr00tConfig:
    """The ``tiny`` (CPU tests, builds in milliseconds) or ``full`` (real dimensions) architecture.

    ``version`` is "n1.5" or "n1.6"; RLinf ``model_type`` names (gr00t, gr00t_n1d6) are accepted too.
    """
    version = MODEL_TYPE_TO_VERSION.get(version, version)
    if version not in VERSIONS:
        raise ConfigError(f'Unknown GR00T version "{version}".{did_you_mean(version, VERSIONS)}',
                          f"Use one of {', '.join(VERSIONS)} (or model_type gr00t / gr00t_n1d6).")
    if name not in PRESETS:
        raise ConfigError(f'Unknown GR00T preset "{name}".{did_you_mean(name, PRESETS)}',
                          f"Use one of {', '.join(PRESETS)}.")
    return _PRESET_TABLE[(name, version)]()


@dataclass
class ModelSettings:
    """RL-facing model settings (field names follow RLinf's ``actor.model`` for GR00T recipes).

    The lead's pydantic ``ModelConfig`` maps onto this plain dataclass; :func:`vlarl_cli.policies.gr00t.build_policy` consumes it.
    """

    model_type: str = "gr00t"  # gr00t (N1.5) | gr00t_n1d6 (N1.6)
    model_path: str | None = None  # checkpoint folder (vlarl / gr00t_n15 / gr00t_n16 layout)
    preset: str | None = None  # "tiny" | "full" when no model_path
    precision: str | None = None  # bf16 / fp16 / fp32 (None: fp32); CPU always fp32
    action_dim: int = 7  # env action dims (LIBERO 7)
    num_action_chunks: int = 5  # env steps executed of the 16 predicted
    denoising_steps: int = 4  # K
    noise_method: str = "flow_sde"  # ode | flow_sde | flow_cps | flow_noise
    noise_level: float = 0.5
    joint_logprob: bool = False
    action_noise_scale: float | None = None  # None: 0.1 for N1.6 (RLinf), 0 for N1.5
    add_value_head: bool = True
    value_after_vlm: bool | None = None  # True: value reads only the mean VL token (RLinf use_vlm_value);
    #                                      None: use_vlm_value, else False (VL mean + state token)
    # RLinf rl_head_config keys whose behaviour is built in (checked, never ignored):
    use_vlm_value: bool | None = None  # RLinf's name for value_after_vlm (gr00t_action_model.py get_value)
    value_vlm_mode: str | None = None  # pooling of the VL tokens for the critic: only mean_token is implemented
    padding_value: int | None = None  # fixed padded prompt length: must equal the model's (570 in the full presets)
    # RLinf's GR00T code never reads detach_critic_input (no detach in rlinf/models/embodiment/gr00t): the value
    # loss trains the shared layers that require grad. vlarl does the same and says so when a recipe sets it
    detach_critic_input: bool | None = None
    value_hidden: tuple[int, ...] = (1024, 512, 256)  # RLinf GR00T value MLP widths
    disable_dropout: bool = True  # dropout -> Identity so recomputed log-probs are exact
    embodiment_tag: str | None = None  # None: libero_franka (N1.5) / libero_panda (N1.6)
    # The trainable set: None takes the checkpoint / preset config's (Gr00tConfig.tune_*, as Isaac-GR00T and
    # RLinf); a value overrides it, and one that differs from the config's is printed as a deviation from RLinf
    tune_visual: bool | None = None
    tune_llm: bool | None = None
    tune_top_llm_layers: int | None = None
    tune_projector: bool | None = None
    tune_diffusion_model: bool | None = None
    tune_vlln: bool | None = None
    train_expert_only: bool | None = None  # True: every backbone tensor frozen (head only); None / False: as above
    is_lora: bool = False
    lora_rank: int = 32
    use_proprio: bool = True  # False feeds a zero state
    tokenizer_path: str | None = None  # Eagle tokenizer folder: vocab.json + merges.txt (+ added tokens) or tokenizer.json
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        if self.model_type not in MODEL_TYPE_TO_VERSION:
            raise ConfigError(
                f'model_type "{self.model_type}" is not a GR00T model.'
                f"{did_you_mean(self.model_type, list(MODEL_TYPE_TO_VERSION))}",
                f"Use one of {', '.join(MODEL_TYPE_TO_VERSION)}.")
        if self.is_lora:
            raise ConfigError("LoRA training is not implemented for GR00T (is_lora: true).",
                              "Set actor.model.is_lora: false; GR00T RL trains the action head only.")
        if self.model_path is None and self.preset is None:
            raise ConfigError("GR00T needs model_path (a checkpoint folder) or preset (tiny / full).",
                              "Set actor.model.model_path or actor.model.preset.")
        if self.preset is not None and self.preset not in PRESETS:
            raise ConfigError(f'Unknown GR00T preset "{self.preset}".{did_you_mean(self.preset, PRESETS)}',
                              f"Use one of {', '.join(PRESETS)}.")
        if self.num_action_chunks < 1:
            raise ConfigError(f"num_action_chunks must be >= 1, got {self.num_action_chunks}.",
                              "Execute at least one action per chunk.")
        if self.noise_method == "reinflow":
            self.noise_method = "flow_noise"
        self.value_hidden = tuple(self.value_hidden)
        self._resolve_value_keys()

    def _resolve_value_keys(self) -> None:
        """RLinf's ``use_vlm_value`` is our ``value_after_vlm``; ``value_vlm_mode`` must be the pooling we
        implement (RLinf ``rlinf/models/embodiment/gr00t/gr00t_n1d5/gr00t_action_model.py`` ``get_value``:
        ``mean_token`` averages every VL token, padding included; ``last_token`` / ``first_token`` are not
        implemented here)."""
        if self.value_vlm_mode is not None and self.value_vlm_mode != VALUE_VLM_MODE:
            raise ConfigError(f'GR00T value_vlm_mode "{self.value_vlm_mode}" is not implemented: the critic reads '
                              f"the mean of all VL tokens ({VALUE_VLM_MODE}).",
                              f"Set actor.model.rl_head_config.value_vlm_mode: {VALUE_VLM_MODE} or leave it out.")
        if (self.use_vlm_value is not None and self.value_after_vlm is not None
                and self.use_vlm_value != self.value_after_vlm):
            raise ConfigError(f"use_vlm_value ({self.use_vlm_value}) and value_after_vlm ({self.value_after_vlm}) "
                              "disagree; they are one setting (RLinf's and vlarl's name).",
                              "Set only one of them.")
        resolved = self.value_after_vlm if self.value_after_vlm is not None else self.use_vlm_value
        self.value_after_vlm = self.use_vlm_value = bool(resolved)

    def check_padding(self, model_padding: int | None, prompt_length: int) -> None:
        """``padding_value`` (RLinf ``rl_head_config.padding_value``) must be the padded prompt length the
        model was built with: ``model_padding`` from the checkpoint / preset config (570 in the full
        presets), or none at all when the model pads to images + max_text_tokens (``prompt_length``)."""
        if self.padding_value is None or self.padding_value == model_padding:
            return
        if model_padding is None:
            raise ConfigError(f"padding_value {self.padding_value} is not supported by this GR00T model: it has no "
                              f"fixed padding_value (its prompt is {prompt_length} tokens: images + max_text_tokens).",
                              "Leave actor.model.rl_head_config.padding_value out for this model.")
        raise ConfigError(f"padding_value {self.padding_value} is not supported: this GR00T model pads its prompt to "
                          f"{model_padding} tokens (its checkpoint / preset config).",
                          f"Set actor.model.rl_head_config.padding_value: {model_padding} or leave it out.")

    @property
    def version(self) -> str:
        return MODEL_TYPE_TO_VERSION[self.model_type]

    @property
    def effective_embodiment_tag(self) -> str:
        if self.embodiment_tag is not None:
            return self.embodiment_tag
        return "libero_franka" if self.version == "n1.5" else "libero_panda"

    @property
    def effective_action_noise_scale(self) -> float:
        if self.action_noise_scale is not None:
            return float(self.action_noise_scale)
        return 0.1 if self.version == "n1.6" else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["value_hidden"] = list(self.value_hidden)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSettings:
        refuse_unknown(data, (f.name for f in dataclasses.fields(cls)), "GR00T model setting",
                       "Remove or rename the setting.")
        return cls(**data)

    def replace(self, **changes: Any) -> ModelSettings:
        refuse_unknown(changes, (f.name for f in dataclasses.fields(self)), "GR00T model setting",
                       "Check the spelling against vlarl_cli.policies.gr00t.config.ModelSettings.")
        return dataclasses.replace(self, **changes)


TUNE_FLAGS = ("tune_llm", "tune_visual", "tune_top_llm_layers", "tune_projector", "tune_diffusion_model", "tune_vlln")


def trainability(cfg: Gr00tConfig, settings: ModelSettings) -> tuple[dict[str, Any], list[str]]:
    """The trainable-set flags a policy applies (the config's, as Isaac-GR00T and RLinf, under the settings'
    overrides) and, in words, each way they make vlarl train otherwise than RLinf would."""
    flags = {k: getattr(cfg, k) for k in TUNE_FLAGS}
    deviations = []
    for key in TUNE_FLAGS:
        value = getattr(settings, key)
        if value is not None and value != flags[key]:
            deviations.append(f"{key}={value} (the checkpoint config says {flags[key]})")
            flags[key] = value
    backbone = flags["tune_llm"] or flags["tune_visual"] or flags["tune_top_llm_layers"] or (
        cfg.version == "n1.5" and cfg.project_to_dim is not None)
    if settings.train_expert_only and backbone:
        deviations.append("train_expert_only=True freezes the backbone the config would train (" + ", ".join(
            k for k in ("tune_llm", "tune_visual", "tune_top_llm_layers") if flags[k]) + (
            ", eagle_linear" if cfg.version == "n1.5" and cfg.project_to_dim is not None else "") + ")")
    return flags, deviations
