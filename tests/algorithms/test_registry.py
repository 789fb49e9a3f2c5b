"""The algorithm table (algorithm_types.py), the registries that follow it, the new estimators and losses by hand,
and a fake estimator added by docs/adding_an_algorithm.md alone (one row, one function) that trains."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from vlarl_cli import algorithm_types
from vlarl_cli.algorithms import advantages as adv_mod
from vlarl_cli.algorithms.advantages import (
    ADVANTAGES,
    AdvantageResult,
    compute_advantages,
    drgrpo,
    outcome_advantages,
    register_advantage,
    rloo,
)
from vlarl_cli.algorithms.losses import POLICY_LOSSES, gspo_actor_loss, ppo_actor_loss, sequence_mean
from vlarl_cli.config.loading import load_config
from vlarl_cli.config.schema import AlgorithmConfig


def test_every_table_row_has_its_function_and_back() -> None:
    assert set(ADVANTAGES) == set(algorithm_types.ADVANTAGE_TYPES)
    assert set(POLICY_LOSSES) == set(algorithm_types.POLICY_LOSSES)
    with pytest.raises(ValueError, match=r"no row in vlarl_cli\.algorithm_types\.ADVANTAGE_TYPES"):
        register_advantage("no_row")
    with pytest.raises(ValidationError, match='Did you mean "rloo"'):
        AlgorithmConfig(adv_type="rlo")
    with pytest.raises(ValidationError, match="filter_rewards drops or redraws groups"):
        AlgorithmConfig(adv_type="gae", filter_rewards=True)
    with pytest.raises(ValidationError, match="policy_loss gspo has no dual clip"):
        AlgorithmConfig(policy_loss="gspo")


def test_rloo_and_drgrpo_by_hand() -> None:
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    # RLOO: s_i - mean of the other three; Dr.GRPO: s_i - group mean, never scaled
    torch.testing.assert_close(rloo(scores, 4), torch.tensor([1 - 1 / 3, -2 / 3, -2 / 3, 1 - 1 / 3, 0, 0, 0, 0]))
    torch.testing.assert_close(drgrpo(scores, 4), torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]))
    rewards = torch.zeros(3, 4)
    rewards[2, 0] = rewards[1, 1] = 1.0
    dones = torch.zeros(4, 4, dtype=torch.bool)
    dones[2, 1] = True  # env 1 ends after step 1: its step 2 is masked
    res = compute_advantages("rloo", rewards, dones, group_size=2, normalize=False)
    assert res.advantages[:, 0].tolist() == [0.0, 0.0, 0.0] and res.advantages[2, 1] == 0  # equal scores; masked
    assert not res.loss_mask[2, 1] and res.returns is None


def test_gspo_uses_one_ratio_per_trajectory() -> None:
    """Two trajectories of two units: GSPO's ratio is exp(mean log-ratio of the trajectory) on every unit, its
    gradient that of the sequence ratio; vanilla PPO's is per unit."""
    old = torch.zeros(4)
    logp = torch.tensor([0.1, 0.3, -0.2, 0.0], requires_grad=True)
    adv, weight, trajectory = torch.ones(4), torch.ones(4), torch.tensor([0, 0, 1, 1])
    torch.testing.assert_close(sequence_mean(logp.detach(), weight > 0, trajectory), torch.tensor([0.2, 0.2, -0.1, -0.1]))
    loss, m = gspo_actor_loss(logp, old, adv, weight, 4.0, clip_ratio_low=0.2, clip_ratio_high=0.28,
                              trajectory=trajectory)
    s = torch.tensor([0.2, 0.2, -0.1, -0.1]).exp()
    torch.testing.assert_close(loss, -(s * adv).sum() / 4)
    loss.backward()
    torch.testing.assert_close(logp.grad, -s / 4)  # d/dlogp_t of -s_i / 4 summed over the units of i
    torch.testing.assert_close(m["ratio"], s.mean())
    vanilla, _ = ppo_actor_loss(logp.detach(), old, adv, weight, 4.0, clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert not torch.allclose(vanilla, loss.detach())


def test_the_simplevla_preset_runs_at_its_published_scale() -> None:
    """SimpleVLA-RL's LIBERO recipe on 8 processes: 64 groups of 8 per iteration, dynamic sampling, one
    optimizer step over every sample (its ppo_mini_batch_size covers the batch)."""
    config = load_config("libero_10_grpo_openvlaoft_simplevla", world_size=8).config
    algo = config.algorithm
    assert (algo.adv_type, algo.group_size, algo.dynamic_sampling, algo.clip_ratio_high, algo.kl_beta) == (
        "grpo", 8, True, 0.28, 0.0)
    assert config.train_num_envs * config.rollout_epoch // algo.group_size == 64
    assert config.samples_per_iteration() == config.actor.global_batch_size == 512 * 64
    assert config.rollout.sampling_params.temperature_train == 1.6


@pytest.fixture
def median_estimator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """docs/adding_an_algorithm.md, "An estimator", step by step: the row, then the function."""
    monkeypatch.setitem(algorithm_types.ADVANTAGE_TYPES, "median",
                        algorithm_types.AdvantageType(groups=True, source="a group-median baseline"))

    @register_advantage("median")
    def _median_entry(rewards, dones, loss_mask, *, group_size=1, **_):  # type: ignore[no-untyped-def]
        def baseline(scores):  # type: ignore[no-untyped-def]
            g = scores.view(-1, group_size)
            return (g - g.median(dim=1, keepdim=True).values).reshape(-1)

        adv, mask = outcome_advantages(rewards, loss_mask, baseline)
        return AdvantageResult(adv, None, mask)

    yield "median"
    del adv_mod.ADVANTAGES["median"]


def test_a_fake_estimator_added_by_the_doc_alone_trains(median_estimator: str, tmp_path: Path, one_thread: None
                                                         ) -> None:
    from vlarl_cli.training.rl import train

    loaded = load_config("toy_reach_ppo", [
        f"algorithm.adv_type={median_estimator}", "algorithm.loss_type=actor", "algorithm.group_size=4",
        "algorithm.dynamic_sampling=true", "env.train.total_num_envs=16", "actor.global_batch_size=64",
        "actor.micro_batch_size=64", "runner.max_epochs=1", "runner.val_check_interval=-1",
        f"runner.logger.log_path={tmp_path}"])
    assert loaded.config.train_group_size == 4  # the row's groups=True reached the envs
    result = train(loaded)
    m = result.last_metrics
    assert m["train/actor/optimizer_steps"] == 4 and m["rollout/sampling_draws"] >= 1  # 4 update epochs
    assert m["rollout/signal_groups"] >= 1 and m["rollout/advantages_max"] > 0
