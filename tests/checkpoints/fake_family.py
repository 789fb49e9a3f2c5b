"""A tiny fourth family on the shared checkpoint pipeline (:mod:`vlarl_cli.checkpoints.pipeline`).

Registered by tests as ``vlarl_cli.policies.fakefam.checkpoint`` to exercise ``vlarl convert``'s
dispatch, LoRA merge, dtype cast, pickle gate and self-check without a real 3B model, and to show
what a new family writes (docs/adding_a_family.md). Two layouts:

* ``vlarl``: ``model.safetensors`` (our key names; shards + index when large) + ``vlarl_config.json``;
* ``upstream``: ``weights.safetensors`` with renamed keys (``net.encoder.*``, ``net.action_head.*``,
  ``net.critic.*``) + ``fake_config.json``, like an upstream repo would use. An upstream folder may lack
  the critic (``net.critic.*``): it then starts fresh and is reported in ``load_report.initialized``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlarl_cli.checkpoints import pipeline
from vlarl_cli.checkpoints.detect import open_checkpoint_folder, weights_table
from vlarl_cli.errors import CheckpointError
from vlarl_cli.policies.base import PolicyOutput
from vlarl_cli.policies.lora import apply_lora, init_lora_factors, merge_lora_for_export

__all__ = ["FAMILY", "FORMATS", "describe", "detect_format", "load_policy", "merge_lora_for_export", "save_policy"]

FAMILY = "fakefam"
FORMATS: tuple[str, ...] = ("vlarl", "upstream")
FORMAT_VERSION = 1
UPSTREAM_CONFIG, UPSTREAM_WEIGHTS = "fake_config.json", "weights.safetensors"
_UP = {"enc.": "net.encoder.", "head.": "net.action_head.", "value.": "net.critic."}
FRESH_PREFIXES = ("value.",)  # the critic: RL-only, absent from upstream folders


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


# ---------------------------------------------------------------------------------------- own: key map
def to_upstream_key(key: str) -> str:
    return next(new + key[len(old):] for old, new in _UP.items() if key.startswith(old))


def from_upstream_key(key: str) -> str | None:
    return next((old + key[len(new):] for old, new in _UP.items() if key.startswith(new)), None)


# ---------------------------------------------------------------------------------------- own: detect + config
def detect_format(path: Path) -> str | None:
    return pipeline.detect_layout(path, FAMILY, lambda root, _: "upstream" if (root / UPSTREAM_CONFIG).is_file()
                                  else None)


def read_settings(root: Path, fmt: str) -> FakeSettings:
    """Config-from-checkpoint: our ``vlarl_config.json`` model block, or upstream ``fake_config.json``."""
    data = (pipeline.read_vlarl_config(root, FORMAT_VERSION)["model"] if fmt == "vlarl"
            else pipeline.require_json(root / UPSTREAM_CONFIG))
    try:
        return FakeSettings(**data)
    except TypeError as exc:
        raise CheckpointError(f"{root}: unknown fakefam config field ({exc}).", "Re-save the checkpoint.") from exc


# ---------------------------------------------------------------------------------------- own: fresh params
def _fresh_init(policy: FakePolicy, fresh: list[str]) -> None:
    """The critic and LoRA factors a file lacks, initialised as a fresh build would."""
    with torch.no_grad():
        if any(k.startswith(FRESH_PREFIXES) for k in fresh):
            policy.value.reset_parameters()
    init_lora_factors(policy, fresh)


# ---------------------------------------------------------------------------------------- orchestration
def load_policy(path: Path, *, format: str | None = None, device: Any = "cpu", dtype: torch.dtype = torch.float32,
                strict: bool = True, overrides: dict | None = None) -> FakePolicy:
    root, fmt, header = open_checkpoint_folder(path, family=FAMILY, format=format, formats=FORMATS,
                                               detect=detect_format, looked_for=f"no {UPSTREAM_CONFIG}")
    settings = read_settings(root, fmt)
    policy, params = pipeline.build_on_meta(lambda: FakePolicy(settings),
                                            lambda p: p.to(dtype).to_empty(device=device))
    report = pipeline.LoadReport(fmt)
    rename = (lambda k: k) if fmt == "vlarl" else from_upstream_key
    plan = pipeline.plan_copies(header, params, rename, report)
    pipeline.plan_absent(params, (internal for _, internal in plan), report, FRESH_PREFIXES)
    if strict:  # before a tensor is read
        report.raise_if_incomplete(root, "fakefam model", "Repair the checkpoint, or pass strict=False.")
    pipeline.stream(plan, header, params, report)
    pipeline.settle_absent(policy, params, report, _fresh_init)
    policy.load_report = report
    return policy


def save_policy(policy: FakePolicy, path: Path, *, format: str = "vlarl", dtype: torch.dtype | None = None,
                max_shard_bytes: int = pipeline.MAX_SHARD_BYTES) -> None:
    from vlarl_cli.checkpoints.atomic import atomic_write_json

    pipeline.check_format(format, FORMATS, FAMILY)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    rename = (lambda k: k) if format == "vlarl" else to_upstream_key
    tensors = pipeline.cast_for_save({rename(k): v.detach() for k, v in policy.state_dict().items()}, dtype)
    if format == "vlarl":
        pipeline.write_weights(path, tensors, max_shard_bytes=max_shard_bytes)
        pipeline.write_vlarl_config(path, FAMILY, FORMAT_VERSION, asdict(policy.settings))
    else:
        pipeline.write_weights(path, tensors, max_shard_bytes=max_shard_bytes, name=UPSTREAM_WEIGHTS)
        atomic_write_json(path / UPSTREAM_CONFIG, asdict(policy.settings))


def describe(path: Path) -> dict[str, Any]:
    root, fmt = pipeline.detect_or_refuse(path, detect_format, FAMILY, f"Expected one of {', '.join(FORMATS)}.")
    header = weights_table(root)
    return {"family": FAMILY, "format": fmt, "norm_stats": False,
            "num_parameters": sum(int(torch.Size(shape).numel()) for shape, _, _ in header.values())}
