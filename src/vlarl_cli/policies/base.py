"""The policy contract every model family implements (DESIGN.md, "Contracts").

A policy turns a batch of observations into an action chunk plus everything RL needs:

    out = policy.sample(obs, deterministic=False)
    out.actions   [B, C, A]   env-space actions (un-normalised, env gripper convention), C executed steps
    out.logprobs  [B, C, A]   per-element log-probs of the sampled actions under the current weights
    out.values    [B]         value estimate of the observation (zeros when the policy has no value head);
                  or [B, C]   one per executed action, from a critic with ``value_type: action_level``
    out.replay    dict        tensors from which ``evaluate`` recomputes the SAME log-probs under new
                              weights: the model inputs (images, tokens, state) and the sampling record
                              (denoising chain + indices for flow policies, sampled tokens for token
                              policies). Every tensor has batch as its first dimension so replays can be
                              stacked, sliced and shuffled along it.

    ev = policy.evaluate(out.replay)
    ev.logprobs  [B, C, A]    equal to ``out.logprobs`` under unchanged weights (tested to 1e-5)
    ev.values    [B] (or [B, C], as ``out.values``)
    ev.entropy   [B, C, A] or None   only where the policy defines one (learned noise, token logits)

Deterministic mode (``deterministic=True``) is used for evaluation: ODE denoising / argmax tokens;
its log-probs are zeros. ``sample(..., generator=RowGenerator)`` draws each env's noise from its own
stream (``policies.noise``), so the actions do not depend on how envs are batched.

Optional, for ``vlarl sft``:

    loss = policy.supervised_loss(obs, actions)   # actions [B, C, A] env-space; scalar mean
    (flow-matching loss for flow policies, action-token cross-entropy for token policies)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from vlarl_cli.policies.noise import AnyGenerator

Replay = dict[str, torch.Tensor]
Observation = dict[str, Any]  # keys from vlarl_cli.keys; images uint8 tensors, descriptions list[str]


@dataclass
class PolicyOutput:
    """Result of :meth:`Policy.sample`. Shapes in the module docstring."""

    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    replay: Replay = field(default_factory=dict)


@dataclass
class EvaluateOutput:
    """Result of :meth:`Policy.evaluate`. Shapes in the module docstring."""

    logprobs: torch.Tensor
    values: torch.Tensor
    entropy: torch.Tensor | None = None


@runtime_checkable
class Policy(Protocol):
    """What the RL runner needs from a model family. Implementations are ``torch.nn.Module``s."""

    #: number of env steps executed per sampled chunk (``num_action_chunks``)
    num_action_chunks: int
    #: env action dimensionality (7 on LIBERO)
    action_dim: int

    def sample(self, obs: Observation, deterministic: bool = False,
               generator: AnyGenerator = None) -> PolicyOutput: ...

    def evaluate(self, replay: Replay) -> EvaluateOutput: ...


def stack_replays(replays: list[Replay]) -> Replay:
    """Concatenate replay dicts along the batch dimension."""
    if not replays:
        return {}
    keys = replays[0].keys()
    for r in replays[1:]:
        if r.keys() != keys:
            raise ValueError(f"replay keys differ: {sorted(keys)} vs {sorted(r.keys())}")
    return {k: torch.cat([r[k] for r in replays], dim=0) for k in keys}


def index_replay(replay: Replay, index: torch.Tensor | slice) -> Replay:
    """Select rows of every tensor of a replay (batch is dim 0)."""
    return {k: v[index] for k, v in replay.items()}
