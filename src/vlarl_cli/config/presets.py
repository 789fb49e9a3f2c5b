"""Which shipped presets use a checkpoint, or could load it (``vlarl download``'s summary).

The match reads each preset's ``actor.model`` (its ``model/...`` default plus its own overrides) with the
config reader of :mod:`vlarl_cli.config.loading`, and the families and variants from
:mod:`vlarl_cli.model_types`. :func:`vlarl_cli.checkpoints.hub.download` is handed :func:`configs_using` by
the command (checkpoints/ stands below config/ and does not import it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlarl_cli.config.loading import CONFIG_DIR, read_primary
from vlarl_cli.errors import ConfigError
from vlarl_cli.model_types import CHECKPOINT_FAMILIES, MODEL_TYPES

if TYPE_CHECKING:
    from vlarl_cli.checkpoints.detect import CheckpointInfo

__all__ = ["configs_using"]


def _config_dirs() -> list[Path]:
    """Preset folders: the packaged ``vlarl_cli/configs``, a ``configs/`` in the working directory and the
    source checkout's."""
    candidates = [CONFIG_DIR, Path.cwd() / "configs", Path(__file__).resolve().parents[3] / "configs"]
    out: list[Path] = []
    for c in candidates:
        if c.is_dir() and c.resolve() not in [o.resolve() for o in out]:
            out.append(c)
    return out


def _model_section(folder: Path, preset_file: Path) -> dict[str, Any]:
    """``actor.model`` of a preset: its ``model/<name>`` default, then the preset's own overrides.

    A light reading of the Hydra ``defaults:`` list (only ``model/...`` entries), each file read by
    :func:`~vlarl_cli.config.loading.read_primary` (the reader every config file goes through) without
    composing; interpolations stay strings, which is enough to read ``model_type`` / ``model_path``.
    """
    data = read_primary(preset_file)
    model: dict[str, Any] = {}
    for entry in data.get("defaults") or []:
        if isinstance(entry, str) and entry.startswith("model/"):
            default = folder / (entry.split("@")[0] + ".yaml")
            if default.is_file():
                model.update(read_primary(default))
    actor_any = data.get("actor")
    actor: dict[str, Any] = actor_any if isinstance(actor_any, dict) else {}
    own_any = actor.get("model")
    own: dict[str, Any] = own_any if isinstance(own_any, dict) else {}
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(model.get(key), dict):
            model[key] = {**model[key], **value}
        else:
            model[key] = value
    return model


def _preset_variant(model: dict[str, Any]) -> tuple[str | None, str | None]:
    """(family, variant) a preset's model section asks for (RLinf's ``openpi`` names pi0 or pi0.5 through
    ``openpi.config_name``)."""
    entry = MODEL_TYPES.get(str(model.get("model_type", "")))
    if entry is None or entry.family not in CHECKPOINT_FAMILIES:
        return None, None
    if entry.family == "pi0":
        openpi_any = model.get("openpi")
        openpi: dict[str, Any] = openpi_any if isinstance(openpi_any, dict) else {}
        pi05 = entry.variant == "pi05" or str(openpi.get("config_name", "")).startswith("pi05")
        return "pi0", ("pi05" if pi05 else "pi0")
    return entry.family, entry.variant


def configs_using(info: CheckpointInfo, repo_id: str | None = None,
                  config_dirs: list[Path] | None = None) -> dict[str, list[str]]:
    """Top-level presets whose ``actor.model`` points at this checkpoint, or could load it.

    ``uses``: ``model_path`` equals the repo id (or ends with its name, for a local copy).
    ``compatible``: same family and variant (pi0 vs pi0.5, GR00T N1.5 vs N1.6); a checkpoint whose
    variant is unknown matches every preset of its family. Unreadable presets are skipped.
    """
    uses: list[str] = []
    compatible: list[str] = []
    seen: set[Path] = set()
    name = repo_id.split("/")[-1] if repo_id else None
    for folder in config_dirs if config_dirs is not None else _config_dirs():
        for preset_file in sorted(folder.glob("*.yaml")):
            if preset_file.resolve() in seen:
                continue
            seen.add(preset_file.resolve())
            try:
                model = _model_section(folder, preset_file)
            except ConfigError:  # unreadable, not YAML, empty: a broken preset must not break a summary
                continue
            preset = preset_file.stem
            path = str(model.get("model_path", "")).rstrip("/")
            if repo_id and path and (path == repo_id or (name is not None and path.split("/")[-1] == name)):
                uses.append(preset)
                continue
            family, variant = _preset_variant(model)
            if family is not None and family == info.family and (
                    info.variant is None or variant is None or variant == info.variant):
                compatible.append(preset)
    return {"uses": uses, "compatible": compatible}
