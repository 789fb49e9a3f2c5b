"""Normalisation from openpi norm stats: hand-computed values, round trips, file locations."""

from __future__ import annotations

import json

import pytest
import torch

from vlarl_cli.errors import CheckpointError, ConfigError
from vlarl_cli.policies.normalization import (
    Normalizer,
    NormStats,
    find_norm_stats,
    load_norm_stats,
    save_norm_stats,
)


def _stats() -> dict[str, NormStats]:
    t = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return {"state": NormStats(mean=t(1.0, -2.0), std=t(2.0, 0.5), q01=t(0.0, -4.0), q99=t(4.0, 0.0)),
            "actions": NormStats(mean=t(0.5), std=t(0.25), q01=t(-1.0), q99=t(3.0))}


def test_mean_std_hand_values():
    n = Normalizer(_stats(), "mean_std")
    y = n.normalize(torch.tensor([[3.0, -1.0]]), "state")
    assert torch.allclose(y, torch.tensor([[(3 - 1) / (2 + 1e-6), (-1 + 2) / (0.5 + 1e-6)]]), atol=1e-7)


def test_quantile_hand_values():
    n = Normalizer(_stats(), "quantile")
    y = n.normalize(torch.tensor([[0.0, -4.0], [4.0, 0.0], [2.0, -2.0]]), "state")
    expected = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    assert torch.allclose(y, expected, atol=1e-5)


@pytest.mark.parametrize("mode", ["mean_std", "quantile"])
def test_round_trip_and_extra_dims_pass_through(mode):
    n = Normalizer(_stats(), mode)
    x = torch.randn(4, 5, 32)  # model-space chunk: only the first 1 dim has action stats
    back = n.unnormalize(n.normalize(x, "actions"), "actions")
    assert torch.allclose(back, x, atol=1e-5)
    assert torch.equal(n.unnormalize(x, "actions")[..., 1:], x[..., 1:])
    state = torch.randn(3, 8)  # stats for 2 dims only
    assert torch.equal(n.normalize(state, "state")[:, 2:], state[:, 2:])


def test_identity_and_errors():
    x = torch.randn(2, 3)
    assert torch.equal(Normalizer(None, "identity").normalize(x, "state"), x)
    with pytest.raises(ConfigError, match='Did you mean "quantile"'):
        Normalizer(_stats(), "quantil")
    no_q = {"state": NormStats(mean=torch.zeros(2, dtype=torch.float64), std=torch.ones(2, dtype=torch.float64))}
    with pytest.raises(CheckpointError, match="q01/q99"):
        Normalizer(no_q, "quantile")


def test_files_and_locations(tmp_path):
    save_norm_stats(_stats(), tmp_path / "a" / "norm_stats.json")
    raw = json.loads((tmp_path / "a" / "norm_stats.json").read_text())
    assert set(raw["norm_stats"]) == {"state", "actions"} and raw["norm_stats"]["actions"]["q99"] == [3.0]
    loaded = load_norm_stats(tmp_path / "a" / "norm_stats.json")
    assert torch.equal(loaded["state"].std, _stats()["state"].std)
    # openpi assets/<id>/ and RLinf <id>/ layouts
    root = tmp_path / "ck"
    (root / "assets" / "physical-intelligence" / "libero").mkdir(parents=True)
    (root / "assets" / "physical-intelligence" / "libero" / "norm_stats.json").write_text(json.dumps(raw))
    assert find_norm_stats(root, "physical-intelligence/libero") == (
        root / "assets" / "physical-intelligence" / "libero" / "norm_stats.json")
    rl = tmp_path / "rl"
    (rl / "physical-intelligence" / "libero").mkdir(parents=True)
    (rl / "physical-intelligence" / "libero" / "norm_stats.json").write_text(json.dumps(raw))
    assert find_norm_stats(rl, "physical-intelligence/libero") == rl / "physical-intelligence" / "libero" / "norm_stats.json"
    assert find_norm_stats(rl) is not None  # found by search without the asset id
    assert find_norm_stats(tmp_path / "empty_dir_does_not_exist") is None
    with pytest.raises(CheckpointError, match="does not exist"):
        load_norm_stats(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"norm_stats": {"state": {"mean": [1]}}}')
    with pytest.raises(CheckpointError, match="std"):
        load_norm_stats(tmp_path / "bad.json")
