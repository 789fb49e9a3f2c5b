"""Record GR00T golden data by running Isaac-GR00T's own code (see gr00t_golden.sh for the environment).

Run outside the project (never imports vlarl_cli). Upstream modules are loaded from the two source trees
file by file under their own dotted names, with empty parent packages, because the packages' __init__
chains import training-only dependencies. What runs is upstream's code:

* tokens: the Eagle 2.5 (N1.5) / Eagle 3 (N1.6) ``AutoProcessor`` (their processing_*.py via
  trust_remote_code, their chat_template.json), on a tiny tokenizer cut from their own vocab.json /
  merges.txt (first 256 + N_MERGES ids; merge j creates id 256 + j, so the kept ids equal the real ones;
  added tokens renumbered after them). The conversation glue (message list, add_generation_prompt,
  padding_side, formalize_language) is re-typed from ``GR00TTransform._apply_vlm_processing`` (N1.5) and
  ``Gr00tN1d6Processor._apply_vlm_processing`` / ``__call__`` (N1.6): a few lines each.
* pixels: N1.5 ``gr00t/data/transform/video.py`` VideoToTensor / VideoCrop / VideoResize / VideoToNumpy in
  eval mode with RLinf's LiberoFrankaDataConfig settings, then the Eagle 2.5 processor; N1.6
  ``build_image_transformations_albumentations`` eval transform (shortest edge 256, crop 0.95), then the
  Eagle 3 processor (its process_vision_info / smart_resize and image processor).
* action heads: N1.5 ``FlowmatchingActionHead``, N1.6 ``Gr00tN1d6ActionHead`` on tiny configs whose every
  parameter is overwritten by ``golden_weight(name, shape)`` (seeded per name), so the test can rebuild the
  same weights without committing them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import types
import zlib
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no network: albumentations checks PyPI on import

TASKS = [
    "pick up the black bowl between the plate and the ramekin and place it on the plate",
    "open the top drawer and put the bowl inside",
    "Put both the alphabet soup and the tomato sauce in the basket.",
    "turn on the stove",
    "put the cream cheese in the bowl, then   close it!",
]
N_MERGES = 3000
EAGLE_DIRS = {"n1.5": "gr00t/model/backbone/eagle2_hg_model",
              "n1.6": "gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2"}
TOKENIZER_FILES = ("vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json", "special_tokens_map.json")


def golden_weight(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Deterministic weights per parameter name (same function in tests/policies/gr00t/test_gr00t_golden.py)."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    return torch.randn(shape, generator=g) * 0.1


def load(name: str, path: Path) -> types.ModuleType:
    """Import ``path`` as module ``name``, creating empty parent packages."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            mod = types.ModuleType(pkg)
            mod.__path__ = []
            sys.modules[pkg] = mod
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------ tokenizer
def tiny_tokenizer(src: Path, out: Path) -> None:
    vocab = json.loads((src / "vocab.json").read_text(encoding="utf-8"))
    lines = (src / "merges.txt").read_text(encoding="utf-8").splitlines()
    header, merges = lines[0], lines[1: 1 + N_MERGES]
    keep = 256 + N_MERGES
    small = {t: i for t, i in vocab.items() if i < keep}
    assert len(small) == keep
    for j, line in enumerate(merges):  # merge j makes id 256 + j: the cut vocabulary is self-consistent
        a, b = line.split(" ")
        assert small[a + b] == 256 + j, line
    added = json.loads((src / "added_tokens.json").read_text())
    renumber = {tok: keep + k for k, (tok, _) in enumerate(sorted(added.items(), key=lambda kv: kv[1]))}
    config = json.loads((src / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {str(renumber[v["content"]]): v for v in config["added_tokens_decoder"].values()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_text(json.dumps(small, ensure_ascii=False), encoding="utf-8")
    (out / "merges.txt").write_text("\n".join([header, *merges]) + "\n", encoding="utf-8")
    (out / "added_tokens.json").write_text(json.dumps(renumber, indent=1, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False))
    shutil.copy(src / "special_tokens_map.json", out / "special_tokens_map.json")


def eagle_processor(src: Path, version: str, tok_dir: Path, work: Path):
    from transformers import AutoProcessor

    folder = work / f"eagle_{version}"
    shutil.copytree(src / EAGLE_DIRS[version], folder)
    for f in TOKENIZER_FILES:
        shutil.copy(tok_dir / f, folder / f)
    kwargs = {"trust_remote_code": True, "use_fast": True} if version == "n1.5" else {"trust_remote_code": True}
    proc = AutoProcessor.from_pretrained(str(folder), **kwargs)
    proc.tokenizer.padding_side = "left"  # both releases set it
    return proc


def frames() -> np.ndarray:
    """LIBERO-like uint8 frames [N, 256, 256, 3]: smooth gradients + a few blocks + noise, seeded."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:256, 0:256].astype(np.float32)
    out = []
    for k in range(2):
        base = np.stack([(xx * (0.6 + 0.1 * k) + 30 * k) % 256, (yy * 0.8 + 50) % 256,
                         ((xx + yy) * 0.4 + 70 * k) % 256], -1)
        for _ in range(6):
            y0, x0 = rng.integers(0, 200, 2)
            base[y0: y0 + rng.integers(10, 56), x0: x0 + rng.integers(10, 56)] = rng.integers(0, 256, 3)
        base += rng.normal(0, 6, base.shape)
        out.append(np.clip(base, 0, 255).astype(np.uint8))
    return np.stack(out)


# ------------------------------------------------------------------------------------------ N1.5
def n15_inputs(src: Path, proc, imgs: np.ndarray) -> dict[str, np.ndarray]:
    from PIL import Image

    load("gr00t.data.embodiment_tags", src / "gr00t/data/embodiment_tags.py")
    load("gr00t.data.schema", src / "gr00t/data/schema.py")
    load("gr00t.data.transform.base", src / "gr00t/data/transform/base.py")
    video = load("gr00t.data.transform.video", src / "gr00t/data/transform/video.py")
    keys = ["video.image"]
    crop = video.VideoCrop(apply_to=keys, scale=0.95)
    crop._original_resolutions = {"video.image": (imgs.shape[2], imgs.shape[1])}
    resize = video.VideoResize(apply_to=keys, height=224, width=224, interpolation="linear")
    jitter = video.VideoColorJitter(apply_to=keys, brightness=0.3, contrast=0.4, saturation=0.5, hue=0.08)
    assert jitter.get_transform(mode="eval") is None  # no colour jitter at evaluation
    x = video.VideoToTensor.to_tensor(imgs)
    x = resize.get_transform(mode="eval")(crop.get_transform(mode="eval")(x))
    cam = video.VideoToNumpy.to_numpy(x)  # [N, 224, 224, 3] uint8
    out = {"n15_camera_uint8": cam}
    pixels, ids_rows = [], []
    for task in TASKS:
        pair = [Image.fromarray(cam[0]), Image.fromarray(cam[1])]
        conv = [{"role": "user", "content": [*({"type": "image", "image": im} for im in pair),
                                             {"type": "text", "text": task}]}]
        text = proc.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        images, _ = proc.process_vision_info(conv)
        enc = proc(text=[text], images=images, return_tensors="pt", padding=True)
        ids_rows.append(enc["input_ids"][0].numpy())
        pixels.append(enc["pixel_values"].numpy())
    # the processor's pixels are exactly (camera / 255 - 0.5) / 0.5: store the uint8 frames only (small file)
    for pv in pixels:
        want = (cam.transpose(0, 3, 1, 2).astype(np.float32) / 255.0 - 0.5) / 0.5
        assert np.abs(pv - want).max() < 1e-6, np.abs(pv - want).max()
    for i, row in enumerate(ids_rows):
        out[f"n15_ids_{i}"] = row
    # one padded batch as upstream collates it (left padding inside the batch)
    conv = [[{"role": "user", "content": [{"type": "text", "text": t}]}] for t in TASKS[:2]]
    texts = [proc.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conv]
    batch = proc(text=texts, return_tensors="pt", padding=True)
    out["n15_batch_ids"], out["n15_batch_mask"] = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    return out


# ------------------------------------------------------------------------------------------ N1.6
def n16_inputs(src: Path, proc, imgs: np.ndarray) -> dict[str, np.ndarray]:
    import re

    from PIL import Image

    aug = load("gr00t.model.gr00t_n1d6.image_augmentations", src / "gr00t/model/gr00t_n1d6/image_augmentations.py")
    _, eval_tf = aug.build_image_transformations_albumentations(None, None, None, None, 256, 0.95)
    cams = np.stack([eval_tf(image=im)["image"] for im in imgs])  # [N, 256, 256, 3] uint8
    small = eval_tf(image=imgs[1, ::2, ::2].copy())["image"][None]  # a 128 px input, enlarged by INTER_AREA
    out = {"n16_camera_uint8": cams[:1], "n16_camera_uint8_from128": small}
    for i, task in enumerate(TASKS):
        language = re.sub(r"[^\w\s]", "", task.lower())  # formalize_language (processor default True)
        pair = [Image.fromarray(cams[0]), Image.fromarray(cams[1])]
        conv = [{"role": "user", "content": [{"type": "text", "text": language},
                                             *({"type": "image", "image": im} for im in pair)]}]
        text = proc.apply_chat_template(conv, tokenize=False, add_generation_prompt=False)
        images, _ = proc.process_vision_info([conv])
        enc = proc(text=[text], images=images, return_tensors="pt", padding=True)
        out[f"n16_ids_{i}"] = enc["input_ids"][0].numpy()
        if i == 0:
            pv = enc["pixel_values"]
            pv = (torch.stack(list(pv)) if isinstance(pv, list) else pv).numpy().reshape(2, 3, 252, 252)
            codes = np.round((pv * 0.5 + 0.5) * 255.0)  # stored as the uint8 frames the Eagle 3 processor saw
            assert np.abs((codes / 255.0 - 0.5) / 0.5 - pv).max() < 1e-6
            out["n16_pixel_uint8"] = codes.astype(np.uint8).transpose(0, 2, 3, 1)  # [2, 252, 252, 3]
    return out


# ------------------------------------------------------------------------------------------ action heads
N15_HEAD = dict(action_dim=32, action_horizon=16, add_pos_embed=True, backbone_embedding_dim=64, hidden_size=32,
                input_embedding_dim=48, max_action_dim=32, max_state_dim=64, model_dtype="float32",
                num_target_vision_tokens=4, tune_diffusion_model=True, tune_projector=True, use_vlln=True,
                max_num_embodiments=2, max_seq_len=64, num_inference_timesteps=4, num_timestep_buckets=1000,
                noise_beta_alpha=1.5, noise_beta_beta=1.0, noise_s=0.999,
                diffusion_model_cfg=dict(attention_head_dim=12, cross_attention_dim=64, dropout=0.2,
                                         final_dropout=True, interleave_self_attention=True, norm_type="ada_norm",
                                         num_attention_heads=4, num_layers=4, output_dim=32,
                                         positional_embeddings=None),
                vl_self_attention_cfg=dict(attention_head_dim=16, dropout=0.2, final_dropout=True,
                                           num_attention_heads=4, num_layers=2, positional_embeddings=None))


def seeded(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(golden_weight(name, tuple(p.shape)))
    return {k: v.clone() for k, v in module.state_dict().items()}


def head_case(seed: int, b: int, s: int, vl_dim: int, state_dim: int, act: tuple[int, int]) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"vl": torch.randn(b, s, vl_dim, generator=g), "state": torch.randn(b, 1, state_dim, generator=g),
            "x_t": torch.randn(b, *act, generator=g), "noise": torch.randn(b, *act, generator=g),
            "embodiment_id": torch.tensor([1, 0, 1][:b])}


def n15_head(src: Path) -> dict[str, np.ndarray]:
    from transformers.feature_extraction_utils import BatchFeature

    load("gr00t.model.action_head.action_encoder", src / "gr00t/model/action_head/action_encoder.py")
    load("gr00t.model.action_head.cross_attention_dit", src / "gr00t/model/action_head/cross_attention_dit.py")
    fm = load("gr00t.model.action_head.flow_matching_action_head",
              src / "gr00t/model/action_head/flow_matching_action_head.py")
    head = fm.FlowmatchingActionHead(fm.FlowmatchingActionHeadConfig(**N15_HEAD)).eval()
    seeded(head)
    c = head_case(15, 3, 10, 64, 64, (16, 32))
    out = {f"n15_in_{k}": v.numpy() for k, v in c.items()}
    out["n15_param_names"] = np.array(sorted(n for n, _ in head.named_parameters()))
    with torch.no_grad():
        bo = head.process_backbone_output(BatchFeature(data={"backbone_features": c["vl"]}))
        vl = bo.backbone_features
        state_features = head.state_encoder(c["state"], c["embodiment_id"])
        out["n15_vl_processed"] = vl.numpy()
        vels = []
        for _k, t_cont in enumerate([0.0, 0.25, 0.5, 0.75]):  # the four K=4 grid points
            ts = torch.full((3,), int(t_cont * head.num_timestep_buckets))
            af = head.action_encoder(c["x_t"], ts, c["embodiment_id"])
            af = af + head.position_embedding(torch.arange(af.shape[1])).unsqueeze(0)
            fut = head.future_tokens.weight.unsqueeze(0).expand(3, -1, -1)
            mo = head.model(hidden_states=torch.cat((state_features, fut, af), 1), encoder_hidden_states=vl,
                            timestep=ts)
            vels.append(head.action_decoder(mo, c["embodiment_id"])[:, -16:].numpy())
        out["n15_velocity"] = np.stack(vels, 1)  # [B, 4, H, A] at the same x_t
        real_randn = torch.randn
        torch.randn = lambda *a, **k: c["noise"].clone()  # fixed initial noise for get_action
        try:
            act = head.get_action(BatchFeature(data={"backbone_features": c["vl"]}),
                                  BatchFeature(data={"state": c["state"], "embodiment_id": c["embodiment_id"]}))
        finally:
            torch.randn = real_randn
        out["n15_actions_k4"] = act["action_pred"].numpy()
    return out


N16_CFG = dict(backbone_embedding_dim=64, max_state_dim=128, max_action_dim=128, action_horizon=16, hidden_size=32,
               input_embedding_dim=48, add_pos_embed=True, attn_dropout=0.2, use_vlln=True, max_seq_len=64,
               use_alternate_vl_dit=True, attend_text_every_n_blocks=2, num_inference_timesteps=4,
               num_timestep_buckets=1000, max_num_embodiments=2, state_dropout_prob=0.0,
               diffusion_model_cfg=dict(positional_embeddings=None, num_layers=4, num_attention_heads=4,
                                        attention_head_dim=12, norm_type="ada_norm", dropout=0.2, final_dropout=True,
                                        output_dim=32, interleave_self_attention=True))


def n16_head(src: Path) -> dict[str, np.ndarray]:
    from transformers.feature_extraction_utils import BatchFeature

    models_pkg = types.ModuleType("gr00t.configs.model")
    models_pkg.__path__ = []
    models_pkg.register_model_config = lambda *a, **k: None
    sys.modules.setdefault("gr00t", types.ModuleType("gr00t")).__path__ = []
    sys.modules.setdefault("gr00t.configs", types.ModuleType("gr00t.configs")).__path__ = []
    sys.modules["gr00t.configs.model"] = models_pkg
    cfg_mod = load("gr00t.configs.model.gr00t_n1d6", src / "gr00t/configs/model/gr00t_n1d6.py")
    load("gr00t.model.modules.dit", src / "gr00t/model/modules/dit.py")
    load("gr00t.model.modules.eagle_backbone", src / "gr00t/model/modules/eagle_backbone.py")
    load("gr00t.model.modules.embodiment_conditioned_mlp", src / "gr00t/model/modules/embodiment_conditioned_mlp.py")
    n16 = load("gr00t.model.gr00t_n1d6.gr00t_n1d6", src / "gr00t/model/gr00t_n1d6/gr00t_n1d6.py")
    head = n16.Gr00tN1d6ActionHead(cfg_mod.Gr00tN1d6Config(**N16_CFG)).eval()
    seeded(head)
    c = head_case(16, 3, 12, 64, 128, (16, 128))
    image_mask = torch.zeros(3, 12, dtype=torch.bool)
    image_mask[:, 2:8] = True
    attn = torch.ones(3, 12, dtype=torch.bool)
    attn[0, 10:] = False  # padding at the end of row 0
    out = {f"n16_in_{k}": v.numpy() for k, v in c.items()}
    out["n16_param_names"] = np.array(sorted(n for n, _ in head.named_parameters()))
    out["n16_in_image_mask"], out["n16_in_attention_mask"] = image_mask.numpy(), attn.numpy()
    bo = lambda: BatchFeature(data={"backbone_features": c["vl"].clone(), "image_mask": image_mask,  # noqa: E731
                                    "backbone_attention_mask": attn})
    with torch.no_grad():
        feats = head._encode_features(bo(), BatchFeature(data={"state": c["state"], "embodiment_id": c["embodiment_id"]}))
        vl, sf = feats.backbone_features, feats.state_features
        out["n16_vl_processed"] = vl.numpy()
        vels = []
        for t_cont in [0.0, 0.25, 0.5, 0.75]:
            ts = torch.full((3,), int(t_cont * head.num_timestep_buckets))
            af = head.action_encoder(c["x_t"], ts, c["embodiment_id"])
            af = af + head.position_embedding(torch.arange(af.shape[1])).unsqueeze(0)
            mo = head.model(hidden_states=torch.cat((sf, af), 1), encoder_hidden_states=vl, timestep=ts,
                            image_mask=image_mask, backbone_attention_mask=attn)
            vels.append(head.action_decoder(mo, c["embodiment_id"])[:, -16:].numpy())
        out["n16_velocity"] = np.stack(vels, 1)
        real_randn = torch.randn
        torch.randn = lambda *a, **k: c["noise"].clone()
        try:
            act = head.get_action(bo(), BatchFeature(data={"state": c["state"], "embodiment_id": c["embodiment_id"]}))
        finally:
            torch.randn = real_randn
        out["n16_actions_k4"] = act["action_pred"].numpy()
    return out


def import_torchvision() -> None:
    """PyPI's torchvision 0.28 is a CUDA build whose C ops (nms, roi_align) do not load beside the CPU torch;
    only its two unguarded fake-kernel registrations then fail at import. Nothing here uses those ops: the
    transforms are pure tensor code, so skip the registrations while importing."""
    real = torch.library.register_fake
    torch.library.register_fake = lambda *a, **k: (lambda fn: fn)
    try:
        import torchvision  # noqa: F401
    finally:
        torch.library.register_fake = real


def main() -> None:
    import_torchvision()
    ap = argparse.ArgumentParser()
    ap.add_argument("--n15", type=Path, required=True)
    ap.add_argument("--n16", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    tok_dir = args.out / "tokenizer"
    tiny_tokenizer(args.n15 / EAGLE_DIRS["n1.5"], tok_dir)
    imgs = frames()
    data: dict[str, np.ndarray] = {"frames": imgs, "tasks": np.array(TASKS)}
    with tempfile.TemporaryDirectory() as work:
        data.update(n15_inputs(args.n15, eagle_processor(args.n15, "n1.5", tok_dir, Path(work)), imgs))
        data.update(n16_inputs(args.n16, eagle_processor(args.n16, "n1.6", tok_dir, Path(work)), imgs))
    for mod in [m for m in sys.modules if m == "gr00t" or m.startswith("gr00t.")]:
        del sys.modules[mod]
    data.update(n15_head(args.n15))
    for mod in [m for m in sys.modules if m == "gr00t" or m.startswith("gr00t.")]:
        del sys.modules[mod]
    data.update(n16_head(args.n16))
    np.savez_compressed(args.out / "golden.npz", **data)
    print({k: (v.shape, v.dtype) for k, v in data.items()})


if __name__ == "__main__":
    main()
