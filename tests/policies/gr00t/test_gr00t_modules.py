"""Building blocks: encodings by hand, per-embodiment layers loop vs vectorised, DiT masking invariances,
pixel shuffle, timestep buckets, image / prompt processing."""

from __future__ import annotations

import math

import pytest
import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.gr00t.action_head import (
    ActionHead,
    CategorySpecificLinear,
    DiT,
    sinusoidal_encoding,
    timestep_features,
)
from vlarl_cli.policies.gr00t.backbone import pixel_shuffle
from vlarl_cli.policies.gr00t.config import preset
from vlarl_cli.policies.gr00t.modeling import disable_dropout
from vlarl_cli.policies.gr00t.processing import (
    ByteTokenizer,
    build_prompt,
    load_tokenizer,
    preprocess_images_n15,
)


def test_timestep_features_by_hand() -> None:
    # diffusers Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1): [cos, sin] of t * 10000^(-k/127)
    t = torch.tensor([0.0, 500.0])
    f = timestep_features(t)
    assert f.shape == (2, 256)
    assert torch.equal(f[0, :128], torch.ones(128)) and torch.equal(f[0, 128:], torch.zeros(128))
    k = 5
    w = math.exp(-math.log(10000.0) * k / 127)
    assert f[1, k].item() == pytest.approx(math.cos(500 * w), abs=1e-4)
    assert f[1, 128 + k].item() == pytest.approx(math.sin(500 * w), abs=1e-4)
    assert f[1, 127].item() == pytest.approx(math.cos(500 * 1e-4), abs=1e-6)  # last frequency is 1/10000


def test_action_encoder_sinusoid_by_hand() -> None:
    enc = sinusoidal_encoding(torch.tensor([[3.0]]), 8)  # half = 4, w_k = 10000^(-k/4)
    expected = [math.sin(3 * 10000 ** (-k / 4)) for k in range(4)] + [math.cos(3 * 10000 ** (-k / 4)) for k in range(4)]
    assert enc[0, 0].tolist() == pytest.approx(expected, abs=1e-6)


def test_category_specific_linear_loop_vs_vectorised() -> None:
    torch.manual_seed(0)
    layer = CategorySpecificLinear(5, 3, 4)
    with torch.no_grad():
        layer.b.normal_()
    x = torch.randn(6, 2, 3)
    ids = torch.tensor([0, 4, 2, 2, 1, 3])
    out = layer(x, ids)
    loop = torch.stack([x[i] @ layer.W[ids[i]] + layer.b[ids[i]] for i in range(6)])
    torch.testing.assert_close(out, loop, rtol=0, atol=1e-6)


def test_timestep_buckets() -> None:
    head = ActionHead(preset("tiny"))
    # grid points as the sampler produces them (1 - tau in float32) land in int(t * 1000) buckets
    for k in (1, 3, 4, 5, 10):
        tau = torch.tensor([1.0 - i / k for i in range(k)], dtype=torch.float32)
        buckets = head.bucket(1.0 - tau)
        assert buckets.tolist() == [int(i / k * 1000 + 1e-9) for i in range(k)]


def _dit_inputs(cfg, b: int = 2, s: int = 7):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(b, 5, cfg.input_embedding_dim, generator=g)
    vl = torch.randn(b, s, cfg.backbone_embedding_dim, generator=g)
    ts = torch.tensor([0, 250])
    image = torch.zeros(b, s, dtype=torch.bool)
    image[:, :4] = True
    mask = torch.ones(b, s, dtype=torch.bool)
    mask[:, -1] = False  # padding
    return x, vl, ts, image, mask


def test_alternate_vl_dit_masks_are_respected() -> None:
    cfg = preset("tiny", "n1.6")
    torch.manual_seed(0)
    dit = DiT(cfg).eval()
    disable_dropout(dit)
    x, vl, ts, image, mask = _dit_inputs(cfg)
    out = dit(x, vl, ts, mask, image)
    # padding tokens (mask False) are never attended: changing them changes nothing
    vl2 = vl.clone()
    vl2[:, -1] += 100.0
    torch.testing.assert_close(dit(x, vl2, ts, mask, image), out, rtol=0, atol=0)
    # image tokens matter (block 2 attends them) and text tokens matter (block 0)
    vl3 = vl.clone()
    vl3[:, 0] += 1.0
    assert not torch.allclose(dit(x, vl3, ts, mask, image), out)
    vl4 = vl.clone()
    vl4[:, 5] += 1.0
    assert not torch.allclose(dit(x, vl4, ts, mask, image), out)


