"""A tiny stand-in family checkpoint module implementing the shared family checkpoint API.

Registered by tests as ``vlarl_cli.policies.fakefam.checkpoint`` to exercise ``vlarl convert``'s
dispatch, LoRA merge, dtype cast, pickle gate and self-check without a real 3B model. Two layouts:

* ``vlarl``: ``model.safetensors`` (our key names) + ``vlarl_config.json``;
* ``upstream``: ``weights.safetensors`` with renamed keys (``net.encoder.*``, ``net.action_head.*``,
  ``net.critic.*``) + ``fake_config.json``, like an upstream repo would use.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.base import PolicyOutput
from vlarl_cli.policies.lora import apply_lora, merge_lora_for_export  # noqa: F401 (the family API convert calls)

FAMILY = "fakefam"
FORMATS: tuple[str, ...] = ("vlarl", "upstream")
_UP = {"enc.": "net.encoder.", "head.": "net.action_head.", "value.": "net.critic."}


@dataclass(frozen=True)
class FakeSettings:
    hidden: int = 8
    is_lora: bool = False
    lora_rank: int = 2


class FakePolicy(nn.Module):
    num_action_chunks = 3
    action_dim = 7

    def __init__(self, settings: FakeSettings) -> None:
        super().__init__()
        self.settings = settings
        self.enc = nn.Linear(8 + 6, settings.hidden)
        self.head = nn.Linear(settings.hidden, 3 * 7)
        self.value = nn.Linear(settings.hidden, 1)
        if settings.is_lora:
            apply_lora(self, settings.lora_rank, targets=("enc", "head"))

    def sample(self, obs: dict[str, Any], deterministic: bool = False) -> PolicyOutput:
        img = torch.cat([obs["main_images"].float().mean(dim=(1, 2)), obs["wrist_images"].float().mean(dim=(1, 2))],
                        dim=-1) / 255.0  # [B, 6]
        h = torch.tanh(self.enc(torch.cat([obs["states"], img], dim=-1)))
        noise = torch.randn(h.shape[0], 3, 7)  # drawn in both modes, like a flow policy's initial noise
        actions = self.head(h).view(-1, 3, 7) + (0.0 if deterministic else 0.1) * noise + 1e-3 * noise
        return PolicyOutput(actions=actions, logprobs=torch.zeros_like(actions),
                            values=self.value(h).squeeze(-1))

    def evaluate(self, replay):  # pragma: no cover - not needed by convert
        raise NotImplementedError


def detect_format(path: Path) -> str | None:
    path = Path(path)
    cfg = path / "vlarl_config.json"
    if cfg.is_file() and json.loads(cfg.read_text()).get("family") == FAMILY:
        return "vlarl"
    if (path / "fake_config.json").is_file():
        return "upstream"
    return None


def save_policy(policy: FakePolicy, path: Path, *, format: str = "vlarl", dtype: torch.dtype | None = None) -> None:
    from vlarl_cli.checkpoints.atomic import atomic_save_safetensors, atomic_write_json

    if format not in FORMATS:
        raise CheckpointError(f"unknown format {format}")
    sd = {}
    for k, v in policy.state_dict().items():
        v = v.detach().clone()
        if dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        if format == "upstream":
            k = next(new + k[len(old):] for old, new in _UP.items() if k.startswith(old))
        sd[k] = v
    path = Path(path)
    if format == "vlarl":
        atomic_save_safetensors(sd, path / "model.safetensors")
        atomic_write_json(path / "vlarl_config.json",
                          {"family": FAMILY, "format_version": 1, "model": asdict(policy.settings)})
    else:
        atomic_save_safetensors(sd, path / "weights.safetensors")
        atomic_write_json(path / "fake_config.json", asdict(policy.settings))


def load_policy(path: Path, *, format: str | None = None, device: Any = "cpu", dtype: torch.dtype = torch.float32,
                strict: bool = True, overrides: dict | None = None) -> FakePolicy:
    from safetensors.torch import load_file

    path = Path(path)
    fmt = format or detect_format(path)
    if fmt == "vlarl":
        settings = FakeSettings(**json.loads((path / "vlarl_config.json").read_text())["model"])
        sd = load_file(path / "model.safetensors")
    elif fmt == "upstream":
        settings = FakeSettings(**json.loads((path / "fake_config.json").read_text()))
        inv = {new: old for old, new in _UP.items()}
        sd = {next(inv[p] + k[len(p):] for p in inv if k.startswith(p)): v
              for k, v in load_file(path / "weights.safetensors").items()}
    else:
        raise CheckpointError(f"{path}: not a fakefam checkpoint")
    policy = FakePolicy(settings)
    missing, unexpected = policy.load_state_dict({k: v.to(dtype) for k, v in sd.items()}, strict=False)
    if strict and (missing or unexpected):
        raise CheckpointError(f"missing {missing}, unexpected {unexpected}")
    return policy.to(device=device, dtype=dtype)


def describe(path: Path) -> dict[str, Any]:
    return {"family": FAMILY, "format": detect_format(path), "num_parameters": None, "norm_stats": False}
