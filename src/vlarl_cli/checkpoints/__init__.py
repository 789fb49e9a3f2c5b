"""Checkpoints: hub download, format detection, conversion, safe loading and atomic writes.

Modules (each imports its heavy dependencies - huggingface_hub, torch, rich - only inside functions):

* :mod:`.atomic` - ``atomic_write_bytes/text/json``, ``atomic_save_safetensors``, ``atomic_directory``:
  temp name in the same folder, fsync, ``os.replace``. Use them for every checkpoint and result file.
* :mod:`.hub` - ``download(repo_id, revision, local_dir, include, exclude, allow_pickle)``: verified
  (sha256 / git sha1), resumable across runs, safe against hostile listings (``vlarl download``).
* :mod:`.transfer` - the byte side of a download: hashing while streaming, resume with ``Range`` from
  kept partial bytes, local-dir / hub-cache layouts, manifest of verified files, one-writer lock.
* :mod:`.detect` - ``detect_checkpoint(path)``: family / format / parameter count / norm stats from
  file names, config files and safetensors headers; ``configs_using`` for matching presets.
* :mod:`.convert` - ``convert(src, dst, to_format, dtype, merge_lora, allow_pickle)`` through the family
  checkpoint modules, with a probe-batch self-check (``vlarl convert``).
* :mod:`.safety` - ``load_state_dict`` (safetensors only unless ``allow_pickle``, then
  ``weights_only=True``) and ``safe_join`` for untrusted file names.

The names below are re-exported lazily so ``import vlarl_cli.checkpoints`` stays instant.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "atomic_directory": "atomic", "atomic_open": "atomic", "atomic_save_safetensors": "atomic",
    "atomic_write_bytes": "atomic", "atomic_write_json": "atomic", "atomic_write_text": "atomic",
    "download": "hub", "DownloadResult": "hub",
    "detect_checkpoint": "detect", "CheckpointInfo": "detect", "count_parameters": "detect",
    "ConvertReport": "convert",  # the function: vlarl_cli.checkpoints.convert.convert (name = module)
    "load_state_dict": "safety", "safe_join": "safety",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vlarl_cli.checkpoints' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vlarl_cli.checkpoints.{module}"), name)
