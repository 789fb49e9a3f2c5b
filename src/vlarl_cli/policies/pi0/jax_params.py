"""openpi's JAX parameter tree (``Pi0`` / ``Pi05``, openpi ``models/pi0.py``) <-> vlarl's pi0 parameters.

Names are the JAX tree paths joined by ``/`` as :class:`vlarl_cli.checkpoints.orbax.OrbaxParams` gives
them. Layer stacks are scanned in JAX (a leading ``depth`` axis, ``nn.scan`` in ``gemma.py`` and
``siglip.py``); the second Gemma (the action expert) carries the suffix ``_1`` (``gemma.py: _name``).
Facts from openpi's JAX modules (kernel layouts), checked numerically by
``tests/conformance/openpi/test_openpi_jax_parity.py`` (openpi's own JAX model beside ours):

=============================================  ==============================  ===========================
JAX (per layer ``l``)                          vlarl                           layout
=============================================  ==============================  ===========================
``PaliGemma/img/embedding/kernel``             ``vlm.vision_tower.embeddings   [ph, pw, c, w] ->
                                               .patch_embedding.weight``       [w, c, ph, pw]
``PaliGemma/img/pos_embedding``                ``...position_embedding.weight``  [1, n, w] -> [n, w]
``img/Transformer/encoderblock/LayerNorm_0|1``  ``encoder.layers.l.layer_norm1|2``
``.../MlpBlock_0/Dense_0|1/kernel``            ``encoder.layers.l.mlp.fc1|2``  [in, out] -> [out, in]
``.../MultiHeadDotProductAttention_0/``        ``self_attn.q|k|v_proj``        [w, heads, hd] -> [heads*hd, w]
``query|key|value``, ``out``                   ``self_attn.out_proj``          [heads, hd, w] -> [w, heads*hd]
``img/Transformer/encoder_norm``               ``vlm.vision_tower.post_layernorm``
``PaliGemma/img/head``                         ``vlm.multi_modal_projector.linear``
``PaliGemma/llm/embedder/input_embedding``     ``vlm.language_model.embed_tokens.weight``
``llm/layers/attn/q_einsum[_1]/w``             ``self_attn.q_proj``            [N, D, H] -> [N*H, D]
``llm/layers/attn/kv_einsum[_1]/w``            ``self_attn.k_proj | v_proj``   [2, K, D, H] -> [K*H, D] each
``llm/layers/attn/attn_vec_einsum[_1]/w``      ``self_attn.o_proj``            [N, H, D] -> [D, N*H]
``llm/layers/mlp[_1]/gating_einsum``           ``mlp.gate_proj | up_proj``     [2, D, F] -> [F, D] each
``llm/layers/mlp[_1]/linear``                  ``mlp.down_proj``               [F, D] -> [D, F]
``llm/layers/pre_attention_norm[_1]/scale``    ``input_layernorm.weight``      (Gemma's ``1 + scale``)
``llm/layers/pre_ffw_norm[_1]/scale``          ``post_attention_layernorm.weight``
``.../pre_*_norm_1/Dense_0``, ``final_norm_1/  ``*.dense`` (pi0.5 adaRMS)      [in, out] -> [out, in]
Dense_0``
``llm/final_norm[_1]/scale``                   ``vlm.language_model.norm`` / ``expert.norm``
``action_in_proj``, ``action_out_proj``,       same names                      nnx.Linear [in, out] ->
``state_proj``, ``action_time_mlp_*``,                                         [out, in]
``time_mlp_*``
=============================================  ==============================  ===========================

LoRA (openpi's ``*_lora`` Gemma variants, ``models/lora.py``): ``lora_a`` / ``lora_b`` factors beside an
einsum weight, or ``gating_einsum_lora_a|b`` / ``linear_lora_a|b`` beside the MLP's, are folded into the
base weight: ``w + (a @ b) * alpha / rank`` over the last two axes for the attention einsums and
``w + a @ b`` for the MLP (its ``_dot`` applies no scaling). openpi's variants all set ``alpha = rank``
(``gemma.py: get_config``), so the attention scaling is 1; the checkpoint does not store alpha.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vlarl_cli.errors import CheckpointError

__all__ = ["arch_from_shapes", "internal_tensors", "jax_variant"]

_IMG = "PaliGemma/img/"
_LLM = "PaliGemma/llm/"
_HEADS = ("action_in_proj", "action_out_proj", "state_proj", "action_time_mlp_in", "action_time_mlp_out",
          "time_mlp_in", "time_mlp_out")
_VISION_LAYER = {"LayerNorm_0": "layer_norm1", "LayerNorm_1": "layer_norm2", "MlpBlock_0/Dense_0": "mlp.fc1",
                 "MlpBlock_0/Dense_1": "mlp.fc2"}
_NORMS = {"pre_attention_norm": "input_layernorm", "pre_ffw_norm": "post_attention_layernorm"}


def jax_variant(names: set[str], where: str) -> str:
    """``pi0`` / ``pi05`` from the tree's names; CheckpointError for another model (pi0-FAST, a plain
    PaliGemma, anything else)."""
    if "time_mlp_in/kernel" in names and "action_in_proj/kernel" in names:
        return "pi05"
    if "state_proj/kernel" in names and "action_in_proj/kernel" in names:
        return "pi0"
    tops = sorted({n.split("/", 1)[0] for n in names})
    kind = ("a pi0-FAST or PaliGemma model (no action expert: no action_in_proj)"
            if any(n.startswith(_LLM) for n in names) else "not an openpi model")
    raise CheckpointError(
        f"{where} is an orbax checkpoint of another model: its parameters ({', '.join(tops[:6])}) have neither "
        f"pi0's state_proj nor pi0.5's time_mlp_in beside an action_in_proj, so it is {kind}.",
        "vlarl converts openpi's flow-matching pi0 / pi0.5 (configs pi0_* / pi05_*, e.g. pi0_libero, "
        "pi05_libero); pi0-FAST checkpoints are not supported.")


def arch_from_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """Every :class:`~vlarl_cli.policies.pi0.config.Pi0Config` size the JAX shapes determine (the SigLIP
    head count included: JAX keeps heads as their own axis)."""
    q = shapes[_LLM + "layers/attn/q_einsum/w"]  # [depth, N, D, H]
    kv = shapes[_LLM + "layers/attn/kv_einsum/w"]  # [depth, 2, K, D, H]
    q1 = shapes[_LLM + "layers/attn/q_einsum_1/w"]
    patch = shapes[_IMG + "embedding/kernel"]  # [ph, pw, c, w]
    pos = shapes[_IMG + "pos_embedding"]  # [1, n, w]
    mha = shapes[_IMG + "Transformer/encoderblock/MultiHeadDotProductAttention_0/query/kernel"]  # [d, w, h, hd]
    return {
        "vocab_size": shapes[_LLM + "embedder/input_embedding"][0], "vlm_width": q[2], "vlm_depth": q[0],
        "num_heads": q[1], "num_kv_heads": kv[2], "head_dim": q[3],
        "vlm_mlp": shapes[_LLM + "layers/mlp/gating_einsum"][3],
        "expert_width": q1[2], "expert_mlp": shapes[_LLM + "layers/mlp_1/gating_einsum"][3],
        "vision_width": patch[3], "patch_size": patch[0], "vision_depth": mha[0], "vision_heads": mha[2],
        "vision_mlp": shapes[_IMG + "Transformer/encoderblock/MlpBlock_0/Dense_0/kernel"][2],
        "image_size": round(pos[1] ** 0.5) * patch[0], "max_action_dim": shapes["action_in_proj/kernel"][0],
        "max_state_dim": shapes.get("state_proj/kernel", (shapes["action_in_proj/kernel"][0],))[0],
    }


def _torch(a: np.ndarray) -> Tensor:
    """numpy (bfloat16 from ml_dtypes included) -> torch, keeping the dtype."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _merged(read: Callable[[str], np.ndarray], names: set[str], name: str) -> np.ndarray:
    """The weight ``name`` with its LoRA factors folded in (computed in float32, stored back in its dtype)."""
    w = read(name)
    stem, leaf = name.rsplit("/", 1)
    pairs = [(f"{stem}/lora_a", f"{stem}/lora_b")] if leaf == "w" else [(f"{name}_lora_a", f"{name}_lora_b")]
    for a_name, b_name in pairs:
        if a_name in names and b_name in names:
            a, b = read(a_name).astype(np.float32), read(b_name).astype(np.float32)
            w = (w.astype(np.float32) + np.matmul(a, b)).astype(w.dtype)
    return w


