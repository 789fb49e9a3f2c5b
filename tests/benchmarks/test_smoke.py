"""Every script under benchmarks/ runs in its ``--smoke`` size and prints its JSON line with the machine beside
the figures (``benchmarks/_bench.py``), so no benchmark rots unnoticed.

The scripts without a simulator run in the default suite (~60-90 s together on a loaded 2-core machine).
Those that build LIBERO simulators take minutes even at their smallest (each simulator ~4-12 s to build, a
hard reset ~2.5 s): they are marked ``slow``; faster tests cover the code they drive (``tests/eval``:
``run_episodes`` and ``vlarl eval`` on LIBERO; ``tests/training``: ``rl-train`` iterations and the quickstart;
``tests/envs``: the vector env, resets and rendering).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: script -> extra arguments ("{tmp}" = a temporary folder); no simulator
FAST: dict[str, list[str]] = {
    "ci_disk": [], "family_line_counts": [], "learning_curve": ["--out", "{tmp}"], "lerobot_loader": [],
    "maniskill_learning": [], "maniskill_throughput": [], "policy_latency": [], "row_noise": [],
    "sft_loader": ["--out", "{tmp}"], "transport": [],
    # builds one LIBERO simulator, but it is the GPU machine's one prepared call: its smoke must never rot
    "gpu_truth": [],
}
#: the scripts that build LIBERO simulators (minutes even in smoke size)
LIBERO: dict[str, list[str]] = {
    "algorithm_comparison": ["--out", "{tmp}"], "cpu_budget": [], "env_throughput": [], "eval_throughput": [],
    "iteration_breakdown": [], "learning_run": ["--out", "{tmp}"], "render_quality": [], "sim_split": [],
}


def _smoke(name: str, extra: list[str], tmp_path: Path) -> dict:
    args = [a.replace("{tmp}", str(tmp_path / "out")) for a in extra]
    root = BENCHMARKS.parent
    out = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke", *args], cwd=root,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, f"{name} --smoke failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["benchmark"] == name and line["smoke"] is True
    machine = line["machine"]
    assert machine["cpu_count"] >= 1 and machine["affinity_cpus"] >= 1
    assert len(machine["load_avg_start"]) == 3 and len(machine["load_avg_end"]) == 3
    assert machine["versions"]["torch"] != "not installed"
    assert machine["cpu_model"] and machine["torch_cpu_kernels"]  # the figures' CPU, e.g. "AMD EPYC", "AVX2"
    return line


def test_every_benchmark_has_a_smoke_run() -> None:
    scripts = {p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_")}
    assert scripts == set(FAST) | set(LIBERO), "list a new benchmark in FAST or LIBERO"


@pytest.mark.parametrize("name", sorted(FAST))
def test_smoke(name: str, tmp_path: Path) -> None:
    line = _smoke(name, FAST[name], tmp_path)
    if "skipped" in line:  # a reference venv or optional package is missing: the line says which
        assert "lerobot" in line["skipped"] or "mani_skill" in line["skipped"]


@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.parametrize("name", sorted(LIBERO))
def test_smoke_libero(name: str, tmp_path: Path) -> None:
    if importlib.util.find_spec("libero") is None:
        pytest.skip("LIBERO is not installed")
    line = _smoke(name, LIBERO[name], tmp_path)
    if name == "sim_split" and "skipped" in line:  # LIBERO's own environment is built by .ci/run, not here
        assert "vlarl setup-sim libero" in line["skipped"]
        return
    assert "skipped" not in line
