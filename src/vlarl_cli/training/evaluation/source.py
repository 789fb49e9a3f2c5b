"""Where the evaluated policy comes from: :func:`load_policy` (a training checkpoint folder, a family
policy folder, or a config), checkpoint-folder resolution and the weight hashes recorded on the card.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlarl_cli.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import torch


@dataclass
class PolicyInfo:
    """Where the evaluated weights came from (for the card)."""

    source: str  # "checkpoint" | "config"
    path: str
    sha256: str
    hash_of: str  # what the hash covers
    model_type: str
    config: str = ""


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def state_dict_sha256(module: torch.nn.Module) -> str:
    """sha256 over (name, dtype, shape, raw bytes) of every state-dict entry, in name order."""
    import torch

    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def resolve_checkpoint_folder(path: Path) -> Path:
    """A training checkpoint folder from itself, a folder with ``latest``, a run folder or ``builtin:<name>``."""
    from vlarl_cli.checkpoints.builtin import PREFIX, builtin_checkpoint
    from vlarl_cli.checkpoints.integrity import LATEST, follow_latest, verify_checksums

    if str(path).startswith(PREFIX):
        path = builtin_checkpoint(str(path))
    path = Path(path).expanduser()
    for pointer in (path / LATEST, path / "checkpoints" / LATEST):
        if pointer.is_file():
            path = follow_latest(pointer.parent)  # refused when it leaves its folder
            break
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a checkpoint folder.",
                              "Pass the folder that holds it, like runs/<name>/checkpoints/global_step_<k> (or the "
                              "run folder).")
    if not path.is_dir():
        raise CheckpointError(f"Checkpoint folder {path} does not exist.",
                              "Pass a folder like runs/<name>/checkpoints/global_step_<k> (or the run folder).")
    path = path.resolve()
    has_weights = (path / "model.safetensors").is_file() or bool(list(path.glob("*.safetensors")))
    missing = [f for f, ok in (("model.safetensors", has_weights), ("config.yaml", (path / "config.yaml").is_file()))
               if not ok]
    if missing:
        raise CheckpointError(f"{path} is not a vlarl training checkpoint (missing {', '.join(missing)}).",
                              "Pass a folder written by `vlarl rl-train` (it holds model.safetensors and "
                              "config.yaml), or use --config to build the policy from a config.")
    verify_checksums(path)  # a flipped byte names the file (a folder without checksums.json: nothing to verify)
    return path


def _weights_sha256(folder: Path) -> tuple[str, str]:
    """(sha256, what it covers) of a folder's weights: model.safetensors itself, or all shards."""
    if (folder / "model.safetensors").is_file():
        return _sha256_file(folder / "model.safetensors"), "model.safetensors"
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.safetensors")):
        h.update(f.name.encode() + _sha256_file(f).encode())
    return h.hexdigest(), "sha256 of the *.safetensors files' sha256s"


#: A family policy folder (``save_policy(format="vlarl")``): the family loads weights AND side files (norm
#: stats, tokenizer) from it, which a bare state dict lacks.
FAMILY_POLICY_MARKER = "vlarl_config.json"


def load_policy(checkpoint: Path | None, config: str | None, overrides: list[str] | tuple[str, ...] = (),
                device: Any = "cpu") -> tuple[torch.nn.Module, PolicyInfo, Any]:
    """Build the policy to evaluate.

    ``checkpoint``: a vlarl training checkpoint: rebuild the model from its ``config.yaml`` (or from
    ``config`` when given), then load ``model.safetensors`` strictly. ``config`` alone: build the configured
    policy (e.g. ``actor.model.preset=tiny``), seeding torch with ``actor.seed`` so the random init is the
    same on every rank and on resume.

    Returns:
        (policy in eval mode, :class:`PolicyInfo`, the loaded VlarlConfig).
    """
    import torch

    from vlarl_cli.config.loading import load_config
    from vlarl_cli.policies.registry import build_policy
    from vlarl_cli.training.common import resolve_model_path

    if checkpoint is None and config is None:
        raise ConfigError("Nothing to evaluate: neither --checkpoint nor --config was given.",
                          "Pass --checkpoint runs/<name>/checkpoints/global_step_<k>, or --config with a "
                          "model (e.g. --config quickstart actor.model.preset=tiny).")
    ckpt = resolve_checkpoint_folder(checkpoint) if checkpoint is not None else None
    if ckpt is not None:  # training/ema.py: an SFT checkpoint's EMA is evaluated by default (printed)
        from vlarl_cli.training.ema import choose_weights

        ckpt = Path(choose_weights(str(ckpt)))
    cfg_source = config if config is not None else str(ckpt / "config.yaml")  # type: ignore[operator]
    loaded = load_config(cfg_source, list(overrides))
    model_cfg = loaded.config.actor.model
    family_folder = ckpt is not None and (ckpt / FAMILY_POLICY_MARKER).is_file()
    # a family policy folder is loaded by the family itself (weights + norm stats + tokenizer); otherwise the
    # model is rebuilt from the config (its original model_path provides the side files) and the state dict
    # of model.safetensors is loaded strictly on top
    model_path = str(ckpt) if family_folder else resolve_model_path(model_cfg.model_path)
    model = model_cfg.model_copy(update={"model_path": model_path})
    torch.manual_seed(loaded.config.actor.seed)
    policy = build_policy(model, device)
    if ckpt is not None and family_folder:
        sha, hash_of = _weights_sha256(ckpt)
        info = PolicyInfo("checkpoint", str(ckpt), sha, hash_of, model_cfg.model_type, str(cfg_source))
    elif ckpt is not None:
        _load_weights_strictly(policy, ckpt, cfg_source)
        info = PolicyInfo("checkpoint", str(ckpt), _sha256_file(ckpt / "model.safetensors"), "model.safetensors",
                          model_cfg.model_type, str(cfg_source))
    elif model_path is not None and list(Path(model_path).glob("*.safetensors")):
        sha, hash_of = _weights_sha256(Path(model_path))
        info = PolicyInfo("config", model_path, sha, hash_of, model_cfg.model_type, str(loaded.source))
    else:
        info = PolicyInfo("config", model_path or f"preset={model_cfg.preset}", state_dict_sha256(policy),
                          "state dict", model_cfg.model_type, str(loaded.source))
    policy.eval()
    return policy, info, loaded.config


def _load_weights_strictly(policy: torch.nn.Module, ckpt: Path, cfg_source: str) -> None:
    """``ckpt/model.safetensors`` into ``policy``: every key, every shape, or a CheckpointError."""
    from vlarl_cli.checkpoints.safety import load_state_dict

    fix = "Evaluate with the config the checkpoint was trained with (drop --config, or fix the overrides)."
    state = load_state_dict(ckpt / "model.safetensors")  # a damaged file is named in a CheckpointError
    try:
        result = policy.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shape mismatches raise even when strict=False
        first = str(err).splitlines()[1:2] or [str(err)[:200]]
        raise CheckpointError(f"Checkpoint {ckpt} does not match the model built from "
                              f"{Path(cfg_source).name}: {first[0].strip()}", fix) from None
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(
            f"Checkpoint {ckpt} does not match the model built from {Path(cfg_source).name}: "
            f"{len(result.missing_keys)} missing keys (e.g. {result.missing_keys[:3]}), "
            f"{len(result.unexpected_keys)} unexpected (e.g. {result.unexpected_keys[:3]}).", fix)
