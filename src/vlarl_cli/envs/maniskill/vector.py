"""ManiSkill3 behind the vector-env contract of ``envs.vector.LiberoVectorEnv``.

Same methods and keys (``reset`` / ``step_chunk`` / ``episode_frames`` / ``close``, ``pool``, ``num_envs``,
infos ``success``, ``truncated``, ``episode_done``, ``success_once`` ...), same episode semantics as
``envs.libero.env.LiberoEnv.step_chunk``: an episode ends at success (unless ``ignore_terminations``) or
at ``max_episode_steps``; the rest of its chunk is not executed (``dones`` True from there); the reward is
``reward_coef * success`` or, with ``use_rel_reward``, its change since the previous step (RLinf
``rlinf/envs/maniskill`` with ``reward_mode: raw``, ``use_rel_reward: True``), minus ``step_penalty``.

Simulation: ManiSkill's CPU backend refuses ``num_envs > 1`` in one env object (mani-skill 3.0.1:
"Cannot set the sim backend to 'cpu' and have multiple environments"), so the N envs are N single-env
ManiSkill objects stepped one after the other in this process (no subprocesses, no pickling). Batched
GPU simulation (``sim_backend: gpu``, one object with ``num_envs=N``) is not implemented yet.

Reset states are ManiSkill episode seeds: reset-state id ``k`` is ``env.reset(seed=k)``, which places
the objects and the goal deterministically, so a GRPO group (consecutive envs given the same id) starts
from one state, and auto-reset restarts an env from its id.

Observations: with no camera requested, ``obs_mode="state"`` and ``states`` is ManiSkill's flat state
vector ``[N, D]`` (D = 42 for PickCube-v1). With cameras, ``obs_mode="rgb"``: ``main_images`` is the
task's ``base_camera`` ``[N, R, R, 3]`` uint8, ``wrist_images`` its ``hand_camera`` where the task has
one (StackCube-v1; PickCube-v1, PushCube-v1 ... have none: the key is absent, said once on stdout, and the
image policies mask it), and ``states`` the LIBERO-style 8-d proprio (tcp position, tcp axis-angle, two
finger joints). Images are not rotated (LIBERO's 180-degree flip is a LIBERO camera convention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.envs.base import final_observation
from vlarl_cli.envs.maniskill.tasks import check_task
from vlarl_cli.errors import EnvError

EPISODE_DONE = "episode_done"
ERRORS = "errors"
RESET_STATE_IDS = "reset_state_ids"
ACTIVE = "active"
ACTION_DIM = 7  # pd_ee_delta_pose: xyz delta, axis-angle delta, gripper


@dataclass(frozen=True)
class ManiSkillSpec:
    """Everything the ManiSkill vector env needs (the runner maps ``env.<split>`` onto it).

    Attributes:
        task: ManiSkill env id (``init_params.id``), a built-in task.
        num_envs: N envs.
        cameras: policy cameras; () = state observations, else RGB from the task's sensor camera.
        resolution: square camera size.
        max_episode_steps: env steps per episode (truncation).
        control_mode: ManiSkill controller; only ``pd_ee_delta_pose`` (7-d, as LIBERO) is supported.
        seed: seeds the reset-state draws when ``reset`` gets no ids.
        pool_size: reset-state ids (episode seeds) ``0 .. pool_size - 1``.
        auto_reset, group_size, reward_coef, use_rel_reward, step_penalty, ignore_terminations: as LIBERO.
        record_video: keep the main camera's frames of every episode.
    """

    task: str = "PickCube-v1"
    num_envs: int = 1
    cameras: tuple[str, ...] = ()
    resolution: int = 128
    max_episode_steps: int = 50
    control_mode: str = "pd_ee_delta_pose"
    seed: int = 0
    pool_size: int = 1000
    auto_reset: bool = True
    group_size: int = 1
    reward_coef: float = 1.0
    use_rel_reward: bool = True
    step_penalty: float = 0.0
    ignore_terminations: bool = False
    record_video: bool = False

    def validate(self) -> str:
        """Check the spec; returns the task's instruction."""
        instruction = check_task(self.task)
        rules = [
            (self.num_envs >= 1, f"num_envs must be >= 1, got {self.num_envs}"),
            (self.group_size >= 1 and self.num_envs % self.group_size == 0,
             f"num_envs {self.num_envs} must be a multiple of group_size {self.group_size}"),
            (self.control_mode == "pd_ee_delta_pose",
             f'control_mode "{self.control_mode}" is not supported (only pd_ee_delta_pose, 7-d like LIBERO)'),
            (set(self.cameras) <= {"main", "wrist"}, f"unknown cameras {self.cameras}"),
            (self.max_episode_steps >= 1, f"max_episode_steps must be >= 1, got {self.max_episode_steps}"),
        ]  # fmt: skip
        for ok, message in rules:
            if not ok:
                raise EnvError(message + ".", fix="Adjust the env section of the config.")
        return instruction


