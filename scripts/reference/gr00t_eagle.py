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
from gr00t_golden import golden_weight, import_torchvision  # noqa: E402

EAGLE = "gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2"
IMAGE_TOKEN, IMAGE, TOKENS_PER_IMAGE = 300, 32, 4  # vlarl's tiny N1.6: 32 px, patch 8 -> 16 patches -> 2x2 merge
LENGTHS = (16, 13, 11)  # real tokens per row (8 of them image tokens); right padding with id 0 up to 16


def tiny_config(folder: Path) -> None:
    c = json.loads((folder / "config.json").read_text())
    c["text_config"].update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, vocab_size=320, max_position_embeddings=512)
    c["vision_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              patch_size=8, num_patches=16)
    c["image_token_index"] = IMAGE_TOKEN
    (folder / "config.json").write_text(json.dumps(c))


def build(folder: Path):
    import transformers  # noqa: F401  (before the peft placeholder: transformers probes peft's spec at import)
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    from transformers.modeling_utils import PreTrainedModel

    peft = types.ModuleType("peft")
    peft.LoraConfig, peft.get_peft_model = object, lambda *a, **k: None
    peft.__spec__ = importlib.machinery.ModuleSpec("peft", None)
    sys.modules["peft"] = peft
    cfg = AutoConfig.from_pretrained(str(folder), trust_remote_code=True)
    cls = get_class_from_dynamic_module("modeling_eagle3_vl.Eagle3_VLForConditionalGeneration", str(folder))
    cfg.text_config._attn_implementation = "flash_attention_2"  # what the release asserts at construction
    check, init = PreTrainedModel._check_and_enable_flash_attn_2, PreTrainedModel._initialize_weights
    PreTrainedModel._check_and_enable_flash_attn_2 = classmethod(lambda c, config, *a, **k: config)
    PreTrainedModel._initialize_weights = lambda self, module: None
    try:
        model = cls(cfg).eval()
    finally:
        PreTrainedModel._check_and_enable_flash_attn_2, PreTrainedModel._initialize_weights = check, init
    for c in (model.config.vision_config, model.vision_model.config, model.language_model.config):
        c._attn_implementation = "sdpa"
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(golden_weight("backbone.model." + name, tuple(p.shape)))
    return model


def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1606)
    b, length = len(LENGTHS), max(LENGTHS)
    ids = torch.zeros(b, length, dtype=torch.long)
    mask = torch.zeros(b, length, dtype=torch.long)
    for row, n in enumerate(LENGTHS):
        text = torch.randint(1, IMAGE_TOKEN, (n - 2 * TOKENS_PER_IMAGE,), generator=g)
        ids[row, :n] = torch.cat([text[:2], torch.full((2 * TOKENS_PER_IMAGE,), IMAGE_TOKEN), text[2:]])
        mask[row, :n] = 1
    pixels = torch.rand(b, 2, 3, IMAGE, IMAGE, generator=g) * 2 - 1  # normalised to [-1, 1] as the processor does
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels}


def features(model, x: dict[str, torch.Tensor], *, per_image: bool, grad: bool = False) -> torch.Tensor:
    images = [im[None] for im in x["pixel_values"].flatten(0, 1)]  # sample-major, camera-minor (upstream order)
    original = model.extract_feature
    if per_image:  # FA2's var-len packing keeps images apart: run upstream's extract_feature one image at a time
        model.extract_feature = lambda pv, flags=None: torch.cat([original([im]) for im in pv], dim=0)
    try:
        with torch.set_grad_enabled(grad):  # EagleBackbone.forward: hidden_states[-1] of the model's forward
            out = model(pixel_values=images, input_ids=x["input_ids"], attention_mask=x["attention_mask"],
                        output_hidden_states=True)
    finally:
        model.extract_feature = original
    return out["hidden_states"][-1]


def main() -> None:
    import_torchvision()
    ap = argparse.ArgumentParser()
    ap.add_argument("--n16", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "eagle3_tiny"
        shutil.copytree(args.n16 / EAGLE, folder)
        tiny_config(folder)
        model = build(folder)
        x = inputs()
        exact = features(model, x, per_image=True)
        packed = features(model, x, per_image=False)
    mask = x["attention_mask"].bool()
    data = {f"in_{k}": v.numpy() for k, v in x.items()}
    data.update(features=exact.numpy(), lengths=np.array(LENGTHS),
                param_names=np.array(sorted("backbone.model." + n for n, _ in model.named_parameters())),
                packing_error=np.array(float((packed - exact)[mask].abs().max())))
    np.savez_compressed(args.out / "eagle_n16.npz", **data)
    print({k: (v.shape, v.dtype) for k, v in data.items()}, "packing_error", float(data["packing_error"]))


if __name__ == "__main__":
    main()
