"""Critic heads shared by the model families.

Two MLP critics map pooled features ``[B, in_dim]`` to one value per sample ``[B]`` (REFERENCE.md
section 3: pi0 pools the action-expert output, pi0.5 the VLM prefix, GR00T VL tokens + state features;
the pooling belongs to the family, this module only maps features to values).

* :class:`MLPCritic` (built by :func:`build_mlp_critic`): RLinf's critic
  (``rlinf/models/embodiment/modules/value_head.py`` in rlinf 0.3.0): ``Linear`` layers with an
  activation between them, the last ``Linear(width, 1)``, held in one ``nn.Sequential`` named ``mlp``
  so its parameters are ``mlp.0.*``, ``mlp.2.*``, ... ``mlp.<2n>.*``: exactly the names of RLinf's
  ``value_head.*`` tensors, so an RLinf checkpoint's critic loads as is. Any family can reuse it with
  its own hidden sizes and activation.
* :class:`ValueHead`: the earlier vlarl critic (GELU, parameters ``body.*`` / ``out.*``), kept for the
  families and checkpoints that use it.

Initialisation (``init``):

* ``"rlinf"``: as RLinf: hidden layers Kaiming-normal (fan_out, for the activation), biases 0, last
  layer N(0, 0.02^2) with bias 0. The first values are small but non-zero.
* ``"zero_last"``: hidden layers keep torch's default init, the LAST layer is zero (weight and bias),
  so every value starts at exactly 0. Why one would want it: LIBERO rewards are sparse in [0, 1]; a
  random head on large VLM features can output values of order 1-10, so the first GAE advantages and
  the clipped value loss are dominated by noise. Starting at 0 makes the first advantages equal to the
  discounted returns; the zero layer still gets gradient (its input is non-zero), so the hidden layers
  learn from the second step on.

Both heads compute in their own dtype and return float32, so the value loss is never done in bf16.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from vlarl_cli.errors import ConfigError, did_you_mean

__all__ = ["ACTIVATIONS", "CRITIC_INITS", "MLPCritic", "ValueHead", "build_mlp_critic"]

#: activation names accepted by :class:`MLPCritic` (RLinf accepts the same three)
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}
CRITIC_INITS = ("rlinf", "zero_last")
# torch has no Kaiming gain for GELU; ReLU's is the usual stand-in (RLinf would pass "gelu" and fail)
_KAIMING_GAIN: dict[str, Literal["relu", "tanh"]] = {"relu": "relu", "gelu": "relu", "tanh": "tanh"}


class MLPCritic(nn.Module):
    """MLP critic ``features [B, in_dim] -> values [B]`` with RLinf's parameter names (``mlp.<i>.*``).

    Args:
        in_dim: feature width.
        hidden_sizes: hidden layer widths, e.g. ``(512, 256, 128)`` (RLinf pi0) or ``(1024, 512, 256)``
            (RLinf pi05_libero). Empty: a single linear layer.
        activation: ``relu`` | ``gelu`` | ``tanh`` between the layers.
        init: ``rlinf`` | ``zero_last`` (see the module docstring).
        bias_last: whether the output layer has a bias (RLinf's openpi critic: True).
    """

    def __init__(self, in_dim: int, hidden_sizes: Sequence[int], activation: str = "relu",
                 init: str = "rlinf", bias_last: bool = True) -> None:
        super().__init__()
        act = activation.lower()
        if act not in ACTIVATIONS:
            raise ConfigError(f'Unknown critic activation "{activation}".{did_you_mean(act, tuple(ACTIVATIONS))}',
                              f"Use one of {', '.join(ACTIVATIONS)}.")
        if init not in CRITIC_INITS:
            raise ConfigError(f'Unknown critic init "{init}".{did_you_mean(init, CRITIC_INITS)}',
                              f"Use one of {', '.join(CRITIC_INITS)}.")
        if in_dim < 1 or any(h < 1 for h in hidden_sizes):
            raise ConfigError(f"Critic sizes must be positive, got in_dim={in_dim}, hidden={list(hidden_sizes)}.",
                              "Give positive layer widths.")
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden_sizes:
            layers += [nn.Linear(width, h), ACTIVATIONS[act]()]
            width = h
        layers.append(nn.Linear(width, 1, bias=bias_last))
        self.mlp = nn.Sequential(*layers)
        self.in_dim = in_dim
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.activation = act
        self.init = init
        self.reset_parameters()

    def reset_parameters(self) -> None:
        linears = [m for m in self.mlp if isinstance(m, nn.Linear)]
        last = linears[-1]
        if self.init == "zero_last":
            for m in linears[:-1]:
                m.reset_parameters()
            nn.init.zeros_(last.weight)
        else:
            for m in linears[:-1]:
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity=_KAIMING_GAIN[self.activation])
                nn.init.zeros_(m.bias)
            nn.init.normal_(last.weight, mean=0.0, std=0.02)
        if last.bias is not None:
            nn.init.zeros_(last.bias)

    def forward(self, features: Tensor) -> Tensor:
        if features.dim() != 2 or features.shape[1] != self.in_dim:
            raise ValueError(f"MLPCritic expects features [B, {self.in_dim}], got {tuple(features.shape)}")
        first: nn.Linear = self.mlp[0]  # type: ignore[assignment]
        # a fresh tensor, not a view: FSDP2 warns on (and an in-place op would skip the all-gather of) a wrapped
        # module's view outputs
        return self.mlp(features.to(first.weight.dtype)).squeeze(-1).to(torch.float32, copy=True)

    def extra_repr(self) -> str:
        return f"hidden={list(self.hidden_sizes)}, activation={self.activation}, init={self.init}"


def build_mlp_critic(in_dim: int, hidden_sizes: Sequence[int], activation: str = "relu",
                     init: str = "rlinf", bias_last: bool = True) -> MLPCritic:
    """The generic critic: ``hidden_sizes`` + ``activation`` (see :class:`MLPCritic`)."""
    return MLPCritic(in_dim, hidden_sizes, activation=activation, init=init, bias_last=bias_last)


class ValueHead(nn.Module):
    """The earlier vlarl critic: ``features [B, in_dim] -> values [B]``, GELU, last layer zero-initialised.

    Args:
        in_dim: feature width.
        hidden: hidden layer widths (GELU between layers).
        num_values: outputs per sample; above 1 the values are ``[B, num_values]`` (one per executed
            action, RLinf's ``value_type: action_level``).
    """

    def __init__(self, in_dim: int, hidden: Sequence[int] = (512, 128), num_values: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.GELU()]
            width = h
        self.out = nn.Linear(width, num_values)
        self.num_values = num_values
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.body = nn.Sequential(*layers)
        self.in_dim = in_dim

    def forward(self, features: Tensor) -> Tensor:
        if features.dim() != 2 or features.shape[1] != self.in_dim:
            raise ValueError(f"ValueHead expects features [B, {self.in_dim}], got {tuple(features.shape)}")
        x = features.to(self.out.weight.dtype)
        values = self.out(self.body(x))
        return (values.squeeze(-1) if self.num_values == 1 else values).to(torch.float32, copy=True)  # not a view
