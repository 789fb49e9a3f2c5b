"""ManiSkill3 behind the vector-env contract of ``envs.vector.LiberoVectorEnv``.

Same methods and keys (``reset`` / ``step_chunk`` / ``episode_frames`` / ``close``, ``pool``, ``num_envs``,
infos ``success``, ``truncated``, ``episode_done``, ``success_once`` ...), same episode semantics as
``envs.libero.env.LiberoEnv.step_chunk``: an episode ends at success (unless ``ignore_terminations``) or
at ``max_episode_steps``; the rest of its chunk is not executed for it (``dones`` True from there).

Reward (RLinf ``rlinf/envs/maniskill/maniskill_env.py`` ``_calc_step_reward``): ``reward_mode:
only_success`` gives ``success``; ``raw`` gives the task's own reward, which we build in ManiSkill's
``normalized_dense`` mode (the task's dense reward divided by its maximum, in [0, 1]; success gives 1).
Either is scaled by ``reward_coef``; with ``use_rel_reward`` the step reward is its change since the
previous step (0 at reset); ``step_penalty`` is subtracted every step.

Simulation (``sims.py``): N single-env CPU scenes stepped in turn, or, with ``sim_backend: gpu``, one
batched ``physx_cuda`` scene (chosen in ``make.sim_backend_for``). Steps run env-major per chunk step: at
chunk step c every env whose episode is still running takes its action c.

Reset states are ManiSkill episode seeds: reset-state id ``k`` is ``env.reset(seed=k)``, which places
the objects and the goal deterministically on the CPU backend, so a GRPO group (consecutive envs given
the same id) starts from one state, and auto-reset restarts an env from its id.

Observations: with no camera requested, ``obs_mode="state"`` and ``states`` is ManiSkill's flat state
vector ``[N, D]`` (D = 42 for PickCube-v1, 35 for PushCube-v1). With cameras, ``obs_mode="rgb"``:
``main_images`` is the task's ``base_camera`` ``[N, R, R, 3]`` uint8 (RLinf's ``main_images``),
``wrist_images`` its ``hand_camera`` where the task has one (StackCube-v1; PickCube-v1, PushCube-v1 ...
have none: the key is absent, said once on stdout, and the image policies mask it), and ``states`` the
LIBERO-style 8-d proprio (tcp position, tcp axis-angle, two finger joints). Images are not rotated
(LIBERO's 180-degree flip is a LIBERO camera convention).

Actions: ``[N, C, 7]`` for ``pd_ee_delta_pose`` (xyz delta, axis-angle delta, gripper), clipped to
ManiSkill's action box [-1, 1]. ManiSkill's gripper is +1 open, -1 closed, the opposite of LIBERO's; the
spec's ``gripper`` says which one the policy speaks (``make.gripper_convention``) and LIBERO-convention
actions are negated on the gripper dim. For OpenVLA-OFT this reproduces RLinf's
``prepare_actions_for_maniskill`` (``2 * (g > 0.5) - 1`` of the model's [0, 1] gripper, 1 = open) from the
policy's LIBERO output ``-sign(2 g - 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.envs.base import final_observation
from vlarl_cli.envs.maniskill.sims import CpuBank, GpuBank
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
        reward_mode: ``only_success`` (success) or ``raw`` (ManiSkill's normalized dense reward).
        sim_backend: ``cpu`` (N single-env scenes) or ``physx_cuda`` (one batched scene; needs CUDA).
        gripper: the gripper convention of the actions we are given: ``maniskill`` (+1 open, -1 closed, the
            controller's own) or ``libero`` (-1 open, +1 closed: negated here; ``make.gripper_convention``).
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
    reward_mode: str = "only_success"
    sim_backend: str = "cpu"
    gripper: str = "maniskill"
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
            (self.reward_mode in ("only_success", "raw"),
             f'reward_mode "{self.reward_mode}" is not supported (only_success or raw)'),
            (self.gripper in ("maniskill", "libero"), f'gripper "{self.gripper}" is not maniskill or libero'),
            (self.sim_backend in ("cpu", "physx_cuda"), f'sim_backend "{self.sim_backend}" is not cpu or physx_cuda'),
            # ManiSkill's GPU reset draws every reset env's scene from ONE torch stream seeded with the first
            # seed (BaseEnv.reset: torch.manual_seed(self._episode_seed[0])), so equal seeds do not give equal
            # scenes there: GRPO groups would silently not share a start state
            (self.group_size == 1 or self.sim_backend == "cpu",
             f"GRPO groups (group_size {self.group_size}) are not implemented on the GPU backend: ManiSkill's "
             "batched reset does not give envs with equal seeds equal scenes; use sim_backend cpu"),
            (self.max_episode_steps >= 1, f"max_episode_steps must be >= 1, got {self.max_episode_steps}"),
        ]  # fmt: skip
        for ok, message in rules:
            if not ok:
                raise EnvError(message + ".", fix="Adjust the env section of the config.")
        return instruction


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


def _kwargs(spec: ManiSkillSpec, obs_mode: str) -> dict[str, Any]:
    """``gym.make`` arguments shared by both banks (the bank adds ``num_envs`` and ``sim_backend``)."""
    kwargs: dict[str, Any] = {"obs_mode": obs_mode, "control_mode": spec.control_mode, "render_mode": "rgb_array",
                              "reward_mode": "normalized_dense" if spec.reward_mode == "raw" else "sparse",
                              # the episode limit is ours (below); ManiSkill's TimeLimit must not cut first
                              "max_episode_steps": spec.max_episode_steps + 1}
    if spec.cameras:
        kwargs["sensor_configs"] = {"width": spec.resolution, "height": spec.resolution}
    return kwargs


class ManiSkillVectorEnv:
    """N ManiSkill3 envs of one built-in task in this process, LIBERO's vector-env interface."""

    def __init__(self, spec: ManiSkillSpec, *, sims: list[Any] | None = None, batched_sim: Any = None) -> None:
        """``sims``: N ready single-env gymnasium-style envs (CPU bank), or ``batched_sim``: one env of
        ``num_envs`` (GPU bank), to use instead of building ManiSkill ones (test doubles)."""
        self.instruction = spec.validate()
        self.spec = spec
        self.pool = np.arange(spec.pool_size)
        obs_mode = "rgb" if spec.cameras else "state"
        self._said_no_wrist = False
        wrist = "wrist" in spec.cameras
        self._bank: CpuBank | GpuBank
        if batched_sim is not None:
            self._bank = GpuBank(batched_sim, spec.num_envs, obs_mode, wrist)
        elif sims is not None:
            self._bank = CpuBank(sims, obs_mode, wrist)
        elif spec.sim_backend == "physx_cuda":
            self._bank = GpuBank.build(spec.task, spec.num_envs, _kwargs(spec, obs_mode), obs_mode, wrist)
        else:
            self._bank = CpuBank.build(spec.task, spec.num_envs, _kwargs(spec, obs_mode), obs_mode, wrist)
        if self._bank.num_envs != spec.num_envs:
            raise EnvError(f"{self._bank.num_envs} simulators for num_envs={spec.num_envs}.")
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

    def _store(self, e: int, row: dict[str, np.ndarray]) -> None:
        if "wrist" in self.spec.cameras and keys.WRIST_IMAGES not in row and not self._said_no_wrist:
            self._said_no_wrist = True
            print(f"vlarl: ManiSkill {self.spec.task} has no hand camera; policies get main_images only "
                  "(wrist_images absent, masked by the image policies).")
        self._obs[e] = row

    def _observation(self) -> dict[str, Any]:
        import torch

        obs: dict[str, Any] = {k: torch.from_numpy(np.stack([o[k] for o in self._obs])) for k in self._obs[0]}
        obs[keys.TASK_DESCRIPTIONS] = [self.instruction] * self.num_envs
        return obs

    def _start(self, env_ids: list[int]) -> None:
        if not env_ids:
            return
        rows = self._bank.reset(env_ids, [int(self._ids[e]) for e in env_ids])
        for e, row in zip(env_ids, rows, strict=True):
            self._store(e, row)
            self._episodes[e].start()
            if self.spec.record_video:
                self._episodes[e].frames.append(self._frame(e))

    def _frame(self, e: int) -> np.ndarray:
        if keys.MAIN_IMAGES in self._obs[e]:
            return self._obs[e][keys.MAIN_IMAGES]
        return self._bank.frame(e)

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
        self._start(list(range(n)))
        return self._observation()

    def _as_actions(self, actions: Any) -> np.ndarray:
        if hasattr(actions, "detach"):
            actions = actions.detach().cpu().numpy()
        a = np.asarray(actions, dtype=np.float32)
        if a.ndim != 3 or a.shape[0] != self.num_envs or a.shape[2] != ACTION_DIM or a.shape[1] < 1:
            raise EnvError(f"Action batch has shape {list(a.shape)}, expected [{self.num_envs}, chunk, 7].",
                           fix="Pass one [chunk, 7] action chunk per env (pd_ee_delta_pose).")
        a = np.clip(a, -1.0, 1.0)  # ManiSkill's pd_ee_delta_pose action space is [-1, 1]
        if self.spec.gripper == "libero":  # LIBERO's -1 open / +1 close -> ManiSkill's +1 open / -1 close
            a[..., -1] = -a[..., -1]
        return a

    def _sim_step(self, actions: np.ndarray, running: list[int]) -> dict[int, tuple[dict[str, np.ndarray], float, bool]]:
        """One env step of the ``running`` envs with ``actions [N, 7]``: row, task reward, success per env."""
        if isinstance(self._bank, GpuBank):  # one batched step moves every env; finished ones are dropped
            rows, reward, success = self._bank.step_all(actions)
            return {e: ({k: v[e] for k, v in rows.items()}, float(reward[e]), bool(success[e])) for e in running}
        return {e: self._bank.step_one(e, actions[e]) for e in running}

    def _account(self, e: int, c: int, row: dict[str, np.ndarray], task_reward: float, succ: bool,
                 out: dict[str, np.ndarray]) -> bool:
        """Book env ``e``'s step ``c`` into ``out``; True when its episode ended there."""
        ep, spec = self._episodes[e], self.spec
        self._store(e, row)
        ep.elapsed += 1
        out["success"][e, c] = succ
        ep.success_once |= succ
        ep.last_success = succ
        level = spec.reward_coef * (float(succ) if spec.reward_mode == "only_success" else task_reward)
        reward = level
        if spec.use_rel_reward:
            reward, ep.prev_reward = level - ep.prev_reward, level
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
            return True
        return False

    def step_chunk(self, actions: Any) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
        """Execute ``[N, C, 7]`` actions; ``(obs, rewards [N, C], dones [N, C], infos)`` as LIBERO's."""
        import torch

        a = self._as_actions(actions)
        if (self._ids < 0).any():
            raise EnvError("step_chunk called before reset().", fix="Call reset() first.")
        n, chunk = a.shape[:2]
        out = {"rewards": np.zeros((n, chunk), np.float32), "dones": np.zeros((n, chunk), bool),
               "success": np.zeros((n, chunk), bool), "truncated": np.zeros((n, chunk), bool)}
        for e in range(n):
            out["dones"][e] = not self._episodes[e].active  # finished before this chunk: not stepped
        ended: list[int] = []
        for c in range(chunk):
            running = [e for e in range(n) if self._episodes[e].active]
            if not running:
                break
            for e, (row, task_reward, succ) in self._sim_step(a[:, c], running).items():
                if self._account(e, c, row, task_reward, succ, out):
                    ended.append(e)
        ep_done = np.zeros(n, bool)
        ep = {keys.SUCCESS_ONCE: np.zeros(n, bool), keys.SUCCESS_AT_END: np.zeros(n, bool),
              keys.RETURN: np.zeros(n, np.float32), keys.EPISODE_LEN: np.zeros(n, np.int64)}
        finals: dict[int, dict[str, Any]] = {}  # envs/base.py: the last observation of an episode the limit cut
        for e in ended:
            ep_done[e] = True
            for k, v in self._episodes[e].summary().items():
                ep[k][e] = v
            if self.spec.record_video:
                self._done_frames.setdefault(e, []).append({"main": np.stack(self._episodes[e].frames)})
            if self.spec.auto_reset and out["truncated"][e].any():
                finals[e] = {**self._obs[e], keys.TASK_DESCRIPTIONS: self.instruction}
        if self.spec.auto_reset:
            self._start(sorted(ended))
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
        self._bank.close()

    def __enter__(self) -> ManiSkillVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
