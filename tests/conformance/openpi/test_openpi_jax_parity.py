"""pi0 / pi0.5 against openpi's JAX models (``Pi0`` / ``Pi05``, openpi ``models/pi0.py`` from rlinf-openpi
0.1.1; flax 0.10.2, CPU jax 0.5.3): the published openpi checkpoints and LIBERO numbers come from these.

openpi builds its JAX model (``dummy`` Gemma for VLM and expert with a 300-token vocabulary, SigLIP shrunk
to width 32, 2 layers, 32 px / patch 8), randomises EVERY parameter from a seed and writes it with its own trainer's orbax
writer (``training/checkpoints.save_state``). We read that checkpoint with our orbax reader and key map
(:mod:`vlarl_cli.checkpoints.orbax`, :mod:`vlarl_cli.policies.pi0.jax_params`), the path ``vlarl
convert`` takes, load it into ``Pi0Model`` and compare what both compute from shared inputs: SigLIP
image features, the prefix KV cache and output, the velocity at t = 1, K = 5 / 10 sampled actions for
the same noise, ``compute_loss`` per element (openpi's own noise and time draws handed over) and the
gradient of its mean for every parameter (mapped through the same key map as the weights).

Precisions: ``fp32`` both sides; ``mixed`` = JAX's training default ``dtype="bfloat16"`` (fp32 parameters,
bf16 compute) against ours under the same policy (``vlarl_cli.distributed.mixed_precision``, openpi's
fp32 modules kept fp32). The tolerances (``TOL``) are set at most 10x above the errors measured on this
seed (``MEASURED``, printed by each test); in mixed precision the bf16 rounding noise itself is the error.

Command: ``pytest tests/conformance/openpi/test_openpi_jax_parity.py -q -s`` (needs .reference/openpi and
tensorstore in the project venv: ``pip install -e ".[dev]"``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from openpi_ref import run_reference
from safetensors.torch import load_file, save_file

from vlarl_cli.policies.pi0.config import preset
from vlarl_cli.policies.pi0.modeling import Pi0Model

ARCH = {"vision_width": 32, "vision_mlp": 64, "vision_depth": 2, "vision_heads": 2, "image_size": 32,
        "patch_size": 8}
B, H, L, SEED, LOSS_SEED = 3, 10, 12, 7, 3
VOCAB = 300  # openpi's 257152 shrunk (upstream_pi0_jax.py), so the byte tokenizer of tiny models applies
STEPS = (5, 10)
ASSET_ID = "physical-intelligence/libero"
NORM_STATS = {"state": {"mean": [0.1] * 8, "std": [1.5] * 8, "q01": [-1.0] * 8, "q99": [1.0] * 8},
              "actions": {"mean": [0.2] * 7, "std": [2.0] * 7, "q01": [-2.0] * 7, "q99": [2.5] * 7}}
_JAX_DTYPE = {"fp32": "float32", "mixed": "bfloat16"}


def _inputs(variant: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(11 if variant == "pi0" else 12)
    s = ARCH["image_size"]
    images = torch.rand(B, 3, s, s, 3, generator=g) * 2 - 1  # NHWC per camera slot, as openpi's JAX model
    images[:, 2] = -1.0  # the empty right-wrist slot (openpi LIBERO), masked for everyone
    masks = torch.tensor([[True, True, False]] * B)
    masks[1, 1] = False
    token_mask = torch.zeros(B, L, dtype=torch.bool)
    for i in range(B):
        token_mask[i, : 4 + 3 * i] = True
    return {"images": images, "image_masks": masks, "token_mask": token_mask,
            "tokens": torch.randint(4, VOCAB, (B, L), generator=g) * token_mask,
            "state": torch.randn(B, 32, generator=g), "noise": torch.randn(B, H, 32, generator=g),
            "actions": torch.randn(B, H, 32, generator=g)}


def _run_jax(openpi_python: Path, folder: Path, precisions: tuple[str, ...]) -> Path:
    """openpi's orbax checkpoints and JAX outputs for both variants in each of ``precisions`` (one subprocess:
    JAX is imported and the seeded weights are made and saved once; only the compiles repeat per dtype)."""
    runs = []
    for variant in ("pi0", "pi05"):
        save_file(_inputs(variant), folder / f"inputs-{variant}.safetensors")
        runs.append({"variant": variant, "inputs": str(folder / f"inputs-{variant}.safetensors"),
                     "dtypes": [_JAX_DTYPE[p] for p in precisions], "checkpoint": str(folder / f"ckpt-{variant}"),
                     "outputs": {_JAX_DTYPE[p]: str(folder / f"outputs-{variant}-{p}.safetensors")
                                 for p in precisions}})
    spec = {"seed": SEED, "loss_seed": LOSS_SEED, "action_horizon": H, "max_token_len": L, "vocab_size": VOCAB,
            "sample_steps": list(STEPS), "norm_stats": NORM_STATS, "asset_id": ASSET_ID, "runs": runs, **ARCH}
    run_reference(openpi_python, "upstream_pi0_jax.py", spec, folder, timeout=1500)
    return folder


@pytest.fixture(scope="module")
def upstream(openpi_python, tmp_path_factory) -> Path:
    """fp32 and JAX's bf16 compute (openpi's training precision), both in the default run."""
    return _run_jax(openpi_python, tmp_path_factory.mktemp("openpi_jax"), ("fp32", "mixed"))


@pytest.fixture(scope="module")
def upstream_mixed(upstream) -> Path:
    return upstream


def _load_jax_checkpoint(folder: Path, variant: str) -> Pi0Model:
    """Our model from openpi's orbax checkpoint, through the reader and key map that convert uses."""
    from vlarl_cli.checkpoints.orbax import open_params
    from vlarl_cli.policies.pi0.jax_params import arch_from_shapes, internal_tensors, jax_variant

    params = open_params(folder / f"ckpt-{variant}" / "1")
    shapes = {k: v[0] for k, v in params.shapes().items()}
    assert jax_variant(set(shapes), str(folder)) == variant
    arch = arch_from_shapes(shapes)
    cfg = preset("full", variant, **arch, action_horizon=H, max_token_len=L, add_value_head=False,
                 noise_method="ode")
    model = Pi0Model(cfg)
    state = dict(internal_tensors(params.names(), params.read))
    assert all(v.dtype == torch.float32 for v in state.values())  # fp32 in the source, fp32 here
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert missing == [] and unexpected == []
    return model


