"""benchmarks/algorithm_comparison.py's markdown table: the arms that have an evaluation, their figures as
recorded, and differences from SFT and GRPO equal to ``vlarl eval --compare``'s interval."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from vlarl_cli.training.evaluation.stats import newcombe_interval

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "algorithm_comparison.py"


@pytest.fixture
def comparison(monkeypatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # its folder's learning_run and _bench, as a script
    spec = importlib.util.spec_from_file_location("algorithm_comparison", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _eval(k: int, lo: float, hi: float) -> dict[str, float | int]:
    return {"n": 50, "successes": k, "success_rate": k / 50, "ci95_low": lo, "ci95_high": hi}


def test_table_rows_and_differences(comparison) -> None:
    results = {"sft": {"eval": _eval(18, 0.2414, 0.4986)},
               "grpo": {"train": {"iterations": 30, "trajectories": 480.0}, "eval": _eval(30, 0.46, 0.72)},
               "dynamic_sampling": {"train": {"iterations": 22, "trajectories": 472.0}, "eval": _eval(18, 0.24, 0.50)}}
    lines = comparison.markdown_table({"results": results}).splitlines()
    assert len(lines) == 2 + 3  # header, rule, one row per evaluated arm: RLOO has none yet and is left out
    sft, grpo, dyn = lines[2:]
    assert sft.startswith("| SFT checkpoint") and "| 18 / 50 (0.36) | [0.24, 0.50] |  |  |" in sft
    d, lo, hi = newcombe_interval(18, 50, 30, 50)
    assert grpo == f"| GRPO | 30 | 480 | 30 / 50 (0.60) | [0.46, 0.72] | {d:+.2f} [{lo:+.2f}, {hi:+.2f}] |  |"
    assert lo > 0  # 18 -> 30 of 50 is a significant gain
    d, lo, hi = newcombe_interval(30, 50, 18, 50)  # dynamic sampling vs GRPO: B - A with A = GRPO
    assert dyn.startswith("| GRPO + dynamic sampling | 22 | 472 | 18 / 50 (0.36) |")
    # equal rates: d = 0 -/+ sqrt((0.36 - 0.2414)^2 + (0.4986 - 0.36)^2) = -/+ 0.182 (Wilson bounds of 18 / 50)
    assert dyn.endswith(f"| +0.00 [-0.18, +0.18] | {d:+.2f} [{lo:+.2f}, {hi:+.2f}] |") and d == pytest.approx(-0.24)
