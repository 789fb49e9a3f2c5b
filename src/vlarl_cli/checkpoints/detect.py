"""Cheap family/format detection of a checkpoint folder, and its summary.

Detection reads only file names, ``config.json``-like JSON files and safetensors *headers* (8-byte
length + JSON: names, dtypes, shapes), never tensor data, so it is instant even for a 7B model.

Families and their formats (REFERENCE.md section 4; DESIGN.md "checkpoints/"):

=============  =============  ==========================================================================
family         format         how it is recognised
=============  =============  ==========================================================================
any            ``vlarl``      ``vlarl_config.json`` ({"family", "format_version", "model"})
``pi0``        ``openpi``     keys ``paligemma_with_expert.*`` (openpi PyTorch and RLinf folders)
``pi0``        ``lerobot``    keys ``model.paligemma_with_expert.*`` or config.json ``"type": "pi0"|"pi05"``
``pi0``        ``hf_pi0``     config.json ``model_type == "pi0"`` (transformers >= 5.4), keys ``model.vlm.*``
``gr00t``      ``gr00t_n15``  ``experiment_cfg/metadata.json``, config.json ``model_type`` ``gr00t_n1_5``
``gr00t``      ``gr00t_n16``  model_type ``Gr00tN1d6`` or ``processor_config.json`` + ``embodiment_id.json``
``openvla_oft``  ``openvla_hf``  ``dataset_statistics.json`` / config.json ``model_type == "openvla"``
=============  =============  ==========================================================================

With ``refine=True`` (used by ``convert``) the family package's ``vlarl_cli.policies.<family>.checkpoint``
``detect_format`` is asked as well and wins (it knows its own layouts best).
"""

from __future__ import annotations

import importlib
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlarl_cli.checkpoints.safetensors_header import read_safetensors_header
from vlarl_cli.checkpoints.safety import is_pickle_file
from vlarl_cli.errors import CheckpointError
from vlarl_cli.model_types import MODEL_TYPES, family_model_types

__all__ = [
    "FAMILY_MODEL_TYPES",
    "CheckpointInfo",
    "count_parameters",
    "detect_checkpoint",
    "family_checkpoint_module",
    "open_checkpoint_folder",
    "read_safetensors_header",
    "tensor_table",
    "weight_files",
    "weights_table",
]

_NORM_STATS_NAMES = ("norm_stats.json", "dataset_statistics.json", "statistics.json")

# model_type names of the config system per family package with checkpoints (model_types.py)
FAMILY_MODEL_TYPES: dict[str, tuple[str, ...]] = family_model_types()
# saved GR00T config "version" -> variant (vlarl folders store the version, not the variant)
_VERSION_VARIANT = {t.version: t.variant for t in MODEL_TYPES.values() if t.version is not None}


@dataclass
class CheckpointInfo:
    """What a checkpoint folder holds.

    Attributes:
        path: the folder.
        family: policy package name (``pi0``, ``gr00t``, ``openvla_oft``) or None when unknown.
        format: layout name (see module table) or None.
        variant: finer model name when known (``pi0``/``pi05``, ``gr00t_n15``/``gr00t_n16``, ``openvla``).
        num_parameters: element count summed over the safetensors headers (None without safetensors).
        norm_stats: folder-relative paths of normalisation statistics files found.
        weights: folder-relative safetensors weight files.
        pickle_files: folder-relative pickle-based files (never loaded without ``allow_pickle``).
        has_remote_code: ``*.py`` files or ``auto_map`` in config.json (vlarl never executes them).
        unreadable: ``(folder-relative file, reason)`` of weight files that are not complete safetensors.
        notes: human-readable remarks for the summary.
    """

    path: Path
    family: str | None = None
    format: str | None = None
    variant: str | None = None
    num_parameters: int | None = None
    norm_stats: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)
    pickle_files: list[str] = field(default_factory=list)
    has_remote_code: bool = False
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly view (path as a string)."""
        return {
            "path": str(self.path), "family": self.family, "format": self.format, "variant": self.variant,
            "num_parameters": self.num_parameters, "norm_stats": list(self.norm_stats),
            "weights": list(self.weights), "pickle_files": list(self.pickle_files),
            "has_remote_code": self.has_remote_code, "notes": list(self.notes),
        }


def shard_names(index: Path) -> list[Any]:
    """The values of a ``*.safetensors.index.json``'s ``weight_map`` (the shard of each tensor); a damaged index is
    a CheckpointError naming it (ignored, the folder's other .safetensors files would be read in its place)."""
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"Shard index {index} is unreadable or not JSON: {err}.",
                              "Re-download the checkpoint (`vlarl download` verifies every file).") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"Shard index {index} has no weight_map object (tensor name -> shard file).",
                              "Re-download the checkpoint (`vlarl download` verifies every file).")
    return list(weight_map.values())


