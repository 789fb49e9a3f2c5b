"""Run RLinf 0.3.0's own OpenVLA-OFT classes on a vlarl-exported tiny checkpoint (inside the isolated venv).

    .reference/rlinf_models/bin/python tests/conformance/rlinf_oft/run_rlinf.py <variant> <ckpt> <inputs> <out>

``variant``: ``rlinf`` (``openvla_oft/rlinf``: one image, no STOP token, action_level critic at the last
prompt token) or ``official`` (``openvla_oft/official``: two images, proprio token from the
``proprio_projector--*`` side file loaded by RLinf's own loader, STOP token, right-sorted padding).
Outputs (safetensors): greedy actions, the 256 action logits, token log-probs / entropy at temperature
1.6 from ``default_forward``, the greedy pass's log-probs, and values.

Only the package ``__init__`` files of rlinf that pull in the cluster scheduler (ray) are bypassed: the
modules that compute anything are RLinf's, imported from the installed wheel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: an openvla-oft checkout (e.g. a clone of moojink/openvla-oft): use its real prismatic base classes instead
#: of the stand-in (timm towers are shrunk to the checkpoint's sizes and Llama made bidirectional, as the
#: openvla-oft transformers fork is; nothing else of it is changed)
OPENVLA_OFT_SRC = os.environ.get("VLARL_OPENVLA_OFT_SRC")
sys.path[:0] = [OPENVLA_OFT_SRC or str(HERE / "prismatic_standin"), str(HERE)]  # HERE: oft_towers


_RLINF_ROOT = Path(next(iter(importlib.util.find_spec("rlinf").submodule_search_locations)))  # type: ignore[union-attr]


def _bare_package(name: str) -> None:
    """Register package ``name`` without running its ``__init__`` (which imports the ray scheduler)."""
    module = types.ModuleType(name)
    module.__path__ = [str(_RLINF_ROOT.joinpath(*name.split(".")[1:]))]
    sys.modules[name] = module


for pkg in ("rlinf", "rlinf.models", "rlinf.utils"):
    _bare_package(pkg)
# PyPI's torchvision (a CUDA build) cannot load its C ops beside the CPU torch, and registering their meta
# kernels then fails at import; timm needs only torchvision's pure-Python modules.
sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
scheduler = types.ModuleType("rlinf.scheduler")
scheduler.Worker = type("Worker", (), {})  # rlinf.utils.utils imports it for device helpers only
sys.modules["rlinf.scheduler"] = scheduler

if OPENVLA_OFT_SRC:  # openvla-oft's package __init__ files import its training stack (tensorflow, draccus)
    for _name in ("prismatic", "prismatic.models", "prismatic.vla", "prismatic.extern", "prismatic.extern.hf",
                  "prismatic.training"):
        _module = types.ModuleType(_name)
        _module.__path__ = [str(Path(OPENVLA_OFT_SRC).joinpath(*_name.split(".")))]
        sys.modules[_name] = _module
    from prismatic.vla.constants import NormalizationType

    _data_utils = types.ModuleType("prismatic.vla.datasets.rlds.utils.data_utils")
    _data_utils.NormalizationType = NormalizationType  # type: ignore[attr-defined]
    sys.modules[_data_utils.__name__] = _data_utils

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers.modeling_utils import no_init_weights  # noqa: E402

TEMPERATURE = 1.6


def _real_prismatic(vision: dict) -> dict:
    """Prepare openvla-oft's own prismatic (VLARL_OPENVLA_OFT_SRC); -> the extra OpenVLAConfig arguments."""
    import timm
    from oft_towers import tower_kwargs  # type: ignore[import-not-found]
    from timm.models.vision_transformer import VisionTransformer
    from transformers.models.llama import modeling_llama

    timm.create_model = lambda model_id, **kw: VisionTransformer(**tower_kwargs(vision, "dinov2" in model_id))
    modeling_llama.LlamaModel._update_causal_mask = _bidirectional
    return {"vision_backbone_id": "dinosiglip-vit-so-224px", "llm_backbone_id": "llama2-7b-pure",
            "arch_specifier": "no-align+fused-gelu-mlp", "use_fused_vision_backbone": True}


