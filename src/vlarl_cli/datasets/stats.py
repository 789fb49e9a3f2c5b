"""Normalisation statistics computed from demonstrations, in each family's own file format.

* openpi (pi0 / pi0.5) ``norm_stats.json``: ``{"norm_stats": {"state" | "actions": {mean, std, q01, q99}}}``
  (openpi ``src/openpi/shared/normalize.py``). openpi estimates q01 / q99 from a 5000-bin histogram
  (``RunningStats``); here they are exact (``numpy.quantile``, linear interpolation), which differs from
  openpi's estimate by at most one histogram bin, ``(max - min) / 5000``. std is the population std
  (openpi: ``sqrt(E[x^2] - E[x]^2)``).
* GR00T ``experiment_cfg/metadata.json`` statistics: per modality key ``{min, max, mean, std, q01, q99}``
  (Isaac-GR00T ``gr00t/data/schema.py`` ``DatasetStatisticalValues``); the vector is cut into the keys of
  the embodiment's modality config in order (LIBERO: eef pos 3 / rotation 3 / gripper 2; action 6 + 1).
* OpenVLA-OFT ``dataset_statistics.json``: ``{<dataset_name>: {"action": {mean, std, max, min, q01, q99,
  mask}, "proprio": {...}, "num_transitions", "num_trajectories"}}`` (openvla ``prismatic/vla/datasets/rlds/
  utils/data_utils.py`` ``get_dataset_statistics``); ``mask`` is False for the gripper, which OpenVLA does
  not normalise.

The statistics are taken over the vectors the policy is trained on, in the family's model space: for pi0
that means after the gripper mapping and delta transform its ``supervised_loss`` applies
(:func:`pi0_model_actions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vlarl_cli.policies.gripper import gripper_from_env

__all__ = ["apply_data_stats", "apply_frame_stats", "feature_stats", "gr00t_statistics", "image_stats", "oft_dataset_statistics", "openpi_norm_stats",
           "pi0_model_actions"]


def feature_stats(x: np.ndarray) -> dict[str, list[float]]:
    """min / max / mean / std / q01 / q99 over rows of ``x [N, D]`` (lists of D floats) and ``count``."""
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"x must be [N >= 1, D], got {list(x.shape)}")
    out: dict[str, list[float]] = {k: [] for k in ("min", "max", "mean", "std", "q01", "q99")}
    for j in range(x.shape[1]):  # one float64 column at a time: x may be a memory map of millions of rows
        col = np.asarray(x[:, j], dtype=np.float64)
        q01, q99 = np.quantile(col, [0.01, 0.99])
        for k, v in (("min", col.min()), ("max", col.max()), ("mean", col.mean()), ("std", col.std()),
                     ("q01", q01), ("q99", q99)):
            out[k].append(float(v))
    return {**out, "count": [int(x.shape[0])]}


def _histogram_quantile(cumulative: np.ndarray, q: float) -> float:
    """``numpy.quantile(x, q)`` (linear interpolation) of integer data given by ``cumulative`` counts per value."""
    position = q * (int(cumulative[-1]) - 1)
    k = int(np.floor(position))
    low = int(np.searchsorted(cumulative, k, side="right"))  # the value of the k-th smallest element
    high = int(np.searchsorted(cumulative, min(k + 1, int(cumulative[-1]) - 1), side="right"))
    return low + (position - k) * (high - low)


def image_stats(frames: np.ndarray) -> dict[str, Any]:
    """Per-channel statistics of uint8 ``frames [N, H, W, 3]`` over every pixel, as lerobot stores camera
    stats in ``meta/stats.json``: values scaled to [0, 1], each statistic shaped ``[3, 1, 1]``, ``count`` the
    number of frames (lerobot ``datasets/compute_stats.py``; lerobot estimates them from a sample of frames,
    here they are exact: 256-bin histograms of the integer pixel values)."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] < 1:
        raise ValueError(f"frames must be uint8 [N >= 1, H, W, 3], got {frames.dtype} {list(frames.shape)}")
    values = np.arange(256, dtype=np.float64)
    out: dict[str, list[Any]] = {k: [] for k in ("min", "max", "mean", "std", "q01", "q99")}
    for c in range(3):
        hist = np.bincount(frames[..., c].ravel(), minlength=256)
        total = int(hist.sum())
        mean = float(hist @ values) / total
        nonzero = np.flatnonzero(hist)
        cumulative = np.cumsum(hist)
        channel = {"min": float(nonzero[0]), "max": float(nonzero[-1]), "mean": mean,
                   "std": float(np.sqrt(max(float(hist @ (values - mean) ** 2) / total, 0.0))),
                   "q01": _histogram_quantile(cumulative, 0.01), "q99": _histogram_quantile(cumulative, 0.99)}
        for k, v in channel.items():
            out[k].append([[v / 255.0]])
    return {**out, "count": [int(frames.shape[0])]}


def openpi_norm_stats(states: np.ndarray, actions: np.ndarray) -> dict[str, Any]:
    """openpi ``norm_stats.json`` content for ``states [N, S]`` and model-space ``actions [N, A]``."""
    out = {}
    for name, x in (("state", states), ("actions", actions)):
        s = feature_stats(x)
        out[name] = {k: s[k] for k in ("mean", "std", "q01", "q99")}
    return {"norm_stats": out}


