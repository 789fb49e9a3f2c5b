"""Observation processing and action post-processing for pi0 on LIBERO."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.normalization import Normalizer, NormStats
from vlarl_cli.policies.pi0.config import preset
from vlarl_cli.policies.pi0.processing import Pi0Processor, resize_with_pad, to_model_images
from vlarl_cli.policies.tokenization import ByteTokenizer


def test_resize_with_pad_keeps_aspect_and_centres():
    img = np.full((1, 20, 40, 3), 200, dtype=np.uint8)  # wide image -> 16 x 32 inside 32 x 32, 8 rows pad
    out = resize_with_pad(img, 32, 32)
    assert out.shape == (1, 32, 32, 3) and out.dtype == torch.uint8
    assert torch.all(out[0, :8] == 0) and torch.all(out[0, 24:] == 0)
    assert torch.all(out[0, 8:24] == 200)
    same = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    assert torch.equal(resize_with_pad(same, 32, 32), torch.from_numpy(same))  # no-op at the right size
    with pytest.raises(ValueError, match="uint8"):
        resize_with_pad(np.zeros((1, 4, 4, 3), dtype=np.int32), 2, 2)


def test_model_images_scale_to_minus_one_one():
    img = torch.tensor([0, 255, 51], dtype=torch.uint8).view(1, 1, 1, 1, 3)
    out = to_model_images(img)
    assert out.shape == (1, 1, 3, 1, 1)
    assert torch.allclose(out.flatten(), torch.tensor([-1.0, 1.0, 51 / 255 * 2 - 1]))


def _processor(**overrides) -> Pi0Processor:
    cfg = preset("tiny", **overrides)
    f64 = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    stats = {"state": NormStats(mean=f64(*range(8)), std=f64(*[2.0] * 8)),
             "actions": NormStats(mean=f64(*[1.0] * 7), std=f64(*[0.5] * 7))}
    return Pi0Processor(cfg, ByteTokenizer(), Normalizer(stats, "mean_std"))


def test_prepare_builds_padded_normalised_inputs():
    proc = _processor()
    obs = {keys.MAIN_IMAGES: torch.zeros(2, 64, 64, 3, dtype=torch.uint8), keys.WRIST_IMAGES: None,
           keys.STATES: torch.arange(16, dtype=torch.float32).view(2, 8),
           keys.TASK_DESCRIPTIONS: ["ab", "c"]}
    inp = proc.prepare(obs)
    assert inp["images"].shape == (2, 2, 32, 32, 3)
    assert inp["image_masks"].tolist() == [[True, False], [True, False]]  # missing wrist camera
    assert inp["state"].shape == (2, 32) and torch.equal(inp["state"][:, 8:], torch.zeros(2, 24))
    assert torch.allclose(inp["state"][0, :8], (torch.arange(8.0) - torch.arange(8.0)) / 2)
    assert torch.allclose(inp["state"][1, :8], (torch.arange(8.0, 16.0) - torch.arange(8.0)) / 2)
    assert inp["token_mask"].sum(1).tolist() == [4, 3]
    with pytest.raises(ValueError, match="task descriptions"):
        proc.prepare({**obs, keys.TASK_DESCRIPTIONS: ["only one"]})


def test_actions_to_env_unnormalises_cuts_and_maps_gripper():
    chunk = torch.zeros(2, 8, 32)
    chunk[..., 6] = torch.tensor([-3.0, 3.0]).view(2, 1)  # gripper dim in model space
    raw_state = torch.ones(2, 8)
    out = _processor(num_action_chunks=3).actions_to_env(chunk, raw_state)
    assert out.shape == (2, 3, 7)
    assert torch.allclose(out[..., :6], torch.ones(2, 3, 6))  # 0 * 0.5 + 1
    assert torch.allclose(out[0, :, 6], torch.full((3,), -0.5)) and torch.allclose(out[1, :, 6], torch.full((3,), 2.5))
    delta = _processor(num_action_chunks=3, extra_delta_transform=True).actions_to_env(chunk, raw_state * 2)
    assert torch.allclose(delta[..., :6], torch.full((2, 3, 6), 3.0))  # + state[:6]
    assert torch.equal(delta[..., 6], out[..., 6])  # gripper stays absolute
    binar = _processor(gripper="binarize").actions_to_env(chunk, raw_state)
    assert binar[0, 0, 6] == -1.0 and binar[1, 0, 6] == 1.0
    from01 = _processor(gripper="from_01").actions_to_env(chunk, raw_state)
    assert from01[0, 0, 6] == 1.0 and from01[1, 0, 6] == -1.0  # -sign(2g - 1): -0.5 -> +1, 2.5 -> -1


def test_rotated_numpy_views_are_accepted():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (2, 48, 48, 3), dtype=np.uint8)
    rotated = img[:, ::-1, ::-1]  # how envs rotate LIBERO frames by 180 degrees
    out = resize_with_pad(rotated, 32, 32)
    assert torch.equal(out, resize_with_pad(np.ascontiguousarray(rotated), 32, 32))


def test_pi05_discrete_state_prompt_depends_on_state():
    cfg = preset("tiny", "pi05", discrete_state_input=True, max_token_len=96)
    proc = Pi0Processor(cfg, ByteTokenizer(), Normalizer(None, "identity"))
    obs = {keys.MAIN_IMAGES: torch.zeros(2, 32, 32, 3, dtype=torch.uint8), keys.WRIST_IMAGES: None,
           keys.STATES: torch.tensor([[0.0] * 8, [0.5] * 8]), keys.TASK_DESCRIPTIONS: ["go", "go"]}
    inp = proc.prepare(obs)
    assert not torch.equal(inp["tokens"][0], inp["tokens"][1])
    text = ByteTokenizer().decode(inp["tokens"][1][inp["token_mask"][1]].tolist()[1:])
    assert text == "Task: go, State: " + " ".join(["192"] * 8) + ";\nAction: "
    with pytest.raises(ConfigError, match=r"pi0\.5 option"):
        preset("tiny", "pi0", discrete_state_input=True)


def test_state_obs_mode_masks_every_camera_and_needs_the_privileged_state():
    """``obs_mode: state``: no image is read (every slot zeros and masked, so the model skips them all), the
    14-d state is normalised like any other, and an 8-d (image-mode) state is refused, not cut."""
    from vlarl_cli.policies.pi0.policy import Pi0Policy

    cfg = preset("tiny", obs_mode="state", state_env_dim=14)
    f64 = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    stats = {"state": NormStats(mean=f64(*[1.0] * 14), std=f64(*[2.0] * 14)),
             "actions": NormStats(mean=f64(*[0.0] * 7), std=f64(*[1.0] * 7))}
    proc = Pi0Processor(cfg, ByteTokenizer(), Normalizer(stats, "mean_std"))
    obs = {keys.STATES: torch.full((2, 14), 5.0), keys.TASK_DESCRIPTIONS: ["ab", "c"]}
    inp = proc.prepare(obs)
    assert inp["images"].shape == (2, 2, 32, 32, 3) and not inp["images"].any()
    assert not inp["image_masks"].any()
    assert torch.allclose(inp["state"][:, :14], torch.full((2, 14), 2.0)) and not inp["state"][:, 14:].any()
    with pytest.raises(ConfigError, match="14"):
        proc.prepare({**obs, keys.STATES: torch.zeros(2, 8)})
    policy = Pi0Policy(cfg, norm_stats=stats)
    assert policy.cameras == () and policy.obs_mode == "state"
    torch.manual_seed(0)
    out = policy.sample(obs, deterministic=True)
    assert out.actions.shape == (2, cfg.num_action_chunks, 7) and torch.isfinite(out.actions).all()
    with pytest.raises(ConfigError, match="obs_mode"):
        preset("tiny", obs_mode="pixels")
