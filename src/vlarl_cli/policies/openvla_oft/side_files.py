"""The OFT authors' side files: ``action_head--<step>_checkpoint.pt`` and ``proprio_projector--<step>_checkpoint.pt``.

openvla-oft's ``finetune.py`` saves the L1-regression head and the proprio projector as separate PyTorch
state dicts beside the Hugging Face folder; RLinf and the OFT evaluation find them by name
(``find_checkpoint_file``: the component name and ``checkpoint`` in the file name, exactly one match) and
strip the ``module.`` prefix DDP adds (``load_component_state_dict``). Read for facts only.

Loading is safe: ``torch.load(weights_only=True)`` (no pickled code runs) and the result must be a flat
``{str: Tensor}`` mapping, anything else is refused. Files that belong to variants vlarl does not
implement (``vision_backbone--*`` FiLM, ``noisy_action_projector--*`` diffusion) are refused, so such a
checkpoint never runs with half of its weights.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vlarl_cli.errors import CheckpointError

__all__ = ["ACTION_HEAD", "PROPRIO_PROJECTOR", "config_from_side_files", "find_side_files", "load_side_file",
           "side_file_name"]

ACTION_HEAD = "action_head"
PROPRIO_PROJECTOR = "proprio_projector"
_SUPPORTED = (ACTION_HEAD, PROPRIO_PROJECTOR)
#: components of OFT variants vlarl does not implement: their presence is an error, not a silent skip
_UNSUPPORTED = {"noisy_action_projector": "the diffusion action head", "vision_backbone": "FiLM (use_film)"}


def side_file_name(component: str, step: int | str = 0) -> str:
    """``<component>--<step>_checkpoint.pt`` (openvla-oft ``finetune.py`` naming)."""
    return f"{component}--{step}_checkpoint.pt"


def _matches(name: str, component: str) -> bool:
    return name.startswith(component + "--") and "checkpoint" in name and name.endswith(".pt")


def find_side_files(root: str | os.PathLike[str]) -> dict[str, Path]:
    """``{component: path}`` of the side files in ``root`` (one per component, else CheckpointError)."""
    folder = Path(root)
    if not folder.is_dir():
        return {}
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    for component, what in _UNSUPPORTED.items():
        found = [n for n in names if _matches(n, component)]
        if found:
            raise CheckpointError(f"{folder} holds {found[0]}, a component of {what}, which vlarl does not implement "
                                  "for OpenVLA-OFT.", "Use a checkpoint trained with the L1-regression head "
                                  "(action_head--*) or RLinf's token head.")
    out: dict[str, Path] = {}
    for component in _SUPPORTED:
        found = [n for n in names if _matches(n, component)]
        if len(found) > 1:
            raise CheckpointError(f"{folder} holds {len(found)} {component} files ({', '.join(found)}); exactly one "
                                  "is expected.", "Keep only the file of the step you want to load.")
        if found:
            out[component] = folder / found[0]
    return out


def load_side_file(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """A side file as ``{key: tensor}`` (``module.`` prefixes stripped); refused unless it holds only tensors."""
    p = Path(path)
    try:
        raw: Any = torch.load(os.fspath(p), map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses pickled objects other than tensors and containers
        raise CheckpointError(f"{p} could not be read as a tensors-only PyTorch file ({type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''}).",
                              "Use the file saved by openvla-oft (a state dict of tensors); never load "
                              "untrusted pickles.") from None
    if not isinstance(raw, dict) or not raw:
        raise CheckpointError(f"{p} does not hold a state dict (got {type(raw).__name__}).",
                              "Use the file saved by openvla-oft (a state dict of tensors).")
    bad = [k for k, v in raw.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if bad:
        raise CheckpointError(f"{p} holds non-tensor entries ({', '.join(map(str, bad[:5]))}).",
                              "A side file must be a flat {name: tensor} state dict.")
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in raw.items()}


def config_from_side_files(tensors: dict[str, dict[str, Tensor]], action_dim: int) -> dict[str, Any]:
    """OftConfig fields implied by the side files' shapes (``implement_version``, head and proprio sizes)."""
    values: dict[str, Any] = {}
    head = tensors.get(ACTION_HEAD)
    if head is not None:
        fc1, fc2 = head.get("model.fc1.weight"), head.get("model.fc2.weight")
        if fc1 is None or fc2 is None:
            raise CheckpointError(f"The action_head file has no model.fc1 / model.fc2 (keys: {sorted(head)[:6]}).",
                                  "Only the OFT authors' L1RegressionActionHead (MLP-ResNet) is supported.")
        if fc2.shape[0] != action_dim:
            raise CheckpointError(f"The action head predicts {fc2.shape[0]} action dims, actor.model.action_dim is "
                                  f"{action_dim}.", "Set action_dim to match the checkpoint.")
        blocks = {int(k.split(".")[2]) for k in head if k.startswith("model.mlp_resnet_blocks.")}
        values.update(implement_version="official", action_head="l1_regression", l1_hidden=int(fc1.shape[0]),
                      l1_blocks=len(blocks))
    proprio = tensors.get(PROPRIO_PROJECTOR)
    if proprio is not None:
        w = proprio.get("fc1.weight")
        if w is None:
            raise CheckpointError(f"The proprio_projector file has no fc1.weight (keys: {sorted(proprio)[:6]}).",
                                  "Only the OFT authors' ProprioProjector is supported.")
        values.update(implement_version="official", use_proprio=True, proprio_dim=int(w.shape[1]))
    return values
