"""Training checkpoints: complete, atomic, resumable.

Layout of ``<log_path>/checkpoints/global_step_<k>/``::

    model.safetensors      the policy's full state dict (gathered from FSDP shards: loads at any world size),
    vlarl_config.json ...  written by the family's ``save_policy(format="vlarl")``, so the folder is also a
                           policy folder for ``vlarl eval`` / ``vlarl convert`` (large models: shards + index)
    optimizer.pt           optimizer state keyed by parameter name (full, unsharded) + LR-scheduler state
                           (torch.save; read back with weights_only=True)
    rng.pt                 torch / numpy / python RNG states and the trainer's generators
    trainer_state.json     iteration, optimizer steps, skipped steps, logger run ids, vlarl version
    config.yaml            the resolved config of the run
    checksums.json         sha256 of every other file, written last (checkpoints/integrity.py)

The folder is built under a temporary name and renamed into place (``atomic_directory``), then the
``latest`` file next to it is replaced atomically, so a crash at any point leaves either the previous
checkpoint or the new one, never a partial one. A resume verifies every file against ``checksums.json``
(a flipped byte names the file) and follows ``latest`` only to a folder next to it.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlarl_cli.checkpoints.integrity import LATEST, follow_latest, verify_checksums, write_checksums
from vlarl_cli.errors import CheckpointError

__all__ = ["LATEST", "TrainerState", "load_checkpoint", "locate_checkpoint", "resolve_checkpoint", "save_checkpoint"]


@dataclass
class TrainerState:
    iteration: int = 0  # completed iterations
    optimizer_steps: int = 0
    skipped_steps: int = 0
    run_ids: dict[str, str] = field(default_factory=dict)
    version: str = ""


def checkpoint_dir(run_dir: Path, iteration: int) -> Path:
    return run_dir / "checkpoints" / f"global_step_{iteration}"


def _rng_state(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    np_state: Any = np.random.get_state()
    py_state: Any = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
        "python": {"version": py_state[0], "state": list(py_state[1]), "gauss": py_state[2]},
        "generators": {name: g.get_state() for name, g in generators.items()},
    }


def _set_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    for name, g in generators.items():
        if name in state["generators"]:
            g.set_state(state["generators"][name])


def save_checkpoint(run_dir: Path, *, model_state: dict[str, torch.Tensor], optimizer_state: dict[str, Any],
                    scheduler: Any, generators: dict[str, torch.Generator], trainer_state: TrainerState,
                    config_yaml: str, export: Any = None) -> Path:
    """Write a complete checkpoint atomically and point ``latest`` at it. Main process only.

    ``export(folder)``, when given, writes the policy in its family's own "vlarl" layout (weights,
    ``vlarl_config.json``, norm stats) into ``folder``; its files become the checkpoint's weight files,
    so the checkpoint folder is also a policy folder that ``vlarl eval`` and ``vlarl convert`` read.
    Without it the state dict is written as ``model.safetensors``.
    """
    import shutil

    from safetensors.torch import save_file

    from vlarl_cli.checkpoints.atomic import atomic_directory, atomic_write_text

    final = checkpoint_dir(run_dir, trainer_state.iteration)
    with atomic_directory(final) as tmp:
        if export is not None:
            staging = tmp / "_policy"
            export(staging)
            for item in staging.iterdir():
                shutil.move(str(item), tmp / item.name)
            staging.rmdir()
        else:
            tensors = {k: v.detach().to("cpu").contiguous() for k, v in model_state.items()}
            save_file(_untie(tensors), str(tmp / "model.safetensors"))
        torch.save({"optimizer": optimizer_state,
                    "scheduler": scheduler.state_dict() if scheduler is not None else None},
                   tmp / "optimizer.pt")
        torch.save(_rng_state(generators), tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(asdict(trainer_state), indent=2))
        (tmp / "config.yaml").write_text(config_yaml)
        write_checksums(tmp)  # last: a folder with its checksums was complete when written
    atomic_write_text(final.parent / LATEST, final.name + "\n")
    return final


def _untie(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors that share memory (tied weights): store a copy of each alias."""
    seen: dict[tuple[int, Any], str] = {}
    out = {}
    for name, t in tensors.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        out[name] = t.clone() if key in seen else t
        seen.setdefault(key, name)
    return out


def resolve_checkpoint(run_dir: Path, resume: str) -> Path:
    """:func:`locate_checkpoint`, verified against its ``checksums.json`` (a checkpoint from before checksums
    existed is used with a note)."""
    path = locate_checkpoint(run_dir, resume)
    if not verify_checksums(path):
        print(f"note: {path} has no checksums.json (written before vlarl kept them); its files are not verified.",
              flush=True)
    return path


def locate_checkpoint(run_dir: Path, resume: str) -> Path:
    """``auto`` -> the run's latest checkpoint; otherwise the given folder (or its ``latest``)."""
    if resume == "auto":
        if not (run_dir / "checkpoints" / LATEST).is_file():
            raise CheckpointError(f"--resume auto: no checkpoint under {run_dir / 'checkpoints'}.",
                                  "Start without --resume, or pass the checkpoint folder explicitly.")
        path = follow_latest(run_dir / "checkpoints")
    else:
        path = Path(resume).expanduser()
        if (path / LATEST).is_file():
            path = follow_latest(path)
    if not (path / "trainer_state.json").is_file():
        raise CheckpointError(f"{path} is not a vlarl training checkpoint (no trainer_state.json).",
                              "Pass a folder like runs/<name>/checkpoints/global_step_<k>, or 'auto'.")
    return path


@dataclass
class LoadedCheckpoint:
    model_state: dict[str, torch.Tensor]
    trainer_state: TrainerState
    optimizer_state: dict[str, Any]
    scheduler_state: dict[str, Any] | None
    rng_state: dict[str, Any]


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model.safetensors`` or of the shards listed in ``model.safetensors.index.json``
    (a missing or damaged file is a CheckpointError naming it)."""
    from vlarl_cli.checkpoints.detect import shard_names
    from vlarl_cli.checkpoints.safety import load_state_dict as load_file

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(shard_names(index)))
        state: dict[str, torch.Tensor] = {}
        for name in files:
            state.update(load_file(folder / name))
        return state
    return load_file(folder / "model.safetensors")


def load_checkpoint(path: Path) -> LoadedCheckpoint:
    try:
        model_state = read_weights(path)
        opt = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
        rng = torch.load(path / "rng.pt", map_location="cpu", weights_only=True)
        state = TrainerState(**json.loads((path / "trainer_state.json").read_text()))
    except (OSError, ValueError, RuntimeError, TypeError) as err:
        raise CheckpointError(f"Checkpoint {path} is incomplete or unreadable: {err}",
                              "Resume from an earlier checkpoint (see the checkpoints folder).") from None
    return LoadedCheckpoint(model_state, state, opt["optimizer"], opt["scheduler"], rng)


def restore_rng(ckpt: LoadedCheckpoint, generators: dict[str, torch.Generator]) -> None:
    _set_rng_state(ckpt.rng_state, generators)
