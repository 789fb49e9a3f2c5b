"""pi0 / pi0.5 checkpoints: detection, loading and saving in four layouts, with explicit key maps.

Layouts (``FORMATS``; REFERENCE.md section 4):

=========  ==================================================================================================
``vlarl``    ours: ``model.safetensors`` (+ ``model.safetensors.index.json`` shards when large),
             ``vlarl_config.json`` ``{"family": "pi0", "format_version": 1, "model": {Pi0Config fields}}``,
             ``norm_stats.json``. Internal key names, LoRA factors kept unmerged.
``openpi``   openpi PyTorch / RLinf: ``model.safetensors`` (keys ``paligemma_with_expert.*``), ``config.json``
             (``action_dim``, ``action_horizon``, ``paligemma_variant``, ``action_expert_variant``,
             ``precision``), norm stats at ``assets/<asset_id>/norm_stats.json`` or ``<asset_id>/norm_stats.json``.
``lerobot``  ``model.`` + the openpi keys; ``config.json`` with ``"type": "pi0" | "pi05"``.
``hf_pi0``   transformers >= 5.4 native ``pi0`` (``config.json`` ``model_type == "pi0"``): keys ``model.vlm.*``,
             ``model.dit.*`` (the expert), ``embed_action_time.*``. pi0 only (no adaRMS in transformers).
=========  ==================================================================================================

Key map (internal <-> openpi), prefixes:

====================================  =====================================================================
``vlm.vision_tower.``                 ``paligemma_with_expert.paligemma.model.vision_tower.vision_model.``
``vlm.multi_modal_projector.``        ``paligemma_with_expert.paligemma.model.multi_modal_projector.``
``vlm.language_model.``               ``paligemma_with_expert.paligemma.model.language_model.``
``expert.``                           ``paligemma_with_expert.gemma_expert.model.``
``action_in_proj.`` etc.              unchanged (``action_out_proj``, ``state_proj``, ``action_time_mlp_*``,
                                      ``time_mlp_*``, and our RL heads ``value_head`` / ``noise_head``)
====================================  =====================================================================

Tied embedding: openpi files written with ``safetensors.torch.save_model`` may hold the PaliGemma token
embedding ONLY as ``paligemma_with_expert.paligemma.lm_head.weight``; it is loaded into
``vlm.language_model.embed_tokens.weight`` when the embedding key is absent, and written back under
that name. The expert's ``lm_head`` / ``embed_tokens`` are unused by pi0 (openpi deletes the expert's
embedding): ignored on load, written as zeros on export so upstream strict loaders find them.
Aliases accepted on load: transformers 5.x's re-saved names (``vision_tower.`` without ``vision_model.``,
``language_model.model.``) and the older ``model.vlm.vision_tower.vision_model.``.

Loading builds the model on the meta device, materialises it on the target device and fills it
tensor by tensor from ``safetensors.safe_open`` (never the whole file in memory). Missing RL-only
parameters (value head, noise head, LoRA factors) are freshly initialised and reported; any other
missing or unexpected key, or a shape mismatch, raises :class:`CheckpointError` naming the keys when
``strict`` (the default).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from vlarl_cli.checkpoints import pipeline
from vlarl_cli.checkpoints.detect import open_checkpoint_folder, weight_files
from vlarl_cli.checkpoints.detect import read_json_object as _read_json
from vlarl_cli.checkpoints.detect import tensor_table as _header_shapes
from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.lora import init_lora_factors, merge_lora_for_export, merged_state_dict
from vlarl_cli.policies.normalization import (
    NORM_STATS_FILE,
    NormStats,
    find_norm_stats,
    norm_stats_to_json,
)
from vlarl_cli.policies.pi0.assets import DEFAULT_ASSET_ID
from vlarl_cli.policies.pi0.config import Pi0Config, preset

if TYPE_CHECKING:
    from vlarl_cli.policies.pi0.policy import Pi0Policy

__all__ = ["FORMATS", "describe", "detect_format", "export_state_dict", "from_external", "load_policy",
           "merge_lora_for_export", "save_policy", "to_external"]

FORMATS: tuple[str, ...] = ("vlarl", "openpi", "lerobot", "hf_pi0")
FAMILY = "pi0"
FORMAT_VERSION = 1

_EMBED = "vlm.language_model.embed_tokens.weight"
_OPENPI_ROOT = "paligemma_with_expert."
_OPENPI_RULES = [  # (internal prefix, external prefix); the first per internal prefix is canonical
    ("vlm.vision_tower.", "paligemma_with_expert.paligemma.model.vision_tower.vision_model."),
    ("vlm.multi_modal_projector.", "paligemma_with_expert.paligemma.model.multi_modal_projector."),
    ("vlm.language_model.", "paligemma_with_expert.paligemma.model.language_model."),
    ("expert.", "paligemma_with_expert.gemma_expert.model."),
]
_OPENPI_ALIASES = [
    ("vlm.vision_tower.", "paligemma_with_expert.paligemma.model.vision_tower."),
    ("vlm.language_model.", "paligemma_with_expert.paligemma.model.language_model.model."),
]
_OPENPI_TIED = "paligemma_with_expert.paligemma.lm_head.weight"
_OPENPI_UNUSED = ("paligemma_with_expert.gemma_expert.lm_head.weight",
                  "paligemma_with_expert.gemma_expert.model.embed_tokens.weight")
_HF_RULES = [
    ("vlm.", "model.vlm."),
    ("expert.", "model.dit."),
    ("action_in_proj.", "embed_action_time.action_in_proj."),
    ("state_proj.", "embed_action_time.state_proj."),
    ("action_time_mlp_in.", "embed_action_time.action_time_mlp_in."),
    ("action_time_mlp_out.", "embed_action_time.action_time_mlp_out."),
]
_HF_ALIASES = [("vlm.vision_tower.", "model.vlm.vision_tower.vision_model.")]
# transformers 5.x save_pretrained of a LOADED PI0 writes "model." + the openpi projection names
_HF_ALIASES += [(name, "model." + name) for name in ("action_in_proj.", "action_out_proj.", "state_proj.",
                                                    "action_time_mlp_in.", "action_time_mlp_out.")]
_HF_UNUSED = ("model.dit.embed_tokens.weight", "model.vlm.lm_head.weight", "lm_head.weight")
_TOP_LEVEL = ("action_in_proj.", "action_out_proj.", "state_proj.", "action_time_mlp_in.", "action_time_mlp_out.",
              "time_mlp_in.", "time_mlp_out.", "value_head.", "noise_head.")
# Parameters that only exist for RL (or LoRA): absent from supervised checkpoints, initialised fresh.
_RL_ONLY_PREFIXES = ("value_head.", "noise_head.")


# ---------------------------------------------------------------------------------------- key maps
def _rules(fmt: str, *, load: bool) -> list[tuple[str, str]]:
    if fmt in ("openpi", "lerobot"):
        rules = _OPENPI_RULES + (_OPENPI_ALIASES if load else [])
    elif fmt == "hf_pi0":
        # transformers 5.x save_pretrained writes the openpi names back; accept both on load.
        rules = _HF_RULES + ((_HF_ALIASES + _OPENPI_RULES + _OPENPI_ALIASES) if load else [])
    else:
        raise ValueError(fmt)
    return rules


def from_external(key: str, fmt: str) -> str | None:
    """External key -> internal key (None: not a parameter of ours, e.g. unused or unknown)."""
    if fmt == "vlarl":
        return key
    if fmt == "lerobot":
        if not key.startswith("model."):
            return None
        key = key[len("model."):]
    if fmt in ("openpi", "lerobot", "hf_pi0") and key == _OPENPI_TIED:
        return _EMBED
    best: tuple[int, str] | None = None
    for internal, external in _rules(fmt, load=True):
        if key.startswith(external) and (best is None or len(external) > best[0]):
            best = (len(external), internal + key[len(external):])
    if best is not None:
        return best[1]
    if key.startswith(_TOP_LEVEL):
        return key
    return None


def to_external(key: str, fmt: str) -> str:
    """Internal key -> the canonical external key of ``fmt``."""
    if fmt == "vlarl":
        return key
    if fmt == "hf_pi0":
        for internal, external in _HF_RULES:
            if key.startswith(internal):
                return external + key[len(internal):]
        return key
    out = key
    if key == _EMBED:
        out = _OPENPI_TIED
    else:
        for internal, external in _OPENPI_RULES:
            if key.startswith(internal):
                out = external + key[len(internal):]
                break
    return "model." + out if fmt == "lerobot" else out


def _is_known_unused(key: str, fmt: str) -> bool:
    k = key[len("model."):] if fmt == "lerobot" and key.startswith("model.") else key
    if fmt == "lerobot" and (k.startswith(("normalize_", "unnormalize_")) or key.startswith(("normalize_",
                                                                                              "unnormalize_"))):
        return True  # old LeRobot normalisation buffers (read separately as norm stats)
    return k in _OPENPI_UNUSED or (fmt == "hf_pi0" and k in _HF_UNUSED)


# ---------------------------------------------------------------------------------------- files
def detect_format(path: str | os.PathLike[str]) -> str | None:
    """The layout of a pi0-family checkpoint folder, or None when it is not one (cheap: names + headers)."""
    return pipeline.detect_layout(path, FAMILY, _detect_external)


def _detect_external(root: Path, cfg: dict[str, Any]) -> str | None:
    if cfg.get("type") in ("pi0", "pi05"):
        return "lerobot"
    try:
        names = set(_header_shapes(weight_files(root)))
    except CheckpointError:
        names = set()
    if cfg.get("model_type") == "pi0":
        # transformers' native pi0 and LeRobot both write model_type "pi0"; the key names decide
        return "lerobot" if any(n.startswith("model." + _OPENPI_ROOT) for n in names) else "hf_pi0"
    if not names:
        return None
    if any(n.startswith("model." + _OPENPI_ROOT) for n in names):
        return "lerobot"
    if any(n.startswith(_OPENPI_ROOT) for n in names):
        return "openpi"
    if any(n.startswith(("model.vlm.", "model.dit.")) for n in names):
        return "hf_pi0"
    return None


# ---------------------------------------------------------------------------------------- architecture
def _variant_from_keys(internal_keys: set[str]) -> str:
    if "time_mlp_in.weight" in internal_keys:
        return "pi05"
    if "state_proj.weight" in internal_keys:
        return "pi0"
    raise CheckpointError("Cannot tell pi0 from pi0.5: the checkpoint has neither state_proj (pi0) nor "
                          "time_mlp_in (pi0.5).", "Check that this is a pi0-family checkpoint.")


_LEGACY_VALUE = re.compile(r"^value_head\.(body\.(\d+)|out)\.(weight|bias)$")
_VALUE_LAYER = re.compile(r"^value_head\.mlp\.(\d+)\.weight$")


def _legacy_value_key(key: str, cfg: Pi0Config) -> str:
    """vlarl's earlier critic names (``value_head.body.<i>`` / ``value_head.out``) -> ``value_head.mlp.<i>``."""
    m = _LEGACY_VALUE.match(key)
    if m is None:
        return key
    index = int(m.group(2)) if m.group(2) is not None else 2 * len(cfg.value_hidden)
    return f"value_head.mlp.{index}.{m.group(3)}"


