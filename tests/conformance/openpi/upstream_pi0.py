"""The openpi side of the pi0 / pi0.5 conformance tests: runs under .reference/openpi/bin/python.

Usage: ``python upstream_pi0.py <spec.json>``. The spec names the sizes, the seed and, per run (one per
variant, in ONE process: importing openpi's stack costs most of the time), an input ``.safetensors`` file
written by the test and two output files. Builds openpi's own ``PI0Pytorch``
(rlinf-openpi 0.1.1 + its patched transformers 4.53.2) with the ``dummy`` Gemma variant for both the VLM
and the expert and a SigLIP shrunk before ``PaliGemmaForConditionalGeneration`` is built (openpi hard-codes
So400m sizes and ``projection_dim=2048`` in ``gemma_pytorch.py``), gives every parameter seeded random
values, and writes: the weights (openpi key names) and what openpi computes from the shared inputs.

Nothing of vlarl is imported here: this interpreter has another torch / transformers stack.
"""

from __future__ import annotations

import json
import sys
import types

import torch
from safetensors.torch import load_file, save_file


def _shrink_siglip(spec: dict) -> None:
    from openpi.models_pytorch import gemma_pytorch

    original = gemma_pytorch.PaliGemmaForConditionalGeneration

    def build(config):
        v = config.vision_config
        v.hidden_size, v.intermediate_size = spec["vision_width"], spec["vision_mlp"]
        v.num_hidden_layers, v.num_attention_heads = spec["vision_depth"], spec["vision_heads"]
        v.image_size, v.patch_size = spec["image_size"], spec["patch_size"]
        v.projection_dim = config.text_config.hidden_size
        config.text_config.num_image_tokens = (v.image_size // v.patch_size) ** 2
        return original(config=config)

    gemma_pytorch.PaliGemmaForConditionalGeneration = build


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Seeded values for EVERY parameter (zero-initialised adaRMS dense layers included)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in**0.5)
            elif "vision_tower" in name and "layernorm" in name.replace("_", "").lower() and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))  # SigLIP LayerNorm gains
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))  # biases, Gemma (1 + w) RMSNorm weights


