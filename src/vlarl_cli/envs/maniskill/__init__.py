"""ManiSkill3 (``env_type: maniskill``), the second simulator of the seeds. Nothing heavy is imported here.

- ``envs.maniskill.tasks``: the built-in tasks we run offline, and RLinf's digital-twin task ids, which
  load in configs and are refused at env creation (missing assets, then: RLinf's task code).
- ``envs.maniskill.assets``: the hub dataset repos those tasks read and where they go.
- ``envs.maniskill.setup``: ``check_maniskill`` (import + Vulkan check naming the missing packages).
- ``envs.maniskill.vector``: ``ManiSkillVectorEnv``, the LIBERO vector-env contract over ManiSkill.
- ``envs.maniskill.sims``: the simulators behind it: N single-env CPU scenes, or one batched physx_cuda scene.
- ``envs.maniskill.make``: config -> env; the one place the backend (cpu / gpu) is chosen. The gripper
  convention is the policy's declaration (``keys.policy_gripper``).
- ``envs.maniskill.simulator``: its row of the simulator table (``envs.registry``).
"""
