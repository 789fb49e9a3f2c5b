"""What one actor update's backward keeps, per micro-batch element: the activation term of ``--dry-run``.

Each family declares its transformer stacks (``activation_stacks(policy)`` in its package): widths x token
lengths x layers of the stacks a gradient flows through (a frozen tower whose input needs no gradient keeps
nothing). :func:`activation_bytes` turns them into bytes for a micro-batch in the compute dtype.

Per token and layer, a pre-norm transformer layer keeps (no recomputation): the two norms' inputs and
outputs (``4 x width``), the attention projections' outputs and the attention output (``attn``: q + k + v +
o widths), and the MLP's hidden tensors (gated: gate, up, activation, product = ``4 x mlp``; plain: fc1 and
activation = ``2 x mlp``); a cross-attention adds its keys and values over ``kv_tokens``. With gradient
checkpointing a layer keeps only its input (``width``), and the backward rebuilds one layer at a time (the
largest layer's full set is added once). Attention scores (``heads x tokens x kv``) are kept only by the
math attention kernel (``scores=True``); the CUDA kernels for bf16 keep a log-sum-exp row instead.
These are estimates of the tensors the layers keep; glue outside the layers (embeddings, heads, losses,
dtype casts of a mixed-precision forward) is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from vlarl_cli.policies.flow_matching import FlowConfig


@dataclass(frozen=True)
class ActivationStack:
    """One stack of transformer layers whose activations the backward keeps, for ONE micro-batch element."""

    name: str
    tokens: int  # query tokens per element
    width: int  # residual width
    mlp: int  # MLP hidden width
    attn: int  # q + k + v + o projection widths per token
    layers: int
    heads: int = 0  # attention heads (for scores under the math kernel)
    gated: bool = True  # SwiGLU / GeGLU MLP (4 hidden tensors) or plain fc1-act-fc2 (2)
    passes: int = 1  # forwards per element in one update (an action expert called more than once)
    kv_tokens: int = 0  # keys / values attended beyond the stack's own tokens (a prefix cache, VL tokens)
    kv_width: int = 0  # k + v widths per such token, kept per layer
    checkpointed: bool = False  # gradient checkpointing: each layer keeps only its input

    def layer_elements(self, scores: bool = False) -> int:
        """Elements one layer keeps in one pass without recomputation."""
        mlp = (4 if self.gated else 2) * self.mlp
        own = self.tokens * (4 * self.width + self.attn + mlp) + self.kv_tokens * self.kv_width
        if scores:
            own += self.heads * self.tokens * (self.tokens + self.kv_tokens)
        return own

    def elements(self, scores: bool = False) -> int:
        """Elements the stack keeps until its backward, all layers and passes."""
        per_layer = self.tokens * self.width if self.checkpointed else self.layer_elements(scores)
        return self.passes * self.layers * per_layer


def activation_elements(stacks: Iterable[ActivationStack], scores: bool = False, rebuilt: bool = True) -> int:
    """Elements kept per micro-batch element: every stack, plus (``rebuilt``) the one layer the backward
    rebuilds at a time under checkpointing (the forward alone never holds it)."""
    stacks = list(stacks)
    kept = sum(s.elements(scores) for s in stacks)
    largest = max((s.layer_elements(scores) for s in stacks if s.checkpointed), default=0)
    return kept + (largest if rebuilt else 0)


def activation_bytes(stacks: Iterable[ActivationStack], micro_batch: int, dtype: torch.dtype,
                     scores: bool = False, rebuilt: bool = True) -> int:
    """Bytes one micro-batch's backward keeps, in the compute ``dtype``."""
    size = torch.empty((), dtype=dtype).element_size()
    return micro_batch * activation_elements(stacks, scores, rebuilt) * size


def keeps_activations(*modules: torch.nn.Module | None) -> bool:
    """True when a gradient flows through these modules: one of their parameters is trained (the families
    run frozen towers without a graph, so a frozen leading tower keeps nothing)."""
    return any(p.requires_grad for m in modules if m is not None for p in m.parameters())


def logprob_calls(flow: FlowConfig) -> int:
    """Velocity calls one log-prob recomputation makes (``flow_matching.flow_logprobs``): every denoising
    step for a joint log-prob, the stored step alone otherwise, none for the deterministic ``ode``."""
    if flow.method == "ode":
        return 0
    return flow.num_steps if flow.joint_logprob else 1


def saved_tensor_bytes(fn: object, module: torch.nn.Module) -> tuple[int, object]:
    """Bytes of the distinct storages autograd saves for backward while ``fn()`` runs (parameters excluded),
    and ``fn``'s result: the measured counterpart of :func:`activation_bytes` on any device.

    The pack hook keeps a detached view: the tensor it receives still carries its ``grad_fn``, and an op that
    saves its own output (exp, softmax, attention) would then own a tensor owning that op, a Python / C++
    reference cycle that no garbage collection breaks. A backward that completes frees it; a backward that
    fails part-way (out of memory) or none at all leaves the graph's activations allocated for good (on an
    H200 every smaller micro-batch then ran out of memory, with 134 GB still allocated at micro-batch 1)."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr and ptr not in params:
            kept[ptr] = max(kept.get(ptr, 0), storage.nbytes())
        return t.detach()  # same storage; autograd restores the grad_fn on unpack (no reference cycle)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()  # type: ignore[operator]
    return sum(kept.values()), out
