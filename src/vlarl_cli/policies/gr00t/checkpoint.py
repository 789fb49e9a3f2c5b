"""GR00T checkpoints: our ``vlarl`` layout and the upstream N1.5 / N1.6 folder layouts, both ways.

Layouts (``FORMATS``):

* ``vlarl``: ``model.safetensors`` (or ``model-0000i-of-0000N.safetensors`` + ``model.safetensors.index.json``
  when larger than ``max_shard_bytes``), ``vlarl_config.json`` = ``{"family": "gr00t", "format_version": 1,
  "model": <Gr00tConfig>, "settings": <ModelSettings>}``, ``norm_stats.json`` = the :class:`ModalitySpec`.
* ``gr00t_n15`` (Isaac-GR00T N1.5 / RLinf-Gr00t-SFT-*): ``config.json`` (``model_type: gr00t_n1_5`` with
  ``backbone_cfg`` / ``action_head_cfg``), sharded ``model-*.safetensors`` + ``model.safetensors.index.json``,
  ``experiment_cfg/metadata.json`` (statistics + modalities per embodiment tag).
* ``gr00t_n16`` (``model_type: Gr00tN1d6``): flat ``config.json``, sharded weights + index,
  ``processor_config.json``, ``statistics.json``, ``embodiment_id.json`` (and ``experiment_cfg/metadata.json``).

Key map (ours <-> upstream): identical except (1) the vision tower, which transformers 5 flattened:
ours ``<eagle>.vision_model.X`` <-> upstream ``<eagle>.vision_model.vision_model.X``; (2) upstream's
``language_model.lm_head.weight`` (unused by GR00T: the LM is cut before its head) is skipped on load and
not written; if ``embed_tokens`` is absent but ``lm_head`` present (tied storage) the head fills the
embedding. RL additions (``action_head.value_head.*``, ``action_head.noise_head.*``) are written under
those names; an upstream checkpoint without them gets freshly initialised heads (reported, not an error).
Upstream ``config.json`` files carry no Eagle dimensions; we add an ``eagle_config`` block when saving and
fall back to the full-size Eagle of the version when it is absent.

Loading is safetensors-only and lazy (``safe_open``, tensor by tensor into a model built on the meta
device); strict mode raises :class:`CheckpointError` listing missing / unexpected / mis-shaped keys by name.
All writes are atomic per file (temp name + fsync + ``os.replace``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import torch

from vlarl_cli.checkpoints import pipeline
from vlarl_cli.checkpoints.detect import open_checkpoint_folder, weights_table
from vlarl_cli.errors import CheckpointError, ConfigError
from vlarl_cli.model_types import MODEL_TYPES
from vlarl_cli.policies.gr00t.config import Gr00tConfig, ModelSettings, preset
from vlarl_cli.policies.gr00t.modality import EMBODIMENT_IDS, ModalitySpec
from vlarl_cli.policies.lora import merge_lora_for_export

__all__ = [
    "FORMATS",
    "describe",
    "detect_format",
    "from_upstream_key",
    "infer_backbone_fields",
    "load_policy",
    "merge_lora_for_export",
    "read_config",
    "save_policy",
    "to_upstream_key",
]

FORMATS: tuple[str, ...] = ("vlarl", "gr00t_n15", "gr00t_n16")
FAMILY = "gr00t"
FORMAT_VERSION = 1
NORM_STATS = "norm_stats.json"
#: upstream config.json model_type names of N1.5 / N1.6 (the one table: vlarl_cli.model_types)
N15_MODEL_TYPES = MODEL_TYPES["gr00t"].upstream
N16_MODEL_TYPES = MODEL_TYPES["gr00t_n1d6"].upstream
#: upstream layout (= variant) -> version, and version -> our model_type
_LAYOUT_VERSION = {t.variant: t.version for t in MODEL_TYPES.values() if t.family == FAMILY and t.version}
_VERSION_MODEL_TYPE = {t.version: name for name, t in MODEL_TYPES.items() if t.family == FAMILY and t.version}
_VERSION_LAYOUT = {v: k for k, v in _LAYOUT_VERSION.items() if k is not None}
#: RL additions that upstream checkpoints do not contain; missing ones are initialised fresh.
OPTIONAL_PREFIXES = ("action_head.value_head.", "action_head.noise_head.")
_EAGLE_FIELDS = ("vision_kind", "vision_hidden_size", "vision_intermediate_size", "vision_num_layers",
                 "vision_num_heads", "image_size", "patch_size", "vision_use_head", "use_pixel_shuffle",
                 "pixel_shuffle_kind",
                 "mlp_connector_layers", "llm_hidden_size", "llm_intermediate_size", "llm_num_heads",
                 "llm_num_kv_heads", "llm_head_dim", "vocab_size", "rope_theta", "rms_norm_eps",
                 "max_position_embeddings", "image_token_id", "pad_token_id", "max_text_tokens", "formalize_language",
                 "prompt_style", "crop_fraction", "shortest_image_edge", "vision_num_patches", "prompt_pad_id",
                 "padding_value",
                 # not Eagle, but absent from N1.6's config.json (no VL self-attention there); kept so that
                 # a round trip reproduces the config exactly
                 "vl_num_heads", "vl_head_dim")


# ---------------------------------------------------------------------------------------------- keys
def _vision_prefix(version: str) -> str:
    return "backbone.eagle_model.vision_model." if version == "n1.5" else "backbone.model.vision_model."


def to_upstream_key(key: str, version: str) -> str:
    """Our state-dict key -> the upstream GR00T key of ``version`` ("n1.5" / "n1.6")."""
    prefix = _vision_prefix(version)
    if key.startswith(prefix):
        return prefix + "vision_model." + key[len(prefix):]
    return key


_LM_LAYER = re.compile(r"language_model\.model\.layers\.(\d+)\.")


def from_upstream_key(key: str, version: str, select_layer: int | None = None) -> str | None:
    """Upstream key -> our key, or None for upstream-only tensors we deliberately skip: the LM head, LLM
    layers at or above ``select_layer`` (upstream drops them at build time) and N1.6's training-only
    state-dropout ``mask_token``."""
    if key.endswith("language_model.lm_head.weight") or key == "action_head.mask_token":
        return None
    if select_layer is not None:
        m = _LM_LAYER.search(key)
        if m is not None and int(m.group(1)) >= select_layer:
            return None
    prefix = _vision_prefix(version)
    nested = prefix + "vision_model."
    if key.startswith(nested):
        return prefix + key[len(nested):]
    return key


# ---------------------------------------------------------------------------------------------- files
def detect_format(path: Path) -> str | None:
    """``vlarl`` / ``gr00t_n15`` / ``gr00t_n16`` from file names and ``config.json`` only, else None."""
    return pipeline.detect_layout(path, FAMILY, _detect_external)


def _detect_external(root: Path, cfg: dict[str, Any]) -> str | None:
    model_type = cfg.get("model_type")
    return next((t.variant for t in MODEL_TYPES.values() if t.family == FAMILY and model_type in t.upstream), None)


# ---------------------------------------------------------------------------------------------- config
#: N1.6 config.json keys that set the trainable set (Gr00tN1d6Config names = Gr00tConfig fields; absent keys keep
#: Gr00tN1d6Config's defaults, which are Gr00tConfig's for N1.6)
_N16_TUNE_FLAGS = ("tune_llm", "tune_visual", "tune_top_llm_layers", "tune_projector", "tune_diffusion_model",
                   "tune_vlln")


def _upstream_config(cfg: Gr00tConfig) -> dict[str, Any]:
    dit = {"attention_head_dim": cfg.dit_head_dim, "cross_attention_dim": cfg.backbone_embedding_dim,
           "dropout": cfg.dropout, "final_dropout": True, "interleave_self_attention": True,
           "norm_type": "ada_norm", "num_attention_heads": cfg.dit_num_heads, "num_layers": cfg.dit_num_layers,
           "output_dim": cfg.hidden_size, "positional_embeddings": None}
    eagle = {k: getattr(cfg, k) for k in _EAGLE_FIELDS}
    flow = {"noise_beta_alpha": 1.5, "noise_beta_beta": 1.0, "noise_s": 0.999, "num_inference_timesteps": 4,
            "num_timestep_buckets": cfg.num_timestep_buckets}
    if cfg.version == "n1.5":
        head = {"action_dim": cfg.action_dim, "action_horizon": cfg.action_horizon, "add_pos_embed": cfg.add_pos_embed,
                "backbone_embedding_dim": cfg.backbone_embedding_dim, "diffusion_model_cfg": dit,
                "hidden_size": cfg.hidden_size, "input_embedding_dim": cfg.input_embedding_dim,
                "max_action_dim": cfg.action_dim, "max_state_dim": cfg.state_dim, "model_dtype": "float32",
                "num_target_vision_tokens": cfg.num_future_tokens, "tune_diffusion_model": True,
                "tune_projector": True, "use_vlln": cfg.use_vlln, "max_num_embodiments": cfg.num_embodiments,
                "max_seq_len": cfg.max_seq_len,
                "vl_self_attention_cfg": {"attention_head_dim": cfg.vl_head_dim, "dropout": cfg.dropout,
                                          "final_dropout": True, "num_attention_heads": cfg.vl_num_heads,
                                          "num_layers": cfg.vl_self_attention_layers, "positional_embeddings": None},
                **flow}
        return {"model_type": "gr00t_n1_5", "architectures": ["GR00T_N1_5"], "action_dim": cfg.action_dim,
                "action_horizon": cfg.action_horizon, "compute_dtype": "bfloat16", "hidden_size": cfg.llm_hidden_size,
                "backbone_cfg": {"eagle_path": "NVEagle/eagle_er-qwen3_1_7B-Siglip2_400M_stage1_5_128gpu_er_v7_1mlp_nops",
                                 "load_bf16": False, "project_to_dim": cfg.project_to_dim, "reproject_vision": False,
                                 "select_layer": cfg.select_layer, "tune_llm": False, "tune_visual": False,
                                 "use_flash_attention": True, "eagle_config": eagle},
                "action_head_cfg": head}
    return {"model_type": "Gr00tN1d6", "architectures": ["Gr00tN1d6"], "model_name": "nvidia/Eagle-Block2A-2B-v2",
            "backbone_model_type": "eagle", "backbone_embedding_dim": cfg.backbone_embedding_dim,
            **{k: getattr(cfg, k) for k in _N16_TUNE_FLAGS}, "select_layer": cfg.select_layer, "max_state_dim": cfg.state_dim,
            "max_action_dim": cfg.action_dim, "action_horizon": cfg.action_horizon, "hidden_size": cfg.hidden_size,
            "input_embedding_dim": cfg.input_embedding_dim, "add_pos_embed": cfg.add_pos_embed,
            "attn_dropout": cfg.dropout, "use_vlln": cfg.use_vlln, "max_seq_len": cfg.max_seq_len,
            "use_alternate_vl_dit": cfg.alternate_vl_dit, "attend_text_every_n_blocks": cfg.attend_text_every_n_blocks,
            "diffusion_model_cfg": dit, "max_num_embodiments": cfg.num_embodiments, "eagle_config": eagle, **flow}


def infer_backbone_fields(shapes: dict[str, list[int]], version: str) -> dict[str, Any]:
    """Eagle dimensions read off tensor shapes (our key names -> shape), for upstream folders whose
    ``config.json`` does not describe the backbone. Fields that shapes cannot tell (attention head counts of
    the vision tower, token ids, rope theta) are not returned."""
    eagle = "backbone.eagle_model." if version == "n1.5" else "backbone.model."
    lm, vis = eagle + "language_model.model.", eagle + "vision_model."
    out: dict[str, Any] = {}
    if lm + "embed_tokens.weight" in shapes:
        out["vocab_size"], out["llm_hidden_size"] = shapes[lm + "embed_tokens.weight"]
    q, k = shapes.get(lm + "layers.0.self_attn.q_proj.weight"), shapes.get(lm + "layers.0.self_attn.k_proj.weight")
    qn = shapes.get(lm + "layers.0.self_attn.q_norm.weight")
    if q and k and qn:
        out["llm_head_dim"] = qn[0]
        out["llm_num_heads"], out["llm_num_kv_heads"] = q[0] // qn[0], k[0] // qn[0]
    if lm + "layers.0.mlp.gate_proj.weight" in shapes:
        out["llm_intermediate_size"] = shapes[lm + "layers.0.mlp.gate_proj.weight"][0]
    patch = shapes.get(vis + "embeddings.patch_embedding.weight")
    pos = shapes.get(vis + "embeddings.position_embedding.weight")
    if patch and pos:
        d = patch[0]
        p = patch[2] if len(patch) == 4 else math.isqrt(patch[1] // 3)
        out.update(vision_kind="siglip" if len(patch) == 4 else "siglip2", vision_hidden_size=d, patch_size=p)
        if len(patch) == 4:  # SigLIP: fixed grid, the position table tells the image size
            out["image_size"] = math.isqrt(pos[0]) * p
        else:  # SigLIP-2 resizes its position table; the image size comes from the processor
            out["vision_num_patches"] = pos[0]
        layers = {int(m.group(1)) for key in shapes if (m := re.match(re.escape(vis) + r"encoder\.layers\.(\d+)\.", key))}
        if layers:
            out["vision_num_layers"] = max(layers) + 1
        if vis + "encoder.layers.0.mlp.fc1.weight" in shapes:
            out["vision_intermediate_size"] = shapes[vis + "encoder.layers.0.mlp.fc1.weight"][0]
        out["vision_use_head"] = any(key.startswith(vis + "head.") for key in shapes)
        two = eagle + "mlp1.3.weight" in shapes
        first = shapes.get(eagle + ("mlp1.1.weight" if two else "mlp1.0.weight"))
        if first:
            out["mlp_connector_layers"] = 2 if two else 1
            out["use_pixel_shuffle"] = first[1] == 4 * d
    return out


def processor_image_fields(proc: dict[str, Any]) -> dict[str, Any]:
    """Image / language settings of an N1.6 ``processor_config.json`` as Gr00tConfig fields; the
    torchvision path (``use_albumentations`` false, or ``image_crop_size`` / ``image_target_size``) is refused."""
    kw = proc.get("processor_kwargs", {})
    if kw.get("image_crop_size") is not None or kw.get("image_target_size") is not None or \
            kw.get("use_albumentations") is False:
        raise CheckpointError("processor_config.json uses the torchvision image path (image_crop_size / "
                              "image_target_size or use_albumentations false), which vlarl does not implement.",
                              "Use a checkpoint processed with shortest_image_edge + crop_fraction (albumentations), "
                              "as the released N1.6 checkpoints are.")
    out: dict[str, Any] = {}
    if kw.get("shortest_image_edge") is not None:
        out["shortest_image_edge"] = int(kw["shortest_image_edge"])
    if kw.get("crop_fraction") is not None:
        out["crop_fraction"] = float(kw["crop_fraction"])
    if "formalize_language" in kw:
        out["formalize_language"] = bool(kw["formalize_language"])
    return out


def _config_from_upstream(data: dict[str, Any], version: str, shapes: dict[str, list[int]] | None = None,
                          processor: dict[str, Any] | None = None) -> Gr00tConfig:
    base = preset("full", version)
    try:
        if version == "n1.5":
            bb, head = data["backbone_cfg"], data["action_head_cfg"]
            dit, vl = head["diffusion_model_cfg"], head.get("vl_self_attention_cfg") or {}
            eagle = bb.get("eagle_config") or {}
            changes = dict(
                select_layer=bb["select_layer"], project_to_dim=bb.get("project_to_dim"),
                action_dim=head.get("max_action_dim", head["action_dim"]), state_dim=head["max_state_dim"],
                action_horizon=head["action_horizon"], hidden_size=head["hidden_size"],
                input_embedding_dim=head["input_embedding_dim"], backbone_embedding_dim=head["backbone_embedding_dim"],
                vl_self_attention_layers=vl.get("num_layers", 0) if head.get("use_vlln", True) else 0,
                vl_num_heads=vl.get("num_attention_heads", base.vl_num_heads),
                vl_head_dim=vl.get("attention_head_dim", base.vl_head_dim),
                num_future_tokens=head.get("num_target_vision_tokens", 32))
            changes.update(num_embodiments=head.get("max_num_embodiments", 32), max_seq_len=head.get("max_seq_len", 1024),
                           add_pos_embed=head.get("add_pos_embed", True), use_vlln=head.get("use_vlln", True))
        else:
            dit, eagle = data["diffusion_model_cfg"], data.get("eagle_config") or {}
            changes = dict(
                select_layer=data["select_layer"], action_dim=data["max_action_dim"], state_dim=data["max_state_dim"],
                action_horizon=data["action_horizon"], hidden_size=data["hidden_size"],
                input_embedding_dim=data["input_embedding_dim"], backbone_embedding_dim=data["backbone_embedding_dim"],
                alternate_vl_dit=data.get("use_alternate_vl_dit", True),
                attend_text_every_n_blocks=data.get("attend_text_every_n_blocks", 2),
                num_embodiments=data.get("max_num_embodiments", 32), max_seq_len=data.get("max_seq_len", 1024),
                add_pos_embed=data.get("add_pos_embed", True), use_vlln=data.get("use_vlln", True),
                **{k: data[k] for k in _N16_TUNE_FLAGS if k in data})
        changes.update(dit_num_layers=dit["num_layers"], dit_num_heads=dit["num_attention_heads"],
                       dit_head_dim=dit["attention_head_dim"], dropout=dit.get("dropout", 0.2),
                       num_timestep_buckets=(data.get("action_head_cfg") or data).get("num_timestep_buckets", 1000))
        if shapes is not None:  # dimensions the weights tell; an explicit eagle_config still wins
            changes.update(infer_backbone_fields(shapes, version))
        changes.update(processor or {})
        changes.update({k: v for k, v in eagle.items() if k in _EAGLE_FIELDS})
        if version == "n1.6" and "image_size" not in eagle:
            from vlarl_cli.policies.gr00t.images import smart_size

            factor = changes.get("patch_size", base.patch_size) * (
                2 if changes.get("use_pixel_shuffle", base.use_pixel_shuffle) else 1)
            edge = changes.get("shortest_image_edge", base.shortest_image_edge)
            if edge is not None:  # without it Gr00tConfig refuses N1.6 and names the field
                changes["image_size"] = smart_size(edge, factor)
        grid = changes.get("image_size", base.image_size) // changes.get("patch_size", base.patch_size)
        if changes.get("vision_num_patches") == grid * grid:
            changes["vision_num_patches"] = None  # the table is the grid itself
    except KeyError as exc:
        raise CheckpointError(f"config.json of a GR00T {version} checkpoint lacks the field {exc}.",
                              "Use an unmodified Isaac-GR00T / RLinf config.json.") from exc
    return base.replace(**changes)


def read_config(path: Path, fmt: str | None = None) -> tuple[Gr00tConfig, dict[str, Any] | None]:
    """Architecture config of a checkpoint folder and, for ``vlarl``, its saved settings dict."""
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt == "vlarl":
        data = pipeline.read_vlarl_config(path, FORMAT_VERSION)
        return Gr00tConfig.from_dict(data["model"]), data.get("settings")
    if fmt in _LAYOUT_VERSION:
        version = _LAYOUT_VERSION[fmt]
        data = pipeline.require_json(path / "config.json")
        shapes = None
        block = (data.get("backbone_cfg") or {}).get("eagle_config") if version == "n1.5" else data.get("eagle_config")
        if not block or not set(_EAGLE_FIELDS) <= set(block):  # backbone not (fully) described: ask the weights
            shapes = {ours: list(shape) for name, (shape, _, _) in weights_table(path).items()
                      if (ours := from_upstream_key(name, version)) is not None}
        proc_file = path / "processor_config.json"
        processor = processor_image_fields(pipeline.require_json(proc_file)) if (
            version == "n1.6" and proc_file.is_file()) else None
        return _config_from_upstream(data, version, shapes, processor), None
    raise CheckpointError(f"{path} is not a GR00T checkpoint in a known layout.",
                          f"Expected one of {', '.join(FORMATS)}: {pipeline.VLARL_CONFIG}, or config.json with model_type "
                          f"{N15_MODEL_TYPES[0]} / {N16_MODEL_TYPES[0]}.")


def _read_modality(path: Path, fmt: str, tag: str) -> ModalitySpec:
    if fmt == "vlarl":
        file = path / NORM_STATS
        if not file.is_file():
            raise CheckpointError(f"Missing {NORM_STATS} (modality and normalisation statistics) in {path}.",
                                  "Re-save the checkpoint with save_policy, which writes it.")
        spec = ModalitySpec.load_json(file)
        if spec.embodiment_tag != tag:
            raise CheckpointError(f'Checkpoint {path} holds statistics for embodiment "{spec.embodiment_tag}", '
                                  f'not "{tag}".', f"Set actor.model.embodiment_tag: {spec.embodiment_tag}.")
        return spec
    if fmt == "gr00t_n15":
        return ModalitySpec.from_n15_metadata(pipeline.require_json(path / "experiment_cfg" / "metadata.json"), tag,
                                              embodiment_id=EMBODIMENT_IDS.get(tag))
    proc = path / "processor_config.json"
    return ModalitySpec.from_n16_files(pipeline.require_json(path / "statistics.json"),
                                       pipeline.require_json(path / "embodiment_id.json"),
                                       pipeline.require_json(proc) if proc.is_file() else None, tag)


# ---------------------------------------------------------------------------------------------- save
def save_policy(policy: Any, path: Path, *, format: str = "vlarl", dtype: torch.dtype | None = None,
                max_shard_bytes: int = pipeline.MAX_SHARD_BYTES) -> None:
    """Write ``policy`` (a :class:`~.modeling.Gr00tPolicy`) to folder ``path`` in ``format``.

    ``dtype`` casts floating tensors (e.g. ``torch.bfloat16`` for upstream-sized files); default keeps them.
    Upstream layouts are always written sharded with an index, as Isaac-GR00T does.
    """
    from vlarl_cli.checkpoints.atomic import atomic_write_json

    pipeline.check_format(format, FORMATS, "GR00T")
    cfg: Gr00tConfig = policy.config
    want = _LAYOUT_VERSION.get(format)
    if want is not None and want != cfg.version:
        raise CheckpointError(f"Cannot save a GR00T {cfg.version} model in the {format} layout.",
                              f"Use format {_VERSION_LAYOUT[cfg.version]} or vlarl.")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {name if format == "vlarl" else to_upstream_key(name, cfg.version): t.detach()
               for name, t in policy.state_dict().items()}
    # clone: tied parameters share storage, which safetensors refuses to write
    tensors = {k: v.clone() for k, v in pipeline.cast_for_save(tensors, dtype).items()}
    pipeline.write_weights(path, tensors, max_shard_bytes=max_shard_bytes, force_index=format != "vlarl")
    modality: ModalitySpec = policy.modality
    if format == "vlarl":
        pipeline.write_vlarl_config(path, FAMILY, FORMAT_VERSION, cfg.to_dict(), settings=policy.settings.to_dict())
        modality.save_json(path / NORM_STATS)
        return
    atomic_write_json(path / "config.json", _upstream_config(cfg))
    (path / "experiment_cfg").mkdir(exist_ok=True)
    atomic_write_json(path / "experiment_cfg" / "metadata.json",
                      {modality.embodiment_tag: modality.to_n15_metadata()})
    if format == "gr00t_n16":
        files = modality.to_n16_files(cfg.state_dim, cfg.action_dim, cfg.action_horizon)
        files["processor_config.json"]["processor_kwargs"].update(
            shortest_image_edge=cfg.shortest_image_edge, crop_fraction=cfg.crop_fraction, use_albumentations=True,
            formalize_language=cfg.formalize_language, image_crop_size=None, image_target_size=None)
        for name, content in files.items():
            atomic_write_json(path / name, content)


# ---------------------------------------------------------------------------------------------- load
def load_policy(path: Path, *, format: str | None = None, device: Any = "cpu", dtype: torch.dtype = torch.float32,
                strict: bool = True, overrides: dict | None = None) -> Any:
    """Load a GR00T policy from a checkpoint folder in any of :data:`FORMATS`.

    ``overrides`` are :class:`ModelSettings` fields (the run's RL settings: num_action_chunks, noise_method,
    embodiment_tag, ...). Returns the :class:`~.modeling.Gr00tPolicy`; ``policy.load_report`` (a
    :class:`~vlarl_cli.checkpoints.pipeline.LoadReport`) tells what was loaded, skipped and freshly initialised.
    """
    from vlarl_cli.policies.gr00t.modeling import Gr00tPolicy

    root, fmt, header = open_checkpoint_folder(
        path, family="GR00T", format=format, formats=FORMATS, detect=detect_format,
        looked_for=f"no known layout: no {pipeline.VLARL_CONFIG} with family gr00t, no config.json with model_type "
        f"{N15_MODEL_TYPES[0]} / {N16_MODEL_TYPES[0]}")
    device = torch.device(device)
    cfg, saved = read_config(root, fmt)
    settings = _settings(root, cfg, saved, overrides)
    modality = _read_modality(root, fmt, settings.effective_embodiment_tag)
    if fmt != "vlarl":
        # upstream config.json does not say whether the SigLIP attention-pool head was kept: read it off the keys
        has_head = any(".vision_model.vision_model.head." in k or ".vision_model.head." in k for k in header)
        if has_head != cfg.vision_use_head:
            cfg = cfg.replace(vision_use_head=has_head)
    policy, params = pipeline.build_on_meta(lambda: Gr00tPolicy(cfg, settings, modality, device="meta", dtype=dtype),
                                            lambda p: p.to_empty(device=device))
    report = pipeline.LoadReport(fmt)
    plan = _plan(fmt, cfg, header, params, saved, report)
    if strict:  # refused before a tensor is read
        report.raise_if_incomplete(root, "GR00T model", "Load with the matching model_type / preset, or repair the "
                                   "checkpoint; strict=False loads the matching tensors only.")
    pipeline.stream(plan, header, params, report)
    pipeline.settle_absent(policy, params, report, lambda p, fresh: _fresh_init(p, fresh, device, dtype))
    setattr(policy, "load_report", report)  # noqa: B010 (declared on Gr00tPolicy)
    return policy


def _settings(root: Path, cfg: Gr00tConfig, saved: dict[str, Any] | None, overrides: dict | None) -> ModelSettings:
    """The run's settings: the folder's saved ones (``vlarl``) under ``overrides``, checked against the version."""
    version_type = _VERSION_MODEL_TYPE[cfg.version]
    settings_dict: dict[str, Any] = {"model_type": version_type, **(saved or {}), **(overrides or {}),
                                     "model_path": str(root)}
    ships_tokenizer = (root / "tokenizer.json").is_file() or (
        (root / "vocab.json").is_file() and (root / "merges.txt").is_file())
    if settings_dict.get("tokenizer_path") is None and ships_tokenizer:
        settings_dict["tokenizer_path"] = str(root)  # a checkpoint that ships its prompt tokenizer
    settings = ModelSettings.from_dict(settings_dict)
    if settings.version != cfg.version:
        raise ConfigError(f"{root} holds a GR00T {cfg.version} model but model_type is {settings.model_type} "
                          f"(GR00T {settings.version}).",
                          f"Set actor.model.model_type: {version_type}.")
    return settings


def _plan(fmt: str, cfg: Gr00tConfig, header: pipeline.TensorTable, params: dict[str, torch.Tensor],
          saved: dict[str, Any] | None, report: pipeline.LoadReport) -> list[tuple[str, str]]:
    """``(file key, our key)`` to copy; the rest sorted into ``report``. A value / noise head the settings do
    not use is skipped; RL heads absent from the file start fresh: always for upstream layouts, and for ours
    when the saved settings did not have that head (e.g. resuming a flow_sde run with flow_noise)."""
    def rename(key: str) -> str | None:
        return key if fmt == "vlarl" else from_upstream_key(key, cfg.version, cfg.select_layer)

    plan = pipeline.plan_copies(header, params, rename, report, ignore=lambda k: rename(k) is None,
                                optional=OPTIONAL_PREFIXES)
    embed = next((k for k in params if k.endswith("language_model.model.embed_tokens.weight")), None)
    pipeline.fill_tied(plan, header, params, report, embed,  # tied storage: only lm_head was saved
                       [k for k in report.skipped if k.endswith("language_model.lm_head.weight")])
    saved_heads = set() if saved is None else (
        {"action_head.value_head."} if saved.get("add_value_head") else set()) | (
        {"action_head.noise_head."} if saved.get("noise_method") == "flow_noise" else set())
    pipeline.plan_absent(params, (internal for _, internal in plan), report,
                         tuple(p for p in OPTIONAL_PREFIXES if p not in saved_heads))
    return plan


def _fresh_init(policy: Any, fresh: list[str], device: torch.device, dtype: torch.dtype) -> None:
    """The value / noise heads a file lacks (``action_head.<head>.*``), built anew in state-dict order
    (GR00T has no LoRA)."""
    for head_name in dict.fromkeys(k.split(".")[1] for k in fresh):
        _reinit_head(policy, head_name, device, dtype)


def _reinit_head(policy: Any, name: str, device: torch.device, dtype: torch.dtype) -> None:
    from vlarl_cli.policies.gr00t.critic import Gr00tCritic
    from vlarl_cli.policies.gr00t.modeling import NoiseHead

    cfg, s = policy.config, policy.settings
    with torch.device(device):
        if name == "value_head":
            in_dim = cfg.backbone_embedding_dim + (0 if s.value_after_vlm else cfg.input_embedding_dim)
            head: torch.nn.Module = Gr00tCritic(in_dim, hidden=s.value_hidden)
        else:
            head = NoiseHead(cfg.hidden_size, cfg.action_dim)
    head.to(dtype)
    head.requires_grad_(True)
    setattr(policy.action_head, name, head)


# ---------------------------------------------------------------------------------------------- describe
def describe(path: Path) -> dict[str, Any]:
    """Cheap summary from file names, JSON files and safetensors headers (no tensor data read)."""
    path, fmt = pipeline.detect_or_refuse(path, detect_format, "GR00T", f"Expected one of {', '.join(FORMATS)}.")
    cfg, _ = read_config(path, fmt)
    header = weights_table(path)
    num = sum(math.prod(shape) for shape, _, _ in header.values())
    dtypes = {dtype for _, dtype, _ in header.values()}
    if fmt == "vlarl":
        tags = [ModalitySpec.load_json(path / NORM_STATS).embodiment_tag] if (path / NORM_STATS).is_file() else []
    elif fmt == "gr00t_n15":
        meta = path / "experiment_cfg" / "metadata.json"
        tags = sorted(pipeline.require_json(meta)) if meta.is_file() else []
    else:
        stats = path / "statistics.json"
        tags = sorted(pipeline.require_json(stats)) if stats.is_file() else []
    modalities = {}
    for tag in tags:  # the DataConfig-like description: which cameras / state / action keys each expects
        try:
            spec = _read_modality(path, fmt, tag)
        except (CheckpointError, ConfigError):
            continue
        modalities[tag] = {"cameras": list(spec.video_keys), "state": dict(spec.state_keys),
                           "action": dict(spec.action_keys), "embodiment_id": spec.embodiment_id}
    return {"modalities": modalities, "family": FAMILY, "format": fmt, "version": cfg.version, "num_parameters": int(num),
            "num_tensors": len(header), "dtypes": sorted(dtypes), "sharded": (path / pipeline.INDEX).is_file(),
            "norm_stats": bool(tags), "embodiment_tags": tags, "action_horizon": cfg.action_horizon,
            "action_dim": cfg.action_dim, "state_dim": cfg.state_dim}
