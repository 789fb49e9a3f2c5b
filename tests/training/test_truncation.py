"""Time-limit truncation: carried through the rollout (done = terminated or truncated, TorchRL's split) and,
with auto-reset under GAE, bootstrapped with the critic's value of the cut episode's final observation:
``r += gamma * V(final obs)`` (REFERENCE.md section 2; RLinf ``EnvWorker.compute_bootstrap_rewards``)."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.algorithms.advantages import bootstrap_truncated
from vlarl_cli.config.loading import load_config
from vlarl_cli.envs.toy import ReachEnv, ToyVectorEnv
from vlarl_cli.errors import EnvError
from vlarl_cli.policies.base import PolicyOutput
from vlarl_cli.training.batch import epoch_advantages
from vlarl_cli.training.rollout import Rollout, collect

F, T_ = False, True


def test_bootstrap_adds_gamma_times_final_value_only_at_cut_steps() -> None:
    rewards = torch.tensor([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 2.0], [1.0, 1.0]]])  # [T=2, B=2, C=2]
    truncated = torch.tensor([[[F, T_], [F, F]], [[F, F], [T_, F]]])
    final_values = torch.tensor([[4.0, 9.0], [7.0, -2.0]])  # 9.0 and 7.0: nothing was cut there
    out = bootstrap_truncated(rewards, truncated, final_values, gamma=0.5)
    assert out.tolist() == [[[1.0, 2.0], [0.5, 0.5]], [[0.0, 2.0], [0.0, 1.0]]]
    with pytest.raises(ValueError, match="final_values"):
        bootstrap_truncated(rewards, truncated, final_values[:, :1], gamma=0.5)


def _three_step_rollout() -> Rollout:
    """One env, 3 chunk steps of 2 actions. The time limit cuts its episode at the 2nd action of chunk 1
    (V(final obs) = 4); the env auto-resets, so values[2] = 3 is the next episode's first observation.
    Chunk rewards (sums) r = [1, 0, 2]; values V = [1, 2, 3, 5]."""
    truncated = torch.zeros(3, 1, 2, dtype=torch.bool)
    truncated[1, 0, 1] = True
    dones = torch.zeros(4, 1, 2, dtype=torch.bool)
    dones[2, 0, 1] = True  # done after chunk 1 (row t + 1)
    return Rollout(replay={}, logprobs=torch.zeros(3, 1, 2, 2), values=torch.tensor([[1.0], [2.0], [3.0], [5.0]]),
                   rewards=torch.tensor([[[0.5, 0.5]], [[0.0, 0.0]], [[2.0, 0.0]]]), dones=dones,
                   truncated=truncated, final_values=torch.tensor([[0.0], [4.0], [0.0]]),
                   success=torch.zeros(3, 1, 2, dtype=torch.bool))


@pytest.mark.parametrize("auto_reset", [True, False])
def test_three_step_gae_by_hand(auto_reset: bool) -> None:
    """gamma = lambda = 0.5. With the bootstrap (auto-reset) the cut chunk's reward is 0 + 0.5 * 4 = 2:
        delta_2 = 2 + 0.5 * 5 - 3 = 1.5                 A_2 = 1.5
        delta_1 = 2 + 0.5 * 3 * (1 - 1) - 2 = 0         A_1 = 0 + 0.25 * 0 * 1.5 = 0
        delta_0 = 1 + 0.5 * 2 - 1 = 1                   A_0 = 1 + 0.25 * 0 = 1
    returns A + V = [2, 2, 4.5] (the cut step's return is its bootstrap target 0 + 0.5 * 4).
    Without auto-reset the cut is terminal (RLinf): delta_1 = -2, A_1 = -2, A_0 = 1 + 0.25 * -2 = 0.5,
    returns [1.5, 0, 4.5]."""
    config = load_config("toy_reach_ppo", [f"env.train.auto_reset={auto_reset}", "algorithm.gamma=0.5",
                                           "algorithm.gae_lambda=0.5"]).config
    assert config.bootstrap_truncation == auto_reset
    out = epoch_advantages(config, _three_step_rollout(), critic=True, normalize=False)
    expected = ([1.0, 0.0, 1.5], [2.0, 2.0, 4.5]) if auto_reset else ([0.5, -2.0, 1.5], [1.5, 0.0, 4.5])
    assert out.advantages[:, 0].tolist() == expected[0]
    assert out.returns[:, 0].tolist() == expected[1]


def test_grpo_never_bootstraps() -> None:
    config = load_config("toy_reach_ppo", ["env.train.auto_reset=true", "algorithm.adv_type=grpo",
                                           "algorithm.loss_type=actor", "algorithm.group_size=2"]).config
    assert not config.bootstrap_truncation


def test_terminated_is_done_without_truncation() -> None:
    r = _three_step_rollout()
    r.dones[3, 0, 0] = True  # a success at chunk 2's first action
    assert r.terminated[:, 0].tolist() == [[F, F], [F, F], [T_, F]]
    assert (r.dones[1:] == (r.terminated | r.truncated)).all()


class _StepRight:
    """Moves every point right by a full step; its value is 10 x (the point's x), so V(obs) reads where it was."""

    num_action_chunks, action_dim = 2, 2

    def sample(self, obs, deterministic=False, generator=None) -> PolicyOutput:
        n = obs[keys.STATES].shape[0]
        return PolicyOutput(actions=torch.tensor([1.0, 0.0]).expand(n, 2, 2), logprobs=torch.zeros(n, 2, 2),
                            values=10 * obs[keys.STATES][:, 0])


def _toy(auto_reset: bool) -> ToyVectorEnv:
    # goals straight below the start: moving right never reaches them, so the 3-step limit cuts every episode
    return ToyVectorEnv.over(ReachEnv(2, chunk=2, max_steps=3), torch.tensor([[0.0, -1.0], [0.0, -0.8]]),
                             auto_reset=auto_reset)


def test_toy_env_returns_the_final_observation_of_a_cut_episode() -> None:
    env = _toy(auto_reset=True)
    env.reset([0, 1])
    obs, _, dones, info = env.step_chunk(torch.ones(2, 2, 2))
    assert keys.FINAL_OBSERVATION not in info and not dones.any()
    obs, _, dones, info = env.step_chunk(torch.ones(2, 2, 2))  # step 3 reaches the limit, step 4 is not run
    assert info[keys.TRUNCATED].tolist() == [[T_, F], [T_, F]] and dones.all()
    assert info[keys.EPISODE_LEN].tolist() == [3, 3]
    final = info[keys.FINAL_OBSERVATION][keys.STATES]
    assert torch.allclose(final[:, :2], torch.tensor([[0.75, 0.75], [0.75, 0.75]]))
    assert torch.equal(obs[keys.STATES][:, :2], torch.zeros(2, 2))  # restarted towards the same goals
    assert torch.equal(final[:, 2:], obs[keys.STATES][:, 2:])


def test_collect_bootstraps_with_the_value_of_the_final_observation() -> None:
    r = collect(_StepRight(), _toy(auto_reset=True), 3, bootstrap=True)
    assert r.truncated[:, 0].tolist() == [[F, F], [T_, F], [F, F]]
    assert r.final_values[:, 0].tolist() == [0.0, 7.5, 0.0]  # V = 10 x 0.75 at the cut; 0 elsewhere
    assert r.values[:, 0].tolist() == [0.0, 5.0, 0.0, 5.0]  # the restarted episode's first values
    assert not collect(_StepRight(), _toy(auto_reset=True), 3).final_values.any()


def test_a_cut_without_its_final_observation_is_refused_when_bootstrapping() -> None:
    with pytest.raises(EnvError, match="final observation"):
        collect(_StepRight(), _toy(auto_reset=False), 3, bootstrap=True)


def test_final_observation_replaces_only_the_cut_rows() -> None:
    from vlarl_cli.envs.base import final_observation

    obs = {keys.STATES: torch.zeros(3, 2), keys.TASK_DESCRIPTIONS: ["a", "b", "c"]}
    out = final_observation(obs, {1: {keys.STATES: [5.0, 6.0], keys.TASK_DESCRIPTIONS: "old b"}})
    assert out[keys.STATES].tolist() == [[0.0, 0.0], [5.0, 6.0], [0.0, 0.0]]
    assert out[keys.TASK_DESCRIPTIONS] == ["a", "old b", "c"]
    assert not obs[keys.STATES].any() and obs[keys.TASK_DESCRIPTIONS][1] == "b"  # the returned obs is untouched


def test_stages_and_env_ranks_merge_a_final_observation_in_env_order() -> None:
    """Pipeline stages (envs/vector.py) and env ranks (distributed/remote_env.py) put a final observation of
    one part together with the other parts' returned observations."""
    from vlarl_cli.distributed.remote_env import _merge_final
    from vlarl_cli.envs.vector import _merge_stages

    def part(ids: list[int], final: bool) -> tuple:
        obs = {keys.STATES: torch.tensor([[float(e)] for e in ids])}
        infos: dict = {"env_ids": ids, keys.TRUNCATED: torch.tensor([[final]] * len(ids))}
        if final:
            infos[keys.FINAL_OBSERVATION] = {keys.STATES: -obs[keys.STATES]}
        return obs, torch.zeros(len(ids), 1), torch.zeros(len(ids), 1, dtype=torch.bool), infos

    stage0, stage1 = part([0, 2], final=False), part([1, 3], final=True)  # env e is in stage e % 2
    obs, _, _, infos = _merge_stages([stage0, stage1], 4)
    assert obs[keys.STATES][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert infos[keys.FINAL_OBSERVATION][keys.STATES][:, 0].tolist() == [0.0, -1.0, 2.0, -3.0]
    assert _merge_final([stage0[0], stage1[0]], [None, None]) == {}
    merged = _merge_final([stage0[0], stage1[0]], [None, {keys.STATES: torch.tensor([[7.0], [8.0]])}])
    assert merged[keys.FINAL_OBSERVATION][keys.STATES][:, 0].tolist() == [0.0, 2.0, 7.0, 8.0]  # rank order
