"""The simulator side (LIBERO). Nothing heavy is imported here.

- ``envs.libero.setup``: ``prepare_libero`` (config without a prompt, MUJOCO_GL choice, asset checks);
  ``python -m vlarl_cli.envs.libero.install`` links and verifies the assets at install time.
- ``envs.libero.suites``: suites, tasks, languages, the 50 init states per task, episode addressing.
- ``envs.libero.protocol``: the ``standard`` (openpi / OFT) and ``rlinf`` (RLinf 0.3.0 LiberoEnv) episode
  protocols as data: limits, settle steps, seeding, reset mode, eval order, per-family replan size.
- ``envs.libero.conventions``: gripper conventions per model family, clipping, the 8-d state.
- ``envs.libero.env``: ``LiberoEnv``, one simulator executing ``[C, 7]`` chunks, rendering only at chunk
  boundaries.
- ``envs.libero.expert``: a scripted pick-and-place expert (tests, reward-path checks).
- ``envs.vector``: ``LiberoVectorEnv(VectorEnvSpec)``, N simulators in W spawned workers with
  shared-memory observations, GRPO groups, pipeline stages and crash recovery.
"""
