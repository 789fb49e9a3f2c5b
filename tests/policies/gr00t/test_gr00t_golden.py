"""Our GR00T inputs and action heads against golden data recorded from Isaac-GR00T itself.

``tests/fixtures/gr00t/golden.npz`` was produced by ``scripts/reference/gr00t_golden.sh`` (upstream code at
n1.5-release 4af2b622 / n1.6.1-release 5dc80c4a; see tests/fixtures/gr00t/README.md). Tolerances:

* prompt tokens: exact (same tokenizer files, same template, same text).
* pixels: the uint8 frames are bit-exact (we emulate OpenCV's fixed-point INTER_AREA enlargement and use
  the same float bilinear + truncation as torchvision / VideoToNumpy and PIL's bicubic); the normalised
  values then agree to float rounding (1e-6). The bound allowed is still one uint8 level, so that a BLAS /
  platform difference in torch's bilinear that flips one .5 rounding does not fail CI, but at most 0.1 %
  of the values may differ at all.
* action heads: fp32, atol 2e-5 / rtol 1e-4 on values of order 1 (different but equivalent operation
  order: fused SDPA vs diffusers' attention processor, our Euler step written as the flow interpolation).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from vlarl_cli.policies.flow_matching import FlowConfig, VelocityOutput, sample_flow
from vlarl_cli.policies.gr00t.action_head import ActionHead
from vlarl_cli.policies.gr00t.config import preset
from vlarl_cli.policies.gr00t.images import (
    n15_camera_uint8,
    n16_camera_uint8,
    preprocess_images_n15,
    preprocess_images_n16,
)
from vlarl_cli.policies.gr00t.processing import build_prompt
from vlarl_cli.policies.gr00t.tokenizer import QwenTokenizer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gr00t"
LEVEL = 2.0 / 255.0  # one uint8 level after (x / 255 - 0.5) / 0.5


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "golden.npz") as data:
        return {k: data[k] for k in data.files}


def golden_weight(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Same seeded weights as scripts/reference/gr00t_golden.py."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    return torch.randn(shape, generator=g) * 0.1


# ------------------------------------------------------------------------------------------ tokens
@pytest.mark.parametrize(("version", "tokens_per_image"), [("n1.5", 256), ("n1.6", 81)])
def test_prompt_tokens_equal_isaac_gr00t(golden, version, tokens_per_image) -> None:
    tok = QwenTokenizer(FIXTURES / "tokenizer")  # vocab.json + merges.txt + added tokens, no tokenizer.json
    assert not (FIXTURES / "tokenizer" / "tokenizer.json").exists()
    ctx = tok.token_to_id("<IMG_CONTEXT>")
    prefix = "n15" if version == "n1.5" else "n16"
    for i, task in enumerate(golden["tasks"]):
        want = golden[f"{prefix}_ids_{i}"].tolist()
        length = max(570, len(want))  # the cut tokenizer splits words finer than the real one (longer prompts)
        ids, mask = build_prompt(tok, [str(task)], num_images=2, tokens_per_image=tokens_per_image, length=length,
                                 image_token_id=ctx, pad_id=0, formalize=version == "n1.6", style="eagle_chat",
                                 version=version)
        got = ids[0][mask[0].bool()].tolist()
        assert got == want, (version, task)
        assert ids[0, len(want):].eq(0).all()  # RLinf's right padding with id 0 up to 570


def test_tokenizer_matches_upstream_batch_padding_rows(golden) -> None:
    # upstream left-pads inside a batch with <|endoftext|>; every row's real tokens are ours unchanged
    tok = QwenTokenizer(FIXTURES / "tokenizer")
    ids, mask = golden["n15_batch_ids"], golden["n15_batch_mask"]
    pad = tok.token_to_id("<|endoftext|>")
    for row in range(ids.shape[0]):
        real = ids[row][mask[row].astype(bool)].tolist()
        assert ids[row][~mask[row].astype(bool)].tolist() == [pad] * int((mask[row] == 0).sum())
        text = f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{golden['tasks'][row]}" \
               "<|im_end|>\n<|im_start|>assistant\n"
        assert tok.encode(text) == real


# ------------------------------------------------------------------------------------------ pixels
def _levels_close(ours: np.ndarray, theirs: np.ndarray, *, min_exact: float) -> None:
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    assert diff.max() <= 1, diff.max()
    assert (diff == 0).mean() >= min_exact, (diff == 0).mean()


def _upstream_pixels(frames_uint8: np.ndarray) -> np.ndarray:
    # the recorder asserted that the Eagle processors' pixel_values equal (x / 255 - 0.5) / 0.5 of these frames
    return (frames_uint8.transpose(0, 3, 1, 2).astype(np.float32) / 255.0 - 0.5) / 0.5


def test_n15_pixels_equal_isaac_gr00t(golden) -> None:
    frames = torch.from_numpy(golden["frames"])
    cam = n15_camera_uint8(frames, 224, 0.95).numpy()
    _levels_close(cam, golden["n15_camera_uint8"], min_exact=0.999)
    pixels = preprocess_images_n15(frames, 224, 0.95).numpy()
    want = _upstream_pixels(golden["n15_camera_uint8"])
    assert pixels.shape == want.shape == (2, 3, 224, 224)  # one 224 tile: 256 tokens
    assert np.abs(pixels - want).max() <= LEVEL + 1e-6


def test_n16_pixels_equal_isaac_gr00t(golden) -> None:
    frames = torch.from_numpy(golden["frames"])
    _levels_close(n16_camera_uint8(frames[:1], 256, 0.95).numpy(), golden["n16_camera_uint8"], min_exact=0.999)
    small = frames[1:, ::2, ::2].contiguous()  # a 128 px frame: INTER_AREA enlarges it to 256
    _levels_close(n16_camera_uint8(small, 256, 0.95).numpy(), golden["n16_camera_uint8_from128"], min_exact=0.999)
    pixels = preprocess_images_n16(frames, shortest_edge=256, crop_fraction=0.95, factor=28).numpy()
    want = _upstream_pixels(golden["n16_pixel_uint8"])
    assert pixels.shape == want.shape == (2, 3, 252, 252)  # 18 x 18 patches of 14 px -> 81 tokens
    assert np.abs(pixels - want).max() <= LEVEL + 1e-6


# ------------------------------------------------------------------------------------------ action heads
def _head(version: str) -> ActionHead:
    cfg = preset("tiny", version).replace(num_embodiments=2, use_attention_mask=version == "n1.6")
    head = ActionHead(cfg).eval()
    with torch.no_grad():
        for name, p in head.named_parameters():
            p.copy_(golden_weight(name, tuple(p.shape)))
    return head


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_action_head_equals_isaac_gr00t(golden, version) -> None:
    p = "n15" if version == "n1.5" else "n16"
    head = _head(version)
    assert sorted(n for n, _ in head.named_parameters()) == sorted(golden[f"{p}_param_names"].tolist())
    vl_in = torch.from_numpy(golden[f"{p}_in_vl"])
    emb = torch.from_numpy(golden[f"{p}_in_embodiment_id"]).long()
    state = torch.from_numpy(golden[f"{p}_in_state"])[:, 0]
    x_t = torch.from_numpy(golden[f"{p}_in_x_t"])
    if version == "n1.6":
        image_mask = torch.from_numpy(golden["n16_in_image_mask"])
        vl_mask = torch.from_numpy(golden["n16_in_attention_mask"])
    else:
        image_mask = vl_mask = None
    tol = {"rtol": 1e-4, "atol": 2e-5}
    with torch.no_grad():
        vl = head.process_vl(vl_in)
        torch.testing.assert_close(vl, torch.from_numpy(golden[f"{p}_vl_processed"]), **tol)
        sf = head.encode_state(state, emb)
        for k in range(4):  # the K = 4 grid points t = k / 4 (buckets 0, 250, 500, 750)
            v, _ = head.velocity(x_t, torch.full((3,), k / 4), vl, sf, emb, vl_mask, image_mask)
            torch.testing.assert_close(v, torch.from_numpy(golden[f"{p}_velocity"][:, k]), **tol)

        def fn(x: torch.Tensor, t: torch.Tensor) -> VelocityOutput:
            return VelocityOutput(velocity=head.velocity(x, t, vl, sf, emb, vl_mask, image_mask)[0])

        noise = torch.from_numpy(golden[f"{p}_in_noise"])
        out = sample_flow(fn, noise, FlowConfig(num_steps=4, method="ode", noise_at=0.0), deterministic=True)
    torch.testing.assert_close(out.actions, torch.from_numpy(golden[f"{p}_actions_k4"]), **tol)
