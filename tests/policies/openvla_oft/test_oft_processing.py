"""OpenVLA-OFT processing: prompt + left padding, images, bin decoding, un-normalisation, gripper."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.gripper import gripper_to_env
from vlarl_cli.policies.openvla_oft.config import preset
from vlarl_cli.policies.openvla_oft.processing import (
    ActionStats,
    OftProcessor,
    PromptTokenizer,
    bin_centers,
    center_crop,
    openvla_prompt,
    pixel_values,
    resize_images,
    select_unnorm_key,
    tokens_to_normalized_actions,
    unnormalize_actions,
)


def test_prompt_matches_rlinf_format():
    assert openvla_prompt("Open The Drawer") == "In: What action should the robot take to open the drawer?\nOut: "


def test_tokenizer_left_pads_with_bos_first():
    tok = PromptTokenizer.byte(bos_id=2, pad_id=0)
    ids, mask = tok.encode(["a", "bb"], max_len=70)
    body_a = [b + 4 for b in openvla_prompt("a").encode()]
    body_b = [b + 4 for b in openvla_prompt("bb").encode()]
    assert ids[0, 0] == 2 and ids[1, 0] == 2 and bool(mask[:, 0].all())
    assert ids[0, 70 - len(body_a):].tolist() == body_a and ids[1, 70 - len(body_b):].tolist() == body_b
    assert int(mask[0].sum()) == 1 + len(body_a) and int(mask[1].sum()) == 1 + len(body_b)
    assert not bool(mask[0, 1: 70 - len(body_a)].any())
    assert (ids[0, 1: 70 - len(body_a)] == 0).all()
    assert ids[0, -1] == ord(" ") + 4  # the prompt ends with "Out: " right before the action block


def test_tokenizer_refuses_prompts_longer_than_max_len():
    tok = PromptTokenizer.byte()
    with pytest.raises(ConfigError, match="max_prompt_len=20"):
        tok.encode(["pick up the black bowl"], max_len=20)


def test_tokenizer_from_local_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<s>": 1, "In:": 2, "What": 3, "action": 4}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.save(str(tmp_path / "tokenizer.json"))
    tok = PromptTokenizer.from_path(tmp_path, bos_id=1, pad_id=0)
    assert tok.prompt_ids("x")[:4] == [1, 2, 3, 4]
    cfg = preset("tiny", tokenizer=str(tmp_path / "tokenizer.json"))
    from vlarl_cli.policies.openvla_oft.processing import make_tokenizer

    assert make_tokenizer(cfg).vocab_size == 5


def test_bin_decoding_hand_values():
    centers = bin_centers(256)
    assert centers.shape == (255,)
    assert centers[0].item() == pytest.approx(-1 + 1 / 255)  # midpoint of -1 and -1 + 2/255
    assert centers[-1].item() == pytest.approx(1 - 1 / 255)
    k = torch.tensor([0, 1, 2, 127, 128, 254, 255])
    got = tokens_to_normalized_actions(k, 256)
    # d = clip(255 - k, 0, 254): the two lowest ids share the top centre, the highest id is the lowest
    want = [centers[254], centers[254], centers[253], centers[128], centers[127], centers[1], centers[0]]
    assert torch.equal(got, torch.stack(want))
    # centre i = -1 + (2 i + 1) / 255: centre 127 is 0 (k = 128), centre 128 is 2 / 255 (k = 127)
    assert got[3].item() == pytest.approx(2 / 255) and abs(got[4].item()) < 1e-15


def test_unnormalize_and_gripper_hand_values(oft_stats):
    stats = ActionStats.from_dict("libero_10_no_noops", oft_stats["libero_10_no_noops"])
    a = torch.tensor([[-1.0, 1.0, 0.0, 0.5, -0.5, 1.0, 0.996]], dtype=torch.float64)
    x = unnormalize_actions(a, stats)
    eps = 1e-8  # 0.5 (a + 1) (q99 - q01 + eps) + q01 per dim; the gripper (mask False) passes through
    want = [-0.5, 1.0 * (1.2 + eps) - 0.4, 0.5 * (1.8 + eps) - 0.9,
            0.75 * (0.2 + eps) - 0.1, 0.25 * (0.4 + eps) - 0.2, 1.0 * (0.6 + eps) - 0.3, 0.996]
    assert torch.allclose(x, torch.tensor([want], dtype=torch.float64), atol=1e-12, rtol=0)
    g = torch.tensor([0.0, 0.004, 0.49, 0.5, 0.51, 0.996, 1.0])
    assert gripper_to_env("zero_one_to_sign", g).tolist() == [1.0, 1.0, 1.0, 0.0, -1.0, -1.0, -1.0]  # 1 = open -> -1


def test_processor_actions_to_env_end_to_end(oft_stats):
    cfg = preset("tiny", unnorm_key="libero_10_no_noops")
    stats = ActionStats.from_dict("libero_10_no_noops", oft_stats["libero_10_no_noops"])
    proc = OftProcessor(cfg, PromptTokenizer.byte(), stats)
    k = torch.zeros(1, 8, 7, dtype=torch.long)
    k[0, 0] = torch.tensor([0, 255, 0, 255, 0, 255, 0])  # gripper bin 0 -> +0.996 -> open -> -1
    k[0, 1, 6] = 255  # gripper -0.996 -> 2g - 1 < 0 -> close -> +1
    env = proc.actions_to_env(k)
    assert env.shape == (1, 8, 7) and env.dtype == torch.float32
    top, low = 1 - 1 / 255, -1 + 1 / 255
    q01 = torch.tensor([-0.5, -0.4, -0.9, -0.1, -0.2, -0.3])
    q99 = torch.tensor([0.5, 0.8, 0.9, 0.1, 0.2, 0.3])
    norm = torch.tensor([top, low, top, low, top, low])
    want = 0.5 * (norm + 1) * (q99 - q01 + 1e-8) + q01
    assert torch.allclose(env[0, 0, :6], want, atol=1e-6)
    assert env[0, 0, 6] == -1.0 and env[0, 1, 6] == 1.0
    none = OftProcessor(preset("tiny", gripper="none"), PromptTokenizer.byte(), None).actions_to_env(k)
    assert none[0, 0, 6].item() == pytest.approx(top)  # no statistics, no mapping: bin value as is


def test_select_unnorm_key_rules(oft_stats):
    STATS = oft_stats
    assert select_unnorm_key(STATS, "libero_10") == "libero_10_no_noops"  # RLinf's _no_noops fallback
    assert select_unnorm_key(STATS, "libero_90_no_noops") == "libero_90_no_noops"
    assert select_unnorm_key({"only": {}}, None) == "only"
    with pytest.raises(ConfigError, match="no unnorm_key"):
        select_unnorm_key(STATS, None)
    with pytest.raises(ConfigError, match='Did you mean "libero_10_no_noops"'):
        select_unnorm_key(STATS, "libero_10_no_noop")


def test_pixel_values_stack_dino_then_siglip_normalisation():
    img = torch.tensor([[[[0, 128, 255]]]], dtype=torch.uint8)  # [1, 1, 1, 3]
    px = pixel_values(img)
    assert px.shape == (1, 6, 1, 1)
    x = torch.tensor([0.0, 128 / 255, 1.0])
    dino = (x - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor([0.229, 0.224, 0.225])
    siglip = (x - 0.5) / 0.5
    assert torch.allclose(px[0, :, 0, 0], torch.cat([dino, siglip]), atol=1e-6)


def test_resize_and_center_crop():
    flat = torch.full((2, 40, 40, 3), 77, dtype=torch.uint8)
    assert torch.equal(resize_images(flat, 28), torch.full((2, 28, 28, 3), 77, dtype=torch.uint8))
    same = torch.randint(0, 256, (1, 28, 28, 3), dtype=torch.uint8)
    assert torch.equal(resize_images(same, 28), same)  # no-op at the right size
    assert torch.equal(center_crop(flat), flat)  # a constant image stays constant
    # a 1-px frame of 255 around zeros disappears after cropping sqrt(0.9) = 94.9% of each side
    framed = torch.zeros(1, 100, 100, 3, dtype=torch.uint8)
    framed[:, 0], framed[:, -1], framed[:, :, 0], framed[:, :, -1] = 255, 255, 255, 255
    assert int(center_crop(framed).max()) == 0
    with pytest.raises(ValueError, match="uint8"):
        resize_images(np.zeros((1, 4, 4, 3), dtype=np.int32), 4)


def test_prepare_outputs_and_errors():
    proc = OftProcessor(preset("tiny"), PromptTokenizer.byte(), None)
    obs = {keys.MAIN_IMAGES: torch.zeros(2, 64, 64, 3, dtype=torch.uint8), keys.TASK_DESCRIPTIONS: ["a", "b"]}
    out = proc.prepare(obs)
    assert out["images"].shape == (2, 28, 28, 3) and out["images"].dtype == torch.uint8
    assert out["tokens"].shape == out["token_mask"].shape == (2, 160)
    with pytest.raises(ValueError, match="task descriptions"):
        proc.prepare({**obs, keys.TASK_DESCRIPTIONS: ["a"]})
    with pytest.raises(KeyError, match="main_images"):
        proc.prepare({keys.TASK_DESCRIPTIONS: ["a"]})


@pytest.mark.parametrize("crop", [False, True])
def test_prepare_crops_only_when_asked(crop):
    proc = OftProcessor(preset("tiny", image_size=112, patch_size=14, center_crop=crop), PromptTokenizer.byte(), None)
    framed = torch.zeros(1, 112, 112, 3, dtype=torch.uint8)
    framed[:, :2], framed[:, -2:], framed[:, :, :2], framed[:, :, -2:] = 255, 255, 255, 255
    out = proc.prepare({keys.MAIN_IMAGES: framed, keys.TASK_DESCRIPTIONS: ["a"]})["images"]
    assert (int(out.max()) == 0) is crop  # the 2-px frame lies outside the central sqrt(0.9) crop
    if not crop:
        assert torch.equal(out, framed)  # already at the model size: untouched
