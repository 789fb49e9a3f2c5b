"""OpenVLA-OFT checkpoints: detection, loading and saving in two layouts, with explicit key maps.

Layouts (``FORMATS``):

==============  ==============================================================================================
``vlarl``       ours: ``model.safetensors`` (+ ``model.safetensors.index.json`` shards when large),
                ``vlarl_config.json`` ``{"family": "openvla_oft", "format_version": 1, "model": {OftConfig}}``,
                ``dataset_statistics.json``. Internal (transformers) key names, LoRA factors kept unmerged.
``openvla_hf``  the OpenVLA / OpenVLA-OFT / RLinf Hugging Face folder: ``config.json`` (``model_type: openvla``,
                ``text_config``, ``n_action_bins``, ``norm_stats``), sharded ``model-0000x-of-0000y.safetensors``
                + ``model.safetensors.index.json``, ``dataset_statistics.json``, tokenizer files. Vision keys are
                timm names (openvla-oft ``PrismaticVisionBackbone``); LoRA merged on export.
==============  ==============================================================================================

Key map internal (transformers modules) <-> ``openvla_hf`` (timm), per tower (``F`` =
``vision_backbone.featurizer.`` DINOv2, ``G`` = ``vision_backbone.fused_featurizer.`` SigLIP):

==============================================  =========================================================
``F embeddings.cls_token``                      ``F cls_token`` (on export + ``position_embeddings[:, 0]``)
``F embeddings.register_tokens``                ``F reg_token``
``F embeddings.position_embeddings [1,1+N,D]``  ``F pos_embed [1,N,D]`` (timm DINOv2-reg gives the CLS no
                                                position: a zero row is prepended on load)
``F embeddings.patch_embeddings.projection.``   ``F patch_embed.proj.``
``F encoder.layer.n.attention.{q,k,v}_proj.``   thirds of ``F blocks.n.attn.qkv.`` (rows q | k | v)
``F encoder.layer.n.attention.o_proj.``         ``F blocks.n.attn.proj.``
``F encoder.layer.n.layer_scale{1,2}.lambda1``  ``F blocks.n.ls{1,2}.scale_factor`` (OpenVLA's renamed
                                                ``gamma``; ``gamma`` accepted on load)
``F encoder.layer.n.{norm1,norm2,mlp.fc1,mlp.fc2}.``  ``F blocks.n.`` same names
``F layernorm.``                                ``F norm.``
``G embeddings.patch_embedding.``               ``G patch_embed.proj.``
``G embeddings.position_embedding.weight``      ``G pos_embed`` (``[1, N, D]`` <-> ``[N, D]``)
``G encoder.layers.n.layer_norm{1,2}.``         ``G blocks.n.norm{1,2}.``
``G encoder.layers.n.self_attn.{q,k,v}_proj.``  thirds of ``G blocks.n.attn.qkv.``
``G encoder.layers.n.self_attn.out_proj.``      ``G blocks.n.attn.proj.``
``G encoder.layers.n.mlp.``                     ``G blocks.n.mlp.``
``G post_layernorm.``                           ``G norm.``
``G head.probe``                                ``G attn_pool.latent``
``G head.attention.in_proj_{weight,bias}``      ``G attn_pool.q.`` ++ ``G attn_pool.kv.`` (rows)
``G head.attention.out_proj.`` / ``head.layernorm.`` / ``head.mlp.``  ``G attn_pool.proj.`` / ``.norm.`` / ``.mlp.``
``projector.``, ``language_model.``, ``value_head.``  unchanged
==============================================  =========================================================

Parameters that exist only on our side (transformers' DINOv2 ``mask_token``, unused without masked
inputs; the RL value head; LoRA factors) are freshly initialised when absent and listed in
``policy.load_report.initialized``. Loading builds the model on the meta device, materialises it
on the target device and fills it tensor by tensor from ``safetensors.safe_open``. Any other missing
or unexpected key, or a shape mismatch, raises :class:`CheckpointError` naming the keys when
``strict`` (the default).

The OFT authors' side files (``action_head--*_checkpoint.pt``, ``proprio_projector--*_checkpoint.pt``,
:mod:`~vlarl_cli.policies.openvla_oft.side_files`) route the checkpoint to ``implement_version:
official`` with the L1-regression head and the proprio token; a recipe that asks for RLinf's token
head on such a folder is refused (it would decode an L1-trained model through the LM head). Their
tensors load into ``action_head.*`` / ``proprio_projector.*``; ``openvla_hf`` export writes them back
as side files. Dataset statistics are required: a checkpoint without them is refused with the places
looked at (never identity actions), except a ``vlarl`` folder saved from a model that had none.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vlarl_cli.checkpoints import pipeline
from vlarl_cli.checkpoints.detect import open_checkpoint_folder, weight_files
from vlarl_cli.checkpoints.detect import read_json_object as _read_json
from vlarl_cli.checkpoints.detect import tensor_table as _header
from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.lora import init_lora_factors, merge_lora_for_export, merged_state_dict
from vlarl_cli.policies.openvla_oft.config import OftConfig, preset
from vlarl_cli.policies.openvla_oft.processing import DATASET_STATISTICS_FILE, load_dataset_statistics
from vlarl_cli.policies.openvla_oft.side_files import (
    ACTION_HEAD,
    PROPRIO_PROJECTOR,
    config_from_side_files,
    find_side_files,
    load_side_file,
    side_file_name,
)

__all__ = ["FORMATS", "describe", "detect_format", "export_state_dict", "import_rules", "load_policy",
           "merge_lora_for_export", "save_policy"]

FORMATS: tuple[str, ...] = ("vlarl", "openvla_hf")
FAMILY = "openvla_oft"
FORMAT_VERSION = 1
_DINO = "vision_backbone.featurizer."
_SIGLIP = "vision_backbone.fused_featurizer."
# Internal-only parameters: fresh when a checkpoint lacks them (never an error).
_FRESH_PREFIXES = ("value_head.",)
_FRESH_KEYS = (_DINO + "embeddings.mask_token", "actor_logstd")
_SIDE_PREFIXES = (ACTION_HEAD + ".", PROPRIO_PROJECTOR + ".")


# ---------------------------------------------------------------------------------------- key maps
@dataclass(frozen=True)
class Rule:
    """How one internal tensor is made from external tensors.

    ``kind``: ``copy`` (one tensor as is), ``third`` (rows ``part``/3 of a fused qkv), ``pos_cls``
    (prepend a zero CLS row), ``squeeze`` (drop the leading 1), ``concat`` (rows of several tensors).
    ``ext``: the external keys read (alternatives for ``copy``: the first present wins).
    """

    kind: str
    ext: tuple[str, ...]
    part: int = 0


#: ``(our key, rule, file keys)``: one parameter of a load plan
_Step = tuple[str, Rule, list[str]]


def import_rules(cfg: OftConfig) -> dict[str, Rule]:
    """Internal key -> :class:`Rule` for the ``openvla_hf`` layout (vision towers only; the rest is
    identity and handled by :func:`_rule_for`)."""
    r: dict[str, Rule] = {}

    def copy(internal: str, *external: str) -> None:
        r[internal] = Rule("copy", tuple(external))

    f, g = _DINO, _SIGLIP
    copy(f + "embeddings.cls_token", f + "cls_token")
    if cfg.dino_registers > 0:
        copy(f + "embeddings.register_tokens", f + "reg_token")
    r[f + "embeddings.position_embeddings"] = Rule("pos_cls", (f + "pos_embed",))
    for p in ("weight", "bias"):
        copy(f"{f}embeddings.patch_embeddings.projection.{p}", f"{f}patch_embed.proj.{p}")
        copy(f"{f}layernorm.{p}", f"{f}norm.{p}")
        for n in range(cfg.dino_depth):
            src, dst = f"{f}blocks.{n}.", f"{f}encoder.layer.{n}."
            for name in ("norm1", "norm2", "mlp.fc1", "mlp.fc2"):
                copy(f"{dst}{name}.{p}", f"{src}{name}.{p}")
            for i, q in enumerate(("q_proj", "k_proj", "v_proj")):
                r[f"{dst}attention.{q}.{p}"] = Rule("third", (f"{src}attn.qkv.{p}",), i)
            copy(f"{dst}attention.o_proj.{p}", f"{src}attn.proj.{p}")
        copy(f"{g}embeddings.patch_embedding.{p}", f"{g}patch_embed.proj.{p}")
        copy(f"{g}post_layernorm.{p}", f"{g}norm.{p}")
        for n in range(cfg.siglip_depth):
            src, dst = f"{g}blocks.{n}.", f"{g}encoder.layers.{n}."
            copy(f"{dst}layer_norm1.{p}", f"{src}norm1.{p}")
            copy(f"{dst}layer_norm2.{p}", f"{src}norm2.{p}")
            for name in ("mlp.fc1", "mlp.fc2"):
                copy(f"{dst}{name}.{p}", f"{src}{name}.{p}")
            for i, q in enumerate(("q_proj", "k_proj", "v_proj")):
                r[f"{dst}self_attn.{q}.{p}"] = Rule("third", (f"{src}attn.qkv.{p}",), i)
            copy(f"{dst}self_attn.out_proj.{p}", f"{src}attn.proj.{p}")
        if cfg.siglip_head:
            r[f"{g}head.attention.in_proj_{p}"] = Rule("concat", (f"{g}attn_pool.q.{p}", f"{g}attn_pool.kv.{p}"))
            copy(f"{g}head.attention.out_proj.{p}", f"{g}attn_pool.proj.{p}")
            copy(f"{g}head.layernorm.{p}", f"{g}attn_pool.norm.{p}")
            for name in ("mlp.fc1", "mlp.fc2"):
                copy(f"{g}head.{name}.{p}", f"{g}attn_pool.{name}.{p}")
    for n in range(cfg.dino_depth):
        for s in (1, 2):  # OpenVLA renames timm's LayerScale.gamma to scale_factor (HF overwrote "gamma")
            copy(f"{f}encoder.layer.{n}.layer_scale{s}.lambda1", f"{f}blocks.{n}.ls{s}.scale_factor",
                 f"{f}blocks.{n}.ls{s}.gamma")
    r[g + "embeddings.position_embedding.weight"] = Rule("squeeze", (g + "pos_embed",))
    if cfg.siglip_head:
        copy(g + "head.probe", g + "attn_pool.latent")
    return r


def _rule_for(key: str, fmt: str, rules: dict[str, Rule]) -> Rule | None:
    """The rule of internal ``key`` (None: internal-only key such as ``mask_token``)."""
    if fmt == "vlarl":
        return Rule("copy", (key,))
    if key in rules:
        return rules[key]
    if key.startswith(_DINO) or key.startswith(_SIGLIP):
        return None
    return Rule("copy", (key,))


def _build(rule: Rule, tensors: list[Tensor]) -> Tensor:
    if rule.kind == "copy":
        return tensors[0]
    if rule.kind == "third":
        t = tensors[0]
        n = t.shape[0] // 3
        return t[rule.part * n: (rule.part + 1) * n]
    if rule.kind == "pos_cls":
        t = tensors[0]
        return torch.cat([t.new_zeros(t.shape[0], 1, t.shape[2]), t], dim=1)
    if rule.kind == "squeeze":
        return tensors[0].reshape(tensors[0].shape[1:]) if tensors[0].dim() == 3 else tensors[0]
    if rule.kind == "concat":
        return torch.cat(tensors, dim=0)
    raise ValueError(rule.kind)


def _expected_shape(rule: Rule, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    s = shapes[0]
    if rule.kind == "third":
        return (s[0] // 3, *s[1:])
    if rule.kind == "pos_cls":
        return (s[0], s[1] + 1, s[2])
    if rule.kind == "squeeze":
        return s[1:] if len(s) == 3 else s
    if rule.kind == "concat":
        return (sum(x[0] for x in shapes), *s[1:])
    return s


def export_state_dict(policy: nn.Module, fmt: str) -> dict[str, Tensor]:
    """The tensors :func:`save_policy` writes for ``fmt`` (external names; LoRA merged for ``openvla_hf``)."""
    cfg: OftConfig = policy.cfg  # type: ignore[assignment]
    if fmt == "vlarl":
        return {k: v.detach() for k, v in policy.state_dict().items()}
    pipeline.check_format(fmt, FORMATS, "OpenVLA-OFT")
    sd = merged_state_dict(policy)
    # side-file components go to their own files (save_policy); the RL log-std has no upstream home
    sd = {k: v for k, v in sd.items() if not k.startswith(_SIDE_PREFIXES) and k != "actor_logstd"}
    rules = import_rules(cfg)
    out: dict[str, Tensor] = {}
    thirds: dict[str, dict[int, Tensor]] = {}
    for key, value in sd.items():
        rule = _rule_for(key, fmt, rules)
        if rule is None:
            continue  # internal-only (mask_token)
        if rule.kind == "copy":
            if key == _DINO + "embeddings.cls_token":
                # fold the CLS position into the token: timm DINOv2-reg has no CLS position
                value = value + sd[_DINO + "embeddings.position_embeddings"][:, :1]
            out[rule.ext[0]] = value
        elif rule.kind == "third":
            thirds.setdefault(rule.ext[0], {})[rule.part] = value
        elif rule.kind == "pos_cls":
            out[rule.ext[0]] = value[:, 1:]
        elif rule.kind == "squeeze":
            out[rule.ext[0]] = value.unsqueeze(0)
        elif rule.kind == "concat":
            d = value.shape[0] // 3
            out[rule.ext[0]], out[rule.ext[1]] = value[:d], value[d:]
    for ext, parts in thirds.items():
        out[ext] = torch.cat([parts[0], parts[1], parts[2]], dim=0)
    return {k: v.contiguous() for k, v in out.items()}


# ---------------------------------------------------------------------------------------- files
def detect_format(path: str | os.PathLike[str]) -> str | None:
    """The layout of an OpenVLA-OFT checkpoint folder, or None (cheap: file names, JSON, headers)."""
    return pipeline.detect_layout(path, FAMILY, _detect_external)


def _detect_external(root: Path, cfg: dict[str, Any]) -> str | None:
    if cfg.get("model_type") == "openvla":
        return "openvla_hf"
    try:
        names = set(_header(weight_files(root)))
    except CheckpointError:
        return None
    if any(n.startswith(_DINO) for n in names) and any(n.startswith("language_model.") for n in names):
        return "openvla_hf"
    return None


# ---------------------------------------------------------------------------------------- architecture
def _count_blocks(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    idx = {int(k[len(prefix):].split(".")[0]) for k in shapes if k.startswith(prefix)}
    return max(idx) + 1 if idx else 0


def _config_from_checkpoint(root: Path, fmt: str, shapes: dict[str, tuple[int, ...]]) -> OftConfig:
    if fmt == "vlarl":
        return OftConfig.from_dict(pipeline.read_vlarl_config(root, FORMAT_VERSION)["model"])
    cfg_json = _read_json(root / "config.json") or {}
    if isinstance(cfg_json.get("vlarl_arch"), dict):  # written by our exporter (tiny / custom sizes)
        return OftConfig.from_dict(cfg_json["vlarl_arch"])
    vb = str(cfg_json.get("vision_backbone_id", "dinosiglip-vit-so-224px"))
    if vb != "dinosiglip-vit-so-224px" or cfg_json.get("use_fused_vision_backbone") is False:
        raise CheckpointError(f"Unsupported OpenVLA vision backbone {vb!r} in {root / 'config.json'}.",
                              "Only dinosiglip-vit-so-224px (DINOv2 + SigLIP, 224 px) is supported.")
    values: dict[str, Any] = {}
    text = cfg_json.get("text_config") or {}
    for ours, name in (("llm_width", "hidden_size"), ("llm_depth", "num_hidden_layers"), ("llm_mlp", "intermediate_size"),
                       ("llm_heads", "num_attention_heads"), ("llm_kv_heads", "num_key_value_heads"),
                       ("vocab_size", "vocab_size"), ("rms_norm_eps", "rms_norm_eps"),
                       ("max_position_embeddings", "max_position_embeddings")):
        if text.get(name) is not None:
            values[ours] = text[name]
    if "llm_heads" in values and "llm_kv_heads" not in values:
        values["llm_kv_heads"] = values["llm_heads"]
    for ours, name in (("n_action_bins", "n_action_bins"), ("pad_to_multiple_of", "pad_to_multiple_of"),
                       ("pad_token_id", "pad_token_id")):
        if cfg_json.get(name) is not None:
            values[ours] = int(cfg_json[name])
    emb = shapes.get("language_model.model.embed_tokens.weight")
    if emb is not None:
        values["vocab_size"], values["llm_width"] = emb
    n_dino = _count_blocks(shapes, _DINO + "blocks.")
    n_siglip = _count_blocks(shapes, _SIGLIP + "blocks.")
    if n_dino:
        values["dino_depth"] = n_dino
    if n_siglip:
        values["siglip_depth"] = n_siglip
    if (s := shapes.get(_DINO + "patch_embed.proj.weight")) is not None:
        values["dino_width"], values["patch_size"] = s[0], s[-1]
    if (s := shapes.get(_DINO + "pos_embed")) is not None:
        values["image_size"] = math.isqrt(s[1]) * values.get("patch_size", 14)
    if (s := shapes.get(_DINO + "reg_token")) is not None:
        values["dino_registers"] = s[1]
    elif shapes:
        values["dino_registers"] = 0
    if (s := shapes.get(_SIGLIP + "patch_embed.proj.weight")) is not None:
        values["siglip_width"] = s[0]
    if (s := shapes.get(_SIGLIP + "blocks.0.mlp.fc1.weight")) is not None:
        values["siglip_mlp"] = s[0]
    if shapes:
        values["siglip_head"] = (_SIGLIP + "attn_pool.latent") in shapes
    return preset("full", **values)


# ---------------------------------------------------------------------------------------- load
def _fresh_init(policy: Any, fresh: list[str]) -> None:
    """Initialise internal-only parameters a checkpoint did not contain, as a fresh build would."""
    miss = set(fresh)
    with torch.no_grad():
        if any(k.startswith("value_head.") for k in miss) and policy.value_head is not None:
            from vlarl_cli.policies.openvla_oft.heads import OftCritic

            cfg: OftConfig = policy.cfg
            ref = policy.projector.fc1.weight
            policy.value_head = OftCritic(cfg.llm_width, cfg.value_hidden, cfg.num_values).to(
                device=ref.device, dtype=ref.dtype)
        if "actor_logstd" in miss and policy.actor_logstd is not None:
            policy.actor_logstd.fill_(policy.cfg.logstd_init)
        for name, p in policy.named_parameters():
            if name in miss and name in _FRESH_KEYS:
                p.zero_()  # transformers initialises the DINOv2 mask token to zeros
    init_lora_factors(policy, miss)


def _find_statistics(root: Path, cfg_json: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    f = root / DATASET_STATISTICS_FILE
    if f.is_file():
        return load_dataset_statistics(f), os.fspath(f)
    if cfg_json and isinstance(cfg_json.get("norm_stats"), dict) and cfg_json["norm_stats"]:
        return dict(cfg_json["norm_stats"]), os.fspath(root / "config.json")
    return None, None


def _refuse_old_critic(root: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """Strict loading refuses the critic of earlier vlarl versions: its output bias has no place in RLinf's."""
    if "value_head.out.weight" in shapes:
        raise CheckpointError(f"{root} holds a critic in the layout of earlier vlarl versions (value_head.body.* / "
                              "value_head.out.*); the OpenVLA-OFT critic is now RLinf's (value_head.mlp.*, no output "
                              "bias) and that output bias has no place in it.",
                              "Load with strict=False: the old critic is reported as unexpected and a fresh "
                              "one starts (the actor weights load unchanged).")


