"""LIBERO's row of the simulator table (:mod:`vlarl_cli.envs.registry`): plain facts, nothing imported."""

from vlarl_cli.envs.registry import Simulator

GIB = 1024**3

SIMULATOR = Simulator(
    name="libero",
    summary="libero (libero_spatial, libero_object, libero_goal, libero_10, libero_90, libero_130)",
    make_env="vlarl_cli.envs.libero.make:make_env",
    check_split="vlarl_cli.envs.libero.make:check_split",
    evaluate="vlarl_cli.training.evaluation:training_eval_metrics",  # the standard / rlinf protocols
    record_demos="vlarl_cli.training.demos:record_libero_demos",  # the scripted pick-and-place expert
    deviations="vlarl_cli.envs.libero.make:deviations",
    task_name="vlarl_cli.envs.libero.make:task_name",
    images=True,
    in_workers=True,  # one simulator per env in spawned worker processes
    pipelines=True,
    env_bytes=int(1.7 * GIB),  # RSS of one LIBERO env process, measured on these machines
    default_demos=2,  # about a minute each with both cameras rendered
)