def test_single_block_attends_only_its_token_group() -> None:
    cfg = preset("tiny", "n1.6").replace(dit_num_layers=2)
    torch.manual_seed(0)
    dit = DiT(cfg).eval()
    x, vl, ts, image, mask = _dit_inputs(cfg)
    out = dit(x, vl, ts, mask, image)  # block 0 is the only cross block: text tokens only (0 % 4 == 0)
    vl2 = vl.clone()
    vl2[:, :4] = torch.randn_like(vl2[:, :4])  # image tokens
    torch.testing.assert_close(dit(x, vl2, ts, mask, image), out, rtol=0, atol=0)


def test_n15_dit_ignores_mask_like_upstream() -> None:
    cfg = preset("tiny")
    head = ActionHead(cfg).eval()
    disable_dropout(head)
    b = 2
    vl = torch.randn(b, 6, cfg.backbone_embedding_dim)
    state = torch.randn(b, 1, cfg.input_embedding_dim)
    ids = torch.tensor([31, 31])
    mask = torch.ones(b, 6, dtype=torch.bool)
    mask[:, -1] = False
    x = torch.randn(b, cfg.action_horizon, cfg.action_dim)
    t = torch.tensor([0.0, 0.5])
    v1, _ = head.velocity(x, t, vl, state, ids, mask)
    vl2 = vl.clone()
    vl2[:, -1] += 1.0
    v2, _ = head.velocity(x, t, vl2, state, ids, mask)
    assert not torch.allclose(v1, v2)  # N1.5 cross-attends every VL token, padded or not


def test_pixel_shuffle_loop_vs_vectorised() -> None:
    x = torch.randn(2, 4, 4, 3)
    y = pixel_shuffle(x, 0.5)
    assert y.shape == (2, 2, 2, 12)
    # each output cell gathers a 2x2 neighbourhood: out[n, i, j] = cat over (di, dj), di outer, of x[n, 2i+di, 2j+dj]
    for i in range(2):
        for j in range(2):
            expected = torch.cat([x[:, 2 * i + di, 2 * j + dj] for di in range(2) for dj in range(2)], dim=-1)
            torch.testing.assert_close(y[:, i, j], expected, rtol=0, atol=0)


def test_disable_dropout_counts_and_replaces() -> None:
    head = ActionHead(preset("tiny"))
    n = sum(isinstance(m, torch.nn.Dropout) for m in head.modules())
    assert n > 0 and disable_dropout(head) == n
    assert not any(isinstance(m, torch.nn.Dropout) for m in head.modules())


def test_preprocess_images() -> None:
    img = torch.full((2, 40, 40, 3), 255, dtype=torch.uint8)
    out = preprocess_images_n15(img, 16)
    assert out.shape == (2, 3, 16, 16)
    # white -> +1 after (x - 0.5) / 0.5, or one level below: upstream's (x * 255).to(uint8) truncates the
    # resampled 0.99999994 to 254
    assert ((out == 1.0) | (out == 254 / 127.5 - 1)).all()
    # the 95 % centre crop drops a 1-pixel border of a 40 px image: a black border disappears entirely
    img = torch.zeros(1, 40, 40, 3, dtype=torch.uint8)
    img[:, 1:39, 1:39] = 255
    assert preprocess_images_n15(img, 19).min() >= 254 / 127.5 - 1
    img[:, 2] = 0  # a black row inside the crop does show up
    assert preprocess_images_n15(img, 19).min() < 0.5
    with pytest.raises(ValueError, match="uint8"):
        preprocess_images_n15(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), 8)


