"""GR00T's modality design: embodiment tags, the DataConfig-like description of which cameras, state
and action keys a checkpoint expects, dataset statistics and min-max normalisation.

Upstream facts (Isaac-GR00T ``gr00t/experiment/data_config.py``, ``gr00t/data/schema.py``,
``gr00t/data/transform/state_action.py``; RLinf ``rlinf/models/embodiment/gr00t``):

* An *embodiment tag* (``libero_franka``, ``libero_panda``, ...) selects the per-embodiment state
  encoder / action encoder / action decoder slot (32 slots) and the DataConfig.
* N1.5 keeps per-embodiment statistics and modality metadata in ``experiment_cfg/metadata.json``:
  ``{tag: {"statistics": {"state": {key: {min, max, mean, std, q01, q99}}, "action": {...}},
  "modalities": {"video": {key: {...}}, "state": {key: {"shape": [n], ...}}, "action": {...}},
  "embodiment_tag": tag}}``.
* N1.6 keeps them in ``statistics.json`` (``{tag: {"state": {...}, "action": {...}}}``),
  ``embodiment_id.json`` (``{tag: slot}``) and ``processor_config.json`` (modality configs).
* Normalisation per key (``min_max`` / ``q99`` / ``mean_std``) follows the release's own rules, which
  differ in clipping (see :mod:`.normalization`); LIBERO recipes use min-max for state and action.
* Gripper: the model's un-normalised gripper action lives in [0, 1] (1 = open); LIBERO wants -1 = open,
  +1 = close after ``g' = -sign(2 g - 1)`` (RLinf ``normalize_gripper_action`` / ``prepare_actions_for_libero``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vlarl_cli.errors import CheckpointError, ConfigError, did_you_mean
from vlarl_cli.policies.gr00t.normalization import MODES, normalize, unnormalize
from vlarl_cli.policies.gripper import check_gripper, gripper_to_env

__all__ = [
    "EMBODIMENT_IDS",
    "LANGUAGE_KEY",
    "ZERO_STATE_TAGS",
    "ModalitySpec",
    "default_modality",
    "min_max_normalize",
    "min_max_unnormalize",
]

#: Embodiment tag -> projector slot (RLinf ``embodiment_tags.EMBODIMENT_TAG_MAPPING``, which extends
#: GR00T's table with the LIBERO tags). N1.6 checkpoints carry their own ``embodiment_id.json``.
EMBODIMENT_IDS: dict[str, int] = {
    "libero_panda": 2, "robocasa_panda_omron": 13, "oxe_droid": 17, "gr1": 24, "agibot_genie1": 26,
    "maniskill_widowx": 30, "libero_franka": 31, "isaaclab_franka": 31, "new_embodiment": 10,
}
LANGUAGE_KEY = "annotation.human.action.task_description"
#: Embodiments whose state input is all zeros: RLinf's ManiSkill GR00T path feeds a zero ``state.left_arm``
#: ("State from simulation are not unified yet", ``gr00t/simulation_io.py``
#: ``convert_maniskill_obs_to_gr00t_format``) and passes ``action.left_arm`` to the env unchanged.
ZERO_STATE_TAGS = frozenset({"maniskill_widowx"})
_STAT_FIELDS = ("min", "max", "mean", "std", "q01", "q99")


def min_max_normalize(x: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """``2 (x - lo) / (hi - lo) - 1`` per element, 0 where ``lo == hi`` (GR00T ``Normalizer`` min_max).

    ``x`` [..., D]; ``lo``/``hi`` [D].
    """
    lo, hi = lo.to(x), hi.to(x)
    span = hi - lo
    ok = span != 0
    out = 2.0 * (x - lo) / torch.where(ok, span, torch.ones_like(span)) - 1.0
    return torch.where(ok, out, torch.zeros_like(out))


def min_max_unnormalize(x: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """Inverse of :func:`min_max_normalize` on [-1, 1] (input clamped first, as upstream)."""
    lo, hi = lo.to(x), hi.to(x)
    return (x.clamp(-1.0, 1.0) + 1.0) / 2.0 * (hi - lo) + lo


@dataclass
class ModalitySpec:
    """What a checkpoint expects for one embodiment and how to map env data to model data.

    ``state_keys``/``action_keys`` are ``(name, width)`` pairs in concatenation order; the env state
    vector [B, 8] (LIBERO: eef pos 3, axis-angle 3, gripper qpos 2) is cut into them column by column.
    ``statistics`` = ``{"state": {name: {min, max, ...}}, "action": {name: {...}}}`` (lists of floats).
    """

    embodiment_tag: str
    embodiment_id: int
    video_keys: tuple[str, ...] = ("image", "wrist_image")
    state_keys: tuple[tuple[str, int], ...] = ()
    action_keys: tuple[tuple[str, int], ...] = ()
    statistics: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    state_norm: str = "min_max"  # default mode of the state keys: min_max | q99 | mean_std
    action_norm: str = "min_max"  # default mode of the action keys
    #: keys normalised with mean/std whatever the default ({"state": [...], "action": [...]}; N1.6
    #: ``mean_std_embedding_keys``)
    mean_std_keys: dict[str, list[str]] = field(default_factory=dict)
    use_percentiles: bool = False  # N1.6: min-max bounds are q01/q99
    clip_outliers: bool = False  # N1.6: clip normalised min-max values (state and action) to [-1, 1]
    convention: str = "n1.5"  # "n1.5" | "n1.6": which release's rules (see normalization.py)
    gripper_convention: str = "zero_one_to_sign"  # g' = -sign(2g - 1); "none" keeps the model value
    language_key: str = LANGUAGE_KEY

    def __post_init__(self) -> None:
        self.video_keys = tuple(self.video_keys)
        self.state_keys = tuple((str(k), int(n)) for k, n in self.state_keys)
        self.action_keys = tuple((str(k), int(n)) for k, n in self.action_keys)
        for label, mode in (("state_norm", self.state_norm), ("action_norm", self.action_norm)):
            if mode not in MODES:
                raise ConfigError(f"GR00T {label} {mode!r} is not a normalisation mode we implement.",
                                  f"Use one of {', '.join(MODES)} (Isaac-GR00T Normalizer modes).")
        if self.convention not in ("n1.5", "n1.6"):
            raise ConfigError(f"Unknown normalisation convention {self.convention!r}.", 'Use "n1.5" or "n1.6".')
        self.mean_std_keys = {k: list(v) for k, v in self.mean_std_keys.items()}
        check_gripper(self.gripper_convention, ("zero_one_to_sign", "none"), "gripper_convention")
        for kind, keys in (("state", self.state_keys), ("action", self.action_keys)):
            stats = self.statistics.get(kind, {})
            for name, width in keys:
                if name not in stats:
                    raise CheckpointError(f'No {kind} statistics for key "{name}" of embodiment '
                                          f'"{self.embodiment_tag}" (have: {sorted(stats)}).',
                                          "Provide statistics for every modality key (metadata.json / "
                                          "statistics.json).")
                for bound in self._fields_needed(kind, name):
                    values = stats[name].get(bound)
                    if values is None or len(values) != width:
                        raise CheckpointError(
                            f'{kind} statistics "{name}.{bound}" must have {width} values, got {values!r}.',
                            "Fix the statistics file of the checkpoint.")

    # ------------------------------------------------------------------ sizes and bounds
    @property
    def state_width(self) -> int:
        return sum(n for _, n in self.state_keys)

    @property
    def action_width(self) -> int:
        return sum(n for _, n in self.action_keys)

    def mode(self, kind: str, name: str) -> str:
        """Normalisation mode of one key ("state" / "action")."""
        if name in self.mean_std_keys.get(kind, []):
            return "mean_std"
        return self.state_norm if kind == "state" else self.action_norm

    def _fields_needed(self, kind: str, name: str) -> tuple[str, ...]:
        mode = self.mode(kind, name)
        if mode == "mean_std":
            return ("mean", "std")
        return ("q01", "q99") if (mode == "q99" or self.use_percentiles) else ("min", "max")

    def _bounds(self, kind: str) -> tuple[Tensor, Tensor]:
        keys = self.state_keys if kind == "state" else self.action_keys
        stats = self.statistics[kind]
        lo = [v for name, _ in keys for v in stats[name]["min"]]
        hi = [v for name, _ in keys for v in stats[name]["max"]]
        return torch.tensor(lo, dtype=torch.float32), torch.tensor(hi, dtype=torch.float32)

    # ------------------------------------------------------------------ transforms
    def _apply(self, kind: str, x: Tensor, inverse: bool) -> Tensor:
        keys = self.state_keys if kind == "state" else self.action_keys
        parts, start = [], 0
        for name, width in keys:
            stats, mode = self.statistics[kind][name], self.mode(kind, name)
            chunk = x[..., start: start + width]
            if inverse:
                parts.append(unnormalize(chunk, stats, mode, convention=self.convention,
                                         use_percentiles=self.use_percentiles))
            else:
                # N1.6 clips min-max keys and mean/std actions, never mean/std states
                clip = self.clip_outliers and not (kind == "state" and mode == "mean_std")
                parts.append(normalize(chunk, stats, mode, convention=self.convention,
                                       use_percentiles=self.use_percentiles, clip=clip))
            start += width
        return torch.cat(parts, dim=-1)

    def normalize_state(self, states: Tensor) -> Tensor:
        """Env states [B, >=state_width] -> normalised [B, state_width] float32 (extra columns dropped)."""
        if states.dim() != 2 or states.shape[1] < self.state_width:
            raise ValueError(f"states must be [B, >={self.state_width}] for embodiment "
                             f"{self.embodiment_tag}, got {tuple(states.shape)}")
        return self._apply("state", states[:, : self.state_width].float(), inverse=False)

    def normalize_action(self, actions: Tensor) -> Tensor:
        """Env-unit actions [..., action_width] -> model space (the SFT target), float32."""
        return self._apply("action", actions[..., : self.action_width].float(), inverse=False)

    def unnormalize_action(self, actions: Tensor) -> Tensor:
        """Model actions [B, T, >=action_width] -> env units [B, T, action_width] float32."""
        return self._apply("action", actions[..., : self.action_width].float(), inverse=True)

    def to_env_action(self, actions: Tensor) -> Tensor:
        """Apply the gripper convention to the last action dimension ([..., A] float32, new tensor)."""
        out = actions.clone()
        out[..., -1] = gripper_to_env(self.gripper_convention, out[..., -1])
        return out

    # ------------------------------------------------------------------ upstream files
    def to_n15_metadata(self) -> dict[str, Any]:
        """One entry of N1.5 ``experiment_cfg/metadata.json`` (``{tag: entry}``)."""
        def modality(keys: tuple[tuple[str, int], ...]) -> dict[str, Any]:
            return {k: {"absolute": True, "rotation_type": None, "shape": [n], "continuous": True}
                    for k, n in keys}
        return {
            "statistics": {kind: {k: dict(v) for k, v in self.statistics[kind].items()}
                           for kind in ("state", "action")},
            "modalities": {"video": {k: {"resolution": [256, 256], "channels": 3, "fps": 20.0}
                                     for k in self.video_keys},
                           "state": modality(self.state_keys), "action": modality(self.action_keys)},
            "embodiment_tag": self.embodiment_tag,
            "vlarl": {"gripper_convention": self.gripper_convention},
        }

    @classmethod
    def from_n15_metadata(cls, metadata: dict[str, Any], tag: str, *, embodiment_id: int | None = None
                          ) -> ModalitySpec:
        """Read one embodiment out of a parsed N1.5 ``metadata.json``."""
        if tag not in metadata:
            raise CheckpointError(f'metadata.json has no entry for embodiment tag "{tag}" '
                                  f"(has: {sorted(metadata)}).{did_you_mean(tag, list(metadata))}",
                                  "Set actor.model.embodiment_tag to one of the listed tags.")
        entry = metadata[tag]
        mods = entry.get("modalities", {})
        stats = entry.get("statistics", {})

        def keys(kind: str) -> tuple[tuple[str, int], ...]:
            if mods.get(kind):
                return tuple((k.split(".", 1)[-1], int(v["shape"][0])) for k, v in mods[kind].items())
            return tuple((k, len(v["min"])) for k, v in stats.get(kind, {}).items())

        extra = entry.get("vlarl", {})
        return cls(
            embodiment_tag=tag, embodiment_id=_slot(tag, embodiment_id),
            video_keys=tuple(k.split(".", 1)[-1] for k in mods.get("video", {})) or ("image", "wrist_image"),
            state_keys=keys("state"), action_keys=keys("action"),
            statistics={kind: {k.split(".", 1)[-1]: {f: list(map(float, v[f])) for f in _STAT_FIELDS if f in v}
                               for k, v in stats.get(kind, {}).items()} for kind in ("state", "action")},
            gripper_convention=extra.get("gripper_convention", "zero_one_to_sign"))

    def to_n16_files(self, max_state_dim: int, max_action_dim: int, action_horizon: int
                     ) -> dict[str, dict[str, Any]]:
        """Contents of N1.6 ``statistics.json``, ``embodiment_id.json`` and ``processor_config.json``."""
        tag = self.embodiment_tag
        modality_configs = {tag: {
            "video": {"delta_indices": [0], "modality_keys": list(self.video_keys)},
            "state": {"delta_indices": [0], "modality_keys": [k for k, _ in self.state_keys],
                      "mean_std_embedding_keys": self.mean_std_keys.get("state") or None},
            "action": {"delta_indices": list(range(action_horizon)), "modality_keys": [k for k, _ in self.action_keys],
                       "mean_std_embedding_keys": self.mean_std_keys.get("action") or None},
            "language": {"delta_indices": [0], "modality_keys": [self.language_key]},
        }}
        return {
            "statistics.json": {tag: {kind: {k: dict(v) for k, v in self.statistics[kind].items()}
                                      for kind in ("state", "action")}},
            "embodiment_id.json": {tag: self.embodiment_id},
            "processor_config.json": {"processor_class": "Gr00tN1d6Processor", "processor_kwargs": {
                "modality_configs": modality_configs, "max_state_dim": max_state_dim,
                "max_action_dim": max_action_dim, "max_action_horizon": action_horizon,
                "use_percentiles": self.use_percentiles, "clip_outliers": self.clip_outliers,
                "vlarl": {"state_widths": dict(self.state_keys), "action_widths": dict(self.action_keys),
                          "gripper_convention": self.gripper_convention}}},
        }

    @classmethod
    def from_n16_files(cls, statistics: dict[str, Any], embodiment_ids: dict[str, int],
                       processor_config: dict[str, Any] | None, tag: str) -> ModalitySpec:
        """Read one embodiment out of parsed N1.6 ``statistics.json`` / ``embodiment_id.json`` /
        ``processor_config.json`` (the latter optional: key order then follows the statistics)."""
        if tag not in statistics:
            raise CheckpointError(f'statistics.json has no entry for embodiment tag "{tag}" (has: '
                                  f"{sorted(statistics)}).{did_you_mean(tag, list(statistics))}",
                                  "Set actor.model.embodiment_tag to one of the listed tags.")
        if tag not in embodiment_ids:
            raise CheckpointError(f'embodiment_id.json has no slot for embodiment tag "{tag}" (has: '
                                  f"{sorted(embodiment_ids)}).", "Add the tag to embodiment_id.json.")
        stats = statistics[tag]
        kwargs = (processor_config or {}).get("processor_kwargs", {})
        mc = kwargs.get("modality_configs", {}).get(tag, {})
        extra = kwargs.get("vlarl", {})
        _refuse_unsupported_n16(kwargs, mc, tag)

        def keys(kind: str) -> tuple[tuple[str, int], ...]:
            names = mc.get(kind, {}).get("modality_keys") or list(stats.get(kind, {}))
            return tuple((n, len(stats[kind][n]["min"]) if n in stats.get(kind, {}) else 0) for n in names)

        return cls(
            embodiment_tag=tag, embodiment_id=int(embodiment_ids[tag]),
            video_keys=tuple(mc.get("video", {}).get("modality_keys", ("image", "wrist_image"))),
            state_keys=keys("state"), action_keys=keys("action"),
            statistics={kind: {k: {f: list(map(float, v[f])) for f in _STAT_FIELDS if f in v}
                               for k, v in stats.get(kind, {}).items()} for kind in ("state", "action")},
            mean_std_keys={kind: list(mc.get(kind, {}).get("mean_std_embedding_keys") or [])
                           for kind in ("state", "action") if mc.get(kind, {}).get("mean_std_embedding_keys")},
            # Gr00tN1d6Processor defaults: use_percentiles False, clip_outliers True
            use_percentiles=bool(kwargs.get("use_percentiles", False)),
            clip_outliers=bool(kwargs.get("clip_outliers", True)), convention="n1.6",
            gripper_convention=extra.get("gripper_convention", "zero_one_to_sign"))

    # ------------------------------------------------------------------ our own JSON
    def to_dict(self) -> dict[str, Any]:
        return {"embodiment_tag": self.embodiment_tag, "embodiment_id": self.embodiment_id,
                "video_keys": list(self.video_keys), "state_keys": [list(k) for k in self.state_keys],
                "action_keys": [list(k) for k in self.action_keys], "statistics": self.statistics,
                "state_norm": self.state_norm, "action_norm": self.action_norm,
                "mean_std_keys": self.mean_std_keys, "use_percentiles": self.use_percentiles,
                "clip_outliers": self.clip_outliers, "convention": self.convention,
                "gripper_convention": self.gripper_convention, "language_key": self.language_key}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModalitySpec:
        return cls(**{**data, "state_keys": tuple(tuple(k) for k in data["state_keys"]),
                      "action_keys": tuple(tuple(k) for k in data["action_keys"])})

    def save_json(self, path: Path) -> None:
        from vlarl_cli.checkpoints.atomic import atomic_write_json

        atomic_write_json(path, self.to_dict())

    @classmethod
    def load_json(cls, path: Path) -> ModalitySpec:
        return cls.from_dict(json.loads(Path(path).read_text()))


def _refuse_unsupported_n16(kwargs: dict[str, Any], modality_config: dict[str, Any], tag: str) -> None:
    """N1.6 processor options we do not implement are an error, never silently ignored."""
    if kwargs.get("apply_sincos_state_encoding") and modality_config.get("state", {}).get("sin_cos_embedding_keys"):
        raise ConfigError(f"processor_config.json of embodiment {tag} asks for sin/cos state encoding "
                          "(apply_sincos_state_encoding with sin_cos_embedding_keys), which vlarl does not implement.",
                          "Use a checkpoint trained without sin/cos state encoding (the LIBERO ones are).")
    configs = modality_config.get("action", {}).get("action_configs") or []
    relative = [c for c in configs if str((c or {}).get("rep", "")).upper() == "RELATIVE"]
    if kwargs.get("use_relative_action") and relative:
        raise ConfigError(f"processor_config.json of embodiment {tag} uses relative actions (use_relative_action with "
                          "RELATIVE action configs); vlarl does not convert relative actions to absolute ones.",
                          "Use a checkpoint with absolute / delta actions (the LIBERO ones are).")


def _slot(tag: str, embodiment_id: int | None) -> int:
    if embodiment_id is not None:
        return int(embodiment_id)
    if tag not in EMBODIMENT_IDS:
        raise ConfigError(f'Unknown GR00T embodiment tag "{tag}".{did_you_mean(tag, list(EMBODIMENT_IDS))}',
                          f"Use one of {', '.join(sorted(EMBODIMENT_IDS))}.")
    return EMBODIMENT_IDS[tag]


_POSE = (("x", 1), ("y", 1), ("z", 1), ("roll", 1), ("pitch", 1), ("yaw", 1))


def default_modality(tag: str, config: Any | None = None) -> ModalitySpec:
    """The LIBERO modality of ``tag`` with placeholder statistics (for presets without a checkpoint).

    ``maniskill_widowx`` (RLinf ``ManiskillWidowXDataConfig``, N1.5 and N1.6): camera ``ego_view`` (the
    env's ``main_images``), state and action ``left_arm`` (7), a zero state (:data:`ZERO_STATE_TAGS`), the
    actions passed to ManiSkill unchanged (gripper_convention none).
    ``libero_franka`` (N1.5, RLinf ``LiberoFrankaDataConfig``): state x..yaw + 2-d gripper qpos = the
    8 env state columns; ``libero_panda`` (N1.6): 1-d gripper, 7 state columns. Actions: 7 (pose deltas +
    gripper). Placeholder statistics make normalisation the identity on pose dims and map the gripper
    action from [-1, 1] to [0, 1].
    """
    slot = _slot(tag, None)

    def unit(n: int, lo: float = -1.0) -> dict[str, list[float]]:
        return {"min": [lo] * n, "max": [1.0] * n, "mean": [0.0] * n, "std": [1.0] * n,
                "q01": [lo] * n, "q99": [1.0] * n}

    convention = config.version if config is not None else ("n1.6" if tag == "libero_panda" else "n1.5")
    if tag in ZERO_STATE_TAGS:  # RLinf's ManiskillWidowXDataConfig: one camera, 7-d left_arm state / action
        arm = (("left_arm", 7),)
        return ModalitySpec(embodiment_tag=tag, embodiment_id=slot, video_keys=("ego_view",), state_keys=arm,
                            action_keys=arm, statistics={"state": {"left_arm": unit(7)}, "action": {"left_arm": unit(7)}},
                            convention=convention, clip_outliers=convention == "n1.6", gripper_convention="none")
    gripper_state = 2 if tag in ("libero_franka", "isaaclab_franka") else 1
    state_keys = (*_POSE, ("gripper", gripper_state))
    action_keys = (*_POSE, ("gripper", 1))

    stats = {"state": {k: unit(n) for k, n in state_keys},
             "action": {k: unit(n, 0.0 if k == "gripper" else -1.0) for k, n in action_keys}}
    if config is not None and sum(n for _, n in state_keys) > config.state_dim:
        raise ConfigError(f"embodiment {tag} has {sum(n for _, n in state_keys)} state dims but the model "
                          f"only {config.state_dim}.", "Use a model with a larger state_dim.")
    return ModalitySpec(embodiment_tag=tag, embodiment_id=slot, state_keys=state_keys,
                        action_keys=action_keys, statistics=stats, convention=convention,
                        clip_outliers=convention == "n1.6")
