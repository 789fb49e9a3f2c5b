"""Configuration of the pi0 / pi0.5 family: architecture presets and the RL settings.

Two dataclasses, no pydantic (this module must import instantly):

* :class:`Pi0Config` (frozen): everything that defines the network and its RL sampling. Presets via
  :func:`preset`: ``tiny`` (2-layer SigLIP on 32 px / 8 px patches, 2-layer Gemma width 64, expert
  width 32; builds in milliseconds, used by tests and the CPU quickstart), ``small`` (a mid-size model
  for the latency benchmark) and ``full`` (the real PaliGemma-3B + Gemma-300M expert; ~3.24B live
  parameters, built on ``torch.device("meta")`` unless weights are loaded).
* :class:`ModelSettings`: the fields the RLinf recipes set under ``actor.model`` for openpi models
  (``num_action_chunks``, ``action_dim``, ``num_steps``, ``noise_method``, ``add_value_head``,
  ``value_after_vlm``, ``is_lora``, ...). The lead's pydantic config maps onto it and
  :meth:`ModelSettings.to_pi0_config` turns it into a :class:`Pi0Config`.

Architecture facts (REFERENCE.md section 4; openpi ``models/gemma.py`` variants ``gemma_2b`` and
``gemma_300m``, ``models/pi0_config.py``): SigLIP So400m/14 at 224 px (width 1152, 27 layers, MLP 4304,
16 heads), projector to 2048, Gemma-2B (width 2048, 18 layers, MLP 16384, 8 heads, 1 KV head, head_dim
256, vocab 257152); expert width 1024, MLP 4096, same depth and head layout; actions / state padded to
32; chunk 50 (pi0) or 10 (pi0.5); prompt length 48 (pi0) or 200 (pi0.5).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vlarl_cli.errors import ConfigError, did_you_mean, refuse_unknown
from vlarl_cli.policies.gripper import check_gripper
from vlarl_cli.precision import PRECISION_ALIASES as _PRECISION_ALIASES
from vlarl_cli.precision import PRECISIONS

__all__ = ["PRESETS", "VARIANTS", "ModelSettings", "Pi0Config", "preset"]

VARIANTS = ("pi0", "pi05")
NOISE_METHODS = ("ode", "flow_sde", "flow_cps", "flow_noise")
VALUE_POOLINGS = ("rlinf", "valid")


@dataclass(frozen=True)
class Pi0Config:
    """Network + sampling configuration. Validated on construction (raises :class:`ConfigError`)."""

    variant: str = "pi0"  # "pi0" (state token + action-time MLP) | "pi05" (adaRMS time, no state)
    # --- SigLIP vision tower -------------------------------------------------------------------
    image_size: int = 224
    patch_size: int = 14
    vision_width: int = 1152
    vision_depth: int = 27
    vision_mlp: int = 4304
    vision_heads: int = 16
    # --- PaliGemma language model (Gemma-2B) --------------------------------------------------
    vlm_width: int = 2048
    vlm_depth: int = 18
    vlm_mlp: int = 16384
    num_heads: int = 8
    num_kv_heads: int = 1
    head_dim: int = 256
    vocab_size: int = 257152
    # --- action expert (Gemma-300M); same depth and head layout as the VLM ---------------------
    expert_width: int = 1024
    expert_mlp: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    # --- inputs / outputs ---------------------------------------------------------------------
    max_action_dim: int = 32
    max_state_dim: int = 32
    action_horizon: int = 50
    max_token_len: int = 48
    min_period: float = 4e-3  # sinusoidal time embedding (openpi pi0_pytorch.embed_suffix)
    max_period: float = 4.0
    # --- RL ------------------------------------------------------------------------------------
    num_action_chunks: int = 5  # env steps executed per sampled chunk (C)
    action_env_dim: int = 7  # real action dims (LIBERO 7)
    state_env_dim: int = 8  # real state dims (LIBERO 8)
    num_steps: int = 4  # denoising steps K
    noise_method: str = "flow_sde"
    noise_level: float = 0.5
    joint_logprob: bool = False
    noise_logvar_min_std: float = 0.08  # flow_noise std range (RLinf noise_logvar_range)
    noise_logvar_max_std: float = 0.16
    add_value_head: bool = True
    value_after_vlm: bool = False  # True: value from mean VLM prefix output (pi0.5 recipes)
    detach_critic_input: bool = False  # stop value-loss gradients into the backbone
    # critic (vlarl_cli.policies.value_head.MLPCritic): RLinf's by default (rlinf 0.3.0
    # openpi_action_model.py: ReLU MLP 512-256-128 for pi0, 1024-512-256 for pi05_libero, Kaiming init)
    value_hidden: tuple[int, ...] = (512, 256, 128)
    value_activation: str = "relu"
    value_init: str = "rlinf"  # "rlinf" | "zero_last" (values start at exactly 0)
    value_pooling: str = "rlinf"  # after-VLM pooling: "rlinf" (mean over every prefix slot) | "valid"
    # camera slots of the prefix: 2 = [main, wrist]; 3 = openpi's LIBERO layout [base, left wrist, empty right
    # wrist], the empty slot KEPT (masked). Valid tokens see the same either way; padded prompt rows attend
    # uniformly to every key, so RLinf's after-VLM value (its mean includes those rows) is reproduced
    # exactly only with 3
    camera_slots: int = 2
    # "rgb": camera images (every real checkpoint); "state": no image at all, every camera slot masked, the
    # LIBERO env's privileged 14-d state instead (EnvOptions.obs_mode; CPU learning runs)
    obs_mode: str = "rgb"
    noise_hidden: tuple[int, ...] = (128, 64)
    train_expert_only: bool = False
    is_lora: bool = False
    lora_rank: int = 32
    lora_alpha: float | None = None  # None: = rank
    # --- processing -----------------------------------------------------------------------------
    normalization: str | None = None  # None: variant default (pi0 mean_std, pi05 quantile)
    extra_delta_transform: bool = False  # openpi pi0_libero: actions[:6] += state[:6] on output
    discrete_state_input: bool = False  # pi0.5 only: state binned into the prompt (pi05_base / DROID style)
    # LeRobot's pi0.5 pads the normalised state to max_state_dim BEFORE binning (32 numbers in the prompt,
    # padding in bin 128); openpi bins the state as given
    state_prompt_padded: bool = False
    gripper: str = "none"  # policies/gripper.py: "none" (openpi's LIBERO models) | "binarize" | "from_01"
    tokenizer: str = "byte"  # "byte" (built in) or a path to a local tokenizer.json / folder
    precision: str = "fp32"
    # supervised_loss: "executed" (default) = mean over the executed C steps x real A dims; "openpi" = mean
    # over all H x max_action_dim entries as openpi's compute_loss (padding included), so SFT losses are
    # comparable with openpi's logs
    sft_loss_reduction: str = "executed"

    def __post_init__(self) -> None:
        def bad(msg: str, fix: str) -> None:
            raise ConfigError(msg, fix)

        if self.variant not in VARIANTS:
            bad(f'Unknown pi0 variant "{self.variant}".{did_you_mean(self.variant, VARIANTS)}',
                f"Use one of {', '.join(VARIANTS)}.")
        if self.noise_method not in NOISE_METHODS:
            bad(f'Unknown noise_method "{self.noise_method}".{did_you_mean(self.noise_method, NOISE_METHODS)}',
                f"Use one of {', '.join(NOISE_METHODS)}.")
        if self.precision not in PRECISIONS:
            bad(f'Unknown precision "{self.precision}".{did_you_mean(self.precision, PRECISIONS)}',
                f"Use one of {', '.join(PRECISIONS)}.")
        check_gripper(self.gripper, ("none", "binarize", "zero_one_to_sign"), "gripper")
        if self.normalization not in (None, "mean_std", "quantile", "identity"):
            bad(f'Unknown normalization "{self.normalization}".',
                "Use mean_std (pi0), quantile (pi0.5), identity, or leave it unset.")
        if self.image_size % self.patch_size:
            bad(f"image_size ({self.image_size}) must be a multiple of patch_size ({self.patch_size}).",
                "Pick matching sizes (224 / 14 for the real model).")
        if self.num_heads % self.num_kv_heads:
            bad(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads}).",
                "Use 8 / 1 as Gemma does.")
        if self.expert_width % 2:
            bad(f"expert_width must be even for the sinusoidal time embedding, got {self.expert_width}.",
                "Use an even width.")
        if not 1 <= self.num_action_chunks <= self.action_horizon:
            bad(f"num_action_chunks ({self.num_action_chunks}) must be in [1, action_horizon="
                f"{self.action_horizon}].", "Execute at most as many steps as the model predicts.")
        if not 1 <= self.action_env_dim <= self.max_action_dim:
            bad(f"action_env_dim ({self.action_env_dim}) must be in [1, max_action_dim={self.max_action_dim}].",
                "LIBERO uses 7.")
        if not 1 <= self.state_env_dim <= self.max_state_dim:
            bad(f"state_env_dim ({self.state_env_dim}) must be in [1, max_state_dim={self.max_state_dim}].",
                "LIBERO uses 8.")
        if self.num_steps < 1:
            bad(f"num_steps (denoising steps) must be >= 1, got {self.num_steps}.", "Use 4 to 10.")
        if self.is_lora and self.lora_rank < 1:
            bad(f"lora_rank must be >= 1 when is_lora is set, got {self.lora_rank}.", "Use e.g. 32.")
        if self.discrete_state_input and not self.is_pi05:
            bad("discrete_state_input is a pi0.5 option (pi0 feeds the state as a continuous token).",
                "Set discrete_state_input: false for pi0.")
        if self.camera_slots not in (2, 3):
            bad(f"camera_slots must be 2 (main, wrist) or 3 (openpi's base, left, right wrist), got "
                f"{self.camera_slots}.", "Use 2, or 3 to reproduce RLinf's after-VLM value exactly.")
        if self.obs_mode not in ("rgb", "state"):
            bad(f'Unknown obs_mode "{self.obs_mode}".', "Use rgb (images) or state (no camera, privileged state).")
        if self.sft_loss_reduction not in ("executed", "openpi"):
            bad(f'Unknown sft_loss_reduction "{self.sft_loss_reduction}".', "Use executed (default) or openpi.")
        if self.value_pooling not in VALUE_POOLINGS:
            bad(f'Unknown value_pooling "{self.value_pooling}".{did_you_mean(self.value_pooling, VALUE_POOLINGS)}',
                f"Use one of {', '.join(VALUE_POOLINGS)}.")
        if self.noise_method == "flow_cps" and self.num_steps < 2:
            bad("flow_cps needs num_steps >= 2.", "Use more steps or flow_sde.")

    # ------------------------------------------------------------------ derived values
    @property
    def is_pi05(self) -> bool:
        return self.variant == "pi05"

    @property
    def tokens_per_image(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def normalization_mode(self) -> str:
        if self.normalization is not None:
            return self.normalization
        return "quantile" if self.is_pi05 else "mean_std"

    @property
    def lora_scale_alpha(self) -> float:
        return float(self.lora_rank if self.lora_alpha is None else self.lora_alpha)

    def flow_config(self) -> Any:
        """The shared sampler's :class:`~vlarl_cli.policies.flow_matching.FlowConfig` (openpi time)."""
        import math

        from vlarl_cli.policies.flow_matching import FlowConfig

        return FlowConfig(num_steps=self.num_steps, method=self.noise_method, noise_level=self.noise_level,
                          noise_at=1.0, joint_logprob=self.joint_logprob,
                          logvar_min=2 * math.log(self.noise_logvar_min_std),
                          logvar_max=2 * math.log(self.noise_logvar_max_std))

    def replace(self, **changes: Any) -> Pi0Config:
        refuse_unknown(changes, (f.name for f in dataclasses.fields(self)), "pi0 config field",
                       "Check the spelling against vlarl_cli.policies.pi0.config.Pi0Config.")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["value_hidden"] = list(self.value_hidden)
        d["noise_hidden"] = list(self.noise_hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pi0Config:
        refuse_unknown(d, (f.name for f in dataclasses.fields(cls)), "pi0 config field",
                       "The checkpoint was written by another version; remove the field.", " in a saved config")
        d = dict(d)
        if "value_hidden" in d and "value_activation" not in d:
            # written before the RLinf critic became the default: GELU, zero-initialised output layer
            d.update(value_activation="gelu", value_init="zero_last", value_pooling="valid")
        for k in ("value_hidden", "noise_hidden"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)


# Variant defaults on top of the architecture (openpi pi0_config.Pi0Config: chunk 50 / token length 48
# for pi0, chunk 10 / 200 for pi0.5; RLinf pi0.5 recipes read the value from the VLM).
_VARIANT_DEFAULTS: dict[str, dict[str, Any]] = {
    "pi0": {"action_horizon": 50, "max_token_len": 48, "value_after_vlm": False, "value_hidden": (512, 256, 128)},
    "pi05": {"action_horizon": 10, "max_token_len": 200, "value_after_vlm": True, "value_hidden": (1024, 512, 256)},
}

_TINY: dict[str, Any] = {
    "image_size": 32, "patch_size": 8, "vision_width": 32, "vision_depth": 2, "vision_mlp": 64,
    "vision_heads": 2, "vlm_width": 64, "vlm_depth": 2, "vlm_mlp": 128, "num_heads": 2, "num_kv_heads": 1,
    "head_dim": 16, "vocab_size": 300, "expert_width": 32, "expert_mlp": 64, "max_token_len": 24,
    "action_horizon": 8, "value_hidden": (32, 16, 8), "noise_hidden": (16, 16),
}
_SMALL: dict[str, Any] = {
    "image_size": 112, "patch_size": 14, "vision_width": 192, "vision_depth": 4, "vision_mlp": 768,
    "vision_heads": 3, "vlm_width": 256, "vlm_depth": 6, "vlm_mlp": 1024, "num_heads": 4, "num_kv_heads": 1,
    "head_dim": 64, "vocab_size": 1024, "expert_width": 128, "expert_mlp": 512, "max_token_len": 32,
    "action_horizon": 10, "value_hidden": (128, 64, 32), "noise_hidden": (64, 32),
}
PRESETS: dict[str, dict[str, Any]] = {"tiny": _TINY, "small": _SMALL, "full": {}}


def preset(name: str, variant: str = "pi0", **overrides: Any) -> Pi0Config:
    """A named preset (``tiny`` | ``small`` | ``full``) for ``variant`` (``pi0`` | ``pi05``).

    ``overrides`` replace any :class:`Pi0Config` field.
    """
    if name not in PRESETS:
        raise ConfigError(f'Unknown pi0 preset "{name}".{did_you_mean(name, tuple(PRESETS))}',
                          f"Use one of {', '.join(PRESETS)}.")
    if variant not in VARIANTS:
        raise ConfigError(f'Unknown pi0 variant "{variant}".{did_you_mean(variant, VARIANTS)}',
                          f"Use one of {', '.join(VARIANTS)}.")
    values: dict[str, Any] = {"variant": variant, **_VARIANT_DEFAULTS[variant], **PRESETS[name]}
    if name != "full" and variant == "pi05":
        values["action_horizon"] = min(values["action_horizon"], 10)
    values.update(overrides)
    return Pi0Config().replace(**values)


@dataclass
class ModelSettings:
    """The RL recipe's ``actor.model`` section for the pi0 family (RLinf field names).

    ``model_type``: ``pi0`` | ``pi05`` | ``openpi`` (then the variant comes from ``config_name``, e.g.
    ``pi0_libero`` / ``pi05_libero`` as in RLinf). ``None`` fields take the variant's default.
    """

    model_type: str = "pi0"
    config_name: str | None = None
    preset: str = "tiny"
    model_path: str | None = None
    checkpoint_format: str | None = None  # None: detect
    precision: str | None = None  # None: fp32 on CPU, else the checkpoint's stored dtype (bf16 for openpi)
    num_action_chunks: int = 5
    action_dim: int = 7
    action_horizon: int | None = None
    num_steps: int = 4
    noise_method: str = "flow_sde"
    noise_level: float = 0.5
    joint_logprob: bool = False
    noise_logvar_range: tuple[float, float] = (0.08, 0.16)
    add_value_head: bool = True
    value_after_vlm: bool | None = None
    is_lora: bool = False
    lora_rank: int = 32
    train_expert_only: bool = False
    detach_critic_input: bool = False
    gradient_checkpointing: bool = False
    disable_dropout: bool = True  # accepted for recipe compatibility: this model has no dropout
    tokenizer_path: str | None = None
    norm_stats_path: str | None = None
    asset_id: str | None = None  # e.g. "physical-intelligence/libero"
    extra_delta_transform: bool | None = None
    sft_loss_reduction: str | None = None  # None: "executed" (see Pi0Config)
    overrides: dict[str, Any] = field(default_factory=dict)  # any further Pi0Config field

    @property
    def variant(self) -> str:
        mt = self.model_type.lower()
        if mt in ("pi0", "pi05"):
            return mt
        if mt == "openpi":
            name = (self.config_name or "pi0").lower()
            return "pi05" if name.startswith("pi05") else "pi0"
        raise ConfigError(f'model_type "{self.model_type}" is not a pi0-family model.'
                          f"{did_you_mean(mt, ('pi0', 'pi05', 'openpi'))}",
                          "Use pi0, pi05 or openpi (with config_name pi0_libero / pi05_libero).")

    def to_pi0_config(self) -> Pi0Config:
        return preset(self.preset, self.variant, **self.rl_values())

    def rl_values(self) -> dict[str, Any]:
        """The Pi0Config fields the recipe sets: over a preset here, over a checkpoint's own config in
        ``build_policy`` (derived in one place, not a second hand-kept list)."""
        values: dict[str, Any] = {
            "precision": _PRECISION_ALIASES.get(self.precision or "fp32", self.precision or "fp32"),
            "detach_critic_input": self.detach_critic_input, "num_action_chunks": self.num_action_chunks,
            "action_env_dim": self.action_dim, "num_steps": self.num_steps, "noise_method": self.noise_method,
            "noise_level": self.noise_level, "joint_logprob": self.joint_logprob,
            "noise_logvar_min_std": float(self.noise_logvar_range[0]),
            "noise_logvar_max_std": float(self.noise_logvar_range[1]),
            "add_value_head": self.add_value_head, "is_lora": self.is_lora, "lora_rank": self.lora_rank,
            "train_expert_only": self.train_expert_only,
        }
        if self.action_horizon is not None:
            values["action_horizon"] = self.action_horizon
        if self.value_after_vlm is not None:
            values["value_after_vlm"] = self.value_after_vlm
        if self.tokenizer_path is not None:
            values["tokenizer"] = self.tokenizer_path
        if self.sft_loss_reduction is not None:
            values["sft_loss_reduction"] = self.sft_loss_reduction
        if self.extra_delta_transform is not None:
            values["extra_delta_transform"] = self.extra_delta_transform
        elif (self.config_name or "").lower() == "pi0_libero":
            values["extra_delta_transform"] = True  # openpi pi0_libero was trained with it
        values.update(self.overrides)
        return values