def _bidirectional(self, attention_mask, input_tensor, *args, **kwargs):
    b, s = attention_mask.shape
    keys = attention_mask[:, None, None, :].bool().expand(b, 1, s, s)
    return torch.where(keys, 0.0, torch.finfo(input_tensor.dtype).min).to(input_tensor.dtype)


def _config(ckpt: Path, official: bool):
    raw = json.loads((ckpt / "config.json").read_text())
    arch = raw["vlarl_arch"]
    vision = {k: arch[k] for k in ("image_size", "patch_size", "dino_width", "dino_depth", "dino_heads",
                                   "dino_mlp_ratio", "dino_registers", "siglip_width", "siglip_depth",
                                   "siglip_heads", "siglip_mlp")}
    extra = _real_prismatic(vision) if OPENVLA_OFT_SRC else {"vision": vision}
    from prismatic.extern.hf.configuration_prismatic import OpenVLAConfig

    text = dict(raw["text_config"])
    text.pop("model_type", None)
    text.pop("torch_dtype", None)
    stats = json.loads((ckpt / "dataset_statistics.json").read_text())
    common = dict(norm_stats=stats, n_action_bins=raw["n_action_bins"], text_config=text,
                  pad_to_multiple_of=raw["pad_to_multiple_of"], pad_token_id=raw["pad_token_id"], **extra)
    if official:
        from rlinf.models.embodiment.openvla_oft.official.openvla_oft_action_model import OpenVLAOFTRLConfig

        critic = any(k.startswith("value_head.") for k in load_file(str(ckpt / "model.safetensors")))
        cfg = OpenVLAOFTRLConfig(action_dim=7, num_action_chunks=8, add_value_head=critic, use_proprio=True,
                                 proprio_dim=8, max_prompt_length=arch["max_prompt_len"], **common)
        cfg.value_type = "chunk_level"
    else:
        cfg = OpenVLAConfig(**common)
        cfg.value_type = "action_level"  # RLinf sets the yaml keys on the config (setattr loop in get_model)
        cfg.hidden_size = text["hidden_size"]
    cfg.unnorm_key = "libero_10_no_noops"
    return cfg


def _weights(model: torch.nn.Module, ckpt: Path) -> None:
    sd = load_file(str(ckpt / "model.safetensors"))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    # the stand-in has no DINOv2 mask token; timm's gamma was renamed scale_factor; nothing else may be left
    left = [k for k in missing if not k.startswith("proprio_projector.")]
    assert not left and not unexpected, (left[:5], unexpected[:5])