def weight_files(path: str | os.PathLike[str]) -> list[Path]:
    """The safetensors files holding a folder's weights.

    Order of preference: ``*.safetensors.index.json`` shard lists (all shards they name, present or
    not: :func:`tensor_table` refuses a missing one by name, a summary lists it as unreadable), then every
    ``*.safetensors`` file in the folder itself (not sub-folders: those hold e.g. optimizer shards).
    LeRobot >= 0.4's ``policy_*processor*.safetensors`` hold normalisation statistics, not weights.
    """
    root = Path(path)
    files: list[Path] = []
    for index in sorted(root.glob("*.safetensors.index.json")):
        for shard in sorted(set(shard_names(index))):
            if Path(str(shard)).name != shard or shard in (".", ".."):  # shards are plain names beside the index
                raise CheckpointError(f"{index} names the shard {shard!r}, which is not a file name in {root}.",
                                      "Re-download the checkpoint; vlarl reads no weights from outside its folder.")
            p = root / shard
            if p not in files:
                files.append(p)
    if files:
        return files
    return sorted(p for p in root.glob("*.safetensors")
                  if p.is_file() and not (p.name.startswith("policy_") and "processor" in p.name))


def _tensor_names_and_count(files: Iterable[Path], unreadable: list[tuple[Path, str]] | None = None
                            ) -> tuple[set[str], int | None]:
    names: set[str] = set()
    total = 0
    seen_any = False
    for f in files:
        try:
            header = read_safetensors_header(f)
        except (OSError, ValueError) as err:
            if unreadable is not None:
                unreadable.append((f, str(err)))
            continue
        seen_any = True
        for name, meta in header.items():
            if name == "__metadata__" or name in names:
                continue
            names.add(name)
            total += math.prod(int(d) for d in meta.get("shape", []))
    return names, (total if seen_any else None)


def count_parameters(path: str | os.PathLike[str]) -> int | None:
    """Number of stored tensor elements in a folder's safetensors weights (headers only).

    Tensors stored once count once: a tied embedding saved only as ``lm_head`` counts once.
    Returns None when there are no readable safetensors files.
    """
    return _tensor_names_and_count(weight_files(path))[1]


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON file's top-level object, or None when it is missing, unreadable or not an object."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


_read_json = read_json_object


def tensor_table(files: list[Path]) -> dict[str, tuple[tuple[int, ...], str, Path]]:
    """``name -> (shape, dtype, file)`` for every tensor of the safetensors ``files`` (headers only, no data).

    Raises CheckpointError naming an unreadable file (families call this while loading).
    """
    out: dict[str, tuple[tuple[int, ...], str, Path]] = {}
    for f in files:
        if not f.is_file():
            raise CheckpointError(f"{f.name} is named by the shard index of {f.parent} but does not exist.",
                                  "Re-download or re-save the checkpoint (the shards are incomplete).")
        try:
            header = read_safetensors_header(f)
        except (OSError, ValueError) as err:
            raise CheckpointError(f"{f} is not a readable safetensors file ({err}).",
                                  "Re-download the checkpoint.") from None
        for name, meta in header.items():
            if name != "__metadata__":
                out[name] = (tuple(int(d) for d in meta["shape"]), str(meta["dtype"]), f)
    return out


