"""RLinf's GR00T critic, so an RLinf GR00T checkpoint resumes with its value head.

RLinf (``rlinf/models/embodiment/gr00t/gr00t_n1d5/gr00t_action_model.py`` and ``gr00t_n1d6/...``, class
``FlowMatchingActionHeadForRLActionPrediction``) builds ``action_head.value_head`` as its shared
``rlinf/models/embodiment/modules/value_head.py`` ``ValueHead(input_dim, hidden_sizes=(1024, 512, 256),
output_dim=1, activation="relu", bias_last=True)``: ``mlp = Sequential(Linear, ReLU, Linear, ReLU, Linear, ReLU,
Linear)``, so the tensors are ``action_head.value_head.mlp.{0,2,4,6}.{weight,bias}``. Input: the mean over ALL
VL tokens of the processed backbone features (padding included, ``value_vlm_mode: mean_token``) concatenated
with the flattened state token (2048 + 1536 = 3584), or the VL mean alone with ``use_vlm_value``.

Initialisation (``ValueHead._init_weights``, which RLinf's ``get_model`` calls again right after loading a
pretrained policy): Kaiming-normal ``fan_out`` for the hidden layers, N(0, 0.02) for the last one, zero
biases: the shared :class:`vlarl_cli.policies.value_head.MLPCritic` with these settings.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from vlarl_cli.policies.value_head import MLPCritic

__all__ = ["RLINF_HIDDEN", "Gr00tCritic"]

#: RLinf's GR00T critic widths
RLINF_HIDDEN = (1024, 512, 256)


class Gr00tCritic(MLPCritic):
    """``features [B, in_dim] -> values [B]`` (float32): RLinf's ``value_head`` layout and initialisation,
    which is :class:`~vlarl_cli.policies.value_head.MLPCritic` with ReLU, ``rlinf`` init and a biased last
    layer (the same parameter names ``mlp.{0,2,4,6}``)."""

    def __init__(self, in_dim: int, hidden: Sequence[int] = RLINF_HIDDEN) -> None:
        super().__init__(in_dim, hidden, activation="relu", init="rlinf", bias_last=True)


def pool_vl(vl: Tensor) -> Tensor:
    """RLinf ``get_value`` ``mean_token``: mean over every VL token, padding included. [B, S, D] -> [B, D]."""
    return vl.mean(dim=1)