@pytest.fixture(scope="module", params=["pi0", "pi05"])
def variant(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def jax_model(upstream, variant) -> Pi0Model:
    return _load_jax_checkpoint(upstream, variant)


def _ours_inputs(x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return x["images"].permute(0, 1, 4, 2, 3).contiguous(), x["image_masks"], x["tokens"], x["token_mask"]


# Bounds on max |ours - JAX|, each at most 10x the error measured on this seed (the tests print it;
# measured values in docs/openpi_jax.md). fp32: float32 summation order only. mixed: both sides round to bf16 at different places (XLA
# fuses elementwise chains and keeps their intermediates in fp32, "excess precision"; torch rounds after
# every op), so the error is bf16 noise: it is the size of the gap between JAX's own fp32 and bf16 runs
# (printed as "jax fp32 vs bf16"), and no tighter agreement is possible without XLA's fusion decisions.
# Gradients: max |diff| / max |JAX grad| per tensor (rel), plus an absolute floor for the SigLIP key
# biases, whose exact gradient is 0 (softmax ignores a per-query constant) and both sides hold noise.
TOL = {
    "fp32": {"features": 1e-5, "prefix": 3e-5, "velocity": 6e-5, "actions": 5e-5, "loss": 3e-5, "grad_rel": 8e-5,
             "grad_floor": 6e-8},
    "mixed": {"features": 0.25, "prefix": 0.45, "velocity": 0.3, "actions": 0.25, "loss": 0.15, "grad_rel": 0.3,
              "grad_floor": 2.5e-3},
}


@pytest.fixture(scope="module", params=["fp32", "mixed"])
def run(request, upstream, variant, jax_model):
    precision = request.param
    folder = upstream if precision == "fp32" else request.getfixturevalue("upstream_mixed")
    return precision, variant, jax_model, load_file(folder / f"inputs-{variant}.safetensors"), load_file(
        folder / f"outputs-{variant}-{precision}.safetensors")


def _policy(model: Pi0Model, precision: str):
    """The compute policy of ``precision``: nothing (fp32) or JAX's (fp32 weights, bf16 compute)."""
    import contextlib

    from vlarl_cli.distributed.mixed_precision import compute_in

    return compute_in(model, torch.bfloat16) if precision == "mixed" else contextlib.nullcontext()


def _check(name: str, precision: str, diff: float, scale: float) -> None:
    print(f"\n{precision} {name}: max |ours - jax| {diff:.3g} (outputs up to {scale:.3g}; bound "
          f"{TOL[precision][name]:.3g})")
    assert scale > 0.1  # a real signal, not a degenerate zero
    assert diff <= TOL[precision][name], f"{precision} {name}: {diff:.3g} > {TOL[precision][name]:.3g}"


def test_image_features(run):
    precision, _, model, x, up = run
    images = _ours_inputs(x)[0]
    with torch.no_grad(), _policy(model, precision):
        ours = model.embed_images(images[:, 0]).float()
    _check("features", precision, float((ours - up["image_features"]).abs().max()),
           float(up["image_features"].abs().max()))


def test_prefix_kv_cache_and_output(run):
    """Keys / values of every layer (RoPE applied) and the final-normed prefix output on the valid prefix
    positions (our default 2 camera slots skip openpi's all-masked third slot; nobody attends it)."""
    precision, _, model, x, up = run
    images, masks, tokens, token_mask = _ours_inputs(x)
    with torch.no_grad(), _policy(model, precision):
        prefix = model.encode_prefix(images, masks, tokens, token_mask)
    t = model.cfg.tokens_per_image
    keep = torch.tensor(list(range(2 * t)) + list(range(3 * t, 3 * t + L)))
    assert torch.equal(prefix.pad, up["prefix_pad"][:, keep].bool())
    worst = 0.0
    for layer in range(model.cfg.vlm_depth):
        for ours, theirs in ((prefix.keys[layer], up["prefix_k"][layer]), (prefix.values[layer], up["prefix_v"][layer])):
            theirs = theirs[:, keep].permute(0, 2, 1, 3)  # [B, P, K, hd] -> [B, K, P, hd]
            mask = prefix.pad[:, None, :, None].expand_as(theirs)
            worst = max(worst, float((ours.float() - theirs)[mask].abs().max()))
    hidden = up["prefix_hidden"][:, keep]
    worst = max(worst, float((prefix.hidden.float() - hidden)[prefix.pad].abs().max()))
    _check("prefix", precision, worst, float(hidden.abs().max()))


def test_velocity_at_t1(run):
    precision, variant, model, x, up = run
    images, masks, tokens, token_mask = _ours_inputs(x)
    state = None if variant == "pi05" else x["state"]
    with torch.no_grad(), _policy(model, precision):
        cache = model.expert_cache(model.encode_prefix(images, masks, tokens, token_mask))
        v = model.velocity_from_features(model.expert_forward(cache, state, x["noise"], torch.ones(B)))
    _check("velocity", precision, float((v - up["velocity_t1"]).abs().max()), float(up["velocity_t1"].abs().max()))


@pytest.mark.parametrize("steps", STEPS)
def test_sampled_actions_for_the_same_noise(run, steps):
    precision, variant, model, x, up = run
    images, masks, tokens, token_mask = _ours_inputs(x)
    state = None if variant == "pi05" else x["state"]
    with _policy(model, precision):
        ours = model.sample_actions(images, masks, tokens, token_mask, state, x["noise"], num_steps=steps)
    theirs = up[f"actions_k{steps}"]
    _check("actions", precision, float((ours - theirs).abs().max()), float(theirs.abs().max()))


def test_training_loss_and_gradients(run):
    """openpi's compute_loss ([B, H]: squared error averaged over the action dims) with its own noise and
    time draws, and the gradient of its mean for every parameter: fp32 gradients on fp32 parameters in
    both precisions (the master weights stay fp32 under the mixed policy)."""
    from vlarl_cli.policies.pi0.jax_params import internal_tensors

    precision, variant, model, x, up = run
    images, masks, tokens, token_mask = _ours_inputs(x)
    model.zero_grad()
    t, noise, actions = up["loss_time"], up["loss_noise"], x["actions"]
    x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
    state = None if variant == "pi05" else x["state"]
    with _policy(model, precision):
        _, action_out = model.joint_forward(images, masks, tokens, token_mask, state, x_t, t)
        loss = ((model.velocity_from_features(action_out) - (noise - actions)) ** 2).mean(-1)
    assert loss.shape == up["loss"].shape == (B, H)
    _check("loss", precision, float((loss - up["loss"]).abs().max()), float(up["loss"].abs().max()))
    loss.mean().backward()
    jax_grads = {k[len("grad/"):]: v.numpy() for k, v in up.items() if k.startswith("grad/")}
    theirs = dict(internal_tensors(sorted(jax_grads), jax_grads.__getitem__))
    params = dict(model.named_parameters())
    assert set(theirs) == set(params)
    worst_rel = worst_floor = 0.0
    for name, g in theirs.items():
        p = params[name]
        assert p.dtype == torch.float32 and (p.grad is None or p.grad.dtype == torch.float32)
        ours = p.grad if p.grad is not None else torch.zeros_like(g)  # no path to the loss: JAX holds zeros
        diff, scale = float((ours - g).abs().max()), float(g.abs().max())
        if ".self_attn.k_proj.bias" in name:  # exactly zero in exact arithmetic
            worst_floor = max(worst_floor, diff)
        elif scale > 0:
            worst_rel = max(worst_rel, diff / scale)
        else:
            assert diff == 0.0, name
    _check("grad_rel", precision, worst_rel, 1.0)
    print(f"{precision} grad_floor: {worst_floor:.3g} (bound {TOL[precision]['grad_floor']:.3g})")
    assert worst_floor <= TOL[precision]["grad_floor"]


def test_jax_fp32_vs_bf16_gap(upstream, upstream_mixed, variant):
    """The scale of bf16 noise on JAX's side alone (context for the mixed-precision bounds): JAX's own fp32
    and bf16 runs of the same weights differ by more than 1e-3 (so the comparison above is not vacuous)
    and by at most the mixed bound."""
    a = load_file(upstream / f"outputs-{variant}-fp32.safetensors")
    b = load_file(upstream_mixed / f"outputs-{variant}-mixed.safetensors")
    for key, bound in (("velocity_t1", "velocity"), ("actions_k10", "actions"), ("loss", "loss")):
        gap = float((a[key] - b[key]).abs().max())
        print(f"\njax fp32 vs bf16 {key}: {gap:.3g}")
        assert 1e-3 < gap <= TOL["mixed"][bound]


def test_orbax_checkpoint_keeps_norm_stats_and_dtypes(upstream, variant):
    """openpi's save_state wrote assets/<asset_id>/norm_stats.json and fp32 params; the reader returns
    every array of _METADATA in its stored dtype."""
    from vlarl_cli.checkpoints.orbax import open_params
    from vlarl_cli.policies.normalization import load_norm_stats

    step = upstream / f"ckpt-{variant}" / "1"
    params = open_params(step)
    assert {dtype for _, dtype in params.shapes().values()} == {"float32"}
    stats = load_norm_stats(step / "assets" / ASSET_ID / "norm_stats.json")
    np.testing.assert_allclose(np.asarray(stats["actions"].std), NORM_STATS["actions"]["std"])
    np.testing.assert_allclose(np.asarray(stats["state"].q99), NORM_STATS["state"]["q99"])


@pytest.mark.parametrize("to", ["vlarl", "openpi"])
def test_vlarl_convert_of_the_jax_checkpoint(upstream, variant, jax_model, to, tmp_path):
    """``vlarl convert <step> out --to vlarl|openpi``: the written weights are exactly the JAX checkpoint's
    (the model the parity tests above compare), fp32 as stored, with openpi's norm stats, and the probe-batch
    self-check passed (0 difference between the staged source and the written folder)."""
    from vlarl_cli.checkpoints.convert import convert
    from vlarl_cli.policies.pi0.checkpoint import load_policy

    report = convert(upstream / f"ckpt-{variant}" / "1", tmp_path / "out", to)
    assert report.src_format == "openpi_jax" and report.max_abs_diff == 0.0
    assert any("float32" in note for note in report.notes)
    policy = load_policy(tmp_path / "out", format=to)
    assert policy.cfg.variant == variant
    ours = policy.state_dict()
    for name, value in jax_model.state_dict().items():
        assert ours[name].dtype == torch.float32 and torch.equal(ours[name], value), name
    np.testing.assert_allclose(policy.norm_stats["actions"].std.numpy(), NORM_STATS["actions"]["std"])