def test_build_prompt_layout() -> None:
    tok = ByteTokenizer()
    ids, mask = build_prompt(tok, ["ab", "abcd", ""], num_images=2, tokens_per_image=3, length=10,
                             image_token_id=300, pad_id=0)
    assert ids.shape == (3, 10)
    assert ids[:, :6].eq(300).all() and mask[:, :6].eq(1).all()
    assert ids[0, 6:].tolist() == [ord("a") + 3, ord("b") + 3, 0, 0] and mask[0, 6:].tolist() == [1, 1, 0, 0]
    assert ids[1, 6:].tolist() == [ord(c) + 3 for c in "abcd"]
    assert mask[2, 6:].tolist() == [1, 0, 0, 0]  # empty text still has one attended position
    with pytest.raises(ConfigError, match="padded length 10"):  # never cut silently (RLinf's F.pad would)
        build_prompt(tok, ["abcde"], num_images=2, tokens_per_image=3, length=10, image_token_id=300, pad_id=0)
    assert tok.decode(tok.encode("pick up the bowl")) == "pick up the bowl"


def test_load_tokenizer_errors() -> None:
    assert isinstance(load_tokenizer(None, 320), ByteTokenizer)
    with pytest.raises(ConfigError, match="tokenizer_path"):
        load_tokenizer(None, 151680)
    with pytest.raises(ConfigError, match=r"tokenizer\.json, or vocab\.json \+ merges\.txt") as err:
        load_tokenizer("/nonexistent/folder", 151680)
    assert "Eagle-Block2A-2B-v2" in str(err.value) and "eagle2_hg_model" in str(err.value)


def test_qwen_tokenizer_from_vocab_merges_equals_its_tokenizer_json(tmp_path) -> None:
    """The vocab + merges build (what Isaac-GR00T ships) and a saved tokenizer.json tokenise alike; the
    added tokens keep the ids the files give them."""
    import json
    import shutil
    from pathlib import Path

    from vlarl_cli.policies.gr00t.tokenizer import QwenTokenizer

    src = Path(__file__).resolve().parents[2] / "fixtures" / "gr00t" / "tokenizer"
    tok = QwenTokenizer(src)
    added = json.loads((src / "added_tokens.json").read_text())
    assert all(tok.token_to_id(t) == i for t, i in added.items())
    other = tmp_path / "json"
    other.mkdir()
    tok._tok.save(str(other / "tokenizer.json"))
    shutil.copy(src / "vocab.json", other / "vocab.json")  # tokenizer.json wins when both exist
    via_json = QwenTokenizer(other)
    text = "<|im_start|>user\nPick up the BOWL, 2x!<image 1><img><IMG_CONTEXT></img>\n\n  café<|im_end|>"
    assert via_json.encode(text) == tok.encode(text)
    ids = tok.encode(text)
    assert ids[0] == added["<|im_start|>"] and added["<IMG_CONTEXT>"] in ids and ids[-1] == added["<|im_end|>"]


def test_formalize_language() -> None:
    from vlarl_cli.policies.gr00t.processing import formalize_language

    assert formalize_language("Pick up the BOWL, then stop!") == "pick up the bowl then stop"
    ids, _ = build_prompt(ByteTokenizer(), ["A.b"], num_images=1, tokens_per_image=1, length=4,
                          image_token_id=300, pad_id=0, formalize=True)
    assert ids[0, 1:].tolist() == [ord("a") + 3, ord("b") + 3, 0]


def test_eagle3_unshuffle_merge_loop() -> None:
    from vlarl_cli.policies.gr00t.backbone import merge_patches

    x = torch.randn(2, 16, 3)  # 4x4 patch grid, row-major
    y = merge_patches(x, "unshuffle")
    assert y.shape == (2, 4, 12)
    for i in range(2):
        for j in range(2):
            for c in range(3):
                for dy in range(2):
                    for dx in range(2):
                        src = x[:, (2 * i + dy) * 4 + (2 * j + dx), c]
                        assert torch.equal(y[:, i * 2 + j, c * 4 + 2 * dy + dx], src)
    # both kinds gather the same 2x2 neighbourhoods, only the channel order differs
    z = merge_patches(x, "eagle2")
    assert torch.equal(z.sort(dim=-1).values, y.sort(dim=-1).values)


def _chat_tokenizer():
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    from vlarl_cli.policies.gr00t.tokenizer import QwenTokenizer as FileTokenizer

    vocab = {"[UNK]": 0, "open": 5, "the": 6, "drawer": 7, "assistant": 8, "user": 9, "system": 10}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in
                            ("<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>")])
    wrapped = FileTokenizer.__new__(FileTokenizer)
    wrapped._tok = tok
    return wrapped, {t: tok.token_to_id(t) for t in ("<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>")}


