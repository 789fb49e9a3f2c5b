"""The ManiSkill simulators behind one vector env: N single-env CPU scenes, or one batched GPU scene.

Both banks answer the same three calls with numpy rows, one per env, so ``vector.ManiSkillVectorEnv``
keeps the episode bookkeeping once:

- ``reset(env_ids, seeds)`` -> observation rows of those envs;
- ``step(actions [N, 7])`` -> observation rows of all envs, ``reward [N]`` (the task's own reward, in the
  reward mode the bank was built with), ``success [N]``;
- ``frame(e)`` -> a rendered RGB frame of env ``e`` (videos of state-observation runs).

``CpuBank``: ManiSkill's CPU backend refuses ``num_envs > 1`` in one env object (mani-skill 3.0.1:
"Cannot set the sim backend to 'cpu' and have multiple environments"), so the N envs are N single-env
ManiSkill objects stepped one after the other (envs whose episode is over are not stepped).

``GpuBank``: ManiSkill's ``physx_cuda`` backend simulates all N envs in ONE scene; every step advances all
of them (a finished env is stepped too and its results are dropped by the caller until it is reset), and
a partial reset is ``reset(seed=<N seeds>, options={"env_idx": ids})`` (ManiSkill's ``BaseEnv.reset``:
a seed list must have one seed per env; only ``env_idx`` are re-initialised). Unlike the CPU bank, a
seed does not fix its env's scene there: ManiSkill seeds torch once per reset call with the first seed
and draws all reset envs' scenes from that stream, so GPU episodes are reproducible per reset call, not
per env, and GRPO groups are refused on it (``ManiSkillSpec.validate``). Which bank runs is chosen in
one place, :func:`vlarl_cli.envs.maniskill.make.sim_backend_for`. NOT TESTED on a GPU: the machines these
tests run on have none (the code path is exercised with a double in tests/envs/maniskill).

Observation rows (``keys`` names): ``obs_mode="state"`` -> ``states`` = ManiSkill's flat state vector;
``obs_mode="rgb"`` -> ``main_images`` (``base_camera``), ``wrist_images`` (``hand_camera`` where the task
has one) and ``states`` = the LIBERO-style 8-d proprio (tcp position, tcp axis-angle, two finger joints).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vlarl_cli import keys


def axis_angle(quat_wxyz: np.ndarray) -> np.ndarray:
    """``[N, 4]`` unit quaternions (w, x, y, z; sapien's order) -> ``[N, 3]`` axis-angle, w >= 0 branch."""
    q = quat_wxyz * np.where(quat_wxyz[:, :1] < 0, -1.0, 1.0)
    w = np.clip(q[:, 0], -1.0, 1.0)
    s = np.sqrt(np.maximum(1.0 - w * w, 0.0))
    angle = 2.0 * np.arccos(w)
    scale = np.where(s > 1e-8, angle / np.maximum(s, 1e-8), 2.0)  # small angle: axis*angle ~ 2 * xyz
    return q[:, 1:] * scale[:, None]


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def extract(raw: Any, sim: Any, obs_mode: str, wrist: bool) -> dict[str, np.ndarray]:
    """Batched ManiSkill observation ``raw`` (batch b) -> our rows ``{key: [b, ...]}``."""
    if obs_mode == "state":
        return {keys.STATES: _np(raw).astype(np.float32)}
    sensors = raw["sensor_data"]
    main = "base_camera" if "base_camera" in sensors else next(iter(sensors))
    rows = {keys.MAIN_IMAGES: _np(sensors[main]["rgb"]).astype(np.uint8)}
    if wrist and "hand_camera" in sensors:
        rows[keys.WRIST_IMAGES] = _np(sensors["hand_camera"]["rgb"]).astype(np.uint8)
    agent = sim.unwrapped.agent
    pose = _np(agent.tcp.pose.raw_pose).astype(np.float64)  # [b, 7]: xyz + quaternion wxyz
    qpos = _np(agent.robot.get_qpos())
    rows[keys.STATES] = np.concatenate([pose[:, :3], axis_angle(pose[:, 3:]), qpos[:, -2:]], axis=1
                                       ).astype(np.float32)
    return rows


def _make(task: str, kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    from vlarl_cli.envs.maniskill.setup import check_maniskill

    check_maniskill()
    import mani_skill.envs  # noqa: F401  (registers the ManiSkill ids with gymnasium)

    return gym.make(task, **kwargs)


class CpuBank:
    """N single-env ManiSkill objects (``sim_backend="cpu"``), or N gymnasium-style test doubles."""

    def __init__(self, sims: list[Any], obs_mode: str, wrist: bool) -> None:
        self.sims, self.obs_mode, self.wrist = sims, obs_mode, wrist

    @classmethod
    def build(cls, task: str, n: int, kwargs: dict[str, Any], obs_mode: str, wrist: bool) -> CpuBank:
        return cls([_make(task, {**kwargs, "num_envs": 1, "sim_backend": "cpu"}) for _ in range(n)],
                   obs_mode, wrist)

    @property
    def num_envs(self) -> int:
        return len(self.sims)

    def reset(self, env_ids: list[int], seeds: list[int]) -> list[dict[str, np.ndarray]]:
        out = []
        for e, seed in zip(env_ids, seeds, strict=True):
            raw, _ = self.sims[e].reset(seed=int(seed))
            out.append({k: v[0] for k, v in extract(raw, self.sims[e], self.obs_mode, self.wrist).items()})
        return out

    def step_one(self, e: int, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool]:
        """Step env ``e`` with ``action [7]``: its observation row, reward, success."""
        import torch

        raw, reward, _, _, info = self.sims[e].step(torch.from_numpy(action[None]))
        row = {k: v[0] for k, v in extract(raw, self.sims[e], self.obs_mode, self.wrist).items()}
        return row, float(_np(reward).reshape(-1)[0]) if reward is not None else 0.0, bool(_np(info["success"])[0])

    def frame(self, e: int) -> np.ndarray:
        return _np(self.sims[e].render())[0].astype(np.uint8)

    def close(self) -> None:
        for sim in self.sims:
            sim.close()


class GpuBank:
    """One ManiSkill object with ``num_envs=N`` on ``sim_backend="physx_cuda"`` (or a batched test double)."""

    def __init__(self, sim: Any, n: int, obs_mode: str, wrist: bool) -> None:
        self.sim, self.n, self.obs_mode, self.wrist = sim, n, obs_mode, wrist
        self._seeds = np.zeros(n, np.int64)
        self._rows: dict[str, np.ndarray] = {}

    @classmethod
    def build(cls, task: str, n: int, kwargs: dict[str, Any], obs_mode: str, wrist: bool) -> GpuBank:
        return cls(_make(task, {**kwargs, "num_envs": n, "sim_backend": "physx_cuda"}), n, obs_mode, wrist)

    @property
    def num_envs(self) -> int:
        return self.n

    def reset(self, env_ids: list[int], seeds: list[int]) -> list[dict[str, np.ndarray]]:
        import torch

        self._seeds[env_ids] = seeds
        idx = torch.as_tensor(env_ids, dtype=torch.long)
        raw, _ = self.sim.reset(seed=self._seeds.tolist(), options={"env_idx": idx})
        self._rows = extract(raw, self.sim, self.obs_mode, self.wrist)
        return [{k: v[e] for k, v in self._rows.items()} for e in env_ids]

    def step_all(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Step every env with ``actions [N, 7]``: rows ``{key: [N, ...]}``, reward ``[N]``, success ``[N]``."""
        import torch

        device = getattr(self.sim.unwrapped, "device", "cpu")
        raw, reward, _, _, info = self.sim.step(torch.from_numpy(actions).to(device))
        self._rows = extract(raw, self.sim, self.obs_mode, self.wrist)
        rew = _np(reward).astype(np.float32).reshape(self.n) if reward is not None else np.zeros(self.n, np.float32)
        return self._rows, rew, _np(info["success"]).astype(bool).reshape(self.n)

    def frame(self, e: int) -> np.ndarray:
        return _np(self.sim.render())[e].astype(np.uint8)

    def close(self) -> None:
        self.sim.close()
