"""``env.<split>`` (``env_type: maniskill``) -> :class:`ManiSkillVectorEnv` (called by ``training.rl.make_env``)."""

from __future__ import annotations

from typing import Any

from vlarl_cli.envs.maniskill.vector import ManiSkillSpec, ManiSkillVectorEnv
from vlarl_cli.errors import EnvError


def make_maniskill_env(split: Any, *, num_envs: int, rank: int, group_size: int, cameras: tuple[str, ...],
                       record_video: bool, stages: int) -> ManiSkillVectorEnv:
    """This rank's ManiSkill envs; LIBERO-only keys that would change behaviour are refused, not ignored."""
    if stages != 1:
        raise EnvError("the ManiSkill env steps in-process: pipelining stages are not supported.",
                       fix="Set rollout.pipeline_stage_num: 1.")
    if split.specific_reset_id is not None:
        raise EnvError("env.*.specific_reset_id is not implemented for ManiSkill.", fix="Set it to null.")
    params = split.init_params
    spec = ManiSkillSpec(
        task=params.id,
        num_envs=num_envs,
        cameras=cameras,
        resolution=split.resolution,
        max_episode_steps=split.max_episode_steps,
        control_mode=params.control_mode,
        seed=split.seed + 1000 * rank,
        auto_reset=split.auto_reset,
        group_size=group_size,
        reward_coef=split.reward_coef,
        use_rel_reward=split.use_rel_reward,
        step_penalty=split.step_penalty if split.use_step_penalty else 0.0,
        ignore_terminations=split.ignore_terminations,
        record_video=record_video,
    )
    spec.validate()
    return ManiSkillVectorEnv(spec)
