"""The model-type vocabulary: every ``actor.model.model_type`` vlarl knows, the policy family that builds
it, and what checkpoint detection and preset matching need to know of it. The one table the config schema,
the policy registry (:mod:`vlarl_cli.policies.registry`), checkpoint detection and preset matching
(:mod:`vlarl_cli.checkpoints.detect`), the evaluation protocol table (:mod:`vlarl_cli.envs.libero.protocol`)
and the families' own configs read; plain data, no imports, so config validation stays instant. It sits
at the package root beside ``keys.py`` and ``precision.py`` rather than in ``config/``: the lower floors
(checkpoints/, envs/) read it too, and config/ stands above them.

Adding a model type is one row here; adding a family is rows here plus ``vlarl_cli/policies/<family>/``
with ``build_policy`` / ``ModelSettings`` and a ``checkpoint`` module (:mod:`vlarl_cli.checkpoints.pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHECKPOINT_FAMILIES", "MODEL_TYPES", "ModelType", "family_model_types", "model_types_of"]


@dataclass(frozen=True)
class ModelType:
    """One ``model_type`` value.

    Attributes:
        family: the package under ``vlarl_cli.policies`` that builds it (``pi0``, ``gr00t``, ...).
        variant: the checkpoint variant it loads (``CheckpointInfo.variant``: ``pi0`` / ``pi05``,
            ``gr00t_n15`` / ``gr00t_n16``, ``openvla``); None when the config decides (RLinf's ``openpi``
            names pi0 or pi0.5 through ``openpi.config_name``) or the family has no checkpoints (toy).
        version: the family's own version name of that variant (GR00T ``n1.5`` / ``n1.6``), if it has one.
        upstream: ``model_type`` values of the upstream ``config.json`` of that variant (GR00T: Isaac-GR00T's
            N1.5 ``gr00t_n1_5`` and N1.6 ``Gr00tN1d6``; the first is the one written on export).
        flow: a flow-matching action expert (denoising steps, ``noise_method``); False: tokens or a Gaussian.
    """

    family: str
    variant: str | None = None
    version: str | None = None
    upstream: tuple[str, ...] = ()
    flow: bool = False


MODEL_TYPES: dict[str, ModelType] = {
    "openpi": ModelType("pi0", flow=True),
    "pi0": ModelType("pi0", "pi0", flow=True),
    "pi05": ModelType("pi0", "pi05", flow=True),
    # Isaac-GR00T gr00t/model/gr00t_n1.py (N1.5: "gr00t_n1_5", N1: "gr00t_n1") and gr00t_n1d6 ("Gr00tN1d6")
    "gr00t": ModelType("gr00t", "gr00t_n15", "n1.5", ("gr00t_n1_5", "gr00t_n1"), flow=True),
    "gr00t_n1d6": ModelType("gr00t", "gr00t_n16", "n1.6", ("Gr00tN1d6", "gr00t_n1d6"), flow=True),
    "openvla_oft": ModelType("openvla_oft", "openvla"),
    "toy_flow": ModelType("toy", flow=True),
    "toy_gaussian": ModelType("toy"),
}

#: families whose checkpoints detection and ``convert`` read (the toy policies have none)
CHECKPOINT_FAMILIES: tuple[str, ...] = ("pi0", "gr00t", "openvla_oft")


def model_types_of(family: str) -> tuple[str, ...]:
    """The ``model_type`` names of ``family``, in table order."""
    return tuple(name for name, t in MODEL_TYPES.items() if t.family == family)


def family_model_types() -> dict[str, tuple[str, ...]]:
    """family -> its model types, for the families that have checkpoints."""
    return {family: model_types_of(family) for family in CHECKPOINT_FAMILIES}
