"""Policy sources of `vlarl eval`: a training checkpoint folder is rebuilt and loaded strictly (no simulator)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from vlarl_cli.errors import CheckpointError
from vlarl_cli.training.evaluation import load_policy, resolve_checkpoint_folder, state_dict_sha256


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    from safetensors.torch import save_file

    from vlarl_cli.config.loading import load_config, to_yaml

    policy, _, _ = load_policy(None, "libero_tiny_ppo", [])
    with torch.no_grad():  # make the weights differ from a fresh build with the same seed
        for p in policy.parameters():
            p.add_(0.01)
    # the layout of training/checkpoint.py: <run>/checkpoints/global_step_<k>/{model.safetensors, config.yaml,
    # trainer_state.json} + <run>/checkpoints/latest
    run = tmp_path_factory.mktemp("run")
    path = run / "checkpoints" / "global_step_3"
    path.mkdir(parents=True)
    save_file({k: v.detach().clone().contiguous() for k, v in policy.state_dict().items()},
              str(path / "model.safetensors"))
    (path / "config.yaml").write_text(to_yaml(load_config("libero_tiny_ppo").config))
    (path / "trainer_state.json").write_text('{"iteration": 3}')
    (run / "checkpoints" / "latest").write_text("global_step_3\n")
    return path, {k: v.clone() for k, v in policy.state_dict().items()}


def test_checkpoint_round_trip(checkpoint: tuple[Path, dict[str, torch.Tensor]]) -> None:
    path, state = checkpoint
    policy, info, _ = load_policy(path, None, [])
    loaded = policy.state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    assert info.source == "checkpoint" and info.hash_of == "model.safetensors"
    assert info.sha256 == hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    assert not policy.training
    # the run folder and its checkpoints/ folder resolve to the latest checkpoint
    assert resolve_checkpoint_folder(path.parent.parent) == path == resolve_checkpoint_folder(path.parent)


def test_config_policy_is_reproducible() -> None:
    _, info_a, _ = load_policy(None, "libero_tiny_ppo", [])
    b, info_b, _ = load_policy(None, "libero_tiny_ppo", [])
    assert info_a.sha256 == info_b.sha256 == state_dict_sha256(b) and info_a.hash_of == "state dict"
    _, info_c, _ = load_policy(None, "libero_tiny_ppo", ["actor.seed=1"])
    assert info_c.sha256 != info_a.sha256


def test_mismatching_model_is_refused(checkpoint: tuple[Path, dict[str, torch.Tensor]]) -> None:
    path, _ = checkpoint
    with pytest.raises(CheckpointError, match="does not match"):
        load_policy(path, None, ["actor.model.model_type=pi05"])


def test_family_policy_folder_checkpoint(checkpoint: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path) -> None:
    """rl-train exports checkpoints with the family's save_policy(format="vlarl") (weights + side files)."""
    from vlarl_cli.policies.pi0.checkpoint import save_policy

    path, state = checkpoint
    policy, _, _ = load_policy(path, None, [])
    folder = tmp_path / "global_step_3"
    save_policy(policy, folder, format="vlarl")
    (folder / "config.yaml").write_text((path / "config.yaml").read_text())
    assert (folder / "vlarl_config.json").is_file()
    again, info, _ = load_policy(folder, None, [])
    loaded = again.state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    assert info.path == str(folder) and len(info.sha256) == 64
