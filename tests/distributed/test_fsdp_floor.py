"""FSDP2 on the CPU is refused below the torch version it was checked on (pyproject allows torch>=2.6)."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli.distributed import fsdp
from vlarl_cli.errors import ConfigError


@pytest.mark.parametrize("version", ["2.6.0", "2.7.1+cu126", "2.12.1"])
def test_cpu_fsdp_below_the_checked_torch_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.raises(ConfigError, match=r"FSDP2 on the CPU is supported from torch 2\.13 "):
        fsdp.shard_model(torch.nn.Linear(2, 2), device=torch.device("cpu"), class_names=[])
    fsdp._check_cpu_fsdp(torch.device("cuda"))  # the floor for GPUs is the package's (2.6)


@pytest.mark.parametrize("version", ["2.13.0+cpu", "2.14.1", "3.0.0"])
def test_cpu_fsdp_from_the_checked_torch_on_is_allowed(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    fsdp._check_cpu_fsdp(torch.device("cpu"))
