"""The RL core learns: toy reach task (envs/toy.py), sparse success reward, fixed seeds, CPU.

Each run trains with the real advantage estimators and ``ppo_update`` and measures the success rate of
the deterministic policy on 256 fixed evaluation goals before and after training. Thresholds leave a
margin below what the fixed seeds reach (flow PPO ~0.9, flow GRPO ~0.8, Gaussian 1.0; all start below
0.25), so a broken sign, mask, ratio or log-prob makes them fail.
"""

from __future__ import annotations

import pytest

from vlarl_cli.training import toy as bench

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _check(result: dict, final_at_least: float, gain_at_least: float) -> None:
    before, after = result["success"][0], result["success"][-1]
    assert before <= 0.25, f"the task is too easy for an untrained policy: {before}"
    assert after >= final_at_least, f"success {before:.2f} -> {after:.2f} (curve {result['success']})"
    assert after - before >= gain_at_least, f"success {before:.2f} -> {after:.2f}"


def test_flow_policy_learns_with_ppo_gae_flow_sde():
    result = bench.train_toy(bench.ToyRun(policy="flow_sde", adv_type="gae", iterations=50, seed=0))
    _check(result, final_at_least=0.75, gain_at_least=0.5)
    m = result["metrics"]
    assert 0 < m["train/actor/clip_fraction"] <= 1 and m["train/actor/skipped_steps"] == 0


def test_flow_policy_learns_with_grpo_flow_sde():
    result = bench.train_toy(bench.ToyRun(policy="flow_sde", adv_type="grpo", iterations=40, num_envs=128,
                                          group_size=8, global_batch_size=256, seed=0))
    _check(result, final_at_least=0.65, gain_at_least=0.45)
    assert "train/critic/value_loss" not in result["metrics"]


def test_gaussian_control_learns_with_ppo():
    result = bench.train_toy(bench.ToyRun(policy="gaussian", adv_type="gae", iterations=15, seed=0))
    _check(result, final_at_least=0.9, gain_at_least=0.6)
