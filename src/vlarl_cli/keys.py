"""Names of the tensors that cross module boundaries.

Environment workers and policies never import each other; they meet in dicts keyed by these
constants (DESIGN.md, "Contracts").
"""

from __future__ import annotations

from typing import Any

# Observation batch, produced by vlarl_cli.envs, consumed by vlarl_cli.policies.
MAIN_IMAGES = "main_images"  # [B, H, W, 3] uint8, already rotated 180 degrees
WRIST_IMAGES = "wrist_images"  # [B, H, W, 3] uint8, already rotated 180 degrees
STATES = "states"  # [B, 8] float32: eef pos (3) + axis-angle (3) + gripper qpos (2)
TASK_DESCRIPTIONS = "task_descriptions"  # list[str] of length B

OBSERVATION_KEYS = (MAIN_IMAGES, WRIST_IMAGES, STATES, TASK_DESCRIPTIONS)

# Per-step environment outputs.
REWARDS = "rewards"
DONES = "dones"
TERMINATED = "terminated"
TRUNCATED = "truncated"
SUCCESS = "success"

# Episode metrics (names as the seed documents log them under env/*).
SUCCESS_ONCE = "success_once"
SUCCESS_AT_END = "success_at_end"
RETURN = "return"
EPISODE_LEN = "episode_len"
EPISODE_METRICS = (SUCCESS_ONCE, SUCCESS_AT_END, RETURN, EPISODE_LEN)  # [N], valid where EPISODE_DONE

# Bookkeeping infos of a vector env's step (envs/base.py).
EPISODE_DONE = "episode_done"  # [N] bool: an episode ended during this chunk (its metrics are valid)
ERRORS = "errors"  # {env id: message} for episodes that failed during this chunk
RESET_STATE_IDS = "reset_state_ids"  # [N] int: flat reset-state id each env (re)started from
ACTIVE = "active"  # [N] bool: the env has a running episode (False only without auto-reset)
ENV_IDS = "env_ids"  # list[int]: the global env ids of the rows (a pipeline stage's subset)
# observation batch: with auto-reset, the rows of episodes cut by the time limit in this chunk hold their last
# observation (the returned one is the next episode's first), the other rows the returned one (envs/base.py)
FINAL_OBSERVATION = "final_observation"


# What the env must render for a policy and which gripper convention its actions speak (a policy's ``cameras`` /
# ``obs_mode`` / ``env_gripper`` attributes; image policies without them read main + wrist in LIBERO's standard
# rgb mode and speak LIBERO's gripper). Read on the training, evaluation and video
# side; the env is told, never the policy imported.
def policy_cameras(policy: Any) -> tuple[str, ...]:
    """The cameras ``policy`` reads (its ``cameras`` attribute; image policies without one read main + wrist)."""
    return tuple(getattr(policy, "cameras", ("main", "wrist")))


def policy_obs_mode(policy: Any) -> str:
    """The LIBERO observation mode ``policy`` was trained on: ``rgb`` (standard) or ``state`` (privileged)."""
    return str(getattr(policy, "obs_mode", "rgb"))


def policy_device(policy: Any) -> Any:
    """The device of ``policy``'s first parameter (a ``torch.device``), None for a policy without parameters."""
    first = next(iter(policy.parameters()), None) if hasattr(policy, "parameters") else None
    return first.device if first is not None else None


GRIPPERS = ("libero", "maniskill")


def policy_gripper(policy: Any) -> str:
    """The gripper convention of the env actions ``policy`` emits, as it declares it: ``libero`` (-1 open, +1
    close: pi0 / pi0.5 / OpenVLA-OFT and GR00T's LIBERO embodiments map the model's [0, 1] gripper with
    ``-sign(2 g - 1)``) or ``maniskill`` (+1 open, -1 closed: the controller's own).

    Its ``env_gripper`` attribute (the toy policies: ``maniskill``); a GR00T policy declares it through its
    modality (``gripper_convention: none`` passes the model's gripper to the env unchanged: its ``maniskill_*``
    embodiments, RLinf ``convert_to_maniskill_action``); otherwise ``libero``."""
    declared = getattr(policy, "env_gripper", None)
    if declared is None:
        modality = getattr(policy, "modality", None)
        declared = "maniskill" if getattr(modality, "gripper_convention", None) == "none" else "libero"
    if declared not in GRIPPERS:
        raise ValueError(f'{type(policy).__name__}.env_gripper is "{declared}"; expected one of {GRIPPERS}')
    return str(declared)
