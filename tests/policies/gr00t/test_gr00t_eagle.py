"""vlarl's Eagle backbones against Isaac-GR00T's own Eagle modeling files on the same tiny weights.

``tests/fixtures/gr00t/eagle_n16.npz`` / ``eagle_n15.npz`` were recorded by ``scripts/reference/gr00t_eagle.py``
(run by ``scripts/reference/gr00t_golden.sh``): ``modeling_eagle3_vl.py`` + ``modeling_siglip2.py`` of n1.6.1-release
and ``modeling_eagle2_5_vl.py`` (transformers' SigLIP) of n1.5-release, under transformers 4.51.3, widths cut to
vlarl's ``tiny`` presets, every tensor ``golden_weight`` of the key a checkpoint stores (``backbone.model.*`` /
``backbone.eagle_model.*``), so vlarl's tensors are rebuilt through its checkpoint key map
(:func:`~vlarl_cli.policies.gr00t.checkpoint.to_upstream_key`). Input: three prompts of different lengths (N1.6:
16 / 13 / 11 real tokens with 8 image tokens; N1.5: 40 / 37 / 35 with 32), two 32 px cameras, right-padded with id
0, as RLinf pads; and the same prompts in RLinf's real layout (``lr_*``: left-padded to the batch's longest as
Isaac-GR00T's processor does, then right-padded). N1.5's import chain needed two more stand-ins, both for the unused RADIO tower:
``radio_model.py`` imports ``flash_attn`` and asks ``torch.cuda.get_device_capability()`` at import.

Upstream runs this with FlashAttention-2 only; the recording runs it with SDPA (no CPU flash_attn), which is
exact for what is compared here and not for the rest, both stated in the recorder:

* N1.6's SigLIP-2 packs all images of a batch into one sequence and relies on FA2's var-len kernel to keep them apart;
  under SDPA they attend to each other (measured: ``packing_error``, 1.6e-3 on features of magnitude 0.6), so
  the recorder runs upstream's ``extract_feature`` one image at a time, which is what FA2 computes;
* Qwen3 with right padding: real positions are exact under SDPA; pad positions are not (an SDPA pad query
  attends to the prompt, an FA2 one gets a zero attention output). vlarl reproduces FA2's pads
  (policies/pad_attention.py, checked against a reference computation in tests/policies/test_pad_attention.py),
  so here pads are asserted to DIFFER from the SDPA recording, and only real positions are compared.

Tolerance: measured error 0 (bit-identical) at every real position, both releases (pads differ by 0.11-0.18); ATOL 1e-6 (about 8 float32 ulps at the
features' magnitude 0.6, so a kernel that rounds differently does not fail CI).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from vlarl_cli.policies.gr00t.backbone import EagleBackbone
from vlarl_cli.policies.gr00t.checkpoint import to_upstream_key
from vlarl_cli.policies.gr00t.config import preset

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gr00t" / "eagle_n16.npz"  # N1.5: eagle_n15.npz
ATOL = 1e-6  # measured 0


def golden_weight(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Same seeded weights as scripts/reference/gr00t_golden.py."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    return torch.randn(shape, generator=g) * 0.1


@pytest.mark.parametrize("version", ["n1.5", "n1.6"])
def test_eagle_backbone_equals_isaac_gr00t_at_real_positions(version) -> None:
    with np.load(FIXTURE.parent / f"eagle_{version.replace('.', '')}.npz") as data:
        rec = {k: data[k] for k in data.files}
    backbone = EagleBackbone(preset("tiny", version)).eval()
    upstream = {to_upstream_key("backbone." + n, version): p for n, p in backbone.named_parameters()}
    assert sorted(upstream) == sorted(rec["param_names"].tolist())  # the key map covers every upstream tensor
    with torch.no_grad():
        for key, p in upstream.items():
            p.copy_(golden_weight(key, tuple(p.shape)))
        feats = backbone(torch.from_numpy(rec["in_pixel_values"]), torch.from_numpy(rec["in_input_ids"]),
                         torch.from_numpy(rec["in_attention_mask"]))
    real = torch.from_numpy(rec["in_attention_mask"]).bool()
    assert real.sum(1).tolist() == rec["lengths"].tolist() == ([16, 13, 11] if version == "n1.6" else [40, 37, 35])
    want = torch.from_numpy(rec["features"])
    torch.testing.assert_close(feats[real], want[real], atol=ATOL, rtol=0.0)
    # pads: FA2's semantics here, SDPA's in the recording -- a deliberate, stated difference
    per_pad = (feats[~real] - want[~real]).abs().amax(dim=-1)  # every pad position's feature vector moves
    assert float(per_pad.min()) > 1e-2, per_pad
    # RLinf's real layout: the processor's in-batch LEFT padding, then RLinf's right padding (lr_*): real positions
    # bit-identical too (measured 0; RoPE positions are arange(L) on both sides, as transformers' FA2 path)
    lr_ids, lr_mask = torch.from_numpy(rec["lr_input_ids"]), torch.from_numpy(rec["lr_attention_mask"])
    assert bool((lr_mask[:, 0] == 0).any()) and bool((lr_mask[:, -1] == 0).all())  # left pads exist, right pads too
    with torch.no_grad():
        lr = backbone(torch.from_numpy(rec["in_pixel_values"]), lr_ids, lr_mask)
    lr_real = lr_mask.bool()
    torch.testing.assert_close(lr[lr_real], torch.from_numpy(rec["lr_features"])[lr_real], atol=ATOL, rtol=0.0)
    if version == "n1.6":  # the recorder's per-image vision call matters: packed SDPA SigLIP-2 is far outside ATOL
        assert float(rec["packing_error"]) > 1e3 * ATOL
    else:  # N1.5's transformers SigLIP runs the images as a batch: nothing packed
        assert float(rec["packing_error"]) == 0.0