def run_rlinf(ckpt: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from rlinf.models.embodiment.openvla_oft.rlinf.openvla_oft_action_model import (
        OpenVLAOFTForRLActionPrediction,
    )

    cfg = _config(ckpt, official=False)
    # built as from_pretrained builds it: under no_init_weights (RLinf's ValueHead initialises with
    # kaiming_normal_(nonlinearity="gelu"), which torch refuses outside that context); weights then load
    with no_init_weights():
        model = OpenVLAOFTForRLActionPrediction(cfg, action_dim=7, num_action_chunks=8, add_value_head=True,
                                                max_prompt_length=inputs["input_ids"].shape[1]).eval()
    _weights(model, ckpt)
    model.setup_config_and_processor(cfg, None)
    with torch.no_grad():
        actions, res = model.predict_action_batch(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                                  pixel_values=inputs["pixel_values"], do_sample=False,
                                                  temperature=TEMPERATURE, top_k=-1)
        fwd = {k: inputs[k] for k in ("input_ids", "attention_mask", "pixel_values")}
        fwd["action_tokens"] = inputs["action_tokens"]
        out = model.default_forward(forward_inputs=dict(fwd), compute_logprobs=True, compute_entropy=True,
                                    compute_values=True, temperature=TEMPERATURE, top_k=-1)
        t = 56
        raw = model.default_forward(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                    pixel_values=inputs["pixel_values"])
        start = model.vocab_size - 256
        logits = raw.logits[:, -t - 1:-1, start:model.vocab_size]
    return {"actions": torch.as_tensor(actions).double(), "greedy_tokens": res["forward_inputs"]["action_tokens"],
            "greedy_logprobs": res["prev_logprobs"].float(), "greedy_values": res["prev_values"].float(),
            "logits": logits.float(), "logprobs": out["logprobs"].float(), "entropy": out["entropy"].float(),
            "values": out["values"].float()}


def run_official(ckpt: Path, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from rlinf.models.embodiment.openvla_oft.official.openvla_oft_action_model import (
        OpenVLAOFTForRLActionPrediction,
    )

    cfg = _config(ckpt, official=True)
    with no_init_weights():
        model = OpenVLAOFTForRLActionPrediction(cfg).eval()
    _weights(model, ckpt)
    model.load_proprio_projector_weights(str(ckpt))  # RLinf's loader: find_checkpoint_file + weights_only
    model.vision_backbone.set_num_images_in_input(2)
    model.set_processor(types.SimpleNamespace(tokenizer=types.SimpleNamespace(pad_token_id=cfg.pad_token_id)))
    with torch.no_grad():
        actions, res = model.predict_action_batch(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                                  pixel_values=inputs["pixel_values"], proprio=inputs["proprio"],
                                                  do_sample=False, temperature=TEMPERATURE, top_k=-1)
        fwd = {k: inputs[k] for k in ("input_ids", "attention_mask", "pixel_values", "proprio")}
        fwd["action_tokens"] = inputs["action_tokens"]
        critic = cfg.add_value_head
        out = model.default_forward(forward_inputs=fwd, compute_logprobs=True, compute_entropy=True,
                                    compute_values=critic, temperature=TEMPERATURE, top_k=-1)
    result = {"actions": torch.as_tensor(actions).double(), "greedy_tokens": res["forward_inputs"]["action_tokens"],
              "greedy_logprobs": res["prev_logprobs"].float(), "logprobs": out["logprobs"].float(),
              "entropy": out["entropy"].float()}
    if critic:  # RLinf's official critic: last_hidden_states[:, -action_dim * num_action_chunks - 1]
        result.update(values=out["values"].float(), greedy_values=res["prev_values"].float())
    return result


def run_images(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """RLinf's ``PrismaticImageProcessor.apply_transform`` on uint8 images ``[B, H, W, 3]`` (its rlinf-variant
    path: tensors, not PIL), with the parameters openvla-oft's processor derives for the fused backbone."""
    import torchvision.transforms.functional as TVF
    from rlinf.models.embodiment.prismatic.processing_prismatic import PrismaticImageProcessor

    size = int(inputs["size"])
    proc = object.__new__(PrismaticImageProcessor)
    proc.input_sizes = [(3, size, size)] * 2
    proc.tvf_resize_params = [{"size": size, "interpolation": TVF.InterpolationMode.BICUBIC, "max_size": None,
                               "antialias": True}] * 2
    proc.tvf_crop_params = [{"output_size": [size, size]}] * 2
    proc.tvf_normalize_params = [{"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "inplace": False},
                                 {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "inplace": False}]
    proc.tvf_do_letterbox = False
    images = inputs["images"].permute(0, 3, 1, 2)[:, None]  # [B, 1, C, H, W], as predict_action_batch passes
    return {"pixel_values": proc.apply_transform(images)[:, 0].float()}


def main() -> None:
    variant, ckpt, inputs_file, out_file = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    inputs = load_file(inputs_file)
    if variant == "images":
        result = run_images(inputs)
    else:
        result = (run_official if variant == "official" else run_rlinf)(ckpt, inputs)
    save_file({k: v.contiguous() for k, v in result.items()}, out_file)


if __name__ == "__main__":
    main()
