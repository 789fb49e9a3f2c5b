"""rl-train's evaluation runs in the training env's simulators (no simulator built twice): on the real simulator,
its episodes equal those of freshly built simulators, action for action and state for state, although the
training env ran other init states before (the standard protocol's seed stream is replayed, the hard reset
rebuilds the model). One env in one worker process, 3 trials of 15 steps: two simulators are built (~25 s on
2 shared cores); the reason it is a test: the rl-train quickstart's before / after numbers rest on it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.policies.base import PolicyOutput
from vlarl_cli.training.evaluation import EvalSettings, plan_episodes, run_episodes

pytestmark = pytest.mark.libero


class StatePolicy:
    """Deterministic actions from the 14-d state (LIBERO ``obs_mode: state``, no camera): the episode follows the
    simulator, so any difference in a reset shows in the actions and states that follow."""

    num_action_chunks = 5
    cameras: tuple[str, ...] = ()
    obs_mode = "state"

    def __init__(self) -> None:
        self.weights = torch.from_numpy(np.random.default_rng(0).normal(0, 2, (14, 7)).astype(np.float32))

    def sample(self, obs: dict[str, Any], deterministic: bool = False, generator: Any = None) -> PolicyOutput:
        a = torch.tanh(obs[keys.STATES] @ self.weights)[:, None, :].expand(-1, self.num_action_chunks, 7).clone()
        n = len(a)
        return PolicyOutput(actions=a, logprobs=torch.zeros(n, self.num_action_chunks, 7), values=torch.zeros(n))


def test_evaluation_in_a_used_training_env_equals_fresh_simulators(tmp_path: Path) -> None:
    from vlarl_cli.envs.vector import LiberoVectorEnv
    from vlarl_cli.training.evaluation.runner import _vector_spec, reusable

    policy = StatePolicy()
    settings = EvalSettings(suite="libero_spatial", tasks=(0,), trials=3, num_envs=1, num_workers=1, max_steps=15,
                            settle_steps=2, env_seed=0)
    plan = plan_episodes("libero_spatial", (0,), 3)
    fresh, _ = run_episodes(policy, settings, plan, out_dir=tmp_path / "fresh", log=False)
    # the training env as rl-train makes it: the suite's own ids, its reset mode left to the protocol
    spec = dataclasses.replace(_vector_spec(policy, settings, 1), suite="libero_spatial", task_ids=(0,),
                               hard_reset=None, auto_reset=False, init_state_order="random")
    with LiberoVectorEnv(spec) as train:
        train.reset([7])  # a training episode from another init state, cut after two chunks
        for _ in range(2):
            train.step_chunk(np.full((1, 5, 7), 0.3))
        assert reusable(train, _vector_spec(policy, settings, 1), plan)
        reused, _ = run_episodes(policy, settings, plan, out_dir=tmp_path / "reused", log=False, env=train)
        assert train.worker_pids()  # left open for training
    assert [(r.key, r.success, r.steps) for r in reused] == [(r.key, r.success, r.steps) for r in fresh]
    for a, b in zip(fresh, reused, strict=True):
        x, y = a.load_data(), b.load_data()
        assert np.array_equal(x.actions, y.actions) and np.array_equal(x.robot_states, y.robot_states), a.key
        assert np.array_equal(x.joint_pos, y.joint_pos), a.key