def load_policy(path: str | os.PathLike[str], *, format: str | None = None, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32, strict: bool = True, overrides: dict[str, Any] | None = None,
                dataset_statistics_path: str | os.PathLike[str] | None = None, settings: Any = None,
                lora_path: str | os.PathLike[str] | None = None) -> nn.Module:
    """Load an OpenVLA-OFT checkpoint in any supported layout as an :class:`OftPolicy`.

    Args:
        path: checkpoint folder.
        format: one of :data:`FORMATS`, or None to detect.
        device, dtype: where and in which precision to materialise the weights.
        strict: raise :class:`CheckpointError` on missing (other than internal-only / RL / LoRA keys),
            unexpected or mis-shaped keys; with ``strict=False`` they are listed in
            ``policy.load_report`` and the parameters that could not be loaded are zero-filled.
        overrides: OftConfig fields to change (the RL settings: num_action_chunks, temperature, ...).
        dataset_statistics_path: explicit ``dataset_statistics.json``; default: the folder's, else the
            ``norm_stats`` of ``config.json``.
        settings: the recipe's :class:`~vlarl_cli.policies.openvla_oft.config.ModelSettings` (RLinf's
            ``center_crop`` / ``image_size`` / ``vocab_size`` / ``hidden_size`` are applied / checked).
        lora_path: a PEFT LoRA adapter folder (RLinf ``lora_path``, e.g. ``RLinf-OpenVLAOFT-*-Base-Lora``
            adapters) merged into the base weights as they are read, in the upstream key space (so a fused
            timm ``qkv`` adapter is merged before the split): ``W' = W + scaling * B @ A``. Every adapter
            tensor must find its base weight. With ``is_lora`` a fresh LoRA then trains on top of the
            merged weights: the policy at step 0 is base + adapter exactly.
    """

    from vlarl_cli.policies.openvla_oft.policy import OftPolicy

    root, fmt, header = open_checkpoint_folder(
        path, family="OpenVLA-OFT", format=format, formats=FORMATS, detect=detect_format,
        looked_for="no vlarl_config.json, no config.json with model_type openvla, no vision_backbone.* + "
        "language_model.* weights")
    shapes = {k: v[0] for k, v in header.items()}
    if strict:
        _refuse_old_critic(root, shapes)
    side = {c: load_side_file(p) for c, p in find_side_files(root).items()} if fmt == "openvla_hf" else {}
    cfg = _resolve_config(root, fmt, shapes, side, overrides or {}, settings)
    stats, stats_src = _statistics(root, fmt, dataset_statistics_path)
    adapter = _read_adapter(root, fmt, lora_path)
    policy, params = pipeline.build_on_meta(lambda: OftPolicy(cfg, dataset_statistics=stats),
                                            lambda p: p.to(dtype).to_empty(device=device))
    report = pipeline.LoadReport(fmt, details={
        "dataset_statistics": stats_src, "implement_version": cfg.implement_version, "action_head": cfg.action_head,
        "side_files": sorted(side), "lora_adapter": os.fspath(lora_path) if adapter and lora_path is not None else None})
    side_flat = {f"{c}.{k}": v for c, d in side.items() for k, v in d.items()}
    filled = _fill_side_files(side_flat, params, report)  # in memory already (read for the config)
    plan, misfits = _plan(fmt, import_rules(cfg), header, params, filled, report)
    report.unexpected += [f"{k} (side file)" for k in side_flat if k not in params]
    _check_adapter(root, lora_path, adapter, plan)
    pipeline.plan_absent(params, filled | {key for key, _, _ in plan + misfits}, report, _FRESH_PREFIXES, _FRESH_KEYS)
    if strict:  # refused before a tensor is read
        report.raise_if_incomplete(root, "OpenVLA-OFT model",
                                   "Check the format / architecture, or pass strict=False to load what matches.")
    _stream_rules(plan, header, params, adapter, report)
    pipeline.zero_fill(params, [key for key, _, _ in misfits])  # not strict: zeros, never to_empty memory
    pipeline.settle_absent(policy, params, report, _fresh_init)
    policy.load_report = report
    policy.apply_trainability()
    return policy


