"""RLinf features vlarl does not implement, so that a recipe using one is told so, not "fix the spelling".

RLinf's embodied recipes (``examples/embodiment/config/*.yaml``) also cover off-policy SAC, DSRL, reward
and critic models, other simulators and other policies. Their keys are unknown to vlarl's schema; without
this table the loader would call them typos and suggest a wrong key (``add_q_head`` -> ``add_value_head``).

A key listed here is refused only when it switches its feature on (true, a non-empty value); the "off"
values RLinf writes into recipes that do not use the feature (``add_q_head: False``, ``use_dsrl: False``,
``reward: {use_reward_model: False}``) are accepted and reported as ignored. A feature with a master switch
(``GATES``) is off for its whole section when the switch is off: RLinf's ``model/pi0.yaml`` carries
``use_dsrl: False`` next to ``dsrl_state_dim: 8`` and the other DSRL sizes, which then mean nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_SAC = "off-policy SAC (replay buffer, Q heads, entropy temperature, target networks)"
_DSRL = "DSRL (RL on the diffusion noise of a frozen policy)"
_ASYNC = "asynchronous PPO (rollouts running ahead of the update: staleness threshold, behaviour-policy weights)"
_COTRAIN = "SFT co-training (a supervised loss on demonstration data mixed into RL)"

# the last component of a key path -> the feature it belongs to
BY_NAME: dict[str, str] = {
    **{k: _SAC for k in (
        "add_q_head", "num_q_heads", "q_head_type", "replay_buffer", "tau", "target_entropy",
        "auto_entropy_tuning", "alpha_type", "initial_alpha", "alpha_lr", "critic_actor_ratio",
        "target_update_freq", "target_update_type", "agg_q", "actor_agg_q", "backup_entropy",
        "critic_subsample_size", "enable_drq", "collect_transitions",
        "demo_buffer", "utd_ratio")},
    "use_dsrl": _DSRL,
    "use_reward_model": "learned reward models",
    "use_critic_model": "a separate critic model (vlarl's critic is the policy's value head)",
    "obs_dim": "RLinf's MLP / CNN state policies",
    "encoder_config": "RLinf's MLP / CNN state policies",
    "staleness_threshold": _ASYNC,
    "behave_weight_threshold": _ASYNC,
    "enable_sft_co_train": _COTRAIN,
    "sft_loss_weight": _COTRAIN,
    "sft_data_path": _COTRAIN,
    "noise_anneal": "annealing the flow-SDE noise level over training (openpi noise_anneal / noise_params)",
}
# name prefixes -> feature
BY_PREFIX: dict[str, str] = {"dsrl_": _DSRL, "sac_": _SAC}
# master switches: when one is off in a section, its feature's other keys in that section are off too
GATES: dict[str, str] = {"use_dsrl": _DSRL, "enable_sft_co_train": _COTRAIN}

SUPPORTED = ("vlarl runs on-policy PPO (adv_type gae) and GRPO / REINFORCE++ for pi0 / pi0.5 (openpi), GR00T "
             "N1.5 / N1.6 and OpenVLA-OFT policies in LIBERO and ManiSkill3's built-in tasks (and the CPU "
             "toy_reach task)")
FIX = ("Remove these keys (or set them to false) to run the rest of the recipe with vlarl, or start from a "
       "preset, e.g. `vlarl rl-train --config libero_10_ppo_openpi --print-config`.")


def feature_of(path: str) -> str | None:
    """The unsupported RLinf feature a dotted key path belongs to, or None."""
    name = path.rsplit(".", 1)[-1]
    if name in BY_NAME:
        return BY_NAME[name]
    return next((feature for prefix, feature in BY_PREFIX.items() if name.startswith(prefix)), None)


def switched_on(value: Any) -> bool:
    """True unless ``value`` is an "off" value RLinf writes for an unused feature."""
    if isinstance(value, dict):
        return any(switched_on(v) for v in value.values()) if value else False
    return value not in (None, False, 0, "", [], "none", "None")


def gated_off(section: dict[str, Any]) -> set[str]:
    """Features whose master switch (``GATES``) is present and off in ``section``."""
    return {feature for gate, feature in GATES.items() if gate in section and not switched_on(section[gate])}


def uses(path: str, value: Any, section: dict[str, Any] | None = None) -> list[str]:
    """``"dotted.path" (feature)`` for every place under ``path`` that switches an unsupported feature on;
    ``section`` is the mapping holding ``path``'s last key (its siblings may switch a feature off)."""
    feature = feature_of(path)
    if feature is not None:
        if feature in gated_off(section or {}):
            return []
        return [f'"{path}" ({feature})'] if switched_on(value) else []
    if isinstance(value, dict):
        return [use for k, v in value.items() for use in uses(f"{path}.{k}", v, value)]
    return []


# --------------------------------------------------------------------------------------------------
# Deviations: RLinf keys vlarl accepts (so the recipe runs) but does not follow. Each is printed with what
# vlarl does instead, never dropped quietly. Keyed by the last components of the dotted path; the value
# test says which values vlarl *does* follow (those are not deviations).


@dataclass(frozen=True)
class Deviation:
    follows: Callable[[Any], bool]
    instead: str


DEVIATIONS: dict[str, Deviation] = {
    # RLinf rlinf/workers/env/env_worker.py: with auto_reset it adds gamma * V(final obs) to the last reward
    # of a chunk whose episode ended (standard: truncations only; always: every end)
    "algorithm.bootstrap_type": Deviation(
        lambda v: v == "standard", "vlarl bootstraps time-limit truncations only (RLinf's standard: with "
        "env.train.auto_reset and GAE, r += gamma * V(final observation)); a termination stays terminal"),
    # RLinf's pi0_maniskill / pi05_maniskill read one image; vlarl's pi0 family reads main + wrist
    "openpi.num_images_in_input": Deviation(
        lambda v: v == 2, "vlarl's pi0 / pi0.5 read the main and the wrist camera; a task without a wrist "
        "camera (PickCube-v1 ...) has it masked, one with it (StackCube-v1) feeds it"),
    # other controllers are kept and refused when the env is made (envs/maniskill/vector.py ManiSkillSpec)
    "init_params.control_mode": Deviation(
        lambda v: v not in (None, "None"), "RLinf's None (the task's default controller) is read as "
        "pd_ee_delta_pose, the one controller vlarl's ManiSkill env drives (7-d, as LIBERO)"),
    "init_params.obs_mode": Deviation(
        lambda v: v in ("rgb", "state"), "vlarl picks the ManiSkill obs_mode from the policy's cameras: rgb "
        "with cameras, state without (no segmentation)"),
    "init_params.sim_config": Deviation(
        lambda v: not v, "vlarl keeps the task's own sim_freq / control_freq"),
    "init_params.sensor_configs": Deviation(
        lambda v: not v or v == {"shader_pack": "default"},
        "vlarl renders the task's sensor cameras at init_params.camera_heights with the default shader"),
}


def _matches(path: str, key: str) -> bool:
    return path == key or path.endswith("." + key)


def deviations(data: Any, prefix: str = "") -> list[str]:
    """``path = value: what vlarl does instead`` for every key of ``data`` (a composed recipe) that vlarl
    accepts but does not follow."""
    if not isinstance(data, dict):
        return []
    out: list[str] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        found = next((d for k, d in DEVIATIONS.items() if _matches(path, k)), None)
        if found is not None:
            if not found.follows(value):
                out.append(f"{path} = {value!r}: {found.instead}")
        else:
            out.extend(deviations(value, f"{path}."))
    return out