def _gemma_layer(stack: str, sub: str, w: np.ndarray, layer: int) -> Iterator[tuple[str, np.ndarray]]:
    """One scanned Gemma tensor of layer ``layer`` -> (our name under ``stack``, array)."""
    p = f"{stack}.layers.{layer}."
    x = w[layer]
    if sub.startswith("attn/q_einsum"):
        n, d, h = x.shape
        yield p + "self_attn.q_proj.weight", x.transpose(0, 2, 1).reshape(n * h, d)
    elif sub.startswith("attn/kv_einsum"):
        _, k, d, h = x.shape
        yield p + "self_attn.k_proj.weight", x[0].transpose(0, 2, 1).reshape(k * h, d)
        yield p + "self_attn.v_proj.weight", x[1].transpose(0, 2, 1).reshape(k * h, d)
    elif sub.startswith("attn/attn_vec_einsum"):
        n, h, d = x.shape
        yield p + "self_attn.o_proj.weight", x.reshape(n * h, d).T
    elif sub.endswith("gating_einsum"):
        yield p + "mlp.gate_proj.weight", x[0].T
        yield p + "mlp.up_proj.weight", x[1].T
    elif sub.endswith("/linear"):
        yield p + "mlp.down_proj.weight", x.T
    else:
        norm, leaf = sub.split("/", 1)
        ours = _NORMS[norm.removesuffix("_1")]
        if leaf == "scale":
            yield p + ours + ".weight", x
        else:  # Dense_0/kernel | Dense_0/bias (adaRMS)
            yield p + ours + (".dense.weight" if leaf.endswith("kernel") else ".dense.bias"), (
                x.T if leaf.endswith("kernel") else x)


