"""A pickle-only openpi checkpoint (RLinf publishes `.pt` ones) converts with allow_pickle, and only then."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vlarl_cli.checkpoints.convert import convert
from vlarl_cli.errors import CheckpointError


@pytest.fixture(scope="module")
def pickle_only_openpi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vlarl_cli.policies.pi0.checkpoint import save_policy
    from vlarl_cli.training.evaluation import load_policy

    policy, _, _ = load_policy(None, "libero_tiny_ppo", [])  # tiny pi0 (openpi family)
    root = tmp_path_factory.mktemp("rlinf_pt")
    save_policy(policy, root, format="openpi")
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(root.glob("*.safetensors")):
        tensors.update(load_file(f))
        f.unlink()
    for index in root.glob("*.safetensors.index.json"):
        index.unlink()
    torch.save(tensors, root / "model.pt")
    return root


def test_pickle_only_openpi_needs_allow_pickle_then_converts_exactly(pickle_only_openpi: Path,
                                                                     tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="only pickle-based weights"):
        convert(pickle_only_openpi, tmp_path / "refused", "vlarl")
    assert not (tmp_path / "refused").exists()
    report = convert(pickle_only_openpi, tmp_path / "out", "vlarl", allow_pickle=True)
    assert report.family == "pi0" and report.src_format == "openpi"
    assert report.max_abs_diff == 0.0 and report.max_abs_diff_values == 0.0  # a pure re-layout
    assert (tmp_path / "out" / "vlarl_config.json").is_file()
    assert not list(pickle_only_openpi.glob("*.safetensors"))  # the source folder is left as it was