def test_eagle_prompt_text_by_hand() -> None:
    from vlarl_cli.policies.gr00t.processing import eagle_prompt_text

    img = "<img>" + "<IMG_CONTEXT>" * 2 + "</img>"
    sys_turn = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"  # no "\n" before <|im_end|>
    # N1.5 (Eagle 2.5 chat template): images, instruction, assistant generation prompt
    assert eagle_prompt_text("open it", version="n1.5", num_images=2, tokens_per_image=2) == (
        f"{sys_turn}<|im_start|>user\n<image 1>{img}<image 2>{img}open it<|im_end|>\n<|im_start|>assistant\n")
    # N1.6 (Gr00tN1d6Processor): instruction first, then the images, no generation prompt
    assert eagle_prompt_text("open it", version="n1.6", num_images=2, tokens_per_image=2) == (
        f"{sys_turn}<|im_start|>user\nopen it<image 1>{img}<image 2>{img}<|im_end|>\n")


def test_eagle_chat_prompt_layout() -> None:
    tok, special = _chat_tokenizer()
    ctx = special["<IMG_CONTEXT>"]
    ids, mask = build_prompt(tok, ["open the drawer"], num_images=2, tokens_per_image=3, length=60,
                             image_token_id=ctx, pad_id=0, style="eagle_chat", version="n1.5")
    row = ids[0][mask[0].bool()].tolist()
    assert row[0] == special["<|im_start|>"] and row.count(ctx) == 6
    assert row[-6:] == [5, 6, 7, special["<|im_end|>"], special["<|im_start|>"], 8]
    assert mask[0, len(row):].eq(0).all() and ids[0, len(row):].eq(0).all()  # RLinf: right-padded with 0
    ids6, mask6 = build_prompt(tok, ["open the drawer"], num_images=2, tokens_per_image=3, length=60,
                               image_token_id=ctx, pad_id=0, style="eagle_chat", version="n1.6")
    row6 = ids6[0][mask6[0].bool()].tolist()
    i = row6.index(5)  # the instruction comes before the first image token in N1.6, after the last in N1.5
    assert row6[i: i + 3] == [5, 6, 7] and i < row6.index(ctx) and row.index(5) > len(row) - 1 - row[::-1].index(ctx)
    assert row6[-2:] == [special["</img>"], special["<|im_end|>"]]
    with pytest.raises(ConfigError, match="IMG_CONTEXT"):
        build_prompt(tok, ["x"], num_images=1, tokens_per_image=1, length=40, image_token_id=ctx + 1,
                     pad_id=0, style="eagle_chat")


def test_siglip_fallback_without_siglip2(monkeypatch) -> None:
    import vlarl_cli.policies.gr00t.backbone as bb

    monkeypatch.setattr(bb, "_has_siglip2", lambda: False)
    backbone = bb.EagleBackbone(preset("tiny", "n1.6"))
    assert type(backbone.eagle.vision_model).__name__ == "SiglipVisionModel"
    pixels = torch.zeros(1, 2, 3, 32, 32)
    cfg = preset("tiny", "n1.6")
    ids = torch.full((1, 2 * cfg.tokens_per_image + 2), cfg.image_token_id)
    ids[0, -2:] = 5
    assert backbone(pixels, ids, torch.ones_like(ids)).shape == (1, ids.shape[1], cfg.llm_hidden_size)


def test_area_resize_matches_opencv() -> None:
    """Our INTER_AREA against OpenCV itself: enlarging and integer shrinking are bit-exact (the same
    fixed-point / integer arithmetic); non-integer shrinking is float in both, at most one level apart."""
    cv2 = pytest.importorskip("cv2")
    import numpy as np

    from vlarl_cli.policies.gr00t.images import area_resize

    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (2, 96, 96, 3), dtype=np.uint8)
    img[:, 20:50] = img[:, 20:50] // 3  # some structure besides noise
    for size, exact in ((243, True), (256, True), (101, True), (48, True), (32, True), (70, False), (50, False)):
        ours = area_resize(torch.from_numpy(img), size, size).numpy()
        theirs = np.stack([cv2.resize(im, (size, size), interpolation=cv2.INTER_AREA) for im in img])
        diff = np.abs(ours.astype(int) - theirs.astype(int))
        assert diff.max() <= (0 if exact else 1), (size, diff.max())
