"""``env.<split>`` (``env_type: maniskill``) -> :class:`ManiSkillVectorEnv` (named by ``envs/maniskill/simulator.py``)."""

from __future__ import annotations

from typing import Any

from vlarl_cli.envs.maniskill.vector import ManiSkillSpec, ManiSkillVectorEnv
from vlarl_cli.envs.registry import EnvRequest
from vlarl_cli.errors import EnvError


def sim_backend_for(requested: str, cuda_available: bool | None = None) -> str:
    """THE place the ManiSkill backend is chosen: ``init_params.sim_backend`` (RLinf's key) against the device.

    ``cpu`` -> ManiSkill ``cpu`` (N single-env scenes); ``gpu`` -> ``physx_cuda`` (one scene of N envs),
    refused with a clear error on a machine without CUDA rather than left to fail inside sapien.
    """
    if requested == "cpu":
        return "cpu"
    if requested != "gpu":
        raise EnvError(f'init_params.sim_backend "{requested}" is not a ManiSkill backend vlarl runs.',
                       fix="Use cpu, or gpu on a machine with a CUDA device.")
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if not cuda_available:
        raise EnvError("init_params.sim_backend: gpu asks for ManiSkill's physx_cuda backend (all envs in one "
                       "batched GPU scene), but this machine has no CUDA device.",
                       fix="Set env.train.init_params.sim_backend=cpu and env.eval.init_params.sim_backend=cpu "
                       "(N single-env CPU scenes), or run on a machine with an NVIDIA GPU.")
    return "physx_cuda"


def check_split(split: Any) -> None:
    """Load-time check of an ``env.<split>`` section: the task id (built-in, or a refused digital twin)."""
    from vlarl_cli.envs.maniskill.tasks import check_task_id

    try:
        check_task_id(split.init_params.id)
    except EnvError as err:
        raise ValueError(str(err)) from None


def make_env(split: Any, request: EnvRequest) -> ManiSkillVectorEnv:
    """The registry's factory (``envs/maniskill/simulator.py``): the policy's gripper convention comes in the
    request (``keys.policy_gripper``), never worked out here."""
    return make_maniskill_env(split, num_envs=request.num_envs, rank=request.rank, group_size=request.group_size,
                              cameras=request.cameras, record_video=request.record_video, stages=request.stages,
                              gripper=request.gripper)


def make_maniskill_env(split: Any, *, num_envs: int, rank: int, group_size: int, cameras: tuple[str, ...],
                       record_video: bool, stages: int, gripper: str) -> ManiSkillVectorEnv:
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
        reward_mode=split.reward_mode,
        sim_backend=sim_backend_for(params.sim_backend),
        gripper=gripper,
        record_video=record_video,
    )
    spec.validate()
    return ManiSkillVectorEnv(spec)
