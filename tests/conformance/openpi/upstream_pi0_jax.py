"""The JAX side of the pi0 / pi0.5 conformance tests: runs under .reference/openpi/bin/python.

Usage: ``python upstream_pi0_jax.py <spec.json>``. Builds openpi's own JAX ``Pi0`` (``openpi/models/pi0.py``
from rlinf-openpi 0.1.1, flax 0.10.2, CPU jax 0.5.3) with the ``dummy`` Gemma variant for the VLM and the
expert and a SigLIP shrunk to the spec's sizes (``siglip.Module`` takes size overrides beside ``variant``;
openpi hard-codes ``So400m/14``), gives EVERY parameter seeded random values, and per variant:

1. writes the weights as openpi's JAX trainer does (``openpi.training.checkpoints.save_state``: an orbax
   CheckpointManager step folder with ``params/`` (OCDBT), ``train_state/`` and ``assets/<asset_id>/
   norm_stats.json``), which the vlarl side reads back with its own orbax reader;
2. for each dtype of the spec (``float32``; ``bfloat16`` = openpi's default training precision: fp32
   parameters, bf16 compute), computes from the shared inputs: SigLIP image features (projector
   included), the prefix KV cache and final-normed prefix output, the velocity at t = 1
   (``sample_actions`` with one step: ``v = noise - x``), sampled actions for K steps with the given noise,
   ``compute_loss`` per element and the gradient of its mean for every parameter. ``compute_loss`` draws
   its own noise and time from the rng; they are re-drawn here exactly as it draws them
   (``split(rng, 3)``, ``normal``, ``beta(1.5, 1) * 0.999 + 0.001``) and handed back with the outputs.

The vocabulary is the spec's (``gemma.PALIGEMMA_VOCAB_SIZE``, 257152 in openpi) and the image resolution is the spec's (``preprocess_observation`` would resize to 224 px otherwise:
its keyword default is changed). The data loader module of openpi's training package (which
pulls in LeRobot and the dataset stack) is replaced by an empty module: ``checkpoints.py`` uses it
only in type annotations, and ``save_state`` is given an object with ``data_config()``.

Nothing of vlarl is imported here: this interpreter has another stack.
"""

from __future__ import annotations

import json
import sys
import types

import numpy as np


def _patch_openpi(spec: dict) -> None:
    sys.modules.setdefault("openpi.training.data_loader", types.ModuleType("openpi.training.data_loader"))
    from openpi.models import gemma as _gemma
    from openpi.models import model as _model
    from openpi.models import pi0 as _pi0

    # a small vocabulary (read by gemma.Module.setup at build time): the token table, its gradient and the
    # prompt tokenizer stay test-sized (vlarl then accepts its byte tokenizer, as for its own tiny models)
    _gemma.PALIGEMMA_VOCAB_SIZE = spec["vocab_size"]

    size = (spec["image_size"], spec["image_size"])
    _model.IMAGE_RESOLUTION = size  # Pi0Config.inputs_spec (the lazy init's fake observation) reads it
    _model.preprocess_observation.__kwdefaults__["image_resolution"] = size
    original = _pi0._siglip.Module

    def shrunk(num_classes=None, *, variant=None, **kw):
        del variant  # So400m/14 in openpi; the sizes below replace it
        return original(num_classes, width=spec["vision_width"], depth=spec["vision_depth"],
                        mlp_dim=spec["vision_mlp"], num_heads=spec["vision_heads"],
                        patch_size=(spec["patch_size"], spec["patch_size"]), **kw)

    _pi0._siglip = types.SimpleNamespace(Module=shrunk)


def _randomize(model, seed: int) -> None:
    """Seeded values for every parameter: the std of openpi's own initialiser where it is random, else
    ``1/sqrt(fan_in)`` for zero-initialised kernels (adaRMS dense, SigLIP head) and 0.1 around the
    initial value for norm scales and biases."""
    import flax.nnx as nnx
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    state = nnx.state(model, nnx.Param)
    for path, var in sorted(state.flat_state().items(), key=lambda kv: "/".join(map(str, kv[0]))):
        value = np.asarray(var.value, dtype=np.float32)
        std = float(value.std())
        name = str(path[-1])
        if std > 0 and name not in ("bias", "scale"):
            new = rng.standard_normal(value.shape) * std
        elif value.ndim >= 2 and name not in ("bias", "scale"):
            new = rng.standard_normal(value.shape) / np.sqrt(value.shape[-2])
        else:
            new = float(value.mean()) + 0.1 * rng.standard_normal(value.shape)
        var.value = jnp.asarray(new, dtype=var.value.dtype)
    nnx.update(model, state)


def _write_checkpoint(model, folder: str, norm_stats: dict, asset_id: str) -> None:
    """openpi's own orbax writer (training/checkpoints.py) on a TrainState of this model."""
    import flax.nnx as nnx
    import optax
    from openpi.shared import normalize as _normalize
    from openpi.training import checkpoints as _checkpoints
    from openpi.training import utils as training_utils

    params = nnx.state(model)
    tx = optax.sgd(0.0)
    state = training_utils.TrainState(step=0, params=params, model_def=nnx.graphdef(model), tx=tx,
                                      opt_state=tx.init(params), ema_decay=None, ema_params=None)
    stats = {k: _normalize.NormStats(**{f: np.asarray(v, np.float32) for f, v in d.items()})
             for k, d in norm_stats.items()}
    data_config = types.SimpleNamespace(norm_stats=stats, asset_id=asset_id)
    loader = types.SimpleNamespace(data_config=lambda: data_config)
    manager, _ = _checkpoints.initialize_checkpoint_dir(folder, keep_period=None, overwrite=True, resume=False)
    _checkpoints.save_state(manager, state, loader, step=1)
    manager.wait_until_finished()


