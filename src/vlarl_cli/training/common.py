"""What every trainer shares (rl-train, sft, evaluation): seeds, the optimizer and its schedule, model paths.

Randomness: :func:`derived_seed` turns (seed, rank, iteration, ...) into one well-mixed seed, so every
random stream of a run is a pure function of its coordinates and a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import torch

from vlarl_cli.config.schema import VlarlConfig
from vlarl_cli.errors import CheckpointError, ConfigError


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def derived_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from integers (numpy's SeedSequence hashing)."""
    return int(np.random.SeedSequence([int(p) % (2**32) for p in parts]).generate_state(1, np.uint64)[0]) >> 1


def _check_checkpoint_folder(folder: Path) -> None:
    """A model_path that exists but cannot be a checkpoint (a file, an empty folder) is named here, not by the
    model's loader after the simulators started (and a dry run passed it)."""
    if not folder.is_dir():
        raise CheckpointError(f'actor.model.model_path "{folder}" is a file, not a checkpoint folder.',
                              "Set actor.model.model_path to the folder that holds the weights (and config).")
    if not any(folder.iterdir()):
        raise CheckpointError(f'Checkpoint folder "{folder}" is empty.',
                              "Point actor.model.model_path at a checkpoint (`vlarl download REPO --local-dir DIR` "
                              "fills one), or use actor.model.preset=tiny to try the pipeline.")


def resolve_model_path(path: str | None) -> str | None:
    """A local folder as is; ``builtin:<name>`` from the package; a hub id (``org/name``) from the local hub
    cache, else a clear error."""
    if path is not None and path.startswith("builtin:"):
        from vlarl_cli.checkpoints.builtin import builtin_checkpoint

        return str(builtin_checkpoint(path))
    if path is not None and Path(path).expanduser().exists():
        _check_checkpoint_folder(Path(path).expanduser())
    if path is None or Path(path).expanduser().exists():
        from vlarl_cli.training.ema import choose_weights  # an SFT checkpoint's EMA, as openpi serves it

        return None if path is None else choose_weights(str(Path(path).expanduser()))
    if path.count("/") == 1 and not path.startswith(("/", ".", "~")):
        from vlarl_cli.checkpoints.hub import resolve_repo_id

        path, _ = resolve_repo_id(path)  # a renamed repo is cached under its new name
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(path, local_files_only=True)
        except Exception:  # not in the cache (or the client is unusable offline)
            raise CheckpointError(f'Checkpoint "{path}" is not a local folder and not in the hub cache.',
                                  f"Run `vlarl download {path}` first, or set actor.model.model_path to a "
                                  "local checkpoint folder (or actor.model.preset=tiny to try the pipeline).") from None
    raise CheckpointError(f'Checkpoint folder "{path}" does not exist.',
                          "Set actor.model.model_path to an existing folder, or download one with `vlarl download`.")


def build_optimizer(policy: torch.nn.Module, config: VlarlConfig) -> torch.optim.Optimizer:
    """AdamW with the value head at ``value_lr`` and everything else trainable at ``lr``."""
    optim = config.actor.optim
    value: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in policy.named_parameters():
        if p.requires_grad:
            (value if "value_head" in name else rest).append(p)
    groups = [g for g in ({"params": rest, "lr": optim.lr, "name": "policy"},
                          {"params": value, "lr": optim.value_lr, "name": "value_head"}) if g["params"]]
    if not groups:
        raise ConfigError("The policy has no trainable parameters.",
                          "Check actor.model.train_expert_only / is_lora / the family's freezing flags.")
    return torch.optim.AdamW(groups, betas=optim.betas, eps=optim.adam_eps, weight_decay=optim.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, config: VlarlConfig, total_steps: int
                    ) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``lr_warmup_steps``, then constant, cosine or linear decay to ``min_lr_rate``."""
    optim = config.actor.optim
    horizon = optim.total_training_steps or max(1, total_steps)
    warmup, floor = optim.lr_warmup_steps, optim.min_lr_rate

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if optim.lr_scheduler == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, horizon - warmup))
        if optim.lr_scheduler == "cosine":
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        return floor + (1 - floor) * (1 - progress)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
