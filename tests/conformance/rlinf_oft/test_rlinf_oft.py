"""Conformance of vlarl's OpenVLA-OFT with RLinf 0.3.0's own OFT classes on shared tiny weights.

RLinf side: ``rlinf/models/embodiment/openvla_oft/{rlinf,official}/openvla_oft_action_model.py`` from the
PyPI wheel, run in the isolated venv of ``scripts/reference/rlinf_models.sh`` (``run_rlinf.py``), on the
folder vlarl exports in the upstream (``openvla_hf``) layout: RLinf loads its weights by the upstream
names, the value head ``value_head.mlp.*`` included (RLinf's critic), and the proprio projector through
RLinf's own side-file loader. Compared: the 256 action logits, greedy tokens and actions, token log-probs
and entropies at temperature 1.6 (``default_forward``), values (rlinf variant, ``value_type:
action_level``).

RLinf's classes inherit from openvla-oft's ``OpenVLAForActionPrediction`` (``prismatic`` package), which is
not on PyPI: ``prismatic_standin/`` provides it, written from the architecture facts on timm's vision
towers and transformers' Llama (attention made bidirectional as openvla-oft's transformers fork does).
What is checked against upstream code is therefore RLinf's wrapper logic (sequence layout, STOP token,
padding / sorting, slicing of logits and hidden states, temperature, masking, log-probs, critic
placement, un-normalisation, proprio loading) and timm's vision towers against vlarl's transformers
towers and key map. With ``VLARL_OPENVLA_OFT_SRC=<an openvla-oft checkout>`` the runner uses openvla-oft's
REAL prismatic base classes instead (towers shrunk to the tiny sizes, Llama made bidirectional as the
openvla-oft transformers fork is): both tests pass that way too (checked at openvla-oft 213c5ff: rlinf
variant logits and values bit-identical, official log-probs within 1e-6).

Tolerances: both sides run float32 on CPU with different attention kernels (eager vs SDPA), different
vision implementations (timm vs transformers) and, for the official variant, padding moved to the end of
the sequence. Measured (float32, CPU, the stand-in): logits 1.2e-6, token log-probs 9.5e-7, entropies 2.9e-6,
rlinf-variant values 3.3e-7, official values (at RLinf's slot) 2.7e-7; asserted: 2e-5 for logits / log-probs /
entropies, 3e-6 / 1e-6 for the values (each within 10x of its measured error).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from vlarl_cli.policies.openvla_oft.checkpoint import save_policy
from vlarl_cli.policies.openvla_oft.config import preset
from vlarl_cli.policies.openvla_oft.policy import OftPolicy
from vlarl_cli.policies.openvla_oft.processing import (
    ActionStats,
    normalize_proprio,
    pixel_values,
    resize_images,
    tokens_to_normalized_actions,
    unnormalize_actions,
)
from vlarl_cli.policies.token import token_logprobs

ROOT = Path(__file__).resolve().parents[3]
PYTHON = ROOT / ".reference" / "rlinf_models" / "bin" / "python"
RUNNER = Path(__file__).with_name("run_rlinf.py")
ATOL = 2e-5  # measured max 2.9e-6 (entropies), see the module docstring
# Llama-2 ids as RLinf asserts them: BOS 1, pad 32000, STOP 2, prompts end with "▁" 29871; 32064 rows
LLAMA_IDS = {"vocab_size": 32064, "pad_to_multiple_of": 64, "bos_token_id": 1, "pad_token_id": 32000,
             "stop_token_id": 2, "max_prompt_len": 12}
STATS = {"libero_10_no_noops": {
    "action": {"q01": [-0.5, -0.4, -0.9, -0.1, -0.2, -0.3, 0.0], "q99": [0.5, 0.8, 0.9, 0.1, 0.2, 0.3, 1.0],
               "mask": [True] * 6 + [False]},
    "proprio": {"q01": [-0.3] * 8, "q99": [0.4] * 8, "mask": [True] * 8}}}


def _reference() -> Path:
    if not PYTHON.is_file():
        if os.environ.get("VLARL_REQUIRE_REFERENCE") == "1":
            pytest.fail(f"{PYTHON} is missing; build it with: bash scripts/reference/rlinf_models.sh")
        pytest.skip("RLinf reference environment missing: bash scripts/reference/rlinf_models.sh")
    return PYTHON


def _policy(**overrides: object) -> OftPolicy:
    torch.manual_seed(0)
    policy = OftPolicy(preset("tiny", **LLAMA_IDS, unnorm_key="libero_10", **overrides),
                       dataset_statistics=STATS).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.parameters():  # far from uniform logits; non-zero critic output layer
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return policy


def _prompts(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """BOS first, left padding after it (RLinf's processor layout), random body ending in 29871."""
    g = torch.Generator().manual_seed(2)
    ids = torch.full((batch, length), 32000, dtype=torch.long)
    mask = torch.zeros(batch, length, dtype=torch.long)
    ids[:, 0], mask[:, 0] = 1, 1
    for i, pad in enumerate((0, 3, 5, 1)[:batch]):
        body = torch.randint(3, 29000, (length - 1 - pad,), generator=g)
        body[-1] = 29871
        ids[i, 1 + pad:], mask[i, 1 + pad:] = body, 1
    return ids, mask


def _run(variant: str, ckpt: Path, inputs: dict[str, torch.Tensor], tmp: Path) -> dict[str, torch.Tensor]:
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(tmp / "inputs.safetensors"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    proc = subprocess.run([str(_reference()), str(RUNNER), variant, str(ckpt), str(tmp / "inputs.safetensors"),
                           str(tmp / "out.safetensors")], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return load_file(str(tmp / "out.safetensors"))


def _ours(policy: OftPolicy, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        return policy.action_outputs(inputs["pixel_values"], inputs["input_ids"], inputs["attention_mask"].bool(),
                                     inputs.get("proprio"))


def _greedy_checks(logits: torch.Tensor, ref: dict[str, torch.Tensor], offset: int) -> None:
    """Greedy tokens (RLinf stores absolute ids in the rlinf variant: ``offset`` 31744; relative in the
    official one: 0), their un-normalised actions and their untempered log-probs."""
    b = logits.shape[0]
    k = logits.argmax(-1)
    assert torch.equal(ref["greedy_tokens"].reshape(b, -1) - offset, k)
    stats = ActionStats.from_dict("libero_10_no_noops", STATS["libero_10_no_noops"])
    actions = unnormalize_actions(tokens_to_normalized_actions(k.reshape(b, 8, 7), 256), stats)
    torch.testing.assert_close(ref["actions"].reshape(b, 8, 7), actions, atol=1e-9, rtol=0)
    greedy_lp, _ = token_logprobs(logits, k, 1.0)  # do_sample False: RLinf scores the argmax untempered
    torch.testing.assert_close(ref["greedy_logprobs"].reshape(b, -1), greedy_lp, atol=ATOL, rtol=0)


def test_rlinf_variant_matches_rlinf(tmp_path: Path) -> None:
    _reference()
    policy = _policy(add_value_head=True, value_type="action_level", value_hidden=(512, 128))  # RLinf: fixed sizes
    save_policy(policy, tmp_path / "ckpt", format="openvla_hf")
    ids, mask = _prompts(4, LLAMA_IDS["max_prompt_len"])
    images = torch.randint(0, 256, (4, 28, 28, 3), generator=torch.Generator().manual_seed(3), dtype=torch.uint8)
    tokens = torch.randint(0, 256, (4, 8, 7), generator=torch.Generator().manual_seed(4))
    inputs = {"input_ids": ids, "attention_mask": mask, "pixel_values": pixel_values(images),
              "action_tokens": tokens + policy.cfg.action_token_start}
    ref = _run("rlinf", tmp_path / "ckpt", inputs, tmp_path)
    logits, hidden = _ours(policy, inputs)
    torch.testing.assert_close(logits, ref["logits"], atol=ATOL, rtol=0)
    _greedy_checks(logits, ref, policy.cfg.action_token_start)
    lp, ent = token_logprobs(logits, tokens.reshape(4, -1), 1.6)
    torch.testing.assert_close(lp, ref["logprobs"], atol=ATOL, rtol=0)
    torch.testing.assert_close(ent, ref["entropy"], atol=ATOL, rtol=0)
    values = policy.values_from_hidden(hidden)  # [B, 8]: one per action, read at the last prompt token
    assert values.shape == ref["values"].shape == (4, 8) and values.abs().max() > 1e-3
    torch.testing.assert_close(values, ref["values"], atol=3e-6, rtol=0)  # measured 3.3e-7
    torch.testing.assert_close(ref["greedy_values"], ref["values"], atol=1e-6, rtol=0)


def test_official_variant_matches_rlinf(tmp_path: Path) -> None:
    """Log-probs, entropies and greedy actions equal RLinf's; so does the critic, at the position RLinf reads.

    RLinf's official-variant critic reads ``last_hidden_states[:, -action_dim * num_action_chunks - 1]``,
    counted from the END of a sequence whose padding it moved to the end, after the STOP token: with ``k`` pad
    tokens in a row that is the slot ``k + 1`` places after the last prompt token (the first action slot when
    ``k = 0``), so the position depends on the row's prompt length. vlarl reads the last prompt token in every
    row, on purpose (``OftModel.values_from_hidden``); both facts are asserted here on RLinf's own code."""
    _reference()
    policy = _policy(implement_version="official", use_proprio=True, num_images_in_input=2, add_value_head=True,
                     value_hidden=(512, 128))  # RLinf: fixed sizes
    save_policy(policy, tmp_path / "ckpt", format="openvla_hf")
    ids, mask = _prompts(4, LLAMA_IDS["max_prompt_len"])  # 0, 3, 5 and 1 pads
    pads = (mask == 0).sum(dim=1)
    images = torch.randint(0, 256, (4, 2, 28, 28, 3), generator=torch.Generator().manual_seed(5), dtype=torch.uint8)
    states = torch.rand(4, 8, generator=torch.Generator().manual_seed(6)) - 0.2
    proprio = normalize_proprio(states, ActionStats.from_dict("p", STATS["libero_10_no_noops"], "proprio"))
    tokens = torch.randint(0, 256, (4, 56), generator=torch.Generator().manual_seed(7))
    inputs = {"input_ids": ids, "attention_mask": mask, "pixel_values": pixel_values(images), "proprio": proprio,
              "action_tokens": tokens}
    ref = _run("official", tmp_path / "ckpt", inputs, tmp_path)
    logits, hidden = _ours(policy, inputs)  # hidden[:, 0]: the last prompt token; hidden[:, j]: j slots later
    _greedy_checks(logits, ref, 0)
    lp, ent = token_logprobs(logits, tokens, 1.6)
    torch.testing.assert_close(lp, ref["logprobs"], atol=ATOL, rtol=0)
    torch.testing.assert_close(ent, ref["entropy"], atol=ATOL, rtol=0)
    with torch.no_grad():
        at_rlinf_slot = policy.value_head(hidden[torch.arange(4), 1 + pads]).float()
        ours = policy.values_from_hidden(hidden)
    assert ref["values"].shape == (4, 1) and ref["values"].abs().max() > 1e-2
    # measured: max |diff| 2.7e-7 at slot 1 + k (the best-matching slot of every row); the greedy pass's values
    # equal default_forward's exactly; vlarl's last-prompt-token values differ from RLinf's by 0.046 to 0.13
    torch.testing.assert_close(ref["values"], at_rlinf_slot, atol=1e-6, rtol=0)
    torch.testing.assert_close(ref["greedy_values"], ref["values"], atol=1e-6, rtol=0)
    assert bool(((ours - ref["values"]).abs() > 1e-2).all())  # the deliberate difference, in every row


def test_image_preprocessing_matches_rlinfs_processor(tmp_path: Path) -> None:
    """256 px LIBERO-like frames -> 224 px pixel values: vlarl's ``torch`` resize (used for implement_version
    rlinf) equals RLinf's tensor processor; PIL's bicubic (the official path) does not, by a few levels."""
    _reference()
    images = torch.randint(0, 256, (2, 256, 256, 3), generator=torch.Generator().manual_seed(8), dtype=torch.uint8)
    images[:, 100:150, 60:200] = 255  # sharp edges, where resampling filters differ
    ref = _run("images", tmp_path, {"images": images, "size": torch.tensor(224)}, tmp_path)["pixel_values"]
    ours = pixel_values(resize_images(images, 224, "torch"))
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=0)
    pil = pixel_values(resize_images(images, 224, "pil"))
    assert (pil - ref).abs().max() > 1e-2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
