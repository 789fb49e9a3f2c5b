"""A rich progress bar for training iterations: iteration, env steps/s, success."""

from __future__ import annotations

from typing import Any


class Progress:
    def __init__(self, total: int, start: int = 0, enabled: bool = True) -> None:
        self.enabled = enabled
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(TextColumn("[bold]rl-train"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"), transient=False)
        self._bar.start()
        self._task = self._bar.add_task("train", total=total, completed=start, info="collecting...")

    def update(self, iteration: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        info = (f"success {metrics.get('env/success_once', float('nan')):.2f} | "
                f"{metrics.get('time/env_steps_per_s', 0.0):.1f} env steps/s | "
                f"loss {metrics.get('train/actor/total_loss', float('nan')):.4f}")
        self._bar.update(self._task, completed=iteration, info=info)
        self._bar.console.log(f"iter {iteration}: " + ", ".join(
            f"{k}={v:.4g}" for k, v in sorted(metrics.items())
            if k.split("/")[0] in ("env", "train", "eval") and isinstance(v, float)))

    def close(self) -> None:
        if self.enabled:
            self._bar.stop()
