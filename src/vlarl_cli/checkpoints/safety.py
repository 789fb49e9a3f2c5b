"""Safe handling of untrusted checkpoint files and remote file names.

Two rules:

* Weights load from **safetensors** only, by default. Pickle-based files (``.bin``, ``.pt``, ``.pth``,
  ``.ckpt``, ``.pkl``) can run arbitrary code when unpickled; they are refused unless the caller passes
  ``allow_pickle=True`` (CLI ``--allow-pickle``), and even then they load with
  ``torch.load(weights_only=True)``, which only rebuilds tensors and plain containers.
* File names that come from a remote listing are untrusted: :func:`safe_join` refuses absolute names,
  ``..`` segments, backslashes and anything that would resolve outside the target folder (also through
  a symlink already present in it).

Remote code (``auto_map`` / ``*.py`` files in a repository) is never imported or executed by vlarl:
nothing here or in :mod:`vlarl_cli.checkpoints.hub` passes ``trust_remote_code``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from vlarl_cli.errors import CheckpointError, HubError

if TYPE_CHECKING:
    import torch

__all__ = [
    "PICKLE_SUFFIXES",
    "SAFETENSORS_SUFFIX",
    "check_relative_name",
    "is_pickle_file",
    "load_state_dict",
    "safe_join",
]

SAFETENSORS_SUFFIX = ".safetensors"
# Suffixes of files that torch.load / pickle would deserialise. ``.bin`` is the transformers
# "pytorch_model.bin" convention (a torch.save zip), ``.ckpt`` the Lightning one.
PICKLE_SUFFIXES: tuple[str, ...] = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")

_DRIVE = re.compile(r"^[A-Za-z]:")


def is_pickle_file(name: str | os.PathLike[str]) -> bool:
    """True when the file name has a pickle-based suffix (see :data:`PICKLE_SUFFIXES`)."""
    return Path(name).suffix.lower() in PICKLE_SUFFIXES


def check_relative_name(name: str) -> PurePosixPath:
    """Validate a repository-relative file name and return it as a PurePosixPath.

    Raises:
        HubError: for empty names, absolute names (``/x``, ``C:x``), backslashes, NUL bytes, and
            ``.``/``..``/empty segments (``a/../b``, ``a//b``).
    """
    bad = (
        not name
        or "\x00" in name
        or "\\" in name
        or name.startswith("/")
        or _DRIVE.match(name) is not None
        or any(part in ("", ".", "..") for part in name.split("/"))
    )
    if bad:
        raise HubError(
            f"The repository listing contains the unsafe file name {name!r} (absolute, '..' or empty "
            "segments); vlarl refuses to write it and stopped before downloading anything.",
            fix="This repository (or the server behind HF_ENDPOINT) is broken or malicious; do not use it. "
            "Report it to its owner.",
        )
    return PurePosixPath(name)


def safe_join(root: str | os.PathLike[str], name: str) -> Path:
    """``root / name`` for an untrusted repository-relative ``name``, guaranteed to stay under ``root``.

    Besides the lexical checks of :func:`check_relative_name`, the folder the file goes into is
    resolved (following any symlinks already on disk) and must still be inside the resolved ``root``.
    The last component itself may be an existing symlink (the hub cache's snapshot links): callers
    replace it with ``os.replace`` and never write through it.
    """
    rel = check_relative_name(name)
    root_path = Path(root)
    joined = root_path.joinpath(*rel.parts)
    resolved_root = root_path.resolve()
    if not joined.parent.resolve().is_relative_to(resolved_root):
        raise HubError(
            f"The file name {name!r} would be written outside {root_path} (through a symlink in the "
            "target folder); vlarl refuses to write it.",
            fix="Remove the symlink from the target folder or download into an empty --local-dir.",
        )
    return joined


def load_state_dict(path: str | os.PathLike[str], *, allow_pickle: bool = False,
                    device: str = "cpu") -> dict[str, torch.Tensor]:
    """Load a flat ``{name: tensor}`` dict from a safetensors file (or, if allowed, a pickle file).

    Args:
        path: a ``.safetensors`` file, or a pickle-based file (``.bin``/``.pt``/...).
        allow_pickle: permit pickle-based files; they are then loaded with ``weights_only=True``.
        device: map location for the tensors.

    Raises:
        CheckpointError: missing file, pickle file without ``allow_pickle``, a pickle file that needs
            more than tensors to load, or an unreadable safetensors file.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"Checkpoint file {p} does not exist.",
                              fix="Check the path, or download it with `vlarl download`.")
    if is_pickle_file(p):
        if not allow_pickle:
            raise CheckpointError(
                f"{p.name} is a pickle-based file ({p.suffix}); loading pickles can execute arbitrary code, "
                "so vlarl only loads safetensors by default.",
                fix="Use a .safetensors copy of the weights, or pass --allow-pickle (allow_pickle=True) if "
                "you trust the file; it is then loaded with torch.load(weights_only=True).",
            )
        return _load_pickle(p, device)
    if p.suffix != SAFETENSORS_SUFFIX:
        raise CheckpointError(f"{p.name} is neither a .safetensors file nor a known pickle format.",
                              fix="Point at the model's .safetensors weights.")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from vlarl_cli.checkpoints.safetensors_header import read_safetensors_header

    try:
        read_safetensors_header(p)  # names a truncated file or a lying header before any tensor is read
        return load_file(p, device=device)
    except ValueError as err:
        raise CheckpointError(f"Damaged weights, not a readable safetensors file: {err}.",
                              fix="Download or copy it again (`vlarl download` verifies hashes).") from None
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{p} is not a readable safetensors file: {err}",
                              fix="Download it again (`vlarl download` verifies hashes).") from err


def _load_pickle(p: Path, device: str) -> dict[str, torch.Tensor]:
    """A pickle-based weights file through torch.load(weights_only=True); a damaged one or one holding more than
    tensors is a CheckpointError naming it."""
    import pickle
    import struct

    import torch

    try:
        obj = torch.load(p, map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, struct.error, ValueError, KeyError, IndexError,
            TypeError, AttributeError) as err:  # what torch's weights-only unpickler raises on a damaged file
        raise CheckpointError(
            f"{p} could not be loaded with torch.load(weights_only=True): {err}",
            fix="The file contains more than tensors (or is damaged); convert it to safetensors in a "
            "trusted environment first.",
        ) from err
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]  # Lightning-style wrapper
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{p} does not hold a flat {{name: tensor}} state dict.",
                              fix="Save the model's state_dict() (or convert it to safetensors).")
    return obj
