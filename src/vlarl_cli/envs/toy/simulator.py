"""The toy reach task's row of the simulator table (:mod:`vlarl_cli.envs.registry`)."""

from vlarl_cli.envs.registry import Simulator

SIMULATOR = Simulator(
    name="toy_reach",
    summary="the CPU toy_reach task (2-D reach-the-goal, pure torch)",
    make_env="vlarl_cli.envs.toy.make:make_env",
    record_demos="vlarl_cli.training.demos:record_toy_demos_for",  # the straight-to-goal expert
    images=False,
    state_policies=True,
    only_state_policies=True,
    action_dim=2,
    in_workers=False,
    pipelines=False,
    env_bytes=64,  # four floats of state per env, in the rank's process
    default_demos=100,  # they take milliseconds
)
