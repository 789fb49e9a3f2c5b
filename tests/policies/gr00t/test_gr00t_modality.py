"""Modality specs, min-max normalisation, gripper convention and the upstream statistics files."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli.errors import CheckpointError, ConfigError
from vlarl_cli.policies.gr00t.modality import (
    ModalitySpec,
    default_modality,
    min_max_normalize,
    min_max_unnormalize,
)


def _spec() -> ModalitySpec:
    stats = {"state": {"pos": {"min": [0.0, -2.0], "max": [4.0, 2.0]}, "grip": {"min": [1.0], "max": [1.0]}},
             "action": {"d": {"min": [-0.5], "max": [0.5]}, "gripper": {"min": [0.0], "max": [1.0]}}}
    return ModalitySpec(embodiment_tag="libero_franka", embodiment_id=31, state_keys=(("pos", 2), ("grip", 1)),
                        action_keys=(("d", 1), ("gripper", 1)), statistics=stats)


def test_min_max_by_hand() -> None:
    lo, hi = torch.tensor([0.0, -2.0, 1.0]), torch.tensor([4.0, 2.0, 1.0])
    x = torch.tensor([[1.0, 0.0, 7.0], [4.0, -2.0, 1.0]])
    # 2 (x - lo) / (hi - lo) - 1; constant dimension (lo == hi) -> 0
    assert min_max_normalize(x, lo, hi).tolist() == [[-0.5, 0.0, 0.0], [1.0, -1.0, 0.0]]
    y = torch.tensor([[-0.5, 0.5, 3.0]])  # out-of-range input is clamped to [-1, 1] before un-normalising
    assert min_max_unnormalize(y, lo, hi).tolist() == [[1.0, 1.0, 1.0]]


def test_normalise_unnormalise_round_trip() -> None:
    spec = _spec()
    states = torch.tensor([[2.0, 1.0, 1.0, 9.0]])  # one extra env column is ignored
    assert spec.normalize_state(states).tolist() == [[0.0, 0.5, 0.0]]
    a = torch.tensor([[[0.2, -0.6]]])
    env = spec.unnormalize_action(a)
    torch.testing.assert_close(env, torch.tensor([[[0.1, 0.2]]]))
    torch.testing.assert_close(min_max_normalize(env, *spec._bounds("action")), a)


def test_gripper_convention() -> None:
    spec = _spec()
    a = torch.tensor([[0.3, 0.2], [0.3, 0.9], [0.3, 0.0], [0.3, 1.0]])
    out = spec.to_env_action(a)
    # g' = -sign(2 g - 1): model 0 -> +1, model 1 -> -1 (RLinf normalize_gripper_action); other dims untouched
    assert out[:, 1].tolist() == [1.0, -1.0, 1.0, -1.0] and torch.equal(out[:, 0], a[:, 0])
    assert a[0, 1] == 0.2  # input not modified


def test_validation_names_the_key() -> None:
    spec = _spec()
    stats = {**spec.statistics, "action": {"d": {"min": [-0.5], "max": [0.5]}}}
    with pytest.raises(CheckpointError, match='"gripper"'):
        ModalitySpec(embodiment_tag="x", embodiment_id=0, state_keys=spec.state_keys, action_keys=spec.action_keys,
                     statistics=stats)
    with pytest.raises(ConfigError, match="min_max, q99, mean_std"):
        ModalitySpec(embodiment_tag="x", embodiment_id=0, statistics=stats, action_norm="percentile")
    with pytest.raises(ConfigError, match='Did you mean "libero_panda"'):
        default_modality("libero_pand")


def test_n15_metadata_round_trip() -> None:
    spec = _spec()
    meta = {spec.embodiment_tag: spec.to_n15_metadata()}
    back = ModalitySpec.from_n15_metadata(meta, "libero_franka", embodiment_id=31)
    assert back.to_dict() == spec.to_dict()
    with pytest.raises(CheckpointError, match="libero_franka"):
        ModalitySpec.from_n15_metadata(meta, "libero_frank")


def test_n15_metadata_upstream_shape() -> None:
    # upstream metadata.json: modality keys without prefix, statistics lists, extra fields ignored
    meta = {"libero_franka": {
        "statistics": {"state": {"x": {"max": [1.0], "min": [-1.0], "mean": [0.0], "std": [1.0], "q01": [-1.0],
                                       "q99": [1.0]}},
                       "action": {"gripper": {"max": [1.0], "min": [0.0], "mean": [0.5], "std": [0.5],
                                              "q01": [0.0], "q99": [1.0]}}},
        "modalities": {"video": {"image": {"resolution": [256, 256], "channels": 3, "fps": 20.0}},
                       "state": {"x": {"absolute": True, "rotation_type": None, "shape": [1], "continuous": True}},
                       "action": {"gripper": {"absolute": True, "rotation_type": None, "shape": [1],
                                              "continuous": True}}},
        "embodiment_tag": "libero_franka"}}
    spec = ModalitySpec.from_n15_metadata(meta, "libero_franka")
    assert spec.embodiment_id == 31 and spec.video_keys == ("image",)
    assert spec.state_keys == (("x", 1),) and spec.action_keys == (("gripper", 1),)


def test_n16_files_round_trip() -> None:
    spec = default_modality("libero_panda")
    files = spec.to_n16_files(128, 128, 16)
    assert files["embodiment_id.json"] == {"libero_panda": 2}
    back = ModalitySpec.from_n16_files(files["statistics.json"], files["embodiment_id.json"],
                                       files["processor_config.json"], "libero_panda")
    assert back.to_dict() == spec.to_dict()
    # without processor_config.json the key order follows statistics.json
    back2 = ModalitySpec.from_n16_files(files["statistics.json"], files["embodiment_id.json"], None, "libero_panda")
    assert back2.state_keys == spec.state_keys
    with pytest.raises(CheckpointError, match=r"embodiment_id\.json"):
        ModalitySpec.from_n16_files(files["statistics.json"], {}, None, "libero_panda")


def test_default_libero_modalities() -> None:
    franka, panda = default_modality("libero_franka"), default_modality("libero_panda")
    assert franka.state_width == 8 and panda.state_width == 7  # N1.5 2-d gripper qpos, N1.6 1-d
    assert franka.action_width == panda.action_width == 7
    assert (franka.embodiment_id, panda.embodiment_id) == (31, 2)
    # placeholder statistics: identity on the pose, gripper [-1, 1] -> [0, 1]
    a = torch.tensor([[[0.25, 0, 0, 0, 0, 0, -1.0]]])
    assert franka.unnormalize_action(a)[0, 0, [0, 6]].tolist() == [0.25, 0.0]


def _stats(**extra) -> dict:
    return {"min": [0.0, 2.0], "max": [4.0, 2.0], "q01": [1.0, 2.0], "q99": [3.0, 2.0], "mean": [2.0, 1.0],
            "std": [2.0, 0.0], **extra}


def test_n15_normalizer_modes_by_hand() -> None:
    """Isaac-GR00T n1.5 Normalizer: min_max unclipped, 0 on a zero span; q99 clipped, raw value passed
    through on a zero span; mean_std passed through where std == 0; inverses never clip."""
    from vlarl_cli.policies.gr00t.normalization import normalize, unnormalize

    x = torch.tensor([[5.0, 7.0]])
    assert normalize(x, _stats(), "min_max", convention="n1.5").tolist() == [[1.5, 0.0]]
    assert normalize(x, _stats(), "q99", convention="n1.5").tolist() == [[1.0, 1.0]]  # 3.0 -> clip 1; 7 clipped
    assert normalize(torch.tensor([[2.0, 2.0]]), _stats(), "q99", convention="n1.5").tolist() == [[0.0, 1.0]]
    assert normalize(x, _stats(), "mean_std", convention="n1.5").tolist() == [[1.5, 7.0]]
    assert unnormalize(torch.tensor([[2.0, 0.5]]), _stats(), "min_max", convention="n1.5").tolist() == [[6.0, 2.0]]
    assert unnormalize(torch.tensor([[1.5, 3.0]]), _stats(), "mean_std", convention="n1.5").tolist() == [[5.0, 3.0]]


def test_n16_state_action_processor_by_hand() -> None:
    """Isaac-GR00T n1.6 StateActionProcessor: min-max bounds from q01/q99 with use_percentiles, clipped
    with clip_outliers; the inverse clips its input; mean/std keys are not clipped for states."""
    stats = {"state": {"a": _stats(), "m": _stats()}, "action": {"a": _stats(), "m": _stats()}}
    spec = ModalitySpec(embodiment_tag="libero_panda", embodiment_id=2, state_keys=(("a", 2), ("m", 2)),
                        action_keys=(("a", 2), ("m", 2)), statistics=stats, convention="n1.6", clip_outliers=True,
                        use_percentiles=True, mean_std_keys={"state": ["m"], "action": ["m"]})
    s = spec.normalize_state(torch.tensor([[5.0, 7.0, 5.0, 7.0]]))
    assert s.tolist() == [[1.0, 0.0, 1.5, 7.0]]  # q99 bounds: (5-1)/2*2-1 = 3 -> clipped; mean/std state unclipped
    a = spec.normalize_action(torch.tensor([[5.0, 7.0, 5.0, 7.0]]))
    assert a.tolist() == [[1.0, 0.0, 1.0, 1.0]]  # actions are clipped after mean/std too
    env = spec.unnormalize_action(torch.tensor([[[3.0, 0.0, 1.5, 3.0]]]))
    assert env.tolist() == [[[3.0, 2.0, 5.0, 3.0]]]  # 3 clipped to 1 -> q99 = 3; std 0 passes 3 through
    n15 = ModalitySpec(embodiment_tag="libero_franka", embodiment_id=31, state_keys=(("a", 2),),
                       action_keys=(("a", 2),), statistics={"state": {"a": _stats()}, "action": {"a": _stats()}})
    assert n15.unnormalize_action(torch.tensor([[[3.0, 0.0]]])).tolist() == [[[8.0, 2.0]]]  # N1.5: no clip


def test_n16_unsupported_processor_options_are_refused() -> None:
    spec = default_modality("libero_panda")
    files = spec.to_n16_files(128, 128, 16)
    proc = files["processor_config.json"]
    proc["processor_kwargs"]["use_relative_action"] = True
    proc["processor_kwargs"]["modality_configs"]["libero_panda"]["action"]["action_configs"] = [
        {"rep": "RELATIVE", "type": "EEF", "format": "DEFAULT"}] * 7
    with pytest.raises(ConfigError, match="relative actions"):
        ModalitySpec.from_n16_files(files["statistics.json"], files["embodiment_id.json"], proc, "libero_panda")
    proc["processor_kwargs"]["use_relative_action"] = False  # configured but switched off: fine
    ModalitySpec.from_n16_files(files["statistics.json"], files["embodiment_id.json"], proc, "libero_panda")
    proc["processor_kwargs"]["apply_sincos_state_encoding"] = True
    proc["processor_kwargs"]["modality_configs"]["libero_panda"]["state"]["sin_cos_embedding_keys"] = ["roll"]
    with pytest.raises(ConfigError, match="sin/cos"):
        ModalitySpec.from_n16_files(files["statistics.json"], files["embodiment_id.json"], proc, "libero_panda")
    proc["processor_kwargs"]["apply_sincos_state_encoding"] = False
    proc["processor_kwargs"].update(use_percentiles=True, clip_outliers=False)
    proc["processor_kwargs"]["modality_configs"]["libero_panda"]["action"]["mean_std_embedding_keys"] = ["x"]
    back = ModalitySpec.from_n16_files(files["statistics.json"], files["embodiment_id.json"], proc, "libero_panda")
    assert back.use_percentiles and not back.clip_outliers and back.mode("action", "x") == "mean_std"