def _check_adapter(root: Path, lora_path: str | os.PathLike[str] | None, adapter: dict[str, Any],
                   plan: list[_Step]) -> None:
    """Refuse an adapter tensor whose base weight the plan does not load (before any tensor is read)."""
    left = sorted(set(adapter) - {src for _, _, srcs in plan for src in srcs})
    if left:
        raise CheckpointError(f"The LoRA adapter {lora_path} adapts {len(left)} weight(s) the base checkpoint {root} "
                              f"does not load: {pipeline.format_keys(left)}.", "Use the adapter trained on this base model.")


def _resolve_config(root: Path, fmt: str, shapes: dict[str, tuple[int, ...]], side: dict[str, Any],
                    overrides: dict[str, Any], settings: Any) -> OftConfig:
    """The architecture: the checkpoint's, the route its side files imply, the run's overrides and settings,
    and the prompt tokenizer the folder ships."""
    cfg = _config_from_checkpoint(root, fmt, shapes)
    implied = config_from_side_files(side, overrides.get("action_dim", cfg.action_dim))
    _check_route(root, implied, overrides)
    if implied.get("action_head") == "l1_regression" and "num_images_in_input" not in overrides:
        implied["num_images_in_input"] = 2  # the OFT authors' LIBERO models: third-person + wrist
    cfg = cfg.replace(**implied)
    if overrides:
        cfg = cfg.replace(**overrides)
    if settings is not None:
        settings.check_architecture(cfg)
        # the OFT authors train their L1 models with image augmentation and crop at evaluation
        cfg = settings.resolve_center_crop(cfg, default=cfg.action_head == "l1_regression")
    tok_file = root / "tokenizer.json"
    if cfg.tokenizer == "byte" and tok_file.is_file():
        cfg = cfg.replace(tokenizer=os.fspath(tok_file))
    elif cfg.tokenizer == "byte" and (root / "tokenizer_config.json").is_file():
        cfg = cfg.replace(tokenizer=os.fspath(root))  # e.g. only tokenizer.model: AutoTokenizer, offline
    elif cfg.tokenizer == "byte" and cfg.vocab_size > 4096:
        warnings.warn(f"{root} has a {cfg.vocab_size}-token vocabulary but no tokenizer.json; prompts will be "
                      "byte-tokenised, which the pretrained model does not understand. Set tokenizer_path to the "
                      "OpenVLA Llama-2 tokenizer.json.", stacklevel=3)
    return cfg


