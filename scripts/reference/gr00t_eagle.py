"""Record Isaac-GR00T n1.6's own Eagle 3 backbone (SigLIP-2 + pixel unshuffle + mlp1 + Qwen3) on tiny weights, run
with SDPA instead of FlashAttention-2 (run by gr00t_golden.sh in .reference/gr00t; never imports vlarl_cli).
Writes tests/fixtures/gr00t/eagle_n16.npz, compared by tests/policies/gr00t/test_gr00t_eagle.py.

What runs: ``modeling_eagle3_vl.py`` / ``modeling_siglip2.py`` / ``configuration_eagle3_vl.py`` of
``gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2`` (their config.json with every width cut to vlarl's ``tiny``
N1.6 preset), called as ``gr00t/model/modules/eagle_backbone.py`` ``EagleBackbone.forward`` calls it
(``hidden_states[-1]`` of the truncated LM). Weights: ``golden_weight("backbone.model." + name)``, i.e. by the
key an N1.6 checkpoint stores, so vlarl rebuilds them through its checkpoint key map.

How it is made to run without FlashAttention-2 (no CPU build exists), and what that changes:

* the release asserts FA2 in three places: transformers 4.51's ``PreTrainedModel.__init__`` refuses
  ``flash_attention_2`` without the ``flash_attn`` package (``_check_and_enable_flash_attn_2``, skipped while
  constructing), ``Eagle3_VLForConditionalGeneration.__init__`` sets FA2 on the vision config and asserts it on
  Qwen3's (kept for construction), and ``EagleBackbone.__init__`` asserts ``use_flash_attention`` (not
  constructed: the model is built directly from its config). After construction both configs are switched
  to ``sdpa``. Weight initialisation is skipped (``modeling_siglip2._init_weights`` names an undefined
  ``Siglip2Model``; every tensor is overwritten anyway), and ``peft`` (LoRA, off) is a placeholder.
* SigLIP-2: the release packs every image of the batch into ONE sequence and relies on FA2's var-len kernel
  (``flash_attention_forward_for_packing`` with ``seq_len_list``) to keep images apart. Under SDPA that list is
  ignored and every patch attends to every image in the batch (measured on these weights: packed vs
  one-image-at-a-time differ by ``packing_error``). To reproduce FA2's result, ``extract_feature`` is called
  once per image here (upstream's own code; only the call is split).
* Qwen3: with RLinf's right padding, a real token never attends to a later pad, so real positions are exact
  under SDPA; a pad query attends to the real tokens before it under SDPA but gets a zero attention output
  under FA2, so pad positions are NOT comparable here (vlarl reproduces FA2's pads: policies/pad_attention.py,
  tested against a reference computation in tests/policies/test_pad_attention.py).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import shutil
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gr00t_golden import golden_weight, import_torchvision

EAGLE = "gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2"
IMAGE_TOKEN, IMAGE = 300, 32
#: per release: Eagle folder, model class, checkpoint key prefix, vision cut, image tokens, real lengths
RELEASES = {
    "n1.6": dict(folder=EAGLE, cls="modeling_eagle3_vl.Eagle3_VLForConditionalGeneration", prefix="backbone.model.",
                 vision=dict(patch_size=8, num_patches=16), top={}, tokens=4, lengths=(16, 13, 11)),
    "n1.5": dict(folder="gr00t/model/backbone/eagle2_hg_model",
                 cls="modeling_eagle2_5_vl.Eagle2_5_VLForConditionalGeneration", prefix="backbone.eagle_model.",
                 vision=dict(patch_size=8, image_size=IMAGE), top=dict(force_image_size=IMAGE), tokens=16,
                 lengths=(40, 37, 35)),
}
TOKENS_PER_IMAGE = RELEASES["n1.6"]["tokens"]  # N1.6: 32 px, patch 8 -> 16 patches -> 2x2 merge (N1.5: no merge)
LENGTHS = RELEASES["n1.6"]["lengths"]  # real tokens per row (8 of them image tokens); right padding with id 0


def tiny_config(folder: Path, release: str = "n1.6") -> None:
    r = RELEASES[release]
    c = json.loads((folder / "config.json").read_text())
    c["text_config"].update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, vocab_size=320, max_position_embeddings=512)
    c["vision_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              **r["vision"])
    c.update(image_token_index=IMAGE_TOKEN, **r["top"])
    (folder / "config.json").write_text(json.dumps(c))


def placeholder(name: str, **attrs) -> None:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules[name] = mod


def build(folder: Path, release: str = "n1.6"):
    import transformers  # noqa: F401  (before the placeholders: transformers probes peft / flash_attn at import)
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    from transformers.modeling_utils import PreTrainedModel

    placeholder("peft", LoraConfig=object, get_peft_model=lambda *a, **k: None)  # LoRA is off
    if release == "n1.5":  # radio_model.py (RADIO tower, unused: the tower is SigLIP) imports flash_attn at module level
        unused = lambda *a, **k: None  # noqa: E731
        placeholder("flash_attn")
        placeholder("flash_attn.flash_attn_interface", flash_attn_unpadded_qkvpacked_func=unused)
        placeholder("flash_attn.bert_padding", pad_input=unused, unpad_input=unused)
    capability = torch.cuda.get_device_capability
    # radio_model.py asks the GPU's compute capability at import (CUDA only) before patching timm's ViT attention
    # with flash_attn for the RADIO tower; the tower here is SigLIP, so the answer only decides a warning
    torch.cuda.get_device_capability = lambda *a, **k: (7, 0)
    try:
        cfg = AutoConfig.from_pretrained(str(folder), trust_remote_code=True)
        cls = get_class_from_dynamic_module(RELEASES[release]["cls"], str(folder))
    finally:
        torch.cuda.get_device_capability = capability
    cfg.text_config._attn_implementation = "flash_attention_2"  # what the release asserts at construction
    check, init = PreTrainedModel._check_and_enable_flash_attn_2, PreTrainedModel._initialize_weights
    PreTrainedModel._check_and_enable_flash_attn_2 = classmethod(lambda c, config, *a, **k: config)
    PreTrainedModel._initialize_weights = lambda self, module: None
    try:
        model = cls(cfg).eval()
    finally:
        PreTrainedModel._check_and_enable_flash_attn_2, PreTrainedModel._initialize_weights = check, init
        for name in [m for m in sys.modules if m == "flash_attn" or m.startswith("flash_attn.")]:
            del sys.modules[name]
    for c in (model.config.vision_config, model.vision_model.config, model.language_model.config):
        c._attn_implementation = "sdpa"
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(golden_weight(RELEASES[release]["prefix"] + name, tuple(p.shape)))
    return model


def inputs(release: str = "n1.6") -> dict[str, torch.Tensor]:
    r = RELEASES[release]
    g = torch.Generator().manual_seed(1606 if release == "n1.6" else 1505)
    lengths, per_image = r["lengths"], r["tokens"]
    b, length = len(lengths), max(lengths)
    ids = torch.zeros(b, length, dtype=torch.long)
    mask = torch.zeros(b, length, dtype=torch.long)
    for row, n in enumerate(lengths):
        text = torch.randint(1, IMAGE_TOKEN, (n - 2 * per_image,), generator=g)
        ids[row, :n] = torch.cat([text[:2], torch.full((2 * per_image,), IMAGE_TOKEN), text[2:]])
        mask[row, :n] = 1
    pixels = torch.rand(b, 2, 3, IMAGE, IMAGE, generator=g) * 2 - 1  # normalised to [-1, 1] as the processor does
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels}


def left_then_right(x: dict[str, torch.Tensor], extra: int = 3, left_id: int = 5) -> dict[str, torch.Tensor]:
    """RLinf's real layout: Isaac-GR00T's processor left-pads each prompt to the batch's longest (with
    ``<|endoftext|>``; ``left_id`` stands in for it in the tiny vocabulary), then RLinf right-pads with 0 to
    ``padding_value`` (here ``extra`` more positions)."""
    ids, mask = x["input_ids"], x["attention_mask"]
    b, length = ids.shape
    out_ids = torch.zeros(b, length + extra, dtype=torch.long)
    out_mask = torch.zeros(b, length + extra, dtype=torch.long)
    for row in range(b):
        n = int(mask[row].sum())
        out_ids[row, : length - n] = left_id
        out_ids[row, length - n: length] = ids[row, :n]
        out_mask[row, length - n: length] = 1
    return {"input_ids": out_ids, "attention_mask": out_mask, "pixel_values": x["pixel_values"]}


def features(model, x: dict[str, torch.Tensor], *, per_image: bool, grad: bool = False,
             release: str = "n1.6") -> torch.Tensor:
    images = x["pixel_values"].flatten(0, 1)  # sample-major, camera-minor (upstream order)
    original = model.extract_feature
    if release == "n1.6":  # Eagle 3 takes a list of [1, 3, H, W] images and packs them into one sequence
        images = [im[None] for im in images]
        if per_image:  # FA2's var-len packing keeps images apart: upstream's extract_feature one image at a time
            model.extract_feature = lambda pv, flags=None: torch.cat([original([im]) for im in pv], dim=0)
    try:
        with torch.set_grad_enabled(grad):  # EagleBackbone.forward_eagle: hidden_states[select_layer] (= the last)
            out = model(pixel_values=images, input_ids=x["input_ids"], attention_mask=x["attention_mask"],
                        output_hidden_states=True)
    finally:
        model.extract_feature = original
    return out["hidden_states"][-1]


def record(src: Path, release: str) -> dict[str, np.ndarray]:
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / f"eagle_{release.replace('.', '')}_tiny"
        shutil.copytree(src / RELEASES[release]["folder"], folder)
        tiny_config(folder, release)
        model = build(folder, release)
        x = inputs(release)
        exact = features(model, x, per_image=True, release=release)
        packed = features(model, x, per_image=False, release=release)
        lr = left_then_right(x)
        exact_lr = features(model, lr, per_image=True, release=release)
    mask = x["attention_mask"].bool()
    data = {f"in_{k}": v.numpy() for k, v in x.items()}
    data.update(features=exact.numpy(), lengths=np.array(RELEASES[release]["lengths"]),
                param_names=np.array(sorted(RELEASES[release]["prefix"] + n for n, _ in model.named_parameters())),
                packing_error=np.array(float((packed - exact)[mask].abs().max())),
                lr_input_ids=lr["input_ids"].numpy(), lr_attention_mask=lr["attention_mask"].numpy(),
                lr_features=exact_lr.numpy())
    return data


def main() -> None:
    import_torchvision()
    ap = argparse.ArgumentParser()
    ap.add_argument("--n15", type=Path, required=True)
    ap.add_argument("--n16", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    for release, src in (("n1.6", args.n16), ("n1.5", args.n15)):
        data = record(src, release)
        np.savez_compressed(args.out / f"eagle_{release.replace('.', '')}.npz", **data)
        print(release, {k: (v.shape, v.dtype) for k, v in data.items()}, "packing_error", float(data["packing_error"]))


if __name__ == "__main__":
    main()
