"""Where the LIBERO vector env was before the simulator plug-ins: its names, re-exported. The generic worker
pool is :mod:`vlarl_cli.envs.pool`; LIBERO's vector env and its rules are :mod:`vlarl_cli.envs.libero.vector`."""

from vlarl_cli.envs.libero.vector import (
    ACTIVE,
    EPISODE_DONE,
    ERRORS,
    RESET_STATE_IDS,
    LiberoVectorEnv,
    LiberoWorker,
    VectorEnvSpec,
    _merge_stages,
    draw_group_states,
    group_reset_state_ids,
    split_spec_fields,
)
from vlarl_cli.envs.pool import WorkerDied, workers_for

__all__ = ["ACTIVE", "EPISODE_DONE", "ERRORS", "RESET_STATE_IDS", "LiberoVectorEnv", "LiberoWorker", "VectorEnvSpec",
           "WorkerDied", "_merge_stages", "draw_group_states", "group_reset_state_ids", "split_spec_fields",
           "workers_for"]