def open_checkpoint_folder(path: str | os.PathLike[str], *, family: str, format: str | None,
                           formats: tuple[str, ...], detect: Any, looked_for: str
                           ) -> tuple[Path, str, dict[str, tuple[tuple[int, ...], str, Path]]]:
    """The opening steps every family's ``load_policy`` shares: the folder exists, its layout is known
    (``format`` or ``detect(root)``), it holds safetensors weights; returns ``(root, format, tensor table
    name -> (shape, dtype, file))``. ``looked_for`` says what detection searched for, for the error message."""
    from vlarl_cli.errors import did_you_mean

    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"Checkpoint folder {root} does not exist.",
                              "Check model_path, or download the checkpoint first (vlarl download).")
    fmt = format or detect(root)
    if fmt is None:
        raise CheckpointError(f"{root} is not a recognised {family} checkpoint ({looked_for}).",
                              f"Point model_path at a {family} checkpoint folder, or pass format= one of {formats}.")
    if fmt not in formats:
        raise CheckpointError(f'Unknown {family} checkpoint format "{fmt}".{did_you_mean(fmt, list(formats))}',
                              f"Use one of {', '.join(formats)}.")
    return root, fmt, weights_table(root)


def weights_table(root: Path) -> dict[str, tuple[tuple[int, ...], str, Path]]:
    """:func:`tensor_table` of a checkpoint folder's :func:`weight_files`; an error when it has none."""
    files = weight_files(root)
    if not files:
        raise CheckpointError(f"No weights in {root}: no .safetensors files (pickle .bin / .pt files are not loaded).",
                              "Convert the weights to safetensors, or download the safetensors release.")
    return tensor_table(files)


def _find_files(root: Path, names: tuple[str, ...], max_depth: int = 4) -> list[str]:
    found: list[str] = []
    root_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).parts) - root_depth
        # Skip our own and huggingface_hub's bookkeeping folders.
        dirnames[:] = [d for d in dirnames if not d.startswith(".")] if depth < max_depth else []
        for name in filenames:
            if name in names:
                found.append(Path(dirpath, name).relative_to(root).as_posix())
    return sorted(found)


def family_checkpoint_module(family: str) -> Any | None:
    """``vlarl_cli.policies.<family>.checkpoint`` if that module exists, else None.

    Import errors *inside* an existing module propagate (a bug there must not be silently hidden).
    """
    name = f"vlarl_cli.policies.{family}.checkpoint"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
            return None
        raise


def _heuristic(root: Path, names: set[str], config: dict[str, Any] | None) -> tuple[str | None, str | None,
                                                                                    str | None]:
    """(family, format, variant) from file names, config.json and tensor names."""
    cfg = config or {}
    model_type = str(cfg.get("model_type", ""))
    lerobot_type = str(cfg.get("type", ""))

    vlarl_cfg = _read_json(root / "vlarl_config.json")
    if vlarl_cfg is not None and isinstance(vlarl_cfg.get("family"), str):
        saved = vlarl_cfg.get("model")
        saved_model: dict[str, Any] = saved if isinstance(saved, dict) else {}
        version = saved_model.get("version")  # GR00T's config dataclass stores "n1.5" / "n1.6"
        saved_variant = saved_model.get("variant") or (
            _VERSION_VARIANT.get(version) if isinstance(version, str) else None)
        return vlarl_cfg["family"], "vlarl", saved_variant

    is_n16 = "n1d6" in model_type.lower() or (
        (root / "processor_config.json").is_file() and (root / "embodiment_id.json").is_file())
    if model_type.lower().startswith("gr00t") or (root / "experiment_cfg" / "metadata.json").is_file():
        return ("gr00t", "gr00t_n16", "gr00t_n16") if is_n16 else ("gr00t", "gr00t_n15", "gr00t_n15")

    if model_type == "openvla" or (root / "dataset_statistics.json").is_file():
        return "openvla_oft", "openvla_hf", "openvla"

    def has(key: str) -> bool:
        return key in names

    pi05_keys = ("time_mlp_in.weight", "model.time_mlp_in.weight")
    pi0_keys = ("action_time_mlp_in.weight", "model.action_time_mlp_in.weight",
                "embed_action_time.action_time_mlp_in.weight")
    variant: str | None = None
    if any(has(k) for k in pi05_keys) or lerobot_type == "pi05" or cfg.get("pi05") is True:
        variant = "pi05"
    elif any(has(k) for k in pi0_keys) or lerobot_type == "pi0" or cfg.get("pi05") is False:
        variant = "pi0"

    if model_type == "pi0" or any(n.startswith("model.vlm.") for n in names):
        return "pi0", "hf_pi0", variant or "pi0"
    if lerobot_type in ("pi0", "pi05") or any(n.startswith("model.paligemma_with_expert.") for n in names):
        return "pi0", "lerobot", variant
    if any(n.startswith("paligemma_with_expert.") for n in names):
        return "pi0", "openpi", variant
    return None, None, None


