"""Metric sinks: JSONL always (resume-safe), TensorBoard when asked, clear errors for missing backends."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from vlarl_cli.errors import ConfigError
from vlarl_cli.logging.sinks import MetricLogger


def test_jsonl_and_tensorboard(tmp_path: Path) -> None:
    logger = MetricLogger.create(tmp_path, ["tensorboard"], project="p", name="n", config={})
    logger.log({"actor/policy_loss": 0.5, "env/success_once": 1.0, "actor/grad_norm": math.inf}, step=1)
    logger.log({"actor/policy_loss": 0.25}, step=2)
    logger.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "actor/policy_loss": 0.5, "env/success_once": 1.0, "actor/grad_norm": "inf"},
                    {"step": 2, "actor/policy_loss": 0.25}]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("actor/policy_loss")] == [(1, 0.5), (2, 0.25)]


def test_resume_drops_records_of_steps_that_will_be_redone(tmp_path: Path) -> None:
    logger = MetricLogger.create(tmp_path, [], project="p", name="n", config={})
    for step in (1, 2, 3):
        logger.log({"x": float(step)}, step=step)
    logger.close()
    # the run is resumed from the checkpoint of step 2: step 3 is collected again
    logger = MetricLogger.create(tmp_path, [], project="p", name="n", config={}, resume_step=3)
    logger.log({"x": 30.0}, step=3)
    logger.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["x"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_non_main_ranks_write_nothing(tmp_path: Path) -> None:
    logger = MetricLogger.create(tmp_path, ["tensorboard"], project="p", name="n", config={}, main_process=False)
    logger.log({"x": 1.0}, step=1)
    logger.close()
    assert not (tmp_path / "metrics.jsonl").exists()


def test_missing_backend_package_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r'pip install "vlarl\[wandb\]"'):
        MetricLogger.create(tmp_path, ["wandb"], project="p", name="n", config={})
