"""Configuration of the OpenVLA-OFT family (RLinf's RL variant): architecture presets and RL settings.

Two dataclasses, no pydantic (this module must import instantly):

* :class:`OftConfig` (frozen): the network, the action tokenisation and the RL sampling. Presets via
  :func:`preset`: ``tiny`` (2-layer DINOv2-with-registers + 2-layer SigLIP on 28 px images, 2-layer
  Llama of width 64; builds in milliseconds, used by tests and the CPU quickstart) and ``full`` (the
  real OpenVLA-7B: ~7.54B parameters, built on ``torch.device("meta")`` unless weights are loaded).
* :class:`ModelSettings`: the fields the RLinf recipes set under ``actor.model`` for ``openvla_oft``
  (``num_action_chunks``, ``action_dim``, ``add_value_head``, ``unnorm_key``, ``use_proprio``,
  ``is_lora``, ...), plus the sampling ``temperature`` (``rollout.sampling_params.temperature_train``).
  The lead's pydantic config maps onto it; :meth:`ModelSettings.to_oft_config` makes an :class:`OftConfig`.

Architecture facts (REFERENCE.md section 4; openvla-oft ``prismatic/extern/hf/configuration_prismatic.py``
and ``modeling_prismatic.py``, RLinf ``rlinf/models/embodiment/openvla_oft/rlinf/openvla_oft_action_model.py``,
read for facts only): vision backbone ``dinosiglip-vit-so-224px`` = DINOv2 ViT-L/14 with 4 registers
(width 1024, 24 blocks, 16 heads, MLP 4096, LayerScale) + SigLIP So400m/14 (width 1152, 27 blocks, 16
heads, MLP 4304, attention-pool head), each read at its SECOND-TO-LAST block (timm
``get_intermediate_layers(n={depth - 2})``), patch features concatenated to 1024 + 1152 = 2176 channels
for 256 patches; fused GELU-MLP projector 2176 -> 8704 (4x) -> 4096 -> 4096; Llama-2-7B (width 4096, 32
layers, 32 heads, MLP 11008, vocabulary 32000 padded to 32064). Action tokens are the
LAST ``n_action_bins`` = 256 ids of the unpadded vocabulary (31744..31999).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vlarl_cli.errors import ConfigError, did_you_mean, refuse_unknown
from vlarl_cli.policies.gripper import check_gripper
from vlarl_cli.precision import PRECISION_ALIASES as _PRECISION_ALIASES
from vlarl_cli.precision import PRECISIONS

__all__ = ["ATTENTION_MODES", "PRESETS", "ModelSettings", "OftConfig", "preset"]

#: ``bidirectional``: every token attends every valid token (the openvla-oft transformers fork makes ALL
#: attention bidirectional; moojink/openvla-oft issues #27 and #89). ``action_bidirectional``: the
#: prompt stays causal and only the action block attends bidirectionally (to itself + the prompt).
ATTENTION_MODES = ("bidirectional", "action_bidirectional")
#: ``first``: the hidden state at the LAST PROMPT TOKEN (the position that predicts action token 0), where
#: RLinf reads its critic (``_compute_values``: ``last_hidden_states[:, -T - 1]``); ``mean`` over the T
#: action positions (a vlarl option).
VALUE_POOLINGS = ("first", "mean")
#: ``rlinf``: RLinf's LIBERO / ManiSkill checkpoints (RLinf ``openvla_oft/rlinf``): no STOP token in the
#: sequence, one image by default, no proprio. ``official``: the OFT authors' layout (RLinf
#: ``openvla_oft/official`` and openvla-oft ``predict_action``): the STOP token ``</s>`` follows the
#: action slots, optional proprio token after the patches, several images.
IMPLEMENT_VERSIONS = ("rlinf", "official")
#: ``tokens``: 256-bin logits over the last vocabulary ids (RLinf's RL head, both implement versions in
#: RLinf 0.3.0). ``l1_regression``: the OFT authors' MLP-ResNet head on the action hidden states
#: (``action_head--*_checkpoint.pt``), with a Gaussian around its mean for RL.
ACTION_HEADS = ("tokens", "l1_regression")
#: RLinf ``value_type``: ``chunk_level`` one value per chunk, ``action_level`` one per executed action.
VALUE_TYPES = ("chunk_level", "action_level")


@dataclass(frozen=True)
class OftConfig:
    """Network + tokenisation + RL sampling configuration. Validated on construction (ConfigError)."""

    # --- images ----------------------------------------------------------------------------------
    image_size: int = 224
    patch_size: int = 14
    # crop sqrt(0.9) of each side and resize back (openvla-oft LIBERO evaluation). RLinf's LIBERO path
    # does not crop (its processor only resizes 256 -> 224), hence off by default.
    center_crop: bool = False
    # --- DINOv2 ViT-L/14 with registers (``featurizer``) -----------------------------------------
    dino_width: int = 1024
    dino_depth: int = 24
    dino_heads: int = 16
    dino_mlp_ratio: int = 4
    dino_registers: int = 4  # 0: plain Dinov2Model (no register tokens)
    # --- SigLIP So400m/14 (``fused_featurizer``) ------------------------------------------------
    siglip_width: int = 1152
    siglip_depth: int = 27
    siglip_heads: int = 16
    siglip_mlp: int = 4304
    siglip_head: bool = True  # attention-pool head: unused by OpenVLA, present in its checkpoints
    # --- Llama-2 language model -------------------------------------------------------------------
    llm_width: int = 4096
    llm_depth: int = 32
    llm_heads: int = 32
    llm_kv_heads: int = 32
    llm_mlp: int = 11008
    vocab_size: int = 32064  # embedding rows (padded)
    pad_to_multiple_of: int = 64  # text vocabulary = vocab_size - pad_to_multiple_of (32000)
    # OpenVLA's config.json text_config omits rms_norm_eps, so OpenVLA / RLinf run with transformers'
    # LlamaConfig default 1e-6 (Llama-2 itself was trained with 1e-5).
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    bos_token_id: int = 1
    pad_token_id: int = 32000
    stop_token_id: int = 2  # "</s>" (openvla-oft STOP_INDEX), after the action slots in the official layout
    # --- action tokens / RL head ------------------------------------------------------------------
    n_action_bins: int = 256
    num_action_chunks: int = 8  # C: env steps per chunk (RLinf LIBERO recipes)
    action_dim: int = 7  # A
    max_prompt_len: int = 50  # prompt tokens incl. BOS (RLinf max_prompt_length)
    attention: str = "bidirectional"
    temperature: float = 1.6  # RLinf OFT recipes: temperature_train = temperature_eval = 1.6
    implement_version: str = "rlinf"
    num_images_in_input: int = 1  # 1: third-person only; 2: + wrist (OFT LIBERO), patches concatenated
    use_proprio: bool = False  # official only: one proprio token after the patches (ProprioProjector)
    proprio_dim: int = 8  # LIBERO state: eef pos 3 + axis-angle 3 + gripper qpos 2
    action_head: str = "tokens"
    # Gaussian exploration around the L1 head's mean (normalised action space): a learned state-independent
    # log-std per action dim, initialised as RLinf's StarVLA OFT head (``actor_logstd`` = -2.5).
    logstd_init: float = -2.5
    learn_std: bool = True
    l1_hidden: int = 0  # MLP-ResNet width (0: llm_width, as the OFT authors' L1RegressionActionHead)
    l1_blocks: int = 2  # MLP-ResNet residual blocks (OFT: 2)
    add_value_head: bool = False
    value_type: str = "chunk_level"
    value_pooling: str = "first"
    value_hidden: tuple[int, ...] = (512, 128)
    is_lora: bool = False
    lora_rank: int = 32
    lora_alpha: float | None = None  # None: = rank
    # --- processing -------------------------------------------------------------------------------
    unnorm_key: str | None = None  # key of dataset_statistics.json, e.g. "libero_10_no_noops"
    gripper: str = "libero"  # policies/gripper.py: "libero" (= zero_one_to_sign, -sign(2g - 1)) | "none"
    tokenizer: str = "byte"  # "byte" (built in) or a local tokenizer.json / tokenizer folder
    precision: str = "fp32"

    def __post_init__(self) -> None:
        def bad(msg: str, fix: str) -> None:
            raise ConfigError(msg, fix)

        if self.precision not in PRECISIONS:
            bad(f'Unknown precision "{self.precision}".{did_you_mean(self.precision, PRECISIONS)}',
                f"Use one of {', '.join(PRECISIONS)}.")
        if self.attention not in ATTENTION_MODES:
            bad(f'Unknown attention mode "{self.attention}".{did_you_mean(self.attention, ATTENTION_MODES)}',
                f"Use one of {', '.join(ATTENTION_MODES)}.")
        if self.value_pooling not in VALUE_POOLINGS:
            bad(f'Unknown value_pooling "{self.value_pooling}".{did_you_mean(self.value_pooling, VALUE_POOLINGS)}',
                f"Use one of {', '.join(VALUE_POOLINGS)}.")
        for name, value, known in (("implement_version", self.implement_version, IMPLEMENT_VERSIONS),
                                   ("action_head", self.action_head, ACTION_HEADS),
                                   ("value_type", self.value_type, VALUE_TYPES)):
            if value not in known:
                bad(f'Unknown {name} "{value}".{did_you_mean(value, known)}', f"Use one of {', '.join(known)}.")
        if not 1 <= self.num_images_in_input <= 3:
            bad(f"num_images_in_input must be 1, 2 or 3, got {self.num_images_in_input}.",
                "Use 1 (RLinf LIBERO recipes) or 2 (third-person + wrist, the OFT authors' LIBERO models).")
        if self.implement_version == "rlinf" and (self.use_proprio or self.action_head != "tokens"):
            bad("implement_version rlinf has no proprio token and no L1-regression head (RLinf "
                "openvla_oft/rlinf feeds images and the prompt to the 256-bin token head).",
                "Set implement_version: official for checkpoints with proprio_projector--*.pt / action_head--*.pt.")
        if self.use_proprio and self.proprio_dim < 1:
            bad(f"proprio_dim must be >= 1, got {self.proprio_dim}.", "LIBERO uses 8.")
        check_gripper(self.gripper, ("zero_one_to_sign", "none"), "gripper")
        if self.image_size % self.patch_size:
            bad(f"image_size ({self.image_size}) must be a multiple of patch_size ({self.patch_size}).",
                "Use 224 / 14 as OpenVLA does.")
        for name, width, heads in (("dino", self.dino_width, self.dino_heads),
                                   ("siglip", self.siglip_width, self.siglip_heads),
                                   ("llm", self.llm_width, self.llm_heads)):
            if width % heads:
                bad(f"{name}_width ({width}) must be a multiple of {name}_heads ({heads}).",
                    "Pick matching sizes.")
        if self.llm_heads % self.llm_kv_heads:
            bad(f"llm_heads ({self.llm_heads}) must be a multiple of llm_kv_heads ({self.llm_kv_heads}).",
                "Llama-2-7B uses 32 / 32.")
        if self.dino_depth < 2 or self.siglip_depth < 2:
            bad("The vision towers need at least 2 blocks (features come from the second-to-last).",
                "Use dino_depth / siglip_depth >= 2.")
        if not 0 < self.n_action_bins <= self.text_vocab_size:
            bad(f"n_action_bins ({self.n_action_bins}) must be in [1, text vocabulary = {self.text_vocab_size}].",
                "Use 256 with a vocabulary of at least 256 ids.")
        if self.pad_to_multiple_of < 0 or self.pad_to_multiple_of >= self.vocab_size:
            bad(f"pad_to_multiple_of ({self.pad_to_multiple_of}) must be in [0, vocab_size).", "Use 64 (OpenVLA).")
        if self.num_action_chunks < 1 or self.action_dim < 1:
            bad(f"num_action_chunks ({self.num_action_chunks}) and action_dim ({self.action_dim}) must be >= 1.",
                "LIBERO uses 8 and 7.")
        if self.max_prompt_len < 2:
            bad(f"max_prompt_len must be >= 2, got {self.max_prompt_len}.", "RLinf uses 50 (128 in some recipes).")
        if not self.temperature > 0:
            bad(f"temperature must be > 0, got {self.temperature}.",
                "Use 1.6 (RLinf OFT recipes); deterministic evaluation uses argmax instead.")
        if self.is_lora and self.lora_rank < 1:
            bad(f"lora_rank must be >= 1 when is_lora is set, got {self.lora_rank}.", "Use e.g. 32.")

    # ------------------------------------------------------------------ derived values
    @property
    def text_vocab_size(self) -> int:
        """Unpadded vocabulary (32000 for Llama-2); the action ids are its last ``n_action_bins``."""
        return self.vocab_size - self.pad_to_multiple_of

    @property
    def action_token_start(self) -> int:
        """First action id (31744 for OpenVLA): relative bin index k <-> id ``start + k``."""
        return self.text_vocab_size - self.n_action_bins

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_action_tokens(self) -> int:
        """Placeholder tokens decoded in one pass: ``num_action_chunks * action_dim`` (56)."""
        return self.num_action_chunks * self.action_dim

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens inserted after BOS: patches of every image, plus the proprio token."""
        return self.num_patches * self.num_images_in_input + int(self.use_proprio)

    @property
    def l1_width(self) -> int:
        return self.l1_hidden or self.llm_width

    @property
    def has_stop_token(self) -> bool:
        """The official layout keeps ``</s>`` after the action slots (openvla-oft
        ``_prepare_input_for_action_prediction``); RLinf's variant drops it (``_build_embedding``)."""
        return self.implement_version == "official"

    @property
    def num_values(self) -> int:
        """Critic outputs per sample: 1 (``chunk_level``) or ``num_action_chunks`` (``action_level``)."""
        return self.num_action_chunks if self.value_type == "action_level" else 1

    @property
    def vision_width(self) -> int:
        """Fused patch-feature channels (DINOv2 + SigLIP = 2176)."""
        return self.dino_width + self.siglip_width

    @property
    def lora_scale_alpha(self) -> float:
        return float(self.lora_rank if self.lora_alpha is None else self.lora_alpha)

    def replace(self, **changes: Any) -> OftConfig:
        refuse_unknown(changes, (f.name for f in dataclasses.fields(self)), "OpenVLA-OFT config field",
                       "Check the spelling against vlarl_cli.policies.openvla_oft.config.OftConfig.")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["value_hidden"] = list(self.value_hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OftConfig:
        refuse_unknown(d, (f.name for f in dataclasses.fields(cls)), "OpenVLA-OFT config field",
                       "The checkpoint was written by another version; remove the field.", " in a saved config")
        d = dict(d)
        if "value_hidden" in d:
            d["value_hidden"] = tuple(d["value_hidden"])
        return cls(**d)


# The tiny preset: byte tokeniser ids 0..259 (vlarl_cli.policies.tokenization.ByteTokenizer) sit below the
# 256 action ids 320..575 of a 576-id text vocabulary padded to 640.
_TINY: dict[str, Any] = {
    "image_size": 28, "patch_size": 14, "dino_width": 32, "dino_depth": 2, "dino_heads": 2, "dino_mlp_ratio": 2,
    "dino_registers": 4, "siglip_width": 48, "siglip_depth": 2, "siglip_heads": 2, "siglip_mlp": 64,
    "llm_width": 64, "llm_depth": 2, "llm_heads": 4, "llm_kv_heads": 2, "llm_mlp": 128, "vocab_size": 640,
    "pad_to_multiple_of": 64, "max_position_embeddings": 512, "bos_token_id": 2, "pad_token_id": 0, "stop_token_id": 3,
    "max_prompt_len": 160, "value_hidden": (32, 16),
}
PRESETS: dict[str, dict[str, Any]] = {"tiny": _TINY, "full": {}}


def preset(name: str, **overrides: Any) -> OftConfig:
    """A named preset (``tiny`` | ``full``); ``overrides`` replace any :class:`OftConfig` field."""
    if name not in PRESETS:
        raise ConfigError(f'Unknown OpenVLA-OFT preset "{name}".{did_you_mean(name, list(PRESETS))}',
                          f"Use one of {', '.join(PRESETS)}.")
    return OftConfig().replace(**{**PRESETS[name], **overrides})


#: RLinf OFT model keys that do not change what the policy computes here (loading mechanics, kernels,
#: ManiSkill-only settings): accepted, listed by the dry-run as not used.
INERT_RLINF_KEYS = {
    "attn_implementation": "attention kernel only (vlarl uses PyTorch SDPA; same numbers up to rounding)",
    "low_cpu_mem_usage": "loading mechanics (vlarl always builds on the meta device)",
    "trust_remote_code": "vlarl ships the model code",
    "policy_setup": "ManiSkill only",
}


@dataclass
class ModelSettings:
    """The RL recipe's ``actor.model`` section for ``model_type: openvla_oft`` (RLinf field names).

    ``temperature`` is ``rollout.sampling_params.temperature_train`` (the runner may change
    ``policy.temperature`` for evaluation). RLinf keys and what they do here:

    * ``implement_version`` ``rlinf`` | ``official`` (None: the checkpoint decides: ``official`` when it
      has ``action_head--*`` / ``proprio_projector--*`` side files).
    * ``num_images_in_input``, ``use_proprio``, ``proprio_dim``: images and proprio token (official only).
    * ``value_type`` ``chunk_level`` | ``action_level``: critic outputs per chunk or per action.
    * ``center_crop``: RLinf's model yaml sets True but RLinf's processor never crops (timm's CenterCrop
      to the full 224 px is a no-op); under ``rlinf`` a True is reported and not applied, under
      ``official`` it crops as the OFT authors' LIBERO evaluation. None: the checkpoint's choice.
    * ``use_film``: FiLM is not implemented; True is refused. ``lora_path``: a PEFT adapter folder applied
      on top of ``model_path`` (RLinf ``PeftModel.from_pretrained``).
    * ``image_size``, ``vocab_size``, ``hidden_size``: checked against the architecture (refused if they
      disagree); :data:`INERT_RLINF_KEYS` change nothing.
    """

    model_type: str = "openvla_oft"
    preset: str = "tiny"
    model_path: str | None = None
    checkpoint_format: str | None = None  # None: detect
    precision: str | None = "fp32"  # None: fp32 (the checkpoint's dtype is not kept on CPU)
    num_action_chunks: int = 8
    action_dim: int = 7
    add_value_head: bool = False
    value_pooling: str | None = None
    value_type: str | None = None
    is_lora: bool = False
    lora_rank: int = 32
    lora_path: str | None = None
    unnorm_key: str | None = None
    implement_version: str | None = None
    num_images_in_input: int | None = None
    use_proprio: bool | None = None
    proprio_dim: int | None = None
    use_film: bool | None = None
    image_size: Any = None  # RLinf: [224, 224]
    vocab_size: int | None = None
    hidden_size: int | None = None
    temperature: float = 1.6
    center_crop: bool | None = None
    max_prompt_length: int | None = None
    attention: str | None = None
    tokenizer_path: str | None = None
    norm_stats_path: str | None = None  # an explicit dataset_statistics.json
    gradient_checkpointing: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)  # any further OftConfig field

    def rl_fields(self) -> dict[str, Any]:
        """OftConfig fields set by the recipe (they win over a checkpoint's own values)."""
        if self.model_type != "openvla_oft":
            raise ConfigError(f'model_type "{self.model_type}" is not an OpenVLA-OFT model.',
                              'Use model_type: "openvla_oft".')
        if self.use_film:
            raise ConfigError("use_film=True (FiLM language conditioning of the vision backbone, RLinf "
                              "openvla_utils.apply_film_to_vla) is not implemented for OpenVLA-OFT in vlarl.",
                              "Set actor.model.use_film: False (RLinf's LIBERO recipes do).")
        values: dict[str, Any] = {
            "precision": _PRECISION_ALIASES.get(self.precision or "fp32", self.precision or "fp32"),
            "num_action_chunks": self.num_action_chunks, "action_dim": self.action_dim,
            "add_value_head": self.add_value_head, "is_lora": self.is_lora, "lora_rank": self.lora_rank,
            "temperature": float(self.temperature),
        }
        optional = {"value_pooling": self.value_pooling, "unnorm_key": self.unnorm_key,
                    "max_prompt_len": self.max_prompt_length, "value_type": self.value_type,
                    "implement_version": self.implement_version, "num_images_in_input": self.num_images_in_input,
                    "use_proprio": self.use_proprio, "proprio_dim": self.proprio_dim,
                    "attention": self.attention, "tokenizer": self.tokenizer_path}
        values.update({k: v for k, v in optional.items() if v is not None})
        values.update(self.overrides)
        return values

    def resolve_center_crop(self, cfg: OftConfig, default: bool) -> OftConfig:
        """Apply ``center_crop`` to ``cfg`` as RLinf / the OFT authors do (see the class docstring);
        ``default`` is the checkpoint's choice used when the recipe leaves it unset."""
        if self.center_crop is None:
            return cfg.replace(center_crop=default)
        if self.center_crop and cfg.implement_version == "rlinf":
            import warnings

            warnings.warn("center_crop: True is not applied: RLinf's OpenVLA-OFT processor never crops (its timm "
                          "CenterCrop is to the full image size), so vlarl runs implement_version rlinf without a "
                          "crop, as RLinf does. Set implement_version: official to crop as the OFT authors' "
                          "LIBERO evaluation does.", stacklevel=2)
            return cfg.replace(center_crop=False)
        return cfg.replace(center_crop=bool(self.center_crop))

    def check_architecture(self, cfg: OftConfig) -> None:
        """RLinf's ``image_size`` / ``vocab_size`` / ``hidden_size`` must describe the model that is built."""
        size = self.image_size
        if size is not None:
            sizes = list(size) if isinstance(size, (list, tuple)) else [size, size]
            if any(int(s) != cfg.image_size for s in sizes):
                raise ConfigError(f"image_size {size} does not match the model's {cfg.image_size} px input.",
                                  f"Set actor.model.image_size: [{cfg.image_size}, {cfg.image_size}] or remove it.")
        for name, given, actual in (("vocab_size", self.vocab_size, cfg.text_vocab_size),
                                    ("hidden_size", self.hidden_size, cfg.llm_width)):
            if given is not None and int(given) != actual:
                raise ConfigError(f"{name} {given} does not match the model ({actual}).",
                                  f"Set actor.model.{name}: {actual} or remove it.")

    def to_oft_config(self) -> OftConfig:
        cfg = preset(self.preset, **self.rl_fields())
        if self.preset != "tiny":  # the tiny preset replaces the architecture the recipe describes
            self.check_architecture(cfg)
        return self.resolve_center_crop(cfg, default=False)
