"""``env.<split>`` (``env_type: maniskill``) -> :class:`ManiSkillVectorEnv` (called by ``training.envs.make_env``)."""

from __future__ import annotations

from typing import Any

from vlarl_cli.envs.maniskill.vector import ManiSkillSpec, ManiSkillVectorEnv
from vlarl_cli.errors import EnvError
from vlarl_cli.model_types import MODEL_TYPES


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


def gripper_convention(model_type: str, embodiment_tag: str | None) -> str:
    """The gripper convention of a policy's env actions: ``libero`` (-1 open, +1 close) or ``maniskill``.

    pi0 / pi0.5 / OpenVLA-OFT and GR00T with a LIBERO embodiment emit LIBERO's convention (their
    processors map the model's [0, 1] gripper with ``-sign(2 g - 1)``); GR00T's ``maniskill_*``
    embodiments emit ManiSkill actions unchanged (RLinf ``gr00t/simulation_io.py``
    ``convert_to_maniskill_action``); the toy MLP policies have no convention and learn ManiSkill's.
    """
    known = MODEL_TYPES.get(model_type)
    family = known.family if known is not None else None  # the schema refuses unknown types before this
    if family == "toy":
        return "maniskill"
    if family == "gr00t" and (embodiment_tag or "").startswith("maniskill"):
        return "maniskill"
    return "libero"


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