def _statistics(root: Path, fmt: str, explicit: str | os.PathLike[str] | None
                ) -> tuple[dict[str, Any] | None, str | None]:
    """``(dataset statistics, where from)``: ``explicit``, else the folder's; none only for a ``vlarl`` folder
    saved from a model that had none (identity actions), never silently."""
    if explicit is not None:
        return load_dataset_statistics(explicit), os.fspath(explicit)
    stats, stats_src = _find_statistics(root, _read_json(root / "config.json"))
    if stats is None and not (fmt == "vlarl" and (_read_json(root / pipeline.VLARL_CONFIG) or {}).get("identity_actions")):
        raise CheckpointError(f"No dataset statistics for {root}: looked for {root / DATASET_STATISTICS_FILE} and "
                              f"the norm_stats of {root / 'config.json'}. Without them the actions cannot be "
                              "un-normalised.", "Copy the checkpoint's dataset_statistics.json into the folder or "
                              "set actor.model.norm_stats_path.")
    return stats, stats_src


def _fill_side_files(side: dict[str, Tensor], params: dict[str, Tensor], report: pipeline.LoadReport) -> set[str]:
    """The OFT authors' side-file tensors (``action_head.*`` / ``proprio_projector.*``) into ``params``."""
    filled: set[str] = set()
    with torch.no_grad():
        for key in [k for k in params if k in side]:
            if tuple(params[key].shape) != tuple(side[key].shape):
                report.mismatched.append(f"{key} {list(side[key].shape)} vs model {list(params[key].shape)}")
                continue
            params[key].copy_(side[key].to(params[key].dtype))
            filled.add(key)
    report.loaded += len(filled)
    return filled


