"""Norm statistics from demonstrations, in each family's format, written where the family's loader finds them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vlarl_cli.config.schema import ModelConfig
from vlarl_cli.training.demos import Episode

pytestmark = pytest.mark.usefixtures("one_thread")


def _episodes() -> list[Episode]:
    rng = np.random.default_rng(0)
    out = []
    for n in (5, 7):
        actions = rng.uniform(-1, 1, (n, 7)).astype(np.float32)
        actions[:, -1] = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        out.append(Episode(states=rng.normal(size=(n, 8)).astype(np.float32), actions=actions))
    return out


def test_feature_stats_by_hand():
    from vlarl_cli.datasets.stats import feature_stats

    s = feature_stats(np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]]))
    assert s["min"] == [0.0, 1.0] and s["max"] == [4.0, 1.0] and s["mean"] == [2.0, 1.0]
    assert s["std"] == pytest.approx([np.sqrt(8 / 3), 0.0])  # population std, as openpi's RunningStats
    assert s["q01"] == pytest.approx([0.04, 1.0]) and s["q99"] == pytest.approx([3.96, 1.0])  # linear interpolation
    assert s["count"] == [3]


def test_pi0_norm_stats_are_the_datas_and_survive_save_and_load(tmp_path):
    from vlarl_cli.datasets.stats import apply_data_stats
    from vlarl_cli.policies.pi0.checkpoint import load_policy, save_policy
    from vlarl_cli.policies.registry import build_policy

    eps = _episodes()
    policy = build_policy(ModelConfig(model_type="pi0", preset="tiny"))
    note = apply_data_stats(policy, eps)
    assert "openpi" in note
    states = np.concatenate([e.states for e in eps]).astype(np.float64)
    actions = np.concatenate([e.actions for e in eps]).astype(np.float64)
    if policy.cfg.extra_delta_transform:
        actions[:, :6] -= states[:, :6]
    save_policy(policy, tmp_path / "p", format="vlarl")
    written = json.loads((tmp_path / "p" / "norm_stats.json").read_text())["norm_stats"]
    np.testing.assert_allclose(written["actions"]["mean"], actions.mean(0), rtol=1e-12)
    np.testing.assert_allclose(written["state"]["q01"], np.quantile(states, 0.01, axis=0), rtol=1e-12)
    loaded = load_policy(tmp_path / "p")
    torch.testing.assert_close(loaded.norm_stats["actions"].std, torch.as_tensor(actions.std(0)), rtol=1e-12, atol=0)


def test_gr00t_min_max_statistics_per_modality_key(tmp_path):
    from vlarl_cli.datasets.stats import apply_data_stats
    from vlarl_cli.policies.gr00t.checkpoint import load_policy, save_policy
    from vlarl_cli.policies.registry import build_policy

    eps = _episodes()
    policy = build_policy(ModelConfig(model_type="gr00t", preset="tiny", embodiment_tag="libero_franka"))
    apply_data_stats(policy, eps)
    states = np.concatenate([e.states for e in eps]).astype(np.float64)
    actions = np.concatenate([e.actions for e in eps]).astype(np.float64)
    stats = policy.modality.statistics
    # the modality keys cut the vectors in order; the gripper action is mapped to GR00T's [0, 1] first
    start = 0
    for name, width in policy.modality.state_keys:
        np.testing.assert_allclose(stats["state"][name]["min"], states[:, start:start + width].min(0))
        start += width
    assert start == 8
    np.testing.assert_allclose(stats["action"]["gripper"]["max"], [(1 - actions[:, -1]).max() / 2])
    save_policy(policy, tmp_path / "g", format="vlarl")
    again = load_policy(tmp_path / "g")
    assert again.modality.statistics == policy.modality.statistics


def test_oft_dataset_statistics_round_trip(tmp_path):
    from vlarl_cli.datasets.stats import apply_data_stats
    from vlarl_cli.policies.openvla_oft.checkpoint import load_policy, save_policy
    from vlarl_cli.policies.registry import build_policy

    eps = _episodes()
    policy = build_policy(ModelConfig(model_type="openvla_oft", preset="tiny"))
    apply_data_stats(policy, eps, dataset_name="my_demos")
    stats = policy.dataset_statistics["my_demos"]
    actions = np.concatenate([e.actions for e in eps]).astype(np.float64)
    np.testing.assert_allclose(stats["action"]["q99"][:6], np.quantile(actions[:, :6], 0.99, axis=0))
    assert stats["action"]["mask"] == [True] * 6 + [False] and stats["num_trajectories"] == 2
    save_policy(policy, tmp_path / "o", format="vlarl")
    written = json.loads((tmp_path / "o" / "dataset_statistics.json").read_text())
    assert written["my_demos"]["action"]["q01"] == stats["action"]["q01"]
    assert load_policy(tmp_path / "o").dataset_statistics["my_demos"]["action"]["mean"] == stats["action"]["mean"]


def test_image_stats_are_numpys_per_channel_statistics_in_lerobot_shape():
    """Histogram statistics of uint8 frames equal numpy's over every pixel (scaled to [0, 1]), quantiles
    included (numpy's linear interpolation), each shaped [3, 1, 1] as lerobot keeps camera stats."""
    from vlarl_cli.datasets.stats import image_stats

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (7, 5, 6, 3), dtype=np.uint8)
    frames[..., 1] = rng.integers(40, 60, (7, 5, 6))  # a narrow channel: min / max / quantiles inside it
    got = image_stats(frames)
    x = frames.reshape(-1, 3).astype(np.float64) / 255
    want = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0),
            "q01": np.quantile(x, 0.01, axis=0), "q99": np.quantile(x, 0.99, axis=0)}
    for key, value in want.items():
        assert np.asarray(got[key]).shape == (3, 1, 1), key
        np.testing.assert_allclose(np.asarray(got[key]).reshape(3), value, rtol=1e-12, atol=1e-15, err_msg=key)
    assert got["count"] == [7]