def pi0_model_actions(actions: np.ndarray, states: np.ndarray, *, gripper: str, extra_delta_transform: bool) -> np.ndarray:
    """Env-space ``actions [N, A]`` -> the space pi0's ``supervised_loss`` normalises (policies/pi0/policy.py):
    the gripper goes through the model's convention (policies/gripper.py: ``from_01`` maps -1/+1 to 1/0),
    the delta transform subtracts ``state[:6]``."""
    x = np.asarray(actions, dtype=np.float64).copy()
    x[:, -1] = gripper_from_env(gripper, x[:, -1])
    if extra_delta_transform:
        d = min(6, states.shape[1])
        x[:, :d] -= np.asarray(states, dtype=np.float64)[:, :d]
    return x


def _split(x: np.ndarray, parts: Sequence[tuple[str, int]]) -> dict[str, dict[str, list[float]]]:
    if sum(w for _, w in parts) != x.shape[1]:
        raise ValueError(f"modality widths {list(parts)} do not add up to the data's {x.shape[1]} dims")
    out, start = {}, 0
    for name, width in parts:
        s = feature_stats(x[:, start:start + width])
        out[name] = {k: s[k] for k in ("min", "max", "mean", "std", "q01", "q99")}
        start += width
    return out


def gr00t_statistics(states: np.ndarray, actions: np.ndarray, state_keys: Sequence[tuple[str, int]],
                     action_keys: Sequence[tuple[str, int]]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """GR00T statistics ``{"state": {key: {...}}, "action": {key: {...}}}`` cut along the modality keys."""
    return {"state": _split(np.asarray(states), state_keys), "action": _split(np.asarray(actions), action_keys)}


def oft_dataset_statistics(name: str, actions: np.ndarray, states: np.ndarray, num_trajectories: int) -> dict[str, Any]:
    """OpenVLA ``dataset_statistics.json`` content under ``name`` (gripper, the last action dim, unmasked)."""
    act, prop = feature_stats(actions), feature_stats(states)
    keep = ("mean", "std", "max", "min", "q01", "q99")
    mask = [True] * (np.asarray(actions).shape[1] - 1) + [False]
    return {name: {"action": {**{k: act[k] for k in keep}, "mask": mask},
                   "proprio": {k: prop[k] for k in keep},
                   "num_transitions": int(np.asarray(actions).shape[0]), "num_trajectories": int(num_trajectories)}}


def apply_data_stats(policy: Any, episodes: Sequence[Any], *, dataset_name: str = "vlarl_demos") -> str:
    """:func:`apply_frame_stats` over the frames of ``episodes``."""
    return apply_frame_stats(policy, np.concatenate([e.states for e in episodes]),
                             np.concatenate([e.actions for e in episodes]), num_episodes=len(episodes),
                             dataset_name=dataset_name)


def apply_frame_stats(policy: Any, states: np.ndarray, actions: np.ndarray, *, num_episodes: int,
                      dataset_name: str = "vlarl_demos") -> str:
    """Give ``policy`` statistics of the frames ``states [N, S]`` / env-space ``actions [N, A]`` (all datasets of
    the run together, each frame once: openpi computes its norm stats over the whole training set the same
    way) in its family's format; returns what was set.

    pi0 / pi0.5 (``set_norm_stats``): openpi norm stats of the raw states and of the model-space actions;
    GR00T (``modality``): min/max statistics per modality key; OpenVLA-OFT (``set_dataset_statistics``):
    ``dataset_statistics`` under ``dataset_name`` (the gripper in the model's convention first). The
    family's ``save_policy`` then writes them where its loader looks (``norm_stats.json``,
    ``experiment_cfg/metadata.json``, ``dataset_statistics.json``). Toy policies have no statistics.
    """
    import dataclasses

    from vlarl_cli.errors import ConfigError

    if hasattr(policy, "set_norm_stats"):  # pi0 family
        from vlarl_cli.policies.normalization import NormStats

        cfg = policy.cfg
        model_actions = pi0_model_actions(actions, states, gripper=cfg.gripper,
                                          extra_delta_transform=cfg.extra_delta_transform)
        content = openpi_norm_stats(states, model_actions)["norm_stats"]
        policy.set_norm_stats({k: NormStats.from_dict(v, where=k) for k, v in content.items()})
        return f"openpi norm stats (mean/std/q01/q99) of {len(states)} frames"
    if hasattr(policy, "modality"):  # GR00T
        spec = policy.modality
        width = sum(n for _, n in spec.state_keys)
        if width != states.shape[1]:
            raise ConfigError(f"GR00T embodiment {spec.embodiment_tag} reads {width} state dims, the "
                              f"demonstrations have {states.shape[1]}.", "Use demonstrations of this embodiment.")
        model_actions = np.array(actions, dtype=np.float64)
        model_actions[:, -1] = gripper_from_env(spec.gripper_convention, model_actions[:, -1])
        stats = gr00t_statistics(states, model_actions, spec.state_keys, spec.action_keys)
        policy.modality = dataclasses.replace(spec, statistics=stats)
        return f"GR00T min/max statistics of {len(states)} frames ({spec.embodiment_tag})"
    if hasattr(policy, "set_dataset_statistics"):  # OpenVLA-OFT
        model_actions = np.array(actions, dtype=np.float64)
        model_actions[:, -1] = gripper_from_env(policy.cfg.gripper, model_actions[:, -1])
        policy.set_dataset_statistics(oft_dataset_statistics(dataset_name, model_actions, states, num_episodes))
        return f"OpenVLA dataset_statistics of {len(states)} frames under {dataset_name!r}"
    return ""