def _plan(fmt: str, rules: dict[str, Rule], header: pipeline.TensorTable, params: dict[str, Tensor],
          filled: set[str], report: pipeline.LoadReport) -> tuple[list[_Step], list[_Step]]:
    """``(plan, misfits)``: ``(our key, rule, file keys)`` of every parameter the file fills, and of those whose
    file tensors would build another shape (``report.mismatched``); file tensors no rule reads go to
    ``report.unexpected``. Decided from the header alone: no tensor is read."""
    plan: list[_Step] = []
    misfits: list[_Step] = []
    for key in params:
        if key in filled:
            continue
        rule = None if fmt == "openvla_hf" and key.startswith(_SIDE_PREFIXES) else _rule_for(key, fmt, rules)
        if rule is None:
            continue
        if rule.kind == "copy":
            srcs = [e for e in rule.ext if e in header][:1]
        else:
            srcs = list(rule.ext) if all(e in header for e in rule.ext) else []
        if not srcs:
            continue
        expect = _expected_shape(rule, [header[src][0] for src in srcs])
        if tuple(params[key].shape) != expect:
            report.mismatched.append(f"{key} <- {srcs[0]} {list(expect)} vs model {list(params[key].shape)}")
            misfits.append((key, rule, srcs))
        else:
            plan.append((key, rule, srcs))
    consumed = {src for _, _, srcs in plan + misfits for src in srcs}
    report.unexpected += [k for k in header if k not in consumed and not _ignorable(k, fmt, rules)]
    return plan, misfits


