"""Gripper conventions (policies/gripper.py): hand values, inverses, aliases, refusals, numpy = torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.policies.gripper import canonical_gripper, check_gripper, gripper_from_env, gripper_to_env


def test_zero_one_to_sign_hand_values_and_inverse_on_libero_commands() -> None:
    y = torch.tensor([-1.0, 1.0, -1.0])  # LIBERO: -1 open, +1 close
    assert gripper_from_env("zero_one_to_sign", y).tolist() == [1.0, 0.0, 1.0]  # model: 1 = open
    assert torch.equal(gripper_to_env("zero_one_to_sign", gripper_from_env("zero_one_to_sign", y)), y)
    assert gripper_to_env("zero_one_to_sign", torch.tensor([0.9, 0.1, 0.5])).tolist() == [-1.0, 1.0, -0.0]


def test_binarize_and_none() -> None:
    g = torch.tensor([0.3, -0.2, 0.0, 1.5])
    assert gripper_to_env("binarize", g).tolist() == [1.0, -1.0, -1.0, 1.0]  # 0 -> -1 (open)
    assert gripper_from_env("binarize", g).tolist() == g.tolist()
    out = gripper_to_env("none", g)
    assert out.tolist() == g.tolist() and out is not g  # a new tensor: callers write into it


@pytest.mark.parametrize(("alias", "family_field"), [("from_01", "pi0 gripper"), ("libero", "OpenVLA-OFT gripper")])
def test_family_names_are_aliases_with_the_same_numbers(alias: str, family_field: str) -> None:
    g = torch.linspace(0.0, 1.0, 11)
    assert canonical_gripper(alias) == "zero_one_to_sign", family_field
    assert torch.equal(gripper_to_env(alias, g), gripper_to_env("zero_one_to_sign", g))
    assert torch.equal(gripper_from_env(alias, g), gripper_from_env("zero_one_to_sign", g))


def test_numpy_gives_the_torch_numbers() -> None:
    g = np.array([0.9, 0.1, 0.5, 0.49])
    for kind in ("zero_one_to_sign", "binarize", "none"):
        np.testing.assert_array_equal(gripper_to_env(kind, g), gripper_to_env(kind, torch.from_numpy(g)).numpy())
        np.testing.assert_array_equal(gripper_from_env(kind, g), gripper_from_env(kind, torch.from_numpy(g)).numpy())


def test_unknown_names_and_unsupported_conventions_are_refused() -> None:
    with pytest.raises(ConfigError, match="from_01"):
        canonical_gripper("from01")
    with pytest.raises(ConfigError, match="not supported by this model family"):
        check_gripper("binarize", ("zero_one_to_sign", "none"), "gripper_convention")
    check_gripper("libero", ("zero_one_to_sign", "none"), "gripper")  # an alias of an allowed one passes


def test_family_configs_validate_through_the_table() -> None:
    from vlarl_cli.policies.openvla_oft.config import OftConfig
    from vlarl_cli.policies.pi0.config import Pi0Config

    Pi0Config(gripper="zero_one_to_sign")
    OftConfig(gripper="zero_one_to_sign")
    with pytest.raises(ConfigError, match="not supported"):
        OftConfig(gripper="binarize")
    with pytest.raises(ConfigError, match="Unknown gripper convention"):
        Pi0Config(gripper="open_close")
