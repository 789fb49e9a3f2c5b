"""``vlarl video``: re-simulate recorded episodes (or roll out a checkpoint live) and write MP4s.

Recorded:  ``render_videos(episodes=Path("eval/x/episodes.jsonl"), failures=True, task=3)`` writes one MP4
per episode plus a montage of all of them; ``against=OTHER`` puts the same (suite, task, trial) of another
results folder next to each (two checkpoints on the same init state).
Live:      ``render_videos(checkpoint=..., suite=..., task=..., trial=..., load_policy=...)``;
``compare_checkpoint`` adds a second policy side by side on the same init state. Policies come from the
caller's ``load_policy`` (``training.evaluation.load_policy`` for ``vlarl video``): building models from
checkpoints is the training side's job, above this package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlarl_cli.errors import ConfigError
from vlarl_cli.video.episodes import EpisodeRecord, ResultsError, read_episodes, unique_episodes


@dataclass(frozen=True)
class Selection:
    """Which recorded episodes: ``episode`` (index of the line), ``failures`` and/or ``task`` (+ ``suite``)."""

    episode: int | None = None
    failures: bool = False
    task: int | None = None
    suite: str | None = None

    def apply(self, records: list[EpisodeRecord]) -> list[EpisodeRecord]:
        if not records:  # "--episode 0 is out of range ... Use 0..-1" said nothing useful
            raise ConfigError("The episode log holds no episode (it is empty, or only blank lines): nothing was "
                              "evaluated into it yet.", "Run `vlarl eval --out DIR` first (an interrupted one "
                              "resumes), then render from DIR/episodes.jsonl.")
        if self.episode is None and not self.failures and self.task is None:
            raise ConfigError("Which episodes? None of --episode, --failures, --task was given.",
                              f"Pass --episode K (0..{len(records) - 1}), --failures, or --task T.")
        if self.episode is not None:
            if not 0 <= self.episode < len(records):
                raise ConfigError(f"--episode {self.episode} is out of range: the log has {len(records)} episodes.",
                                  f"Use 0..{len(records) - 1}.")
            return [records[self.episode]]
        out = [r for r in records if (self.task is None or r.task == self.task)
               and (self.suite is None or r.suite == self.suite) and (not self.failures or not r.success)]
        if not out:
            raise ConfigError("No recorded episode matches the selection "
                              f"(task={self.task}, suite={self.suite}, failures={self.failures}).",
                              "Check the episode log (episodes.jsonl) for the task ids and outcomes.")
        return out


def _check_live(suite: str, task: int, protocol: str, resolution: int | None) -> None:
    """What the simulator would refuse, before the policy is loaded (seconds to minutes for a full model)."""
    from vlarl_cli.envs.libero import suites
    from vlarl_cli.envs.libero.env import RESOLUTIONS
    from vlarl_cli.envs.libero.protocol import get_protocol
    from vlarl_cli.errors import EnvError

    get_protocol(protocol)
    n = suites.num_tasks(suites.check_suite(suite))
    if not 0 <= task < n:
        raise EnvError(f"--task {task} is out of range for {suite} ({n} tasks).", f"Use 0..{n - 1}.")
    if resolution is not None and resolution not in RESOLUTIONS:
        raise EnvError(f"Resolution {resolution} is not supported.", f"Use one of {RESOLUTIONS}.")


def _write(path: Path, frames: np.ndarray, fps: int) -> Path:
    from vlarl_cli.video.writer import write_mp4

    path = write_mp4(path, frames, fps=fps)
    print(f"wrote {path} ({len(frames)} frames, {frames.shape[2]}x{frames.shape[1]})", flush=True)
    return path


def render_videos(episodes: Path | None = None, *, selection: Selection = Selection(), against: Path | None = None,
                  checkpoint: Path | None = None, config: str | None = None, overrides: list[str] | None = None,
                  compare_checkpoint: Path | None = None, suite: str | None = None, task: int | None = None,
                  trial: int = 0, protocol: str = "standard", max_steps: int | None = None,
                  settle_steps: int | None = None, resolution: int | None = None, out: Path | None = None,
                  fps: int = 20, montage_max: int = 16, sims: Any = None,
                  load_policy: Callable[..., tuple[Any, Any, Any]] | None = None) -> list[Path]:
    """Write MP4s (see module docstring); returns the written paths. ``sims``: reuse these simulators;
    ``load_policy(checkpoint, config, overrides) -> (policy, info, config)`` builds the live policies."""
    if episodes is not None:
        return _recorded_videos(episodes, selection, against, resolution, out, fps, montage_max, sims)
    if checkpoint is None and config is None:
        raise ConfigError("Nothing to render: give an episodes.jsonl, or --checkpoint/--config with --suite, "
                          "--task and --trial for a live rollout.",
                          "e.g. vlarl video eval/x/episodes.jsonl --failures, or "
                          "vlarl video --checkpoint PATH --suite libero_10 --task 0 --trial 0")
    if suite is None or task is None:
        raise ConfigError("A live rollout needs --suite and --task (and --trial, default 0).",
                          "e.g. --suite libero_10 --task 3 --trial 0")
    if load_policy is None:
        raise ValueError("a live rollout needs load_policy (e.g. vlarl_cli.training.evaluation.load_policy)")
    _check_live(suite, task, protocol, resolution)
    kwargs: dict[str, Any] = dict(protocol=protocol, resolution=resolution or 256, max_steps=max_steps,
                                  settle_steps=settle_steps)
    return [_live_video(load_policy, (checkpoint, config, overrides or []), compare_checkpoint, (suite, task, trial),
                        kwargs, Path(out) if out is not None else Path("videos"), fps, sims)]


def _recorded_videos(episodes: Path, selection: Selection, against: Path | None, resolution: int | None,
                     out: Path | None, fps: int, montage_max: int, sims: Any) -> list[Path]:
    """Re-simulate the chosen recorded episodes: one MP4 each (beside ``against``'s when given), and a montage."""
    from vlarl_cli.video import render
    from vlarl_cli.video.resim import Simulators, resimulate

    chosen = selection.apply(read_episodes(episodes))
    out = Path(out) if out is not None else (chosen[0].root or Path(".")) / "videos"
    others = unique_episodes(read_episodes(against)) if against is not None else None
    written: list[Path] = []
    clips: list[np.ndarray] = []
    own = sims is None
    sims = sims or Simulators()
    try:
        for rec in chosen:
            ep = resimulate(rec, sims=sims, resolution=resolution)
            if ep.max_state_drift:
                print(f"warning: {rec.label} re-simulation drifted from the recording by "
                      f"{ep.max_state_drift:.2e} (robot state at chunk boundaries)", flush=True)
            clip = render.annotate(ep, title=f"A {rec.label}" if others is not None else rec.label)
            if others is not None:
                other = others.get(rec.key)
                if other is None:
                    raise ResultsError(f"{against} has no episode {rec.label}.",
                                       "Evaluate both checkpoints on the same suite, tasks and trials.")
                clip = render.side_by_side(clip, render.annotate(resimulate(other, sims=sims, resolution=resolution),
                                                                 title=f"B {other.label}"))
            written.append(_write(out / f"{rec.label}{'_vs' if others is not None else ''}.mp4", clip, fps))
            if len(chosen) > 1 and len(clips) < montage_max:
                clips.append(render.annotate(ep, scale=1, title=rec.label, compact=True))
    finally:
        if own:
            sims.close()
    if len(clips) > 1:
        what = ("failures" if selection.failures else "episodes") + \
            (f"_task{selection.task:02d}" if selection.task is not None else "")
        written.append(_write(out / f"montage_{what}.mp4", render.montage(clips), fps))
    return written


def _live_video(load_policy: Callable[..., tuple[Any, Any, Any]], source: tuple[Any, Any, list[str]],
                compare_checkpoint: Path | None, where: tuple[str, int, int], kwargs: dict[str, Any], out: Path,
                fps: int, sims: Any) -> Path:
    """Roll out ``source`` (checkpoint, config, overrides) live at (suite, task, trial), beside
    ``compare_checkpoint``'s rollout when given; one MP4."""
    from vlarl_cli.video import render
    from vlarl_cli.video.resim import Simulators, live_episode

    suite, task, trial = where
    label = f"{suite}_task{task:02d}_trial{trial:02d}"
    own = sims is None
    sims = sims or Simulators()
    try:
        policy, info, _ = load_policy(*source)
        ep = live_episode(policy, suite, task, trial, sims=sims, label=label, **kwargs)
        clip = render.annotate(ep, title=f"{Path(info.path).name} {label}")
        if compare_checkpoint is not None:
            policy_b, info_b, _ = load_policy(compare_checkpoint, None, [])
            ep_b = live_episode(policy_b, suite, task, trial, sims=sims, label=label, **kwargs)
            clip = render.side_by_side(clip, render.annotate(ep_b, title=f"{Path(info_b.path).name} {label}"))
            label += "_vs"
        return _write(out / f"live_{label}.mp4", clip, fps)
    finally:
        if own:
            sims.close()