def _stream_rules(plan: list[_Step], header: pipeline.TensorTable, params: dict[str, Tensor],
                  adapter: dict[str, Any], report: pipeline.LoadReport) -> None:
    """Build each planned parameter from its file tensors (a PEFT adapter merged into them as they are read)."""
    with torch.no_grad(), pipeline.TensorReader() as reader:
        for key, rule, srcs in plan:
            tensors = []
            for s in srcs:
                tensor = reader.get(header[s][2], s)
                if s in adapter:
                    tensor = (tensor.float() + adapter[s].delta()).to(tensor.dtype)
                tensors.append(tensor)
            params[key].copy_(_build(rule, tensors).to(params[key].dtype))
            report.loaded += 1


def _read_adapter(root: Path, fmt: str, lora_path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The PEFT adapter to merge (:func:`vlarl_cli.policies.lora.read_peft_adapter`), or none."""
    if lora_path is None:
        if (root / "adapter_config.json").is_file():
            warnings.warn(f"{root} also holds a PEFT adapter (adapter_config.json); like RLinf, vlarl loads the "
                          "folder's full weights and does not apply it. Set actor.model.lora_path to apply an "
                          "adapter.", stacklevel=3)
        return {}
    if fmt != "openvla_hf":
        raise CheckpointError(f"lora_path needs a base checkpoint in the upstream (openvla_hf) layout; {root} is {fmt}.",
                              "Point model_path at the OpenVLA-OFT Hugging Face folder the adapter was trained on.")
    from vlarl_cli.policies.lora import read_peft_adapter

    return dict(read_peft_adapter(lora_path))


def _check_route(root: Path, implied: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Refuse a recipe that would decode a checkpoint through a head it was not trained with."""
    if implied.get("action_head") == "l1_regression":
        asked = overrides.get("implement_version"), overrides.get("action_head")
        if asked[0] == "rlinf" or asked[1] == "tokens":
            raise CheckpointError(f"{root} has an L1-regression action head (action_head--*_checkpoint.pt, the OFT "
                                  "authors' layout) but the recipe asks for RLinf's 256-bin token head; its LM head "
                                  "was never trained to emit action tokens, the actions would be garbage.",
                                  "Set actor.model.implement_version: official (or leave it unset).")
    if implied.get("use_proprio") and overrides.get("use_proprio") is False:
        raise CheckpointError(f"{root} has a proprio projector (proprio_projector--*_checkpoint.pt): the model was "
                              "trained with a proprio token, the recipe sets use_proprio: False.",
                              "Set actor.model.use_proprio: True (or leave it unset).")


def _ignorable(key: str, fmt: str, rules: dict[str, Rule]) -> bool:
    """External tensors that are known and deliberately not loaded: timm's original LayerScale name
    ``gamma`` when the file also holds OpenVLA's ``scale_factor`` copy."""
    if fmt != "openvla_hf" or not key.endswith((".ls1.gamma", ".ls2.gamma")):
        return False
    return key[: -len("gamma")] + "scale_factor" in {e for r in rules.values() for e in r.ext}


# ---------------------------------------------------------------------------------------- save
def _openvla_config(cfg: OftConfig, precision: str, stats: dict[str, Any]) -> dict[str, Any]:
    """``config.json`` fields of the OpenVLA HF layout (openvla-oft ``OpenVLAConfig``) + ``vlarl_arch``."""
    return {
        "model_type": "openvla", "architectures": ["OpenVLAForActionPrediction"],
        "vision_backbone_id": "dinosiglip-vit-so-224px", "llm_backbone_id": "llama2-7b-pure",
        "arch_specifier": "no-align+fused-gelu-mlp", "use_fused_vision_backbone": True,
        "image_resize_strategy": "resize-naive", "image_sizes": [cfg.image_size, cfg.image_size],
        "timm_model_ids": ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
        "timm_override_act_layers": [None, None], "llm_max_length": cfg.max_position_embeddings,
        "pad_token_id": cfg.pad_token_id, "pad_to_multiple_of": cfg.pad_to_multiple_of,
        "n_action_bins": cfg.n_action_bins, "output_projector_states": False, "torch_dtype": precision,
        "norm_stats": stats,
        "text_config": {"model_type": "llama", "vocab_size": cfg.vocab_size, "hidden_size": cfg.llm_width,
                        "intermediate_size": cfg.llm_mlp, "num_hidden_layers": cfg.llm_depth,
                        "num_attention_heads": cfg.llm_heads, "num_key_value_heads": cfg.llm_kv_heads,
                        "rms_norm_eps": cfg.rms_norm_eps, "max_position_embeddings": cfg.max_position_embeddings,
                        "pad_token_id": cfg.pad_token_id, "torch_dtype": precision},
        "vlarl_arch": cfg.to_dict(),
    }


def save_policy(policy: nn.Module, path: str | os.PathLike[str], *, format: str = "vlarl",
                dtype: torch.dtype | None = None, max_shard_bytes: int = pipeline.MAX_SHARD_BYTES) -> None:
    """Write ``policy`` to folder ``path`` in ``format`` (atomically: complete or absent).

    ``dtype`` casts floating tensors (e.g. ``torch.bfloat16``). Both layouts get
    ``dataset_statistics.json`` when the policy has statistics; ``openvla_hf`` also the upstream
    ``config.json`` and merged LoRA.
    """
    from vlarl_cli.checkpoints.atomic import atomic_directory, atomic_write_json

    pipeline.check_format(format, FORMATS, "OpenVLA-OFT")
    cfg: OftConfig = policy.cfg  # type: ignore[assignment]
    weight: Tensor = policy.projector.fc1.weight  # type: ignore[union-attr, assignment]
    tensors = pipeline.cast_for_save(export_state_dict(policy, format), dtype)
    precision = "bfloat16" if (dtype or weight.dtype) == torch.bfloat16 else "float32"
    stats: dict[str, Any] = getattr(policy, "dataset_statistics", {}) or {}
    with atomic_directory(path) as tmp:
        pipeline.write_weights(tmp, tensors, max_shard_bytes=max_shard_bytes)
        if format == "vlarl":
            pipeline.write_vlarl_config(tmp, FAMILY, FORMAT_VERSION, cfg.to_dict(), identity_actions=not stats)
        else:
            atomic_write_json(tmp / "config.json", _openvla_config(cfg, precision, stats))
            for component in (ACTION_HEAD, PROPRIO_PROJECTOR):
                module = getattr(policy, component, None)
                if module is not None:
                    side_sd = {k: v.detach().to(dtype or v.dtype).contiguous().cpu()
                               for k, v in module.state_dict().items()}
                    torch.save(side_sd, tmp / side_file_name(component))
        if stats:
            atomic_write_json(tmp / DATASET_STATISTICS_FILE, stats)


# ---------------------------------------------------------------------------------------- describe
def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Summary of a checkpoint folder from its headers and JSON files (no tensor data is read)."""
    root, fmt = pipeline.detect_or_refuse(path, detect_format, "OpenVLA-OFT",
                                          "Point at a folder written by OpenVLA(-OFT), RLinf or vlarl.")
    files = weight_files(root)
    header = _header(files)
    shapes = {k: v[0] for k, v in header.items()}
    cfg = _config_from_checkpoint(root, fmt, shapes)
    stats, stats_src = _find_statistics(root, _read_json(root / "config.json"))
    side = sorted(find_side_files(root)) if fmt == "openvla_hf" else []
    return {"family": FAMILY, "format": fmt, "variant": "official" if side else cfg.implement_version,
            "side_files": side,
            "num_parameters": sum(math.prod(s) for s in shapes.values()),
            "norm_stats": stats is not None, "norm_stats_path": stats_src,
            "unnorm_keys": sorted(stats) if stats else [], "dtypes": sorted({v[1] for v in header.values()}),
            "image_size": cfg.image_size, "n_action_bins": cfg.n_action_bins, "vocab_size": cfg.vocab_size,
            "weight_files": [p.name for p in files]}
