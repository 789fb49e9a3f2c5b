"""vlarl's GR00T RL head against RLinf 0.3.0's own GR00T RL head code on the same tiny weights.

``tests/fixtures/gr00t/rlinf.npz`` was recorded by ``scripts/reference/gr00t_rlinf.py`` (run by
``scripts/reference/gr00t_golden.sh``; provenance in tests/fixtures/gr00t/README.md): RLinf's
``FlowMatchingActionHeadForRLActionPrediction`` of ``gr00t_n1d5`` / ``gr00t_n1d6`` on Isaac-GR00T's action heads
(n1.5-release / n1.6.1-release), RLinf's LIBERO ``rl_head_config`` (flow_sde, noise 0.5, one stochastic step,
mean_token value), every tensor ``golden_weight(name)``. Its inputs are the backbone's output for a batch of
three prompts of different lengths (12, 9, 7 real tokens, right-padded to 12 as RLinf pads), with the attention /
image masks N1.6's DiT reads. The last test chains both releases end to end: Isaac-GR00T's own Eagle backbone (run
on SDPA, see test_gr00t_eagle.py) feeding RLinf's head, gradients into the LLM / connector / vision tower included.

Compared: the deterministic (eval) actions; for every choice of RLinf's stochastic step, the recorded chain's
deterministic transitions and the per-step rollout log-probs of the executed [C, 7] block; the values; RLinf's
training recompute (``forward``) and the gradients that a log-prob loss and a value loss send into the layers the
actor and critic share (VL LayerNorm, N1.5's VL self-attention, state encoder, DiT keys, critic). RLinf never
detaches the critic input, and neither does vlarl: the value gradient reaches the VL LayerNorm and state encoder.

Tolerances: fp32 on both sides. Measured when this was written (``torch 2.13.0+cpu`` on both sides, x86-64):
actions, values, the ODE transitions and every gradient bit-identical (0), log-probs (magnitude <= 4.7) within
6e-8. vlarl's flow transition is RLinf's formula (``x0_pred * x0_weight + x1_pred * x1_weight``) and diffusers'
attention processor calls the same ``scaled_dot_product_attention`` as vlarl, so equality is expected. ATOL =
6e-7 is 10x the largest measured error (about one float32 ulp at magnitude 4). Re-recording golden.npz with
today's torch moved Isaac-GR00T's own head outputs by up to 3.6e-7 against the committed file, so a torch upgrade
can need rlinf.npz re-recorded (scripts/reference/gr00t_golden.sh). It was recorded on torch's AVX2 kernels, and the
suite pins them (tests/conftest.py): AVX-512's kernels (an AMD EPYC Zen 4) moved actions by up to 7.2e-7 and
gradients by 1.9e-6 against this fixture. Gradients are compared to 1e-6 of each tensor's largest entry.
A 1e-4 relative change of the VL LayerNorm weight moves log-probs and values by 1e-5 (60x ATOL); a critic over
a masked mean (not RLinf's mean over every token) moves values by 0.1-0.3; a detached critic input leaves no
gradient on the VL LayerNorm.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from vlarl_cli.policies.flow_matching import (
    FlowConfig,
    VelocityOutput,
    _transition,
    flow_logprobs,
    sample_flow,
    time_grid,
)
from vlarl_cli.policies.gr00t.action_head import ActionHead
from vlarl_cli.policies.gr00t.backbone import EagleBackbone
from vlarl_cli.policies.gr00t.checkpoint import to_upstream_key
from vlarl_cli.policies.gr00t.config import preset
from vlarl_cli.policies.gr00t.critic import Gr00tCritic, pool_vl
from vlarl_cli.policies.gr00t.modeling import disable_dropout

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gr00t" / "rlinf.npz"
K, CHUNKS, ENV_DIM = 4, 5, 7
ATOL = 6e-7  # 10x the largest measured error (6e-8, log-probs); everything else measured 0
GRAD_RTOL = 1e-6  # of each gradient tensor's largest entry; measured 0
CFG = FlowConfig(num_steps=K, method="flow_sde", noise_level=0.5, noise_at=0.0)


@pytest.fixture(scope="module")
def rec() -> dict[str, np.ndarray]:
    with np.load(FIXTURE) as data:
        return {k: data[k] for k in data.files}


def golden_weight(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Same seeded weights as scripts/reference/gr00t_golden.py."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    return torch.randn(shape, generator=g) * 0.1


def _head(version: str) -> ActionHead:
    cfg = preset("tiny", version).replace(num_embodiments=2, use_attention_mask=version == "n1.6")
    head = ActionHead(cfg)
    head.value_head = Gr00tCritic(cfg.backbone_embedding_dim + cfg.input_embedding_dim)
    disable_dropout(head)
    with torch.no_grad():
        for name, p in head.named_parameters():
            p.copy_(golden_weight(name, tuple(p.shape)))
    return head.eval()


class Case:
    """vlarl's computation on the recorded inputs (what Gr00tPolicy.encode / values / _velocity_fn do)."""

    def __init__(self, rec: dict[str, np.ndarray], version: str) -> None:
        self.p = "n15" if version == "n1.5" else "n16"
        self.rec = rec
        self.head = _head(version)
        x = {k[len(self.p) + 4:]: torch.from_numpy(v) for k, v in rec.items() if k.startswith(f"{self.p}_in_")}
        self.x = x
        self.emb = x["embodiment_id"].long()
        self.vl_mask, self.image_mask = x["attention_mask"], x["image_mask"]

    def encode(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head.process_vl(self.x["vl"]), self.head.encode_state(self.x["state"][:, 0], self.emb)

    def fn(self, vl: torch.Tensor, sf: torch.Tensor):
        def velocity(x_t: torch.Tensor, t: torch.Tensor) -> VelocityOutput:
            return VelocityOutput(self.head.velocity(x_t, t, vl, sf, self.emb, self.vl_mask, self.image_mask)[0])
        return velocity

    def values(self, vl: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
        return self.head.value_head(torch.cat([pool_vl(vl), sf.flatten(1)], dim=-1))


def _close(got: torch.Tensor, want: np.ndarray, atol: float, rtol: float = 0.0) -> None:
    torch.testing.assert_close(got.detach().float(), torch.from_numpy(np.asarray(want)).float(), atol=atol, rtol=rtol)


VERSIONS = ["n1.5", "n1.6"]


@pytest.mark.parametrize("version", VERSIONS)
def test_rlinf_rollout_actions_logprobs_values(rec, version) -> None:
    c = Case(rec, version)
    p = c.p
    assert sorted(n for n, _ in c.head.named_parameters()) == sorted(rec[f"{p}_param_names"].tolist())
    assert rec["lengths"].tolist() == c.vl_mask.sum(1).tolist() == [12, 9, 7]  # prompts of different lengths
    with torch.no_grad():
        vl, sf = c.encode()
        fn = c.fn(vl, sf)
        out = sample_flow(fn, c.x["noise"], CFG, deterministic=True)  # RLinf mode="eval": deterministic Euler
        _close(out.actions, rec[f"{p}_eval_actions"], atol=ATOL)
        _close(c.values(vl, sf), rec[f"{p}_prev_values_0"][:, 0], atol=ATOL)
        grid = time_grid(K)
        for index in range(K):  # RLinf's stochastic step, each in turn
            chain = torch.from_numpy(rec[f"{p}_chain_{index}"])
            assert (rec[f"{p}_denoise_inds_{index}"] == index).all()
            for i in range(K):  # the deterministic transitions of RLinf's chain are vlarl's ODE means
                tr = _transition(fn, chain[:, i], torch.full((3,), i), grid, CFG)
                if i != index:
                    _close(tr.ode_mean, chain[:, i + 1], atol=ATOL)
            logp, _ = flow_logprobs(fn, chain, torch.full((3,), index), CFG)
            want = rec[f"{p}_prev_logprobs_{index}"]  # [B, K, C, A]: zeros except the stochastic step
            assert not want[:, [i for i in range(K) if i != index]].any()
            _close(logp[:, :CHUNKS, :ENV_DIM], want[:, index, :, :ENV_DIM], atol=ATOL)


@pytest.mark.parametrize("version", VERSIONS)
def test_rlinf_batch_padding_reaches_the_compared_outputs(rec, version) -> None:
    """The batch's different prompt lengths are not inert: N1.6's DiT reads the padding mask (without it the
    actions move), N1.5's head reads no mask (as RLinf's), and RLinf's critic averages the pad positions too
    (a masked mean would move the values)."""
    c = Case(rec, version)
    with torch.no_grad():
        vl, sf = c.encode()
        c.vl_mask = torch.ones_like(c.vl_mask)  # as if every prompt filled the row
        unmasked = sample_flow(c.fn(vl, sf), c.x["noise"], CFG, deterministic=True).actions
        moved = float((unmasked - torch.from_numpy(rec[f"{c.p}_eval_actions"])).abs().max())
        m = torch.from_numpy(rec[f"{c.p}_in_attention_mask"]).float()[..., None]
        masked_mean = c.head.value_head(torch.cat([(vl * m).sum(1) / m.sum(1), sf.flatten(1)], dim=-1))
    if version == "n1.6":
        assert moved > 1e-3, moved
    else:
        assert moved == 0.0
    assert float((masked_mean - torch.from_numpy(rec[f"{c.p}_prev_values_0"][:, 0])).abs().max()) > 1e-2


@pytest.mark.parametrize("version", VERSIONS)
def test_rlinf_training_recompute_and_shared_layer_gradients(rec, version) -> None:
    c = Case(rec, version)
    p = c.p
    chain, index = torch.from_numpy(rec[f"{p}_chain_2"]), torch.full((3,), 2)
    params = dict(c.head.named_parameters())
    names = sorted(k[len(f"{p}_grad_logprob_"):] for k in rec if k.startswith(f"{p}_grad_logprob_"))
    for what in ("logprob", "value"):
        c.head.zero_grad(set_to_none=True)
        vl, sf = c.encode()
        logp, _ = flow_logprobs(c.fn(vl, sf), chain, index, CFG)
        values = c.values(vl, sf)
        _close(logp, rec[f"{p}_train_logprobs"][:, 0], atol=ATOL)
        _close(values, rec[f"{p}_train_values"][:, 0], atol=ATOL)
        if what == "logprob":
            loss = (logp[:, :CHUNKS, :ENV_DIM] * c.x["loss_weights"]).sum()
        else:
            loss = (values * c.x["value_weights"]).sum()
        loss.backward()
        for name in names:
            want = rec[f"{p}_grad_{what}_{name}"]
            got = params[name].grad
            got = torch.zeros_like(params[name]) if got is None else got
            _close(got, want, atol=GRAD_RTOL * max(float(np.abs(want).max()), 1e-6))
        if what == "value":  # RLinf's critic gradient reaches the shared layers (no detach on either side)
            assert np.abs(rec[f"{p}_grad_value_vlln.weight"]).max() > 0
            assert np.abs(rec[f"{p}_grad_value_state_encoder.layer1.W"]).max() > 0


def _chain(rec: dict[str, np.ndarray], version: str) -> tuple[Case, dict[str, torch.Tensor], torch.Tensor]:
    """vlarl's backbone (weights by checkpoint key) + head on the eagle_n1x.npz inputs; returns the case, the
    backbone tensors by upstream key and the padding mask."""
    with np.load(FIXTURE.parent / f"eagle_{version.replace('.', '')}.npz") as data:
        eg = {k: data[k] for k in data.files}
    case = Case(rec, version)
    backbone = EagleBackbone(preset("tiny", version)).eval()
    upstream = {to_upstream_key("backbone." + n, version): p for n, p in backbone.named_parameters()}
    with torch.no_grad():
        for key, p in upstream.items():
            p.copy_(golden_weight(key, tuple(p.shape)))
    ids, mask = torch.from_numpy(eg["in_input_ids"]), torch.from_numpy(eg["in_attention_mask"])
    case.vl_mask, case.image_mask = mask.bool(), ids == 300
    case.encode = lambda: (case.head.process_vl(backbone(torch.from_numpy(eg["in_pixel_values"]), ids, mask)),  # type: ignore[method-assign]
                           case.head.encode_state(case.x["state"][:, 0], case.emb))
    return case, upstream, mask.bool()


@pytest.mark.parametrize("version", VERSIONS)
def test_end_to_end_with_rlinf_head_log_probs_values_and_backbone_gradients(rec, version) -> None:
    """Upstream's Eagle backbone (eagle_n1x.npz, see test_gr00t_eagle.py) feeding RLinf's RL head, recorded in
    rlinf.npz (``chain_*`` N1.6, ``chain15_*`` N1.5: one rollout with stochastic step 1, RLinf's ``forward``
    recompute, the gradient of a fixed weighting of the executed log-probs in the backbone -- RLinf trains N1.6's
    top LLM layers by the checkpoint's config), against vlarl's backbone + head.

    The recording's pad features are SDPA's, vlarl's are FlashAttention-2's (as RLinf's real runs), so:
    N1.6 (the DiT masks pads): log-probs of every row equal (measured 3e-8 on magnitude 8), the gradients of the
    whole batch's loss equal (LLM bit-identical, mlp1 / SigLIP-2 within 2.7e-7 of their largest entry); values
    equal on the unpadded row only (RLinf's critic averages pads too: padded rows differ by 0.010 / 0.055).
    N1.5 (its VL self-attention, DiT and critic read pads unmasked): the unpadded row's log-probs, value and the
    gradients of a loss on that row equal (measured 3e-8 / 0 / 0); padded rows differ (log-probs by 9e-3, values
    by 0.011 / 0.017): the size of the FA2-vs-SDPA pad effect on N1.5 at these tiny widths."""
    p = "chain_" if version == "n1.6" else "chain15_"
    case, upstream, real = _chain(rec, version)
    padded = ~real.all(dim=1)
    assert padded.tolist() == [False, True, True]
    vl, sf = case.encode()
    chain, index = torch.from_numpy(rec[f"{p}chain"]), torch.full((3,), 1)
    logp, _ = flow_logprobs(case.fn(vl, sf), chain, index, CFG)
    values = case.values(vl, sf).detach()
    rows = slice(None) if version == "n1.6" else slice(0, 1)  # rows whose log-probs do not read pad features
    want = torch.from_numpy(rec[f"{p}prev_logprobs"][:, 1, :, :ENV_DIM])
    torch.testing.assert_close(logp[rows, :CHUNKS, :ENV_DIM].detach(), want[rows], atol=3e-7, rtol=0.0)  # measured 3e-8
    train = torch.from_numpy(rec[f"{p}train_logprobs"][:, 0])
    torch.testing.assert_close(logp[rows].detach(), train[rows], atol=3e-7, rtol=0.0)
    if version == "n1.5":  # padded rows read SDPA's pad features in the recording
        assert float((logp[1:].detach() - train[1:]).abs().max()) > 1e-3
    gap = (values - torch.from_numpy(rec[f"{p}train_values"][:, 0])).abs()
    assert float(gap[0]) <= 1e-6  # the unpadded row: measured 0
    assert bool((gap[1:] > 5e-3).all()), gap  # padded rows: SDPA pads (recording) vs FA2 pads (vlarl), stated
    weights = case.x["loss_weights"].clone()
    if version == "n1.5":
        weights[1:] = 0.0  # as recorded: the unpadded row only
    (logp[:, :CHUNKS, :ENV_DIM] * weights).sum().backward()
    names = [k[len(f"{p}grad_"):] for k in rec if k.startswith(f"{p}grad_")]
    assert any(".language_model.model.layers." in n for n in names)
    for name in names:
        theirs = torch.from_numpy(rec[f"{p}grad_{name}"])
        ours = upstream[name].grad
        assert ours is not None and float(theirs.abs().max()) > 0
        # 10x the largest measured relative error (2.7e-7)
        torch.testing.assert_close(ours, theirs, atol=3e-6 * float(theirs.abs().max()), rtol=0.0)
