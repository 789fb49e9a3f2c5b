"""``builtin:<name>`` checkpoints: shipped in the package, resolved like folders, loaded like any checkpoint."""

from __future__ import annotations

import hashlib
import re

import pytest
import torch

from vlarl_cli import keys
from vlarl_cli.checkpoints.builtin import ROOT, available, builtin_checkpoint
from vlarl_cli.errors import CheckpointError
from vlarl_cli.training.common import resolve_model_path

NAME = "pi0_state_libero_spatial_t0_sft"


def test_the_quickstart_checkpoint_ships_and_matches_its_provenance() -> None:
    assert NAME in available()
    folder = builtin_checkpoint(f"builtin:{NAME}")
    assert folder == ROOT / NAME and resolve_model_path(f"builtin:{NAME}") == str(folder)
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    recorded = re.search(r"sha256 ([0-9a-f]{64})", (folder / "PROVENANCE.md").read_text())
    assert recorded is not None and recorded.group(1) == digest
    assert sum(f.stat().st_size for f in folder.iterdir()) < 2_000_000  # "a few MB at most"


def test_unknown_builtin_names_the_shipped_ones() -> None:
    with pytest.raises(CheckpointError, match=f'Did you mean "{NAME}"') as err:
        resolve_model_path("builtin:pi0_state_libero_spatial_t0")
    assert f"builtin:{NAME}" in err.value.fix


def test_the_shipped_policy_loads_in_state_mode_with_its_statistics() -> None:
    from vlarl_cli.policies.pi0.checkpoint import load_policy

    policy = load_policy(builtin_checkpoint(NAME))
    assert policy.obs_mode == "state" and policy.cameras == () and policy.cfg.state_env_dim == 14
    assert set(policy.norm_stats) >= {"state", "actions"} and policy.norm_stats["state"].mean.shape == (14,)
    obs = {keys.STATES: torch.zeros(2, 14), keys.TASK_DESCRIPTIONS: ["pick up the black bowl"] * 2}
    out = policy.sample(obs, deterministic=True)
    assert out.actions.shape == (2, 5, 7) and torch.isfinite(out.actions).all()


def test_vlarl_eval_takes_a_builtin_checkpoint() -> None:
    from vlarl_cli.training.evaluation.source import resolve_checkpoint_folder

    assert resolve_checkpoint_folder(f"builtin:{NAME}") == (ROOT / NAME).resolve()
    with pytest.raises(CheckpointError, match="no built-in checkpoint"):
        resolve_checkpoint_folder("builtin:nothing")
