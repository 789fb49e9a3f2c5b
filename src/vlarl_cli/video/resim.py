"""Re-simulate recorded evaluation episodes (and run live ones) with both cameras rendered every step.

An evaluation records, per episode, the init state id, env seed, step limits and the action chunks it
sent (:mod:`vlarl_cli.video.episodes`). Replaying those chunks in a fresh :class:`LiberoEnv` with the same
protocol options, seed and reset mode reproduces the episode exactly (the env is deterministic given
``env.seed`` before every reset, REFERENCE.md section 1); the robot state logged at every chunk boundary
is compared with the replay's, so a re-simulation that drifted says so (``max_state_drift``).

Frames: index 0 is the first observation (after the settle steps), frame t >= 1 follows step t, so an
episode of S steps has S + 1 frames per camera, exactly what the env's live recording holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.video.episodes import CARD, EpisodeData, EpisodeRecord, ResultsError, load_card


@dataclass
class SimEpisode:
    """A rendered episode.

    Attributes:
        frames: ``{"main"|"wrist": [S + 1, H, W, 3]}`` uint8, rotated like the policy sees them.
        actions: ``[S, 7]`` float32 executed actions (after clipping to [-1, 1]).
        step_success: ``[S]`` bool, ``check_success()`` after each step.
        success: the episode succeeded; steps: S.
        language: task instruction; label: name used for files.
        max_state_drift: max |robot state - logged robot state| over chunk boundaries (0.0 = exact;
            None for live episodes).
        data: the actions and fingerprints (live episodes can be saved like evaluated ones).
    """

    frames: dict[str, np.ndarray]
    actions: np.ndarray
    step_success: np.ndarray
    success: bool
    steps: int
    language: str
    label: str
    max_state_drift: float | None = None
    data: EpisodeData | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def read_card(root: Path | None) -> dict[str, Any]:
    if root is None or not (root / CARD).is_file():
        raise ResultsError(f"No {CARD} next to the episode log in {root}.",
                           "Pass an episodes.jsonl inside a folder written by `vlarl eval`.")
    return load_card(root / CARD)


class Simulators:
    """One :class:`LiberoEnv` per options, reused across episodes (construction costs ~4 s)."""

    def __init__(self) -> None:
        self._envs: dict[tuple, Any] = {}

    def get(self, suite: str, task: int, options: Any) -> Any:
        from vlarl_cli.envs.libero.env import LiberoEnv

        key = (suite, options)
        env = self._envs.get(key)
        if env is None:
            env = self._envs[key] = LiberoEnv(suite, task, options)
        else:
            env.set_task(task)
        return env

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()

    def __enter__(self) -> Simulators:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _options(card: dict[str, Any], record: EpisodeRecord, resolution: int | None) -> Any:
    from vlarl_cli.envs.libero.env import EnvOptions

    return EnvOptions(resolution=resolution or int(card["resolution"]), cameras=tuple(card["cameras"]),
                      obs_mode=str(card.get("obs_mode", "rgb")),
                      protocol=card["protocol"], max_episode_steps=record.max_steps,
                      settle_steps=record.settle_steps, seed=record.seed,
                      hard_reset=str(card.get("reset", "soft")).startswith("hard"), record_video=True)


def _run(env: Any, trial: int, next_chunk: Any) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, bool,
                                                        list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Reset to ``trial`` and execute chunks from ``next_chunk(obs, k)`` until the episode ends."""
    obs = env.reset(trial)
    states, joints, sent = [obs[keys.STATES].copy()], [obs["joint_pos"].copy()], []
    executed: list[np.ndarray] = []
    success: list[np.ndarray] = []
    ok = False
    k = 0
    while True:
        chunk = next_chunk(obs, k)
        if chunk is None:
            break
        chunk = np.asarray(chunk, np.float32)
        sent.append(chunk)
        result = env.step_chunk(chunk)
        executed.append(np.clip(chunk[: result.executed], -1.0, 1.0))
        success.append(result.success[: result.executed])
        obs = result.obs
        states.append(obs[keys.STATES].copy())
        joints.append(obs["joint_pos"].copy())
        k += 1
        if result.episode is not None:
            ok = bool(result.episode[keys.SUCCESS_ONCE])
            break
    frames = env.pop_frames()
    actions = np.concatenate(executed) if executed else np.zeros((0, 7), np.float32)
    step_success = np.concatenate(success) if success else np.zeros(0, bool)
    return frames, actions.astype(np.float32), step_success, ok, sent, states, joints


def resimulate(record: EpisodeRecord, *, sims: Simulators | None = None, resolution: int | None = None,
               card: dict[str, Any] | None = None, data: EpisodeData | None = None) -> SimEpisode:
    """Replay a recorded episode with both cameras rendered every step.

    ``card`` / ``data`` default to the ones stored in the episode's results folder.
    """
    card = card or read_card(record.root)
    data = data if data is not None else record.load_data()
    own = sims is None
    sims = sims or Simulators()
    try:
        env = sims.get(record.suite, record.task, _options(card, record, resolution))
        frames, actions, step_success, ok, _, states, _ = _run(
            env, record.trial, lambda obs, k: data.actions[k] if k < len(data.actions) else None)
    finally:
        if own:
            sims.close()
    n = min(len(states), len(data.robot_states))
    drift = float(np.max(np.abs(np.stack(states[:n]) - data.robot_states[:n]))) if n else 0.0
    return SimEpisode(frames, actions, step_success, ok, len(actions), record.language, record.label,
                      max_state_drift=drift, data=data,
                      extra={"recorded_success": record.success, "recorded_steps": record.steps})


def live_episode(policy: Any, suite: str, task: int, trial: int, *, protocol: str = "standard",
                 resolution: int = 256, max_steps: int | None = None, settle_steps: int | None = None,
                 env_seed: int | None = None, deterministic: bool = True, policy_seed: int = 0,
                 sims: Simulators | None = None, label: str = "") -> SimEpisode:
    """Run ``policy`` for one episode in-process, recording both cameras every step."""
    import torch

    from vlarl_cli.envs.libero.env import EnvOptions
    from vlarl_cli.keys import policy_cameras, policy_obs_mode

    options = EnvOptions(resolution=resolution, cameras=policy_cameras(policy), obs_mode=policy_obs_mode(policy),
                         protocol=protocol, max_episode_steps=max_steps, settle_steps=settle_steps, seed=env_seed,
                         record_video=True)
    gen = torch.Generator().manual_seed(policy_seed)
    takes_gen = "generator" in __import__("inspect").signature(policy.sample).parameters

    def act(obs: dict[str, Any], k: int) -> np.ndarray:
        batch = {key: (torch.from_numpy(np.asarray(v)[None]) if isinstance(v, np.ndarray) else [v])
                 for key, v in obs.items()}
        out = policy.sample(batch, deterministic=deterministic, **({"generator": gen} if takes_gen else {}))
        return out.actions[0].detach().to("cpu", torch.float32).numpy()

    own = sims is None
    sims = sims or Simulators()
    try:
        env = sims.get(suite, task, options)
        with torch.no_grad():
            frames, actions, step_success, ok, sent, states, joints = _run(env, trial, act)
        language = env.task.language
    finally:
        if own:
            sims.close()
    data = EpisodeData(np.stack(sent), np.stack(states), np.stack(joints))
    return SimEpisode(frames, actions, step_success, ok, len(actions), language,
                      label or f"{suite}_task{task:02d}_trial{trial:02d}", data=data)
