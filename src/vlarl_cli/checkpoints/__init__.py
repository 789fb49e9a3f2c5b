"""Checkpoints: hub download, format detection, conversion, safe loading and atomic writes.

Modules (each imports its heavy dependencies - huggingface_hub, torch, rich - only inside functions):

* :mod:`.atomic` - ``atomic_write_bytes/text/json``, ``atomic_save_safetensors``, ``atomic_directory``:
  temp name in the same folder, fsync, ``os.replace``. Use them for every checkpoint and result file.
* :mod:`.hub` - ``download(repo_id, revision, local_dir, include, exclude, allow_pickle)``: verified
  (sha256 / git sha1), resumable across runs, safe against hostile listings (``vlarl download``).
* :mod:`.transfer` - the byte side of a download: hashing while streaming, resume with ``Range`` from
  kept partial bytes, local-dir / hub-cache layouts, manifest of verified files, one-writer lock.
* :mod:`.detect` - ``detect_checkpoint(path)``: family / format / parameter count / norm stats from
  file names, config files and safetensors headers (the presets that use a checkpoint are config/'s
  business: :func:`vlarl_cli.config.presets.configs_using`, handed to ``download`` by the command).
* :mod:`.convert` - ``convert(src, dst, to_format, dtype, merge_lora, allow_pickle)`` through the family
  checkpoint modules, with a probe-batch self-check (``vlarl convert``).
* :mod:`.safety` - ``load_state_dict`` (safetensors only unless ``allow_pickle``, then
  ``weights_only=True``) and ``safe_join`` for untrusted file names.
* :mod:`.pipeline` - the steps every family checkpoint module (``vlarl_cli.policies.<family>.checkpoint``)
  shares: detect the layout, read / write ``vlarl_config.json``, build on the meta device and recompute
  non-persistent buffers, plan which file tensor fills which parameter, stream them, split what the file
  lacks into fresh RL heads / LoRA factors and real holes (a strict load with holes is refused from the
  headers, before a tensor is read), one ``LoadReport``, sharded save (atomic per file).

Adding a family: a row per model type in :mod:`vlarl_cli.model_types` (the one vocabulary the schema,
the policy registry, detection and preset matching read), ``vlarl_cli/policies/<family>/`` with its
``config.py`` / model, and a ``checkpoint.py`` with its key maps, layout rule, config-from-checkpoint and side
files, calling :mod:`.pipeline` for the rest. What that costs, measured
(``benchmarks/family_line_counts.py``, before this pipeline and now), is in ``docs/adding_a_family.md``.

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
