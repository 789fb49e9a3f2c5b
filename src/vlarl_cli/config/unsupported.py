"""RLinf features vlarl does not implement, so that a recipe using one is told so, not "fix the spelling".

RLinf's embodied recipes (``examples/embodiment/config/*.yaml``) also cover off-policy SAC, DSRL, reward
and critic models, other simulators and other policies. Their keys are unknown to vlarl's schema; without
this table the loader would call them typos and suggest a wrong key (``add_q_head`` -> ``add_value_head``).

A key listed here is refused only when it switches its feature on (true, a non-empty value); the "off"
values RLinf writes into recipes that do not use the feature (``add_q_head: False``, ``use_dsrl: False``,
``reward: {use_reward_model: False}``) are accepted and reported as ignored.
"""

from __future__ import annotations

from typing import Any

_SAC = "off-policy SAC (replay buffer, Q heads, entropy temperature, target networks)"
_DSRL = "DSRL (RL on the diffusion noise of a frozen policy)"

# the last component of a key path -> the feature it belongs to
BY_NAME: dict[str, str] = {
    **{k: _SAC for k in (
        "add_q_head", "num_q_heads", "q_head_type", "replay_buffer", "tau", "target_entropy",
        "auto_entropy_tuning", "alpha_type", "initial_alpha", "alpha_lr", "critic_actor_ratio",
        "target_update_freq", "target_update_type", "agg_q", "actor_agg_q", "backup_entropy",
        "critic_subsample_size", "bootstrap_type", "enable_drq", "collect_transitions",
        "demo_buffer", "utd_ratio")},
    "use_dsrl": _DSRL,
    "use_reward_model": "learned reward models",
    "use_critic_model": "a separate critic model (vlarl's critic is the policy's value head)",
    "obs_dim": "RLinf's MLP / CNN state policies",
    "encoder_config": "RLinf's MLP / CNN state policies",
}
# name prefixes -> feature
BY_PREFIX: dict[str, str] = {"dsrl_": _DSRL, "sac_": _SAC}

SUPPORTED = ("vlarl runs on-policy PPO (adv_type gae) and GRPO / REINFORCE++ for pi0 / pi0.5 (openpi), GR00T "
             "N1.5 / N1.6 and OpenVLA-OFT policies in LIBERO (and the CPU toy_reach task)")
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


def uses(path: str, value: Any) -> list[str]:
    """``"dotted.path" (feature)`` for every place under ``path`` that switches an unsupported feature on."""
    feature = feature_of(path)
    if feature is not None:
        return [f'"{path}" ({feature})'] if switched_on(value) else []
    if isinstance(value, dict):
        return [use for k, v in value.items() for use in uses(f"{path}.{k}", v)]
    return []
