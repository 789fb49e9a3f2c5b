"""Stochastic flow log-probs (flow_sde, flow_cps; one denoise index and joint) against RLinf's own code
(rlinf 0.3.0 ``OpenPi0ForRLActionPrediction.get_log_prob_value``, run under .reference/openpi by
``upstream_rlinf_flow.py``) on the same stored chains and the same closed-form velocity, so the flow math
alone is compared: the time grid, sigma_i, the means, the stds and the Gaussian log-density.

RLinf returns the per-transition log-probs stacked (``[B, 1, H, D]``; joint: initial noise + K transitions,
``[B, K+1, H, D]``); its rollout averages the joint stack over that axis (``sample_actions``:
``log_probs.mean(dim=1)``), which is what ``flow_logprobs`` returns. The difference is float32 rounding of
the same formulas: at most 7.6e-8 of the largest log-prob (printed; they reach ~4e2 for small sigma), bound
5e-7 relative. Command: ``pytest tests/conformance/openpi/test_rlinf_flow_logprobs.py -q -s``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from openpi_ref import run_reference
from safetensors.torch import load_file, save_file

from vlarl_cli.policies.flow_matching import FlowConfig, VelocityOutput, flow_logprobs

B, H, D = 4, 5, 7
CASES = [{"name": f"{m}_k{k}_{'joint' if j else 'one'}_a{a}", "method": m, "steps": k, "joint": j, "noise_level": a}
         for m in ("flow_sde", "flow_cps") for k in (4, 5) for j in (False, True) for a in (0.5,)]
CASES += [{"name": "flow_sde_k4_one_a0.8", "method": "flow_sde", "steps": 4, "joint": False, "noise_level": 0.8}]
# max |diff| / max |log-prob| measured on this seed: 7.6e-8 (flow_cps K=4 joint); the bound is 6.6x that
BOUND_REL = 5e-7


def _velocity(x: torch.Tensor, t: torch.Tensor) -> VelocityOutput:
    return VelocityOutput(torch.sin(1.3 * x) - 0.2 * x + 0.7 * t[:, None, None], None)


@pytest.fixture(scope="module")
def rlinf(openpi_python, tmp_path_factory) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    folder: Path = tmp_path_factory.mktemp("rlinf_flow")
    g = torch.Generator().manual_seed(5)
    inputs = {f"chain_k{k}": torch.randn(B, k + 1, H, D, generator=g) for k in (4, 5)}
    inputs["denoise_index"] = torch.tensor([0, 1, 2, 3])
    inputs["state"] = torch.zeros(B, 8)
    save_file(inputs, folder / "inputs.safetensors")
    spec = {"inputs": str(folder / "inputs.safetensors"), "out": str(folder / "out.safetensors"), "cases": CASES}
    run_reference(openpi_python, "upstream_rlinf_flow.py", spec, folder, timeout=600)
    return inputs, load_file(folder / "out.safetensors")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_flow_logprobs_equal_rlinfs(rlinf, case):
    inputs, out = rlinf
    cfg = FlowConfig(num_steps=case["steps"], method=case["method"], noise_level=case["noise_level"], noise_at=1.0,
                     joint_logprob=case["joint"])
    ours, _ = flow_logprobs(_velocity, inputs[f"chain_k{case['steps']}"], inputs["denoise_index"], cfg)
    theirs = out[case["name"]]
    theirs = theirs.mean(dim=1) if case["joint"] else theirs[:, 0]
    diff = float((ours - theirs).abs().max())
    print(f"\n{case['name']}: max |ours - RLinf| {diff:.3g} (log-probs up to {float(theirs.abs().max()):.3g})")
    assert theirs.abs().max() > 1.0 and diff <= BOUND_REL * float(theirs.abs().max())
