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
    packages=("numpy", "mujoco", "robosuite", "bddl", "libero"),
    modules=("mujoco", "robosuite", "libero.libero.envs", "vlarl_cli.envs.libero.vector"),
    prepare="vlarl_cli.envs.libero.setup:prepare_libero",  # LIBERO's config, so importing libero never prompts
    # what a LIBERO worker imports (measured: the distributions of sys.modules after a reset), at
    # scripts/install.sh's pins; no torch (libero's declared dependencies would pull it)
    requirements=("numpy", "mujoco", "robosuite", "bddl", "future", "easydict", "matplotlib", "cloudpickle", "pyyaml",
                  "termcolor", "tqdm", "pillow", "numba", "scipy", "opencv-python", "gymnasium", "PyOpenGL"),
    requirements_no_deps=("libero", "gym", "gym-notices"),
    setup="vlarl_cli.envs.libero.install:link_assets_into",
)


def own_environment_row(**fields: object) -> Simulator:
    """A row for a LIBERO variant whose workers run LIBERO's code in their own environment (LIBERO-PRO's
    package, LIBERO-Plus): LIBERO's worker facts, the generic deterministic rollout for rl-train's
    evaluation (``vlarl eval --suite ...`` runs the benchmark's protocol) and no scripted demos; ``fields``
    name the variant, its config mapping and its environment."""
    shared: dict[str, object] = {
        "evaluate": None, "deviations": SIMULATOR.deviations, "task_name": SIMULATOR.task_name, "images": True,
        "in_workers": True, "pipelines": True, "env_bytes": SIMULATOR.env_bytes, "default_demos": 0,
        "modules": SIMULATOR.modules, "prepare": SIMULATOR.prepare}
    return Simulator(**{**shared, **fields})  # type: ignore[arg-type]