def _observation(x: dict):
    import jax.numpy as jnp
    from openpi.models import model as _model

    keys = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    return _model.Observation(
        images={k: jnp.asarray(x["images"][:, i]) for i, k in enumerate(keys)},
        image_masks={k: jnp.asarray(x["image_masks"][:, i]) for i, k in enumerate(keys)},
        state=jnp.asarray(x["state"]), tokenized_prompt=jnp.asarray(x["tokens"].astype(np.int32)),
        tokenized_prompt_mask=jnp.asarray(x["token_mask"]))


def _tick(what: str, _t=[None]) -> None:  # noqa: B006 - phase times on stderr (the test shows them on failure)
    import time

    now = time.perf_counter()
    if _t[0] is not None:
        print(f"[jax side] {what}: {now - _t[0]:.1f} s", file=sys.stderr)
    _t[0] = now


def _f32(a) -> np.ndarray:
    return np.asarray(np.asarray(a, dtype=np.float32))


def _compute(model, obs, noise, actions, loss_rng, steps):
    """Everything compared, in ONE jitted function (CPU compile time dominates: one compile per run)."""
    import flax.nnx as nnx
    import jax
    import jax.numpy as jnp
    from openpi.models import pi0 as _pi0

    out = {"image_features": model.PaliGemma.img(obs.images["base_0_rgb"], train=False)[0]}
    tokens, mask, ar = model.embed_prefix(obs)
    (hidden, _), (k, v) = model.PaliGemma.llm([tokens, None], mask=_pi0.make_attn_mask(mask, ar),
                                              positions=jnp.cumsum(mask, axis=1) - 1)
    out.update(prefix_pad=mask, prefix_hidden=hidden, prefix_k=k, prefix_v=v)  # k, v: [layers, B, P, K, hd]
    rng = jax.random.key(0)
    # num_steps traced: one compiled sampler serves K = 1 (the velocity at t = 1: noise - x) and every K
    out["actions"] = jax.lax.map(lambda n: model.sample_actions(rng, obs, num_steps=n, noise=noise), steps)
    _, noise_rng, time_rng = jax.random.split(loss_rng, 3)  # as Pi0.compute_loss draws them
    out["loss_noise"] = jax.random.normal(noise_rng, actions.shape)
    out["loss_time"] = jax.random.beta(time_rng, 1.5, 1, actions.shape[:-2]) * 0.999 + 0.001

    def mean_loss(m):
        per_element = m.compute_loss(loss_rng, obs, actions, train=False)  # [B, H]
        return jnp.mean(per_element), per_element

    (_, out["loss"]), grads = nnx.value_and_grad(mean_loss, has_aux=True)(model)
    return out, grads


def _outputs(model, x: dict, spec: dict) -> dict[str, np.ndarray]:
    import flax.nnx as nnx
    import jax
    import jax.numpy as jnp

    steps = [1, *spec["sample_steps"]]
    raw, grads = nnx.jit(_compute)(model, _observation(x), jnp.asarray(x["noise"]), jnp.asarray(x["actions"]),
                                   jax.random.key(spec["loss_seed"]), jnp.asarray(steps, dtype=jnp.int32))
    out = {k: _f32(v) for k, v in raw.items() if k != "actions"}
    out["prefix_pad"] = np.asarray(raw["prefix_pad"])
    actions = _f32(raw["actions"])
    out["velocity_t1"] = _f32(x["noise"]) - actions[0]
    for i, n in enumerate(spec["sample_steps"], start=1):
        out[f"actions_k{n}"] = actions[i]
    for path, var in grads.flat_state().items():
        out["grad/" + "/".join(map(str, path))] = _f32(var.value)
    _tick("compile and compute everything")
    return out


def run_one(spec: dict) -> None:
    import flax.nnx as nnx
    import jax
    from openpi.models import pi0_config
    from safetensors.numpy import load_file, save_file

    x = load_file(spec["inputs"])
    model = None
    for dtype in spec["dtypes"]:
        cfg = pi0_config.Pi0Config(dtype=dtype, paligemma_variant="dummy", action_expert_variant="dummy",
                                   pi05=spec["variant"] == "pi05", action_horizon=spec["action_horizon"],
                                   max_token_len=spec["max_token_len"])
        _tick("start")
        fresh = cfg.create(jax.random.key(0))
        _tick(f"build {spec['variant']} {dtype}")
        if model is None:
            _randomize(fresh, spec["seed"])
            _write_checkpoint(fresh, spec["checkpoint"], spec["norm_stats"], spec["asset_id"])
            _tick("randomise and write the orbax checkpoint")
        else:  # the same (fp32) parameters, another compute dtype
            nnx.update(fresh, nnx.state(model, nnx.Param))
        model = fresh
        model.eval()
        out = _outputs(model, x, spec)
        save_file({k: np.ascontiguousarray(v) for k, v in out.items()}, spec["outputs"][dtype])


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    _patch_openpi(spec)
    for run in spec["runs"]:
        run_one({**spec, **run})


if __name__ == "__main__":
    main()