def _cache_kv(cache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    if hasattr(cache, "key_cache"):
        return cache.key_cache[layer], cache.value_cache[layer]
    return cache.layers[layer].keys, cache.layers[layer].values


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    torch.set_num_threads(1)
    _shrink_siglip(spec)
    for run in spec["runs"]:
        run_one({**spec, **run})
    if "tokens" in spec:
        tokenize(spec["tokens"])
    if "critic" in spec:
        rlinf_critic(spec["critic"])


def rlinf_critic(spec: dict) -> None:
    """RLinf's own critic class (rlinf 0.3.0 models/embodiment/modules/value_head.py, loaded by file: the
    package __init__ pulls RLinf's whole stack) built as its openpi model builds it (ReLU, bias_last):
    loads OUR critic's state dict strictly, evaluates it, and hands back its own fresh state dict."""
    import importlib.util
    from pathlib import Path

    root = Path(importlib.util.find_spec("rlinf").submodule_search_locations[0])
    module_spec = importlib.util.spec_from_file_location(
        "rlinf_value_head", root / "models" / "embodiment" / "modules" / "value_head.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    torch.manual_seed(0)
    head = module.ValueHead(input_dim=spec["in_dim"], hidden_sizes=tuple(spec["hidden"]), output_dim=1,
                            activation="relu", bias_last=True)
    fresh = {k: v.clone() for k, v in head.state_dict().items()}
    head.load_state_dict(load_file(spec["weights"]), strict=True)
    with torch.no_grad():
        values = head(load_file(spec["features"])["features"])[:, 0]
    save_file({"values": values, **{"fresh." + k: v for k, v in fresh.items()}}, spec["out"])


def tokenize(spec: dict) -> None:
    """openpi's PaligemmaTokenizer on a given sentencepiece model (its own source, gs://big_vision, is
    not readable anonymously): prompt ids and masks, without and with the discretised state (pi0.5)."""
    import numpy as np
    import sentencepiece
    from openpi.models.tokenizer import PaligemmaTokenizer

    tok = PaligemmaTokenizer.__new__(PaligemmaTokenizer)
    tok._max_len = spec["max_len"]
    tok._tokenizer = sentencepiece.SentencePieceProcessor(model_file=spec["model"])
    states = load_file(spec["states"])["states"].numpy()
    out = {}
    for i, prompt in enumerate(spec["prompts"]):
        ids, mask = tok.tokenize(prompt)
        out[f"plain.{i}"], out[f"plain_mask.{i}"] = torch.as_tensor(np.asarray(ids, dtype=np.int64)), torch.as_tensor(mask)
        ids, mask = tok.tokenize(prompt, states[i])
        out[f"state.{i}"], out[f"state_mask.{i}"] = torch.as_tensor(np.asarray(ids, dtype=np.int64)), torch.as_tensor(mask)
    save_file(out, spec["out"])


def run_one(spec: dict) -> None:
    from openpi.models import pi0_config
    from openpi.models_pytorch.pi0_pytorch import PI0Pytorch, make_att_2d_masks

    cfg = pi0_config.Pi0Config(dtype=spec["dtype"], paligemma_variant="dummy", action_expert_variant="dummy",
                               pi05=spec["variant"] == "pi05", action_horizon=spec["action_horizon"],
                               max_token_len=spec["max_token_len"])
    model = PI0Pytorch(cfg)
    torch.set_float32_matmul_precision("highest")  # PI0Pytorch sets "high" (TF32 on GPUs); keep fp32 exact
    model.sample_actions = types.MethodType(PI0Pytorch.sample_actions, model)  # undo torch.compile
    _randomize(model, spec["seed"])
    if spec["dtype"] == "bfloat16":
        model.paligemma_with_expert.to_bfloat16_for_selected_params("bfloat16")
    model.eval()
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, spec["weights_out"])

    x = load_file(spec["inputs"])
    slots = x["images"].shape[1]
    images = [x["images"][:, i] for i in range(slots)]
    masks = [x["image_masks"][:, i] for i in range(slots)]
    inputs = (images, masks, x["tokens"], x["token_mask"], x["state"])
    model._preprocess_observation = lambda observation, train=True: inputs  # no augmentation / resizing
    out: dict[str, torch.Tensor] = {}

    def prefix_cache():
        embs, pad, att = model.embed_prefix(images, masks, x["tokens"], x["token_mask"])
        att4 = model._prepare_attention_masks_4d(make_att_2d_masks(pad, att))
        model.paligemma_with_expert.paligemma.language_model.config._attn_implementation = "eager"
        (hidden, _), cache = model.paligemma_with_expert.forward(
            attention_mask=att4, position_ids=torch.cumsum(pad, dim=1) - 1, past_key_values=None,
            inputs_embeds=[embs, None], use_cache=True)
        return pad, cache, hidden

    with torch.no_grad():
        out["image_features"] = model.paligemma_with_expert.embed_image(images[0]).float()
        pad, cache, hidden = prefix_cache()
        out["prefix_pad"] = pad
        out["prefix_hidden"] = hidden.float()
        for layer in range(len(model.paligemma_with_expert.paligemma.language_model.layers)):
            k, v = _cache_kv(cache, layer)
            out[f"prefix_k.{layer}"], out[f"prefix_v.{layer}"] = k.float().clone(), v.float().clone()
        pad, cache, _ = prefix_cache()
        out["velocity"] = model.denoise_step(x["state"], pad, cache, x["x_t"], x["t"]).float()
        obs = types.SimpleNamespace(state=x["state"])
        for k in spec["sample_steps"]:
            out[f"actions_k{k}"] = model.sample_actions("cpu", obs, noise=x["noise"].clone(), num_steps=k).float()
    loss = model.forward(obs, x["actions"], noise=x["noise"].clone(), time=x["time"].clone())
    out["loss"] = loss.detach().float()
    loss.mean().backward()
    for name, p in model.named_parameters():
        if p.grad is not None and "embed_tokens" not in name and "lm_head" not in name:
            out["grad." + name] = p.grad.float()
    save_file({k: v.contiguous() for k, v in out.items()}, spec["outputs_out"])


if __name__ == "__main__":
    main()