def _axis_angle(quat_wxyz: np.ndarray) -> np.ndarray:
    """``[N, 4]`` unit quaternions (w, x, y, z; sapien's order) -> ``[N, 3]`` axis-angle, w >= 0 branch."""
    q = quat_wxyz * np.where(quat_wxyz[:, :1] < 0, -1.0, 1.0)
    w = np.clip(q[:, 0], -1.0, 1.0)
    s = np.sqrt(np.maximum(1.0 - w * w, 0.0))
    angle = 2.0 * np.arccos(w)
    scale = np.where(s > 1e-8, angle / np.maximum(s, 1e-8), 2.0)  # small angle: axis*angle ~ 2 * xyz
    return q[:, 1:] * scale[:, None]


def _make_sims(task: str, n: int, kwargs: dict[str, Any]) -> list[Any]:
    import gymnasium as gym

    from vlarl_cli.envs.maniskill.setup import check_maniskill

    check_maniskill()
    import mani_skill.envs  # noqa: F401  (registers the ManiSkill ids with gymnasium)

    return [gym.make(task, **kwargs) for _ in range(n)]


class _Episode:
    """Per-env episode bookkeeping (mirrors LiberoEnv's fields)."""

    def __init__(self) -> None:
        self.active = False
        self.elapsed = 0
        self.success_once = False
        self.last_success = False
        self.prev_reward = 0.0
        self.ret = 0.0
        self.frames: list[np.ndarray] = []

    def start(self) -> None:
        self.elapsed, self.success_once, self.last_success = 0, False, False
        self.prev_reward, self.ret, self.frames = 0.0, 0.0, []
        self.active = True

    def summary(self) -> dict[str, Any]:
        return {keys.SUCCESS_ONCE: self.success_once, keys.SUCCESS_AT_END: self.last_success,
                keys.RETURN: self.ret, keys.EPISODE_LEN: self.elapsed}