def _value_head_arch(shapes: dict[str, tuple[int, ...]], fmt: str, vlm_width: int) -> dict[str, Any]:
    """``value_hidden`` / ``value_after_vlm`` of a stored RLinf-layout critic (``value_head.mlp.<i>.weight``)."""
    layers = sorted((int(m.group(1)), shape) for k, shape in shapes.items()
                    if (name := from_external(k, fmt)) is not None and (m := _VALUE_LAYER.match(name)))
    if not layers:
        return {}
    widths = [shape[0] for _, shape in layers]
    return {"value_hidden": tuple(widths[:-1]), "value_after_vlm": layers[0][1][1] == vlm_width,
            "add_value_head": True}


def _layer_count(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    return len({k[len(prefix):].split(".", 1)[0] for k in shapes if k.startswith(prefix)})


def _arch_from_shapes(sh: dict[str, tuple[int, ...]], vision_heads: int | None) -> dict[str, Any]:
    """Every size the stored tensors (internal names) determine; Gemma's single KV head assumed (true of
    gemma_2b, gemma_300m and dummy). SigLIP's head count is not in any shape: So400m (width 1152) has 16,
    any other width needs ``vision_heads`` (an override), or this raises instead of guessing."""
    out: dict[str, Any] = {}
    lm, ex, vt = "vlm.language_model.layers.0.", "expert.layers.0.", "vlm.vision_tower."
    if _EMBED in sh:
        out["vocab_size"], out["vlm_width"] = sh[_EMBED]
    if (k := sh.get(lm + "self_attn.k_proj.weight")) and (q := sh.get(lm + "self_attn.q_proj.weight")):
        out.update(num_kv_heads=1, head_dim=k[0], num_heads=q[0] // k[0])
    if up := sh.get(lm + "mlp.up_proj.weight"):
        out["vlm_mlp"] = up[0]
    if up := sh.get(ex + "mlp.up_proj.weight"):
        out["expert_mlp"], out["expert_width"] = up
    if a := sh.get("action_in_proj.weight"):
        out["max_action_dim"] = a[1]
    if st := sh.get("state_proj.weight"):
        out["max_state_dim"] = st[1]
    if depth := _layer_count(sh, "vlm.language_model.layers."):
        out["vlm_depth"] = depth
    if fc1 := sh.get(vt + "encoder.layers.0.mlp.fc1.weight"):
        out["vision_mlp"] = fc1[0]
    if depth := _layer_count(sh, vt + "encoder.layers."):
        out["vision_depth"] = depth
    patch, pos = sh.get(vt + "embeddings.patch_embedding.weight"), sh.get(vt + "embeddings.position_embedding.weight")
    if patch and pos:  # image size AND patch size from the stored tensors (e.g. 32 px / patch 8)
        out.update(vision_width=patch[0], patch_size=patch[-1], image_size=math.isqrt(pos[0]) * patch[-1])
        if vision_heads is not None:
            out["vision_heads"] = vision_heads
        elif patch[0] != 1152:
            raise CheckpointError(f"The SigLIP tower is {patch[0]} wide (not So400m's 1152) and its head count is "
                                  "in no tensor shape or config file.",
                                  "Give it as an override: overrides={'vision_heads': <n>}.")
    return out


def _config_from_checkpoint(root: Path, fmt: str, shapes: dict[str, tuple[int, ...]],
                            vision_heads: int | None = None) -> Pi0Config:
    """Architecture of an external checkpoint (config.json + tensor shapes)."""
    if fmt == "vlarl":
        return Pi0Config.from_dict(pipeline.read_vlarl_config(root, FORMAT_VERSION)["model"])
    cfg_json = _read_json(root / "config.json") or {}
    if isinstance(cfg_json.get("vlarl_arch"), dict):  # written by our exporters (tiny / custom sizes)
        arch = Pi0Config.from_dict(cfg_json["vlarl_arch"])
        if fmt == "lerobot" and arch.is_pi05 and "discrete_state_input" not in cfg_json["vlarl_arch"]:
            arch = arch.replace(discrete_state_input=True, state_prompt_padded=True)  # see below
        found = _value_head_arch(shapes, fmt, arch.vlm_width)  # the stored critic decides ...
        if arch.vlm_width == arch.expert_width:  # ... except where its input width cannot tell VLM from expert
            found.pop("value_after_vlm", None)
        return arch.replace(**found)
    internal = {k2 for k in shapes if (k2 := from_external(k, fmt)) is not None}
    variant = _variant_from_keys(internal)
    values: dict[str, Any] = {}
    if fmt == "hf_pi0":
        vlm = cfg_json.get("vlm_config") or {}
        text = vlm.get("text_config") or {}
        vision = vlm.get("vision_config") or {}
        dit = cfg_json.get("dit_config") or {}
        for ours, src, name in [("vlm_width", text, "hidden_size"), ("vlm_depth", text, "num_hidden_layers"),
                                ("vlm_mlp", text, "intermediate_size"), ("num_heads", text, "num_attention_heads"),
                                ("num_kv_heads", text, "num_key_value_heads"), ("head_dim", text, "head_dim"),
                                ("vocab_size", text, "vocab_size"), ("vision_width", vision, "hidden_size"),
                                ("vision_depth", vision, "num_hidden_layers"),
                                ("vision_mlp", vision, "intermediate_size"),
                                ("vision_heads", vision, "num_attention_heads"), ("patch_size", vision, "patch_size"),
                                ("image_size", vision, "image_size"), ("expert_width", dit, "hidden_size"),
                                ("expert_mlp", dit, "intermediate_size"), ("action_horizon", cfg_json, "chunk_size"),
                                ("max_state_dim", cfg_json, "max_state_dim"),
                                ("max_action_dim", cfg_json, "max_action_dim")]:
            if name in src and src[name] is not None:
                values[ours] = src[name]
        return preset("full", variant, **values)
    pv = str(cfg_json.get("paligemma_variant", "gemma_2b"))
    ev = str(cfg_json.get("action_expert_variant", "gemma_300m"))
    known = ("gemma_2b", "gemma_300m", "dummy")  # openpi models/gemma.py variants (+ their _lora forms)
    if not pv.startswith(known) or not ev.startswith(known):
        raise CheckpointError(f"Unsupported openpi variants paligemma_variant={pv!r}, action_expert_variant={ev!r} "
                              f"in {root / 'config.json'}.", "Use gemma_2b + gemma_300m (pi0 / pi0.5) or dummy.")
    horizon = cfg_json.get("action_horizon", cfg_json.get("chunk_size"))
    if horizon is not None:
        values["action_horizon"] = int(horizon)
    if "tokenizer_max_length" in cfg_json:
        values["max_token_len"] = int(cfg_json["tokenizer_max_length"])
    internal_shapes = {mapped: shape for k, shape in shapes.items()
                       if (mapped := from_external(k, fmt)) is not None and not _is_known_unused(k, fmt)}
    values.update(_arch_from_shapes(internal_shapes, vision_heads))
    if fmt == "lerobot" and variant == "pi05":
        # LeRobot's pi0.5 always puts the discretised (padded) state in the prompt
        values.update(discrete_state_input=True, state_prompt_padded=True)
    values.update(_value_head_arch(shapes, fmt, values.get("vlm_width", preset("full", variant).vlm_width)))
    return preset("full", variant, **values)


# ---------------------------------------------------------------------------------------- load
def _fresh_init(policy: Any, missing: list[str]) -> None:
    """Initialise RL-only parameters that the checkpoint did not contain (as a fresh build would)."""
    cfg: Pi0Config = policy.cfg
    miss = set(missing)
    dev = policy.action_in_proj.weight.device
    dtype = policy.action_in_proj.weight.dtype
    if any(k.startswith("value_head.") for k in miss) and policy.value_head is not None:
        from vlarl_cli.policies.pi0.modeling import build_value_head

        policy.value_head = build_value_head(cfg).to(device=dev, dtype=dtype)
    if any(k.startswith("noise_head.") for k in miss) and policy.noise_head is not None:
        from vlarl_cli.policies.pi0.modeling import NoiseHead

        policy.noise_head = NoiseHead(cfg.expert_width, cfg.max_action_dim, cfg.noise_hidden).to(device=dev, dtype=dtype)
    init_lora_factors(policy, miss)


def _is_tied(key: str, fmt: str) -> bool:
    """The LM head that tied storage may hold instead of the token embedding (loaded only in its place)."""
    return key.endswith("lm_head.weight") and from_external(key, fmt) == _EMBED


def _plan(root: Path, fmt: str, cfg: Pi0Config, header: pipeline.TensorTable, params: dict[str, Tensor],
          report: pipeline.LoadReport) -> list[tuple[str, str]]:
    """``(file key, our key)`` of every file tensor to stream into ``params`` (nothing read yet). An RL head of
    another shape than the one configured (e.g. value_after_vlm changed, or RLinf's noise net) is skipped
    with a warning, and that head starts fresh."""

    def rename(ext: str) -> str | None:
        internal = from_external(ext, fmt)
        return None if internal is None else _legacy_value_key(internal, cfg)

    plan = pipeline.plan_copies(header, params, rename, report, optional=_RL_ONLY_PREFIXES, skip_misfit_optional=True,
                                ignore=lambda k: _is_known_unused(k, fmt) or _is_tied(k, fmt))
    pipeline.fill_tied(plan, header, params, report, _EMBED, [k for k in header if _is_tied(k, fmt)])
    rl_skipped = [k for k in report.skipped if (rename(k) or "").startswith(_RL_ONLY_PREFIXES)]
    if rl_skipped:
        warnings.warn(f"{root}: {len(rl_skipped)} RL-head tensors do not fit the configured heads and were "
                      f"NOT loaded ({pipeline.format_keys(rl_skipped, 4)}); those heads start fresh. Check "
                      "value_after_vlm / value_hidden against the checkpoint.", stacklevel=3)
    return plan


def load_policy(path: str | os.PathLike[str], *, format: str | None = None, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32, strict: bool = True, overrides: dict[str, Any] | None = None,
                norm_stats_path: str | os.PathLike[str] | None = None, asset_id: str | None = None,
                ) -> Pi0Policy:
    """Load a pi0-family checkpoint in any supported layout as a :class:`Pi0Policy`.

    Args:
        path: checkpoint folder.
        format: one of :data:`FORMATS`, or None to detect.
        device, dtype: where and in which precision to materialise the weights (fp32 / bf16).
        strict: raise :class:`CheckpointError` on missing (other than RL heads / LoRA), unexpected or
            mis-shaped keys. With ``strict=False`` they are reported in ``policy.load_report`` and the
            parameters that could not be loaded are zero-filled.
        overrides: Pi0Config fields to change (the RL settings: num_steps, noise_method, ...).
        norm_stats_path: explicit ``norm_stats.json``; default: searched in the folder.
        asset_id: e.g. ``physical-intelligence/libero`` (openpi ``assets/<asset_id>/``).
    """

    from vlarl_cli.policies.pi0.policy import Pi0Policy

    root, fmt, header = open_checkpoint_folder(
        path, family="pi0 / pi0.5", format=format, formats=FORMATS, detect=detect_format,
        looked_for="no vlarl_config.json, no pi0 config.json, no paligemma_with_expert.* / model.vlm.* weights")
    shapes = {k: v[0] for k, v in header.items()}
    cfg = _config_from_checkpoint(root, fmt, shapes, (overrides or {}).get("vision_heads"))
    if overrides:
        cfg = cfg.replace(**overrides)
    from vlarl_cli.policies.pi0.assets import resolve_norm_stats, resolve_prompt_tokenizer

    cfg, tokenizer_record = resolve_prompt_tokenizer(cfg, root, explicit=(overrides or {}).get("tokenizer"))
    norm_stats, ns_source = resolve_norm_stats(cfg, root, fmt, header, explicit=norm_stats_path,
                                               asset_id=asset_id)

    policy, params = pipeline.build_on_meta(lambda: Pi0Policy(cfg, norm_stats=norm_stats),
                                            lambda p: p.set_precision(dtype).to_empty(device=device))
    report = pipeline.LoadReport(fmt, details={"norm_stats": ns_source, "tokenizer": tokenizer_record})
    plan = _plan(root, fmt, cfg, header, params, report)
    pipeline.plan_absent(params, (internal for _, internal in plan), report, _RL_ONLY_PREFIXES)
    if strict:  # refused before a tensor is read
        report.raise_if_incomplete(root, f"pi0 model ({cfg.variant})",
                                   "Check the format / variant, or pass strict=False to load what matches.")
    pipeline.stream(plan, header, params, report)
    pipeline.settle_absent(policy, params, report, _fresh_init)
    policy.load_report = report
    policy.tokenizer_record = tokenizer_record
    policy.apply_trainability()
    return policy


# ---------------------------------------------------------------------------------------- save
def export_state_dict(policy: Any, fmt: str, *, include_unused: bool = True) -> dict[str, Tensor]:
    """The tensors that :func:`save_policy` writes for ``fmt`` (external names; LoRA merged if external)."""
    cfg: Pi0Config = policy.cfg
    if fmt == "vlarl":
        return {k: v.detach() for k, v in policy.state_dict().items()}
    if fmt == "hf_pi0" and cfg.is_pi05:
        raise CheckpointError("transformers' native pi0 has no pi0.5 (adaRMS) support, so a pi0.5 policy cannot "
                              "be exported as hf_pi0.", "Export as openpi or lerobot instead.")
    sd = merged_state_dict(policy)
    out = {to_external(k, fmt): v for k, v in sd.items()}
    if include_unused:
        ref = sd["action_in_proj.weight"]
        if fmt in ("openpi", "lerobot"):
            pre = "model." if fmt == "lerobot" else ""
            out[pre + _OPENPI_UNUSED[0]] = torch.zeros(cfg.vocab_size, cfg.expert_width, dtype=ref.dtype)
        else:
            out[_HF_UNUSED[0]] = torch.zeros(cfg.vocab_size, cfg.expert_width, dtype=ref.dtype)
    return out


def _arch_dict(cfg: Pi0Config) -> dict[str, Any]:
    return cfg.to_dict()


def _external_config(cfg: Pi0Config, fmt: str, precision: str) -> dict[str, Any]:
    if fmt == "openpi":
        return {"action_dim": cfg.max_action_dim, "action_horizon": cfg.action_horizon,
                "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m", "precision": precision,
                "pi05": cfg.is_pi05, "vlarl_arch": _arch_dict(cfg)}
    if fmt == "lerobot":
        return {"type": cfg.variant, "chunk_size": cfg.action_horizon, "n_action_steps": cfg.num_action_chunks,
                "max_state_dim": cfg.max_state_dim, "max_action_dim": cfg.max_action_dim,
                "tokenizer_max_length": cfg.max_token_len, "num_inference_steps": cfg.num_steps,
                "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
                "image_resolution": [cfg.image_size, cfg.image_size], "dtype": precision,
                "vlarl_arch": _arch_dict(cfg)}
    # hf_pi0: the fields of transformers' PI0Config
    return {
        "model_type": "pi0", "architectures": ["PI0ForConditionalGeneration"],
        "chunk_size": cfg.action_horizon, "max_state_dim": cfg.max_state_dim, "max_action_dim": cfg.max_action_dim,
        "num_inference_steps": cfg.num_steps, "min_period": cfg.min_period, "max_period": cfg.max_period,
        "vlm_config": {
            "model_type": "paligemma", "projection_dim": cfg.vlm_width, "image_token_id": cfg.vocab_size,
            "text_config": {"model_type": "gemma", "hidden_size": cfg.vlm_width, "num_hidden_layers": cfg.vlm_depth,
                            "intermediate_size": cfg.vlm_mlp, "num_attention_heads": cfg.num_heads,
                            "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
                            "vocab_size": cfg.vocab_size},
            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": cfg.vision_width,
                              "intermediate_size": cfg.vision_mlp, "num_hidden_layers": cfg.vision_depth,
                              "num_attention_heads": cfg.vision_heads, "patch_size": cfg.patch_size,
                              "image_size": cfg.image_size, "vision_use_head": False},
        },
        "dit_config": {"model_type": "gemma", "hidden_size": cfg.expert_width, "num_hidden_layers": cfg.vlm_depth,
                       "intermediate_size": cfg.expert_mlp, "num_attention_heads": cfg.num_heads,
                       "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim},
        "vlarl_arch": _arch_dict(cfg),
    }


def _copy_tokenizer(cfg: Pi0Config, folder: Path) -> None:
    """Ship the prompt tokenizer with the checkpoint (openpi / RLinf folders have none: a copy makes ours
    self-contained, and loading finds it first)."""
    from vlarl_cli.checkpoints.atomic import atomic_open

    src = Path(cfg.tokenizer)
    if cfg.tokenizer == "byte" or not src.is_file():
        return
    name = "tokenizer.json" if src.suffix == ".json" else "paligemma_tokenizer.model"
    with open(src, "rb") as fin, atomic_open(folder / name, "wb") as fout:
        fout.write(fin.read())


def save_policy(policy: Any, path: str | os.PathLike[str], *, format: str = "vlarl",
                dtype: torch.dtype | None = None, asset_id: str = DEFAULT_ASSET_ID,
                max_shard_bytes: int = pipeline.MAX_SHARD_BYTES) -> None:
    """Write ``policy`` to folder ``path`` in ``format`` (atomically: the folder appears complete or not at all).

    ``dtype`` casts floating tensors (e.g. ``torch.bfloat16`` for a compact export). External formats
    get LoRA merged and the upstream side files (``config.json``, norm stats where upstream keeps them).
    """
    from vlarl_cli.checkpoints.atomic import atomic_directory, atomic_write_json

    pipeline.check_format(format, FORMATS, "pi0")
    cfg: Pi0Config = policy.cfg
    if format == "lerobot" and cfg.is_pi05 and not (cfg.discrete_state_input and cfg.state_prompt_padded):
        warnings.warn("LeRobot's pi0.5 always puts the discretised, 32-padded state in the prompt; this policy does "
                      "not (discrete_state_input / state_prompt_padded off), so LeRobot will prompt it differently "
                      "than it was trained. vlarl reloads it as saved (config.json vlarl_arch).", stacklevel=2)
    tensors = pipeline.cast_for_save(export_state_dict(policy, format), dtype)
    precision = "bfloat16" if (dtype or policy.action_in_proj.weight.dtype) == torch.bfloat16 else "float32"
    norm_stats: dict[str, NormStats] = getattr(policy, "norm_stats", {}) or {}
    with atomic_directory(path) as tmp:
        pipeline.write_weights(tmp, tensors, max_shard_bytes=max_shard_bytes)
        if format == "vlarl":
            pipeline.write_vlarl_config(tmp, FAMILY, FORMAT_VERSION, cfg.to_dict())
        else:
            atomic_write_json(tmp / "config.json", _external_config(cfg, format, precision))
        _copy_tokenizer(cfg, tmp)
        if norm_stats:
            where = tmp / "assets" / asset_id / NORM_STATS_FILE if format == "openpi" else tmp / NORM_STATS_FILE
            where.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(where, norm_stats_to_json(norm_stats))


# ---------------------------------------------------------------------------------------- describe
def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Summary of a checkpoint folder from its headers and JSON files (no tensor data is read)."""
    root, fmt = pipeline.detect_or_refuse(path, detect_format, "pi0 / pi0.5", "Point at a folder written by "
                                          "openpi, RLinf, LeRobot, transformers or vlarl.")
    header = _header_shapes(weight_files(root))
    shapes = {k: v[0] for k, v in header.items()}
    cfg = _config_from_checkpoint(root, fmt, shapes)
    used = [k for k in shapes if from_external(k, fmt) is not None and not _is_known_unused(k, fmt)]
    has_embed = any(from_external(k, fmt) == _EMBED and not k.endswith("lm_head.weight") for k in used)
    count = sum(math.prod(shapes[k]) for k in used
                if not (has_embed and k.endswith("lm_head.weight") and from_external(k, fmt) == _EMBED))
    ns = find_norm_stats(root, DEFAULT_ASSET_ID)
    dtypes = sorted({v[1] for v in header.values()})
    return {"family": FAMILY, "format": fmt, "variant": cfg.variant, "num_parameters": count,
            "norm_stats": ns is not None, "norm_stats_path": os.fspath(ns) if ns else None,
            "dtypes": dtypes, "action_horizon": cfg.action_horizon, "image_size": cfg.image_size,
            "weight_files": [p.name for p in weight_files(root)]}


# ---------------------------------------------------------------------------------------- openpi JAX
def stage_orbax(src: str | os.PathLike[str], out: str | os.PathLike[str]) -> dict[str, Any]:
    """``vlarl convert``'s hook for openpi's JAX (orbax) checkpoints: ``src`` restaged into the new folder
    ``out`` in the openpi PyTorch layout (:func:`vlarl_cli.policies.pi0.jax_params.stage_as_openpi`)."""
    from vlarl_cli.policies.pi0.jax_params import stage_as_openpi

    return stage_as_openpi(Path(src), Path(out))
