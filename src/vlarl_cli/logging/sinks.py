"""Metric sinks behind one interface: JSONL (always), TensorBoard, W&B, SwanLab (each optional).

Metric names follow the seed documents: ``actor/*``, ``rollout/*``, ``env/*``, ``time/*``, ``eval/*``.
Only the main process logs; other ranks get a :class:`NullSink` (nanochat's "null logger" habit).
The tracking run id is returned by :meth:`MetricLogger.run_ids` and stored in checkpoints so a resumed
run continues the same W&B / SwanLab run.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Protocol

from vlarl_cli.errors import ConfigError


class Sink(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class NullSink:
    def log(self, metrics: dict[str, float], step: int) -> None:
        return None

    def close(self) -> None:
        return None


class JsonlSink:
    """Appends one JSON object per step to ``metrics.jsonl``; each line is flushed and fsynced.

    On resume, lines with ``step >= resume_step`` are dropped first so the file never holds two
    records of the same step.
    """

    def __init__(self, path: Path, resume_step: int | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) < resume_step]
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept))
            os.replace(tmp, path)
        self._file = path.open("a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        record = {"step": step, **{k: _finite_or_str(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def _finite_or_str(value: float) -> float | str:
    value = float(value)
    return value if math.isfinite(value) else str(value)


class TensorBoardSink:
    def __init__(self, log_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:  # tensorboard is an optional extra
            raise ConfigError("logger_backends lists tensorboard but the tensorboard package is not installed.",
                              'pip install "vlarl[tensorboard]", or remove it from runner.logger.logger_backends.'
                              ) from err
        self._writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    def __init__(self, project: str, name: str, log_dir: Path, config: dict[str, Any],
                 run_id: str | None) -> None:
        try:
            import wandb
        except ImportError as err:
            raise ConfigError("logger_backends lists wandb but the wandb package is not installed.",
                              'pip install "vlarl[wandb]", or remove it from runner.logger.logger_backends.'
                              ) from err
        self._run = wandb.init(project=project, name=name, dir=str(log_dir), config=config, id=run_id,
                               resume="allow")
        self.run_id = self._run.id

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


class SwanlabSink:
    def __init__(self, project: str, name: str, log_dir: Path, config: dict[str, Any],
                 run_id: str | None) -> None:
        try:
            import swanlab
        except ImportError as err:
            raise ConfigError("logger_backends lists swanlab but the swanlab package is not installed.",
                              'pip install "vlarl[swanlab]", or remove it from runner.logger.logger_backends.'
                              ) from err
        kwargs: dict[str, Any] = {"project": project, "experiment_name": name, "logdir": str(log_dir),
                                  "config": config}
        if run_id:
            kwargs.update(id=run_id, resume="allow")
        self._run = swanlab.init(**kwargs)
        self.run_id = getattr(self._run, "id", None) or getattr(getattr(self._run, "public", None), "run_id", None)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


class MetricLogger:
    """Fans one ``log`` call out to every configured sink."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks

    @classmethod
    def create(cls, run_dir: Path, backends: list[str], *, project: str, name: str,
               config: dict[str, Any], run_ids: dict[str, str] | None = None,
               resume_step: int | None = None, main_process: bool = True,
               jsonl_name: str = "metrics.jsonl") -> MetricLogger:
        if not main_process:
            return cls([NullSink()])
        run_ids = run_ids or {}
        sinks: list[Sink] = [JsonlSink(run_dir / jsonl_name, resume_step=resume_step)]
        for backend in backends:
            if backend == "tensorboard":
                sinks.append(TensorBoardSink(run_dir / "tensorboard"))
            elif backend == "wandb":
                sinks.append(WandbSink(project, name, run_dir, config, run_ids.get("wandb")))
            elif backend == "swanlab":
                sinks.append(SwanlabSink(project, name, run_dir, config, run_ids.get("swanlab")))
            else:
                raise ConfigError(f'Unknown logger backend "{backend}".', "Use tensorboard, wandb or swanlab.")
        return cls(sinks)

    def run_ids(self) -> dict[str, str]:
        """Tracking-run ids to store in checkpoints (W&B / SwanLab)."""
        out = {}
        for sink in self.sinks:
            run_id = getattr(sink, "run_id", None)
            if run_id:
                out[type(sink).__name__.removesuffix("Sink").lower()] = str(run_id)
        return out

    def log(self, metrics: dict[str, float], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