class ManiSkillVectorEnv:
    """N ManiSkill3 envs of one built-in task in this process, LIBERO's vector-env interface."""

    def __init__(self, spec: ManiSkillSpec, *, sims: list[Any] | None = None) -> None:
        """``sims``: N ready gymnasium-style envs to use instead of building ManiSkill ones (test doubles)."""
        self.instruction = spec.validate()
        self.spec = spec
        self.pool = np.arange(spec.pool_size)
        self._obs_mode = "rgb" if spec.cameras else "state"
        self._said_no_wrist = False
        kwargs: dict[str, Any] = {"num_envs": 1, "obs_mode": self._obs_mode, "control_mode": spec.control_mode,
                                  "sim_backend": "cpu", "render_mode": "rgb_array",
                                  # the episode limit is ours (below); ManiSkill's TimeLimit must not cut first
                                  "max_episode_steps": spec.max_episode_steps + 1}
        if spec.cameras:
            kwargs["sensor_configs"] = {"width": spec.resolution, "height": spec.resolution}
        self._sims = sims if sims is not None else _make_sims(spec.task, spec.num_envs, kwargs)
        if len(self._sims) != spec.num_envs:
            raise EnvError(f"{len(self._sims)} simulators for num_envs={spec.num_envs}.")
        self._episodes = [_Episode() for _ in range(spec.num_envs)]
        self._ids = np.full(spec.num_envs, -1, np.int64)
        self._obs: list[dict[str, np.ndarray]] = [{} for _ in range(spec.num_envs)]
        self._done_frames: dict[int, list[dict[str, np.ndarray]]] = {}
        self._rng = np.random.default_rng(spec.seed)
        self._closed = False

    @property
    def num_envs(self) -> int:
        return self.spec.num_envs

    @property
    def reset_state_ids(self) -> np.ndarray:
        return self._ids.copy()

    def stage_ids(self, stage: int) -> list[int]:
        raise EnvError("the ManiSkill env steps in-process: pipelining stages are not supported.",
                       fix="Set rollout.pipeline_stage_num: 1.")

    # ------------------------------------------------------------------ observations

    def _read(self, e: int, raw: Any) -> None:
        """Store env ``e``'s observation (ManiSkill returns batched torch tensors, batch 1)."""
        if self._obs_mode == "state":
            self._obs[e] = {keys.STATES: raw[0].detach().cpu().numpy().astype(np.float32)}
            return
        sensors = raw["sensor_data"]
        main = "base_camera" if "base_camera" in sensors else next(iter(sensors))
        images = {keys.MAIN_IMAGES: sensors[main]["rgb"][0].detach().cpu().numpy().astype(np.uint8)}
        if "wrist" in self.spec.cameras and "hand_camera" in sensors:
            images[keys.WRIST_IMAGES] = sensors["hand_camera"]["rgb"][0].detach().cpu().numpy().astype(np.uint8)
        elif "wrist" in self.spec.cameras and not self._said_no_wrist:
            self._said_no_wrist = True
            print(f"vlarl: ManiSkill {self.spec.task} has no hand camera; policies get main_images only "
                  "(wrist_images absent, masked by the image policies).")
        agent = self._sims[e].unwrapped.agent
        pose = agent.tcp.pose.raw_pose[0].detach().cpu().numpy().astype(np.float64)
        qpos = agent.robot.get_qpos()[0].detach().cpu().numpy()
        state = np.concatenate([pose[:3], _axis_angle(pose[None, 3:])[0], qpos[-2:]]).astype(np.float32)
        self._obs[e] = {**images, keys.STATES: state}

    def _observation(self) -> dict[str, Any]:
        import torch

        obs: dict[str, Any] = {k: torch.from_numpy(np.stack([o[k] for o in self._obs])) for k in self._obs[0]}
        obs[keys.TASK_DESCRIPTIONS] = [self.instruction] * self.num_envs
        return obs

    def _start(self, e: int) -> None:
        raw, _ = self._sims[e].reset(seed=int(self._ids[e]))
        self._read(e, raw)
        self._episodes[e].start()
        if self.spec.record_video:
            self._episodes[e].frames.append(self._frame(e))

    def _frame(self, e: int) -> np.ndarray:
        if keys.MAIN_IMAGES in self._obs[e]:
            return self._obs[e][keys.MAIN_IMAGES]
        return self._sims[e].render()[0].detach().cpu().numpy().astype(np.uint8)

    # ------------------------------------------------------------------ reset / step

    def reset(self, reset_state_ids: Any = None) -> dict[str, Any]:
        """Start every env: ``reset_state_ids [N]`` (episode seeds), or one drawn per GRPO group."""
        n, g = self.num_envs, self.spec.group_size
        if reset_state_ids is None:
            ids = np.repeat(self._rng.choice(self.pool, size=n // g), g)
        else:
            ids = np.asarray(reset_state_ids, dtype=np.int64).reshape(-1)
            if ids.shape != (n,):
                raise EnvError(f"reset_state_ids has {ids.size} entries, expected num_envs={n}.")
            if (ids < 0).any() or (ids >= len(self.pool)).any():
                raise EnvError(f"reset-state ids must be in [0, {len(self.pool)}), got {ids.tolist()}.")
        self._ids[:] = ids
        for e in range(n):
            self._start(e)
        return self._observation()

    def _as_actions(self, actions: Any) -> np.ndarray:
        if hasattr(actions, "detach"):
            actions = actions.detach().cpu().numpy()
        a = np.asarray(actions, dtype=np.float32)
        if a.ndim != 3 or a.shape[0] != self.num_envs or a.shape[2] != ACTION_DIM or a.shape[1] < 1:
            raise EnvError(f"Action batch has shape {list(a.shape)}, expected [{self.num_envs}, chunk, 7].",
                           fix="Pass one [chunk, 7] action chunk per env (pd_ee_delta_pose, as LIBERO).")
        return np.clip(a, -1.0, 1.0)  # ManiSkill's pd_ee_delta_pose action space is [-1, 1]

    def _step_env(self, e: int, chunk: np.ndarray, out: dict[str, np.ndarray]) -> dict[str, Any] | None:
        """Run env ``e``'s chunk into row ``e`` of ``out``; the episode summary when it ended."""
        import torch

        ep, spec = self._episodes[e], self.spec
        if not ep.active:
            out["dones"][e] = True
            return None
        for c in range(len(chunk)):
            raw, _, _, _, info = self._sims[e].step(torch.from_numpy(chunk[c][None]))
            self._read(e, raw)
            ep.elapsed += 1
            succ = bool(info["success"][0])
            out["success"][e, c] = succ
            ep.success_once |= succ
            ep.last_success = succ
            reward = spec.reward_coef * float(succ)
            if spec.use_rel_reward:
                reward, ep.prev_reward = reward - ep.prev_reward, reward
            reward -= spec.step_penalty
            out["rewards"][e, c] = reward
            ep.ret += reward
            if spec.record_video:
                ep.frames.append(self._frame(e))
            terminated = succ and not spec.ignore_terminations
            if ep.elapsed >= spec.max_episode_steps:
                out["truncated"][e, c] = not terminated
            if terminated or ep.elapsed >= spec.max_episode_steps:
                out["dones"][e, c:] = True
                ep.active = False
                return ep.summary()
        return None

    def step_chunk(self, actions: Any) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
        """Execute ``[N, C, 7]`` actions; ``(obs, rewards [N, C], dones [N, C], infos)`` as LIBERO's."""
        import torch

        a = self._as_actions(actions)
        if (self._ids < 0).any():
            raise EnvError("step_chunk called before reset().", fix="Call reset() first.")
        n, chunk = a.shape[:2]
        out = {"rewards": np.zeros((n, chunk), np.float32), "dones": np.zeros((n, chunk), bool),
               "success": np.zeros((n, chunk), bool), "truncated": np.zeros((n, chunk), bool)}
        ep_done = np.zeros(n, bool)
        ep = {keys.SUCCESS_ONCE: np.zeros(n, bool), keys.SUCCESS_AT_END: np.zeros(n, bool),
              keys.RETURN: np.zeros(n, np.float32), keys.EPISODE_LEN: np.zeros(n, np.int64)}
        finals: dict[int, dict[str, Any]] = {}  # envs/base.py: the last observation of an episode the limit cut
        for e in range(n):
            summary = self._step_env(e, a[e], out)
            if summary is None:
                continue
            ep_done[e] = True
            for k in ep:
                ep[k][e] = summary[k]
            if self.spec.record_video:
                self._done_frames.setdefault(e, []).append({"main": np.stack(self._episodes[e].frames)})
            if self.spec.auto_reset:
                if out["truncated"][e].any():
                    finals[e] = {**self._obs[e], keys.TASK_DESCRIPTIONS: self.instruction}
                self._start(e)
        infos: dict[str, Any] = {
            keys.SUCCESS: torch.from_numpy(out["success"]),
            keys.TRUNCATED: torch.from_numpy(out["truncated"]),
            EPISODE_DONE: torch.from_numpy(ep_done),
            **{k: torch.from_numpy(v) for k, v in ep.items()},
            ERRORS: {},
            RESET_STATE_IDS: torch.from_numpy(self._ids.copy()),
            ACTIVE: torch.tensor([x.active for x in self._episodes]),
            "env_ids": list(range(n)),
        }
        obs = self._observation()
        if finals:
            infos[keys.FINAL_OBSERVATION] = final_observation(obs, finals)
        return obs, torch.from_numpy(out["rewards"]), torch.from_numpy(out["dones"]), infos

    def episode_frames(self, env_id: int) -> list[dict[str, np.ndarray]]:
        """Frames of ``env_id``'s episodes finished since the last call (record_video): ``{"main": [T, H, W, 3]}``."""
        return self._done_frames.pop(env_id, [])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sim in self._sims:
            sim.close()

    def __enter__(self) -> ManiSkillVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