def _vision(sub: str, w: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    v = "vlm.vision_tower."
    if sub == "embedding/kernel":
        yield v + "embeddings.patch_embedding.weight", w.transpose(3, 2, 0, 1)
    elif sub == "embedding/bias":
        yield v + "embeddings.patch_embedding.bias", w
    elif sub == "pos_embedding":
        yield v + "embeddings.position_embedding.weight", w[0]
    elif sub.startswith("Transformer/encoder_norm/"):
        yield v + "post_layernorm." + ("weight" if sub.endswith("scale") else "bias"), w
    elif sub.startswith("head/"):
        yield "vlm.multi_modal_projector.linear." + ("weight" if sub.endswith("kernel") else "bias"), (
            w.T if sub.endswith("kernel") else w)
    else:
        block = sub.removeprefix("Transformer/encoderblock/")
        module, leaf = block.rsplit("/", 1)
        for layer in range(w.shape[0]):
            p = f"{v}encoder.layers.{layer}."
            if module in _VISION_LAYER:
                name = _VISION_LAYER[module] + {"scale": ".weight", "kernel": ".weight", "bias": ".bias"}[leaf]
                yield p + name, w[layer].T if leaf == "kernel" else w[layer]
                continue
            proj = module.rsplit("/", 1)[1]  # query | key | value | out
            ours = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "out": "out_proj"}[proj]
            x = w[layer]
            if proj == "out":
                out = x.reshape(-1, x.shape[-1]).T if leaf == "kernel" else x
            else:
                out = x.reshape(x.shape[0], -1).T if leaf == "kernel" else x.reshape(-1)
            yield p + f"self_attn.{ours}." + ("weight" if leaf == "kernel" else "bias"), out


def _is_lora(name: str) -> bool:
    return "lora_a" in name or "lora_b" in name


def internal_tensors(names: list[str], read: Callable[[str], np.ndarray]) -> Iterator[tuple[str, Tensor]]:
    """Every parameter of the JAX tree as (vlarl internal name, tensor in its stored dtype), LoRA merged.
    An array this map does not know raises CheckpointError (nothing is dropped silently)."""
    known = set(names)
    for name in names:
        if _is_lora(name):
            continue
        if name.startswith(_IMG):
            pairs: Iterator[tuple[str, np.ndarray]] = _vision(name[len(_IMG):], read(name))
        elif name == _LLM + "embedder/input_embedding":
            pairs = iter([("vlm.language_model.embed_tokens.weight", read(name))])
        elif name.startswith(_LLM + "final_norm"):
            stack = "expert" if name.startswith(_LLM + "final_norm_1") else "vlm.language_model"
            w = read(name)
            leaf = {"scale": "weight", "kernel": "dense.weight", "bias": "dense.bias"}[name.rsplit("/", 1)[1]]
            pairs = iter([(f"{stack}.norm.{leaf}", w.T if leaf == "dense.weight" else w)])
        elif name.startswith(_LLM + "layers/"):
            sub = name[len(_LLM + "layers/"):]
            stack = "expert" if "_1/" in sub or sub.split("/", 1)[0].endswith("_1") else "vlm.language_model"
            w = _merged(read, known, name)
            pairs = (pair for i in range(w.shape[0]) for pair in _gemma_layer(stack, sub, w, i))
        elif name.split("/", 1)[0] in _HEADS:
            head, leaf = name.split("/", 1)
            w = read(name)
            pairs = iter([(f"{head}.{'weight' if leaf == 'kernel' else 'bias'}", w.T if leaf == "kernel" else w)])
        else:
            raise CheckpointError(f"The JAX parameter {name} has no place in vlarl's pi0 / pi0.5.",
                                  "This checkpoint holds parameters openpi's Pi0 / Pi05 do not have; it is "
                                  "another model or a modified openpi.")
        for ours, array in pairs:
            yield ours, _torch(np.ascontiguousarray(array))


