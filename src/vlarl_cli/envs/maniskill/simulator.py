"""ManiSkill3's row of the simulator table (:mod:`vlarl_cli.envs.registry`): plain facts, nothing imported."""

from vlarl_cli.envs.registry import Simulator

SIMULATOR = Simulator(
    name="maniskill",
    summary="maniskill (ManiSkill3 built-in tasks such as PickCube-v1, CPU backend)",
    make_env="vlarl_cli.envs.maniskill.make:make_env",
    check_split="vlarl_cli.envs.maniskill.make:check_split",
    images=True,
    state_policies=True,  # state observations: the toy MLP policies run on it
    in_workers=False,  # steps inside the rank's own process
    pipelines=False,
    # All of a rank's envs step inside that rank's process (envs/maniskill/vector.py). Measured (mani-skill
    # 3.0.1, sapien 3.0.3, CPU backend, lavapipe; PickCube-v1, obs_mode rgb, 256 px, VmRSS after reset + 5
    # steps): importing mani_skill next to torch +158 MiB, the first env +410 MiB (engine and renderer), each
    # further env +6.6 MiB (1 -> 16 envs: 794 -> 893 MiB). State-only envs cost less.
    rank_bytes=(158 + 410) * 1024**2,
    env_bytes=int(6.6 * 1024**2),
    reward_modes=("only_success", "raw"),
    default_demos=0,
)
