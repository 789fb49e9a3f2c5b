"""``vlarl eval --task <ManiSkill id>``: success rate on a ManiSkill3 built-in task, 95% Wilson interval.

Protocol (written into ``summary.json`` with the numbers): episode ``i`` starts from ManiSkill episode
seed ``first_seed + i`` (the vector env's reset-state id: ``env.reset(seed=k)`` places cube and goal), runs
until success or ``max_steps`` env steps (the config's ``env.eval.max_episode_steps`` unless overridden:
50 for PickCube-v1 as RLinf's env yaml), actions deterministic unless a temperature is given. Success is
ManiSkill's ``info["success"]`` at any step (``success_once``; an episode ends at its first success,
LIBERO's convention). The reward (reported as the mean return) follows the config's eval split
(``reward_mode``, ``reward_coef``, ``use_rel_reward``; no step penalty). Episodes run in waves of
``num_envs`` in one process (no resume, no distribution over ranks: ManiSkill episodes are seconds).

    vlarl eval --task PickCube-v1 --checkpoint runs/x/checkpoints/global_step_3 --episodes 100
    vlarl eval --task PushCube-v1 --config maniskill_pushcube_ppo_mlp --episodes 20 --live-video 2
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli import keys
from vlarl_cli.errors import ConfigError


@dataclass(frozen=True)
class ManiSkillEvalSettings:
    """What ``vlarl eval --task`` was asked for (None: the config's eval split decides)."""

    task: str
    episodes: int = 50
    num_envs: int = 2
    max_steps: int | None = None
    temperature: float | None = None
    policy_seed: int = 0
    first_seed: int = 0
    videos: int = 0
    resolution: int | None = None

    def validate(self) -> None:
        from vlarl_cli.envs.maniskill.tasks import check_task

        check_task(self.task)
        if self.episodes < 1 or self.num_envs < 1 or self.first_seed < 0 or self.videos < 0:
            raise ConfigError(f"episodes ({self.episodes}) and num_envs ({self.num_envs}) must be >= 1, first seed "
                              f"({self.first_seed}) and videos ({self.videos}) >= 0.", "Fix the eval options.")


@dataclass
class ManiSkillEvalResult:
    """The numbers of one evaluation (``summary.json``)."""

    task: str
    episodes: int
    successes: int
    success_rate: float
    wilson95: tuple[float, float]
    mean_return: float
    mean_episode_len: float
    protocol: dict[str, Any]
    policy: dict[str, Any]
    per_episode: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


def _spec(settings: ManiSkillEvalSettings, split: Any, model: Any, cameras: tuple[str, ...], gripper: str) -> Any:
    from vlarl_cli.envs.maniskill.make import sim_backend_for
    from vlarl_cli.envs.maniskill.vector import ManiSkillSpec

    return ManiSkillSpec(
        task=settings.task, num_envs=min(settings.num_envs, settings.episodes), cameras=cameras,
        resolution=settings.resolution or split.resolution,
        max_episode_steps=settings.max_steps or split.max_episode_steps, control_mode=split.init_params.control_mode,
        seed=settings.first_seed, pool_size=settings.first_seed + settings.episodes, auto_reset=False, group_size=1,
        reward_coef=split.reward_coef, use_rel_reward=split.use_rel_reward, step_penalty=0.0,
        ignore_terminations=False, reward_mode=split.reward_mode,
        sim_backend=sim_backend_for(split.init_params.sim_backend),
        gripper=gripper, record_video=settings.videos > 0)


def run_maniskill_episodes(policy: Any, env: Any, seeds: list[int], *, temperature: float | None,
                           policy_seed: int) -> list[dict[str, Any]]:
    """Play one episode per seed in waves of ``env.num_envs``; per-episode records in seed order."""
    import torch

    from vlarl_cli.training.evaluation.runner import _sampler

    n, chunk = env.num_envs, int(policy.num_action_chunks)
    takes_gen, _ = _sampler(policy)
    if temperature is not None and hasattr(policy, "temperature"):
        policy.temperature = temperature
    records: list[dict[str, Any]] = []
    for start in range(0, len(seeds), n):
        wave = seeds[start:start + n]
        ids = wave + [wave[-1]] * (n - len(wave))  # the last wave is padded; its extra episodes are dropped
        obs = env.reset(ids)
        gen = torch.Generator().manual_seed(policy_seed * 1_000_003 + start)
        ended: dict[int, dict[str, Any]] = {}
        while len(ended) < n:
            with torch.no_grad():
                out = policy.sample(obs, deterministic=temperature is None, **({"generator": gen} if takes_gen else {}))
            obs, _, _, info = env.step_chunk(out.actions.detach().float().cpu()[:, :chunk])
            for e in np.flatnonzero(info["episode_done"].numpy()):
                ended[int(e)] = {"seed": ids[e], "success": bool(info[keys.SUCCESS_ONCE][e]),
                                 "return": float(info[keys.RETURN][e]), "episode_len": int(info[keys.EPISODE_LEN][e]),
                                 "frames": env.episode_frames(int(e))}
        records += [ended[e] for e in range(len(wave))]
    return records


def _write(out_dir: Path, result: ManiSkillEvalResult, frames: list[list[dict[str, np.ndarray]]], fps: int) -> None:
    from vlarl_cli.checkpoints.atomic import atomic_write_json
    from vlarl_cli.video.writer import write_episode_video

    out_dir.mkdir(parents=True, exist_ok=True)
    for i, episode_frames in enumerate(frames):
        for episode in episode_frames:
            rec = result.per_episode[i]
            write_episode_video(out_dir / "videos" / f"episode_{i:04d}_seed{rec['seed']}.mp4", episode, fps=fps,
                                caption=f"{result.task} seed {rec['seed']} success {int(rec['success'])}")
    atomic_write_json(out_dir / "summary.json", json.loads(json.dumps(asdict(result))))


def evaluate_maniskill(checkpoint: Path | None, config: str | None, overrides: list[str], *,
                       settings: ManiSkillEvalSettings, out_dir: Path | None = None) -> ManiSkillEvalResult:
    """Load the policy (``--checkpoint`` / ``--config`` as the LIBERO eval), play the episodes, write
    ``<out>/summary.json`` (+ ``videos/``) and print the success rate with its Wilson interval."""
    from vlarl_cli.envs.maniskill.vector import ManiSkillVectorEnv
    from vlarl_cli.training.evaluation.source import load_policy
    from vlarl_cli.training.evaluation.stats import wilson_interval

    settings.validate()
    from vlarl_cli.envs.maniskill.setup import check_maniskill

    check_maniskill()  # before the policy loads: a missing ManiSkill is said in seconds, not after minutes
    t0 = time.perf_counter()
    policy, info, cfg = load_policy(checkpoint, config, overrides, "cpu")
    split = cfg.env.eval
    cameras = keys.policy_cameras(policy)
    spec = _spec(settings, split, cfg.actor.model, cameras, keys.policy_gripper(policy))
    seeds = list(range(settings.first_seed, settings.first_seed + settings.episodes))
    with ManiSkillVectorEnv(spec) as env:
        records = run_maniskill_episodes(policy, env, seeds, temperature=settings.temperature,
                                         policy_seed=settings.policy_seed)
    frames = [r.pop("frames") for r in records]
    frames = [f if i < settings.videos else [] for i, f in enumerate(frames)]
    k, n = sum(r["success"] for r in records), len(records)
    protocol = {"first_seed": settings.first_seed, "max_steps": spec.max_episode_steps, "control_mode": spec.control_mode,
                "sim_backend": spec.sim_backend, "gripper": spec.gripper, "cameras": list(cameras),
                "resolution": spec.resolution if cameras else None, "reward_mode": spec.reward_mode,
                "actions": "deterministic" if settings.temperature is None else f"temperature {settings.temperature}",
                "policy_seed": settings.policy_seed, "success": "success at any step; an episode ends at success"}
    result = ManiSkillEvalResult(
        task=settings.task, episodes=n, successes=k, success_rate=k / n, wilson95=wilson_interval(k, n),
        mean_return=float(np.mean([r["return"] for r in records])),
        mean_episode_len=float(np.mean([r["episode_len"] for r in records])), protocol=protocol,
        policy={"source": info.source, "path": info.path, "sha256": info.sha256, "model_type": info.model_type},
        per_episode=records, wall_s=time.perf_counter() - t0)
    out = out_dir or Path("eval") / (Path(info.path).name if info.source == "checkpoint" else Path(info.config).stem) \
        / f"{settings.task}"
    _write(out, result, frames, fps=split.video_cfg.fps)
    lo, hi = result.wilson95
    print(f"vlarl eval {settings.task}: success {k}/{n} = {result.success_rate:.3f} (95% Wilson [{lo:.3f}, {hi:.3f}]), "
          f"mean return {result.mean_return:.3f}, mean length {result.mean_episode_len:.1f} -> {out}", flush=True)
    return result