# ---------------------------------------------------------------------------------------- staging
_SHARD_BYTES = 2 << 30


def _assets_dir(step: Path, params: Path) -> Path:
    """``assets/`` beside ``params/`` (openpi's step folder), refused when it holds no norm_stats.json."""
    assets = params.parent / "assets"
    found = sorted(assets.glob("**/norm_stats.json")) if assets.is_dir() else []
    if not found:
        raise CheckpointError(
            f"{step} has no normalisation statistics: openpi keeps them at assets/<asset_id>/norm_stats.json "
            f"beside params/ (looked in {assets}), and a pi0 policy cannot turn observations into model inputs "
            "or model outputs into robot actions without them.",
            "Copy the checkpoint's assets/ folder too (openpi's trainer writes it into every step folder; the "
            "published checkpoints have it), or the norm_stats.json that training used into "
            "assets/<asset_id>/ beside params/.")
    return assets


def _write_shards(out: Path, tensors: Iterator[tuple[str, Tensor]]) -> list[str]:
    """Stream tensors into ``model-jax-<i>.safetensors`` shards of about 2 GiB; returns the tensor names."""
    from vlarl_cli.checkpoints.atomic import atomic_save_safetensors

    names: list[str] = []
    group: dict[str, Tensor] = {}
    size, index = 0, 0
    for name, tensor in tensors:
        group[name] = tensor.contiguous()
        names.append(name)
        size += tensor.numel() * tensor.element_size()
        if size >= _SHARD_BYTES:
            index += 1
            atomic_save_safetensors(group, out / f"model-jax-{index:05d}.safetensors", metadata={"format": "pt"})
            group, size = {}, 0
    if group:
        atomic_save_safetensors(group, out / f"model-jax-{index + 1:05d}.safetensors", metadata={"format": "pt"})
    return names


def stage_as_openpi(src: Path, out: Path) -> dict[str, Any]:
    """Write openpi's JAX checkpoint ``src`` (step folder or ``params/``) into the new folder ``out`` in the
    openpi PyTorch layout (``config.json`` with the sizes, weights in their stored dtypes under openpi's
    names, ``assets/`` copied): the layout every pi0 loader reads. Returns what was found (variant, dtypes,
    LoRA factors merged, asset ids) for the report."""
    import json
    import shutil

    from vlarl_cli.checkpoints.orbax import open_params
    from vlarl_cli.policies.pi0.checkpoint import to_external
    from vlarl_cli.policies.pi0.config import preset

    params = open_params(src)
    assets = _assets_dir(src, params.folder)
    table = params.shapes()
    shapes = {k: v[0] for k, v in table.items()}
    variant = jax_variant(set(shapes), str(src))
    cfg = preset("full", variant, **arch_from_shapes(shapes))
    out.mkdir(parents=True)
    _write_shards(out, ((to_external(k, "openpi"), v) for k, v in internal_tensors(params.names(), params.read)))
    shutil.copytree(assets, out / "assets")
    config = {"action_dim": cfg.max_action_dim, "action_horizon": cfg.action_horizon, "pi05": cfg.is_pi05,
              "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
              "vlarl_arch": cfg.to_dict()}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return {"variant": variant, "dtypes": sorted({d for _, d in table.values()}),
            "lora_merged": sum(1 for k in shapes if k.endswith("lora_a")),
            "asset_ids": sorted(str(p.parent.relative_to(assets)) for p in assets.glob("**/norm_stats.json")),
            "action_horizon": cfg.action_horizon}
