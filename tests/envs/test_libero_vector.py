"""The vector env on the real simulator: 2 envs in 2 worker processes, one GRPO group, 2 pipeline stages.

Both envs share one init state (group_size=2), so their observations must be identical: this checks
determinism across processes and the shared-memory path at once.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.envs.vector import EPISODE_DONE, ERRORS, LiberoVectorEnv, VectorEnvSpec
from vlarl_cli.errors import EnvError

pytestmark = pytest.mark.libero

MAX_STEPS = 10


@pytest.fixture(scope="module")
def vec(libero_ready):
    spec = VectorEnvSpec(
        suite="libero_spatial",
        task_ids=(0, 1),
        num_envs=2,
        num_workers=2,
        group_size=2,
        stages=2,
        max_episode_steps=MAX_STEPS,
        init_state_order="ordered",
        reward_coef=5.0,
        step_penalty=0.01,
    )
    env = LiberoVectorEnv(spec)
    yield env
    env.close()


def _noop(n: int, chunk: int) -> np.ndarray:
    a = np.zeros((n, chunk, 7))
    a[..., -1] = -1.0
    return a


def test_reset_shapes_group_sharing_and_ordered_states(vec):
    obs = vec.reset()
    assert obs[keys.MAIN_IMAGES].shape == (2, 128, 128, 3) and obs[keys.MAIN_IMAGES].dtype == torch.uint8
    assert obs[keys.WRIST_IMAGES].shape == (2, 128, 128, 3)
    assert obs[keys.STATES].shape == (2, 8) and obs[keys.STATES].dtype == torch.float32
    assert len(obs[keys.TASK_DESCRIPTIONS]) == 2
    assert vec.reset_state_ids.tolist() == [0, 0]  # one group, first state of the ordered pool
    # same init state in two processes -> identical observations
    assert torch.equal(obs[keys.MAIN_IMAGES][0], obs[keys.MAIN_IMAGES][1])
    assert torch.equal(obs[keys.STATES][0], obs[keys.STATES][1])
    assert not torch.equal(obs[keys.MAIN_IMAGES][0], torch.zeros_like(obs[keys.MAIN_IMAGES][0]))
    vec.reset()
    assert vec.reset_state_ids.tolist() == [1, 1]  # ordered: next state of task 0


def test_step_rewards_auto_reset_and_penalty(vec):
    first = vec.reset()
    obs, rewards, dones, infos = vec.step_chunk(_noop(2, 5))
    assert rewards.shape == dones.shape == (2, 5)
    # no success: every step only pays the step penalty
    torch.testing.assert_close(rewards, torch.full((2, 5), -0.01))
    assert not dones.any() and not infos[EPISODE_DONE].any()
    assert torch.equal(obs[keys.MAIN_IMAGES][0], obs[keys.MAIN_IMAGES][1])
    obs, rewards, dones, infos = vec.step_chunk(_noop(2, 5))
    # the step limit (10) is reached at the last step of the second chunk
    assert dones[:, -1].all() and not dones[:, :-1].any()
    assert infos[keys.TRUNCATED][:, -1].all()
    assert infos[EPISODE_DONE].all()
    assert infos[keys.EPISODE_LEN].tolist() == [MAX_STEPS, MAX_STEPS]
    assert not infos[keys.SUCCESS_ONCE].any()
    torch.testing.assert_close(infos[keys.RETURN], torch.full((2,), -0.01 * MAX_STEPS))
    # auto-reset from the same group state: the observation is the episode's first again
    assert torch.equal(obs[keys.MAIN_IMAGES], first[keys.MAIN_IMAGES])
    assert torch.equal(obs[keys.STATES], first[keys.STATES])
    # ... and the cut episode's last observation comes with it, for the value bootstrap (envs/base.py)
    final = infos[keys.FINAL_OBSERVATION]
    assert final[keys.TASK_DESCRIPTIONS] == first[keys.TASK_DESCRIPTIONS]
    assert torch.equal(final[keys.MAIN_IMAGES][0], final[keys.MAIN_IMAGES][1])  # one group state, deterministic
    assert not torch.equal(final[keys.STATES], first[keys.STATES])  # 10 steps later
    assert not torch.equal(final[keys.MAIN_IMAGES], first[keys.MAIN_IMAGES])


def test_stages_step_independently_and_out_of_order(vec):
    vec.reset()
    assert vec.stage_ids(0) == [0] and vec.stage_ids(1) == [1]
    vec.step_chunk_async(0, _noop(1, 3))
    vec.step_chunk_async(1, _noop(1, 2))
    _obs1, r1, _d1, i1 = vec.wait(1)  # collected before stage 0 although sent after it
    _obs0, r0, _d0, i0 = vec.wait(0)
    assert r0.shape == (1, 3) and r1.shape == (1, 2)
    assert i0["env_ids"] == [0] and i1["env_ids"] == [1]
    with pytest.raises(EnvError, match="expected \\[1, chunk, 7\\]"):
        vec.step_chunk_async(0, _noop(2, 3))


def test_nan_action_fails_only_that_episode(vec):
    vec.reset()
    vec.step_chunk(_noop(2, 2))
    actions = _noop(2, 3)
    actions[0, 1, 3] = np.nan
    _, _, dones, infos = vec.step_chunk(actions)
    assert dones[0].all() and not dones[1].any()
    assert infos[EPISODE_DONE].tolist() == [True, False]
    assert "NaN" in infos[ERRORS][0] and 1 not in infos[ERRORS]
    assert infos[keys.EPISODE_LEN][0] == 2
    # env 1 keeps its episode: 2 + 3 + 5 = 10 steps end it exactly
    _obs, _rewards, dones, infos = vec.step_chunk(_noop(2, 5))
    assert infos[EPISODE_DONE].tolist() == [False, True]
    assert infos[keys.EPISODE_LEN][1] == MAX_STEPS


def test_killed_worker_is_replaced_without_losing_other_episode(vec):
    vec.reset()
    vec.step_chunk(_noop(2, 4))
    old_pids = vec.worker_pids()
    os.kill(old_pids[1], signal.SIGKILL)
    obs, _, dones, infos = vec.step_chunk(_noop(2, 3))
    assert vec.worker_pids()[0] == old_pids[0] and vec.worker_pids()[1] != old_pids[1]
    assert "died" in infos[ERRORS][1] and 0 not in infos[ERRORS]
    assert dones[1].all() and not dones[0].any()
    assert not infos[keys.SUCCESS_ONCE][1]
    # env 1 restarted from the group's state: its observation is a first observation again
    fresh = obs[keys.STATES][1].clone()
    # env 0 continues its episode: 4 + 3 + 3 = 10 steps end it; env 1's new one has 3 steps
    obs, _rewards, dones, infos = vec.step_chunk(_noop(2, 3))
    assert infos[EPISODE_DONE].tolist() == [True, False]
    assert infos[keys.EPISODE_LEN][0] == MAX_STEPS
    # after the auto-reset env 0 shows the group's first observation, like the restarted env 1 did
    torch.testing.assert_close(obs[keys.STATES][0], fresh, rtol=0, atol=0)
