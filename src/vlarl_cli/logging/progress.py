"""The training console: a rich progress bar and one short line per iteration.

The line carries the few numbers a user watches (success, return, loss, env steps/s, time per phase);
every metric still goes to ``metrics.jsonl`` and the configured trackers (``logging/sinks.py``). Each
number is looked up under RLinf's metric name first (``train/actor/policy_loss``,
``time/generate_rollouts``...; RLinf ``rlinf/runners/embodied_runner.py``) and then under vlarl's older
names, so the console reads the same while the names move; a number that is absent is left out.
"""

from __future__ import annotations

import math
from typing import Any

#: (label, format, candidate metric names, first found wins)
NUMBERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("success", "{:.2f}", ("env/success_once",)),
    ("eval success", "{:.2f}", ("eval/success_once",)),
    ("return", "{:.3g}", ("env/return", "rollout/returns_mean")),
    ("loss", "{:.4g}", ("train/actor/total_loss", "actor/loss", "train/actor/policy_loss", "actor/policy_loss")),
    ("value loss", "{:.4g}", ("train/critic/value_loss", "critic/value_loss", "actor/value_loss")),
    ("env steps/s", "{:.1f}", ("time/env_steps_per_s",)),
    ("sft loss", "{:.4g}", ("train/sft/loss",)),
    ("grad norm", "{:.3g}", ("train/sft/grad_norm",)),
    ("frames/s", "{:.1f}", ("train/sft/frames_per_s",)),
    ("skipped", "{:.0f}", ("train/sft/skipped_frames",)),
)
#: (label, candidate names) of the phases whose seconds the line shows
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("collect", ("time/generate_rollouts", "time/collect")),
    ("adv", ("time/cal_adv_and_returns", "time/advantages")),
    ("update", ("time/actor_training", "time/actor")),
    ("sync", ("time/sync_weights", "time/sync")),
    ("eval", ("time/eval",)),
)


def _first(metrics: dict[str, Any], names: tuple[str, ...]) -> float | None:
    for name in names:
        value = metrics.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def summary_line(iteration: int, total: int, metrics: dict[str, Any], unit: str = "iter") -> str:
    """``iter 3/10 | success 0.50 | return 1.2 | loss 0.0123 | env steps/s 41.0 | collect 12.3s update 4.5s``."""
    width = len(str(total))
    parts = [f"{unit} {iteration:>{width}}/{total}"]
    for label, fmt, names in NUMBERS:
        value = _first(metrics, names)
        if value is not None:
            parts.append(f"{label} {fmt.format(value) if math.isfinite(value) else value}")
    phases = [f"{label} {value:.1f}s" for label, names in PHASES
              if (value := _first(metrics, names)) is not None]
    if phases:
        parts.append(" ".join(phases))
    return " | ".join(parts)


class Progress:
    """A bar over ``total`` iterations on the main process; :meth:`update` prints :func:`summary_line`.

    Off a terminal (CI logs, pipes) rich draws no live bar and only the per-iteration lines remain.
    """

    def __init__(self, total: int, start: int = 0, enabled: bool = True, label: str = "rl-train",
                 unit: str = "iter") -> None:
        self.enabled = enabled
        self.total, self.unit = total, unit
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                 console=Console(highlight=False), transient=False)
        self._bar.start()
        self._task = self._bar.add_task("train", total=total, completed=start)

    def update(self, iteration: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        # soft_wrap: the terminal folds a long line, rich inserts no hard breaks (logs keep one line)
        self._bar.console.print(summary_line(iteration, self.total, metrics, self.unit), markup=False, soft_wrap=True)
        self._bar.update(self._task, completed=iteration)

    def close(self) -> None:
        if self.enabled:
            self._bar.stop()
