"""rl-train learns: the same loop as LIBERO (collect -> GAE -> PPO -> checkpoint) on the toy reach task."""

from __future__ import annotations

import json
from pathlib import Path

from vlarl_cli.config.loading import load_config
from vlarl_cli.training.rl import train


def test_ppo_flow_sde_learns_to_reach(tmp_path: Path) -> None:
    result = train(load_config("toy_reach_ppo", [f"runner.logger.log_path={tmp_path}"]))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 31))
    first = rows[0]["env/success_once"]
    assert first <= 0.3  # a random flow policy rarely reaches the goal
    evals = [r["eval/success_once"] for r in rows if "eval/success_once" in r]
    assert len(evals) == 3  # iterations 10, 20, 30
    assert evals[-1] >= 0.6 and evals[-1] >= first + 0.3, (first, evals)
    late = sum(r["env/success_once"] for r in rows[-5:]) / 5
    assert late >= first + 0.25, (first, late)
    assert result.checkpoint is not None and (result.checkpoint / "model.safetensors").is_file()