def _module_format(family: str, root: Path, info: CheckpointInfo) -> str | None:
    """The family module's own ``detect_format`` answer; a broken module becomes a note, not a crash
    (detection only feeds a summary; ``convert`` imports the module strictly and surfaces the error)."""
    try:
        module = family_checkpoint_module(family)
        if module is None or not hasattr(module, "detect_format"):
            return None
        return module.detect_format(root)
    except Exception as err:  # see docstring
        info.notes.append(f"vlarl_cli.policies.{family}.checkpoint could not inspect the folder: {err}")
        return None


def _pickles_and_code(root: Path, config: dict[str, Any] | None) -> tuple[list[str], bool]:
    """Folder-relative pickle files, and whether the folder ships code (``*.py`` or ``auto_map``)."""
    pickles: list[str] = []
    code = config is not None and "auto_map" in config
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if is_pickle_file(name):
                pickles.append(Path(dirpath, name).relative_to(root).as_posix())
            code = code or name.endswith(".py")
    return sorted(pickles), code


def detect_checkpoint(path: str | os.PathLike[str], *, refine: bool = False) -> CheckpointInfo:
    """Detect family, format, parameter count and norm stats of a checkpoint folder (cheap).

    Args:
        path: checkpoint folder.
        refine: also ask the family's checkpoint module (its answer wins). Off by default because
            importing a family module imports torch (seconds); the module table above is enough for a
            summary. Family modules are always asked when the table recognises nothing.

    Raises nothing for unknown layouts: ``family``/``format`` stay None and ``notes`` says why.
    """
    root = Path(path)
    info = CheckpointInfo(path=root)
    if not root.is_dir():
        info.notes.append(f"{root} is not a folder")
        return info
    try:
        files = weight_files(root)
    except CheckpointError as err:  # a summary names the problem; loading refuses it
        files = []
        info.notes.append(err.problem)
    info.weights = [f.relative_to(root).as_posix() for f in files]
    broken: list[tuple[Path, str]] = []
    names, info.num_parameters = _tensor_names_and_count(files, broken)
    info.unreadable = [(f.relative_to(root).as_posix(), why) for f, why in broken]
    info.norm_stats = _find_files(root, _NORM_STATS_NAMES)
    if (root / "experiment_cfg" / "metadata.json").is_file():
        info.norm_stats.append("experiment_cfg/metadata.json")  # GR00T per-embodiment statistics
    config = _read_json(root / "config.json")
    info.pickle_files, info.has_remote_code = _pickles_and_code(root, config)
    adapter = _read_json(root / "adapter_config.json")
    if adapter is not None:  # a PEFT LoRA adapter folder: the weights are deltas for a base model
        base = adapter.get("base_model_name_or_path") or "an unnamed base model"
        info.notes.append(f"PEFT LoRA adapter (rank {adapter.get('r', '?')}) for {base}; it needs the base "
                          "weights to be used")

    info.family, info.format, info.variant = _heuristic(root, names, config)
    if info.family is None:  # layouts only a family module knows (e.g. a family added later)
        for family in FAMILY_MODEL_TYPES:
            fmt = _module_format(family, root, info)
            if fmt is not None:
                info.family, info.format = family, fmt
                break
    elif refine:
        fmt = _module_format(info.family, root, info)
        if fmt is not None:
            info.format = fmt
    for _rel, why in info.unreadable:
        info.notes.append(f"unreadable weights: {why}")
    if info.family is None:
        info.notes.append("no known family layout (pi0/pi0.5, GR00T N1.5/N1.6, OpenVLA-OFT, vlarl) found")
    if not info.weights:
        info.notes.append("no .safetensors weights found" +
                          (" (only pickle files; see --allow-pickle)" if info.pickle_files else ""))
    return info
