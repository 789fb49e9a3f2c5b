"""Gripper conventions, in one place: how a family's model-space gripper value becomes LIBERO's gripper
command (-1 = open, +1 = close; REFERENCE.md section 1) and back (the supervised target of an env action).

Three conventions:

* ``none``: the model already emits LIBERO's command (openpi's LIBERO checkpoints); identity both ways.
* ``zero_one_to_sign``: the model emits ``g`` in [0, 1] with 1 = open (OpenVLA / OpenVLA-OFT, GR00T's
  LIBERO embodiments, pi0 trained on such data). To the env ``-sign(2 g - 1)`` (OpenVLA's
  ``normalize_gripper_action`` + ``invert_gripper_action``, RLinf's ``prepare_actions_for_libero``); from
  the env ``(1 - y) / 2``, its inverse on {-1, +1}.
* ``binarize``: the model emits about +-1 in LIBERO's sense; to the env ``sign`` (0 -> -1, open); from the
  env the identity.

The families' config fields keep the names they shipped with, which are stored in checkpoints and
recipes: ``from_01`` (pi0 ``gripper``) and ``libero`` (OpenVLA-OFT ``gripper``) are aliases of
``zero_one_to_sign`` (GR00T ``gripper_convention``). Works on torch tensors and numpy arrays alike
(values of any shape).
"""

from __future__ import annotations

from typing import Any

from vlarl_cli.errors import ConfigError, did_you_mean

__all__ = ["GRIPPER_ALIASES", "GRIPPER_CONVENTIONS", "canonical_gripper", "check_gripper", "gripper_from_env",
           "gripper_to_env"]

GRIPPER_CONVENTIONS = ("none", "zero_one_to_sign", "binarize")
#: names the families' configs and checkpoints use -> the convention
GRIPPER_ALIASES = {"from_01": "zero_one_to_sign", "libero": "zero_one_to_sign"}

def canonical_gripper(name: str) -> str:
    """The convention ``name`` (a convention or an alias) stands for; ConfigError for any other name."""
    canonical = GRIPPER_ALIASES.get(name, name)
    if canonical not in GRIPPER_CONVENTIONS:
        known = (*GRIPPER_CONVENTIONS, *GRIPPER_ALIASES)
        raise ConfigError(f'Unknown gripper convention "{name}".{did_you_mean(name, known)}',
                          f"Use one of {', '.join(GRIPPER_CONVENTIONS)} (aliases: "
                          f"{', '.join(f'{a} = {c}' for a, c in GRIPPER_ALIASES.items())}).")
    return canonical


def check_gripper(name: str, allowed: tuple[str, ...], field: str) -> None:
    """Refuse ``name`` unless it is (an alias of) one of the conventions ``allowed`` (a family's subset)."""
    if canonical_gripper(name) not in allowed:
        raise ConfigError(f'{field} "{name}" is not supported by this model family.',
                          f"Use one of {', '.join(allowed)}.")


def _sign(x: Any) -> Any:
    if hasattr(x, "sign"):  # torch
        return x.sign()
    import numpy as np  # imported here: the family configs import this module and must import instantly

    return np.sign(x)


def gripper_to_env(convention: str, g: Any) -> Any:
    """Model gripper values -> LIBERO commands under ``convention`` (a new tensor / array, same shape)."""
    kind = canonical_gripper(convention)
    if kind == "zero_one_to_sign":
        return -_sign(2.0 * g - 1.0)
    if kind == "binarize":
        return 2.0 * (g > 0) - 1.0
    return g * 1.0


def gripper_from_env(convention: str, y: Any) -> Any:
    """LIBERO commands -> the model-space target under ``convention`` (a new tensor / array, same shape)."""
    if canonical_gripper(convention) == "zero_one_to_sign":
        return (1.0 - y) / 2.0
    return y * 1.0
