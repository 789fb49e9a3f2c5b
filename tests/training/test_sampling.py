"""Dynamic sampling (training/sampling.py): which groups fill the batch, in which order, and the cap."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli.training.rollout import Rollout
from vlarl_cli.training.sampling import fill_with_signal, group_signal

T, N, C, G = 2, 6, 1, 2  # 3 group slots


def _draw(successes: list[int], tag: float) -> Rollout:
    """A rollout whose env n succeeds at its last step when n is in ``successes``; ``tag`` marks the draw."""
    rewards = torch.zeros(T, N, C)
    rewards[-1, successes, 0] = 1.0
    zeros = torch.zeros(T, N, C)
    return Rollout(replay={"tag": torch.full((T * N, 1), tag)}, logprobs=torch.zeros(T, N, C, 1),
                   values=torch.full((T + 1, N), tag), rewards=rewards, dones=torch.zeros(T + 1, N, C, dtype=torch.bool),
                   truncated=zeros.bool(), final_values=torch.zeros(T, N), success=zeros.bool())


def _signal(r: Rollout) -> torch.Tensor:
    return group_signal(r, G, auto_reset=False, reward_type="chunk_level")


def test_groups_with_signal_fill_the_slots_in_draw_order() -> None:
    draws = [_draw([0], 0.0), _draw([3, 4, 5], 1.0), _draw([0, 2], 2.0)]  # signal: {0}, {1}, {0, 1}
    out = fill_with_signal(lambda d: draws[d], _signal, group_size=G, max_draws=5)
    assert _signal(draws[0]).tolist() == [True, False, False]
    assert out.stats == {"rollout/sampling_draws": 3.0, "rollout/drawn_trajectories": 18.0,
                         "rollout/signal_groups": 4.0, "rollout/unfilled_groups": 0.0}
    # slots: draw 0 group 0, draw 1 group 1, draw 2 group 0 (draw 2 group 1 is not needed)
    assert out.rollout.values[0].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert out.rollout.rewards[-1, :, 0].tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert out.rollout.replay["tag"].view(T, N)[0].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert [d is draws[i] for i, d in enumerate(out.draws)] == [True, True, True]


def test_at_the_cap_groups_without_signal_fill_the_rest_with_a_warning() -> None:
    draws = [_draw([], 0.0), _draw([2], 1.0)]  # one signal group in two draws
    with pytest.warns(RuntimeWarning, match="2 of 3 group slots found no group whose scores differ in 2 draws"):
        out = fill_with_signal(lambda d: draws[d], _signal, group_size=G, max_draws=2)
    assert out.stats["rollout/unfilled_groups"] == 2.0 and out.stats["rollout/signal_groups"] == 1.0
    assert out.rollout.values[0].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # the signal group first
