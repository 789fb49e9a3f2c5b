"""The simulator side. Nothing heavy is imported here.

- ``envs.registry``: the simulator table (``libero``, ``maniskill``, ``toy_reach`` and any registered from
  outside); each simulator is a folder ``envs/<name>/`` whose ``simulator.py`` holds its row.
- ``envs.pool``: the generic pool of simulator worker processes (a worker factory, shared-memory arrays,
  tagged requests, replacement of a dead worker).
- ``envs.base``: the ``VectorEnv`` protocol the rollout drives.

LIBERO (``envs/libero/``):

- ``envs.libero.setup``: ``prepare_libero`` (config without a prompt, MUJOCO_GL choice, asset checks);
  ``python -m vlarl_cli.envs.libero.install`` links and verifies the assets at install time.
- ``envs.libero.suites``: suites, tasks, languages, the 50 init states per task, episode addressing.
- ``envs.libero.protocol``: the ``standard`` (openpi / OFT) and ``rlinf`` (RLinf 0.3.0 LiberoEnv) episode
  protocols as data: limits, settle steps, seeding, reset mode, eval order, per-family replan size.
- ``envs.libero.conventions``: gripper conventions per model family, clipping, the 8-d state.
- ``envs.libero.env``: ``LiberoEnv``, one simulator executing ``[C, 7]`` chunks, rendering only at chunk
  boundaries.
- ``envs.libero.expert``: a scripted pick-and-place expert (tests, reward-path checks).
- ``envs.libero.vector``: ``LiberoVectorEnv(VectorEnvSpec)``, N simulators in W workers of ``envs.pool`` with
  shared-memory observations, GRPO groups, pipeline stages and crash recovery (``envs.vector`` re-exports it).
- ``envs.libero.make``: the config mapping (``env.<split>`` -> ``LiberoVectorEnv``) and load-time checks.
"""
