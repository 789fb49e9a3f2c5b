"""pi0 / pi0.5 against openpi's own PyTorch model (PI0Pytorch from rlinf-openpi 0.1.1, patched
transformers 4.53.2), same weights, same inputs.

openpi builds the model (``dummy`` Gemma for VLM and expert: width 64, depth 4, 8 heads, 1 KV head,
head_dim 16, vocabulary 257152; SigLIP shrunk to width 32, 2 layers, 32 px / patch 8) and randomises
EVERY parameter from a seed; our Pi0Model loads those weights through the openpi key map
(``checkpoint.from_external``), then both compute from shared inputs: image features, the prefix KV
cache, one velocity, K = 5 / 10 sampled actions for fixed noise, the per-element training loss and the
gradient of its mean for every parameter.

Camera slots as openpi on LIBERO: base, left wrist, and an empty right wrist masked for the whole
batch. We skip that slot (its tokens are attended by nobody), so the prefix KV cache is compared on the
valid prefix positions; padded prompt rows are compared nowhere (they attend nothing and feed nothing).

Where openpi's PyTorch port departs from openpi's JAX model we follow JAX (test_openpi_jax_parity.py;
list in docs/openpi_jax.md); the differences that show in fp32 are asserted here, not hidden:
``sinusoidal_time_embedding`` is JAX's float32 computation, the port's is float64 on the CPU (its arguments
reach ~1.6e3, so sin / cos differ by ~1e-5 and velocities by ~3e-5): the comparisons below run with the
port's float64 embedding put in place (:func:`port_time_embedding`), and
``test_the_time_embedding_is_the_one_difference`` bounds what JAX's embedding changes.

Tolerances (fp32 both sides; outputs of magnitude 4-6, losses up to ~50): each bound is at most 10x the
error measured on this seed (the tests print it). Image features are bit-identical (same SigLIP code path);
velocities, actions and losses differ by float32 summation order (SDPA vs eager softmax); gradients by
<= ~2e-6 of their tensor's largest entry, with an absolute floor for attention key biases, whose exact
gradient is zero (both sides hold float noise there). A wrong scale, mask, RoPE or norm moves outputs by
> 1e-2. Command: ``pytest tests/conformance/openpi -q``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from openpi_ref import run_reference
from safetensors.torch import load_file, save_file

from vlarl_cli.policies.pi0.checkpoint import _is_known_unused, from_external
from vlarl_cli.policies.pi0.config import preset
from vlarl_cli.policies.pi0.modeling import Pi0Model
from vlarl_cli.policies.value_head import build_mlp_critic

ARCH = {"vision_width": 32, "vision_mlp": 64, "vision_depth": 2, "vision_heads": 2, "image_size": 32,
        "patch_size": 8}
DUMMY_GEMMA = {"vlm_width": 64, "vlm_depth": 4, "vlm_mlp": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16,
               "expert_width": 64, "expert_mlp": 128, "vocab_size": 257152}
B, H, L, SEED = 3, 10, 12, 7
STEPS = (5, 10)


# prompts: openpi's cleaning (strip, "_" and newlines to spaces) and truncation; states: bin edges, the
# range ends and values outside [-1, 1] (np.digitize puts them in bins -1 and 256)
PROMPTS = ["pick up the black bowl", "  put_the bowl\non the plate ", "open the top drawer of the cabinet " * 6]
STATES = torch.tensor([[-1.0, 1.0, 0.0, -0.9921875, 0.5, 1.5, -1.2, 0.00390625],
                       [0.1, -0.1, 0.25, 0.999, -0.999, 0.0078125, 0.3, -0.7],
                       [0.0] * 8], dtype=torch.float32)
TOKEN_LEN = 48
CRITIC_IN, CRITIC_HIDDEN = 64, (1024, 512, 256)  # RLinf's pi05_libero sizes on the dummy VLM width


def _train_sentencepiece() -> bytes:
    """A small sentencepiece model with Gemma's special ids and a one-piece newline."""
    import io

    import sentencepiece as spm

    corpus = ["pick up the black bowl and place it on the plate", "open the top drawer of the cabinet",
              "Task: State: Action: 0 1 2 3 4 5 6 7 8 9 ;,."] * 20
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=buf, vocab_size=150, model_type="bpe", pad_id=0, eos_id=1,
        bos_id=2, unk_id=3, user_defined_symbols=["\n"], normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=False, split_digits=True, minloglevel=2)
    return buf.getvalue()


def _inputs(variant: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1 if variant == "pi0" else 2)
    s = ARCH["image_size"]
    images = torch.rand(B, 3, 3, s, s, generator=g) * 2 - 1
    images[:, 2] = -1.0  # the empty right-wrist slot (openpi LIBERO), masked for everyone
    masks = torch.tensor([[True, True, False]] * B)
    masks[1, 1] = False  # one sample without a wrist image: masked per sample, kept as a slot
    token_mask = torch.zeros(B, L, dtype=torch.bool)
    for i in range(B):
        token_mask[i, : 4 + 3 * i] = True
    return {"images": images, "image_masks": masks,
            "tokens": torch.randint(4, 257152, (B, L), generator=g) * token_mask,
            "token_mask": token_mask, "state": torch.randn(B, 32, generator=g),
            "x_t": torch.randn(B, H, 32, generator=g), "t": torch.rand(B, generator=g),
            "noise": torch.randn(B, H, 32, generator=g), "actions": torch.randn(B, H, 32, generator=g),
            "time": torch.rand(B, generator=g) * 0.999 + 0.001}


@pytest.fixture(scope="module")
def upstream(openpi_python, tmp_path_factory) -> dict[str, Path]:
    """openpi's weights and outputs for both variants (one subprocess)."""
    folder: Path = tmp_path_factory.mktemp("openpi")
    runs = []
    for variant in ("pi0", "pi05"):
        save_file(_inputs(variant), folder / f"inputs-{variant}.safetensors")
        runs.append({"variant": variant, "inputs": str(folder / f"inputs-{variant}.safetensors"),
                     "weights_out": str(folder / f"weights-{variant}.safetensors"),
                     "outputs_out": str(folder / f"outputs-{variant}.safetensors")})
    (folder / "sp.model").write_bytes(_train_sentencepiece())
    save_file({"states": STATES}, folder / "states.safetensors")
    tokens = {"model": str(folder / "sp.model"), "max_len": TOKEN_LEN, "prompts": PROMPTS,
              "states": str(folder / "states.safetensors"), "out": str(folder / "tokens.safetensors")}
    critic = build_mlp_critic(CRITIC_IN, CRITIC_HIDDEN, "relu")
    save_file(critic.state_dict(), folder / "critic.safetensors")
    save_file({"features": torch.randn(5, CRITIC_IN, generator=torch.Generator().manual_seed(4))},
              folder / "critic-features.safetensors")
    critic_spec = {"in_dim": CRITIC_IN, "hidden": list(CRITIC_HIDDEN), "weights": str(folder / "critic.safetensors"),
                   "features": str(folder / "critic-features.safetensors"),
                   "out": str(folder / "critic-out.safetensors")}
    spec = {"dtype": "float32", "seed": SEED, "action_horizon": H, "max_token_len": L,
            "sample_steps": list(STEPS), "runs": runs, "tokens": tokens, "critic": critic_spec, **ARCH}
    run_reference(openpi_python, "upstream_pi0.py", spec, folder)
    return {"folder": folder}


def _port_embedding(t: torch.Tensor, dim: int, min_period: float, max_period: float) -> torch.Tensor:
    """openpi's PyTorch port's sinusoidal time embedding: float64 on the CPU (pi0_pytorch.create_sinusoidal_pos_
    embedding), JAX's is float32 (pi0.py posemb_sincos)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64)
    period = min_period * (max_period / min_period) ** fraction
    x = (1.0 / period * 2 * math.pi)[None, :] * t.double()[:, None]
    return torch.cat([torch.sin(x), torch.cos(x)], dim=1).float()


@pytest.fixture
def port_time_embedding(monkeypatch):
    """Our model with the port's float64 time embedding (the one fp32 difference between the two openpi
    models that reaches these outputs)."""
    from vlarl_cli.policies.pi0 import modeling

    monkeypatch.setattr(modeling, "sinusoidal_time_embedding", _port_embedding)


def _measured(name: str, diff: float, bound: float) -> None:
    print(f"\n{name}: max |ours - openpi port| {diff:.3g} (bound {bound:.3g})")
    assert diff <= bound, f"{name}: {diff:.3g} > {bound:.3g}"


@pytest.fixture(scope="module", params=["pi0", "pi05"])
def run(request, upstream) -> tuple[Pi0Model, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    variant = request.param
    folder = upstream["folder"]
    cfg = preset("tiny", variant, **ARCH, **DUMMY_GEMMA, action_horizon=H, max_token_len=L, add_value_head=False,
                 noise_method="ode")
    torch.manual_seed(0)
    model = Pi0Model(cfg)
    weights = load_file(folder / f"weights-{variant}.safetensors")
    ours = {}
    for k, v in weights.items():
        internal = None if _is_known_unused(k, "openpi") else from_external(k, "openpi")
        assert internal is not None or _is_known_unused(k, "openpi"), f"unmapped openpi key {k}"
        if internal is not None:
            ours[internal] = v
    missing, unexpected = model.load_state_dict(ours, strict=False)
    assert missing == [] and unexpected == []
    return model, load_file(folder / f"inputs-{variant}.safetensors"), load_file(folder / f"outputs-{variant}.safetensors")


def _valid_prefix_index(x: dict[str, torch.Tensor], tokens_per_image: int) -> torch.Tensor:
    """openpi's prefix positions that ours keeps: camera slots used by someone, then every prompt slot."""
    used = [k for k in range(x["image_masks"].shape[1]) if bool(x["image_masks"][:, k].any())]
    idx = [k * tokens_per_image + j for k in used for j in range(tokens_per_image)]
    n = x["image_masks"].shape[1] * tokens_per_image
    return torch.tensor(idx + list(range(n, n + L)))


def test_image_features(run):
    model, x, up = run
    with torch.no_grad():
        ours = model.embed_images(x["images"][:, 0])
    assert up["image_features"].abs().max() > 0.1  # a real signal, not a degenerate zero
    torch.testing.assert_close(ours, up["image_features"], rtol=1e-5, atol=1e-5)


def test_prefix_kv_cache(run):
    model, x, up = run
    with torch.no_grad():
        prefix = model.encode_prefix(x["images"], x["image_masks"], x["tokens"], x["token_mask"])
    keep = _valid_prefix_index(x, model.cfg.tokens_per_image)
    assert torch.equal(prefix.pad, up["prefix_pad"][:, keep])
    valid = prefix.pad  # [B, P]: compare where a token exists
    for layer in range(model.cfg.vlm_depth):
        for name, ours in (("k", prefix.keys[layer]), ("v", prefix.values[layer])):
            theirs = up[f"prefix_{name}.{layer}"][:, :, keep]
            mask = valid[:, None, :, None].expand_as(ours)
            torch.testing.assert_close(ours[mask], theirs[mask], rtol=1e-5, atol=1e-5)
    mask = valid[..., None].expand_as(prefix.hidden)
    torch.testing.assert_close(prefix.hidden[mask], up["prefix_hidden"][:, keep][mask], rtol=1e-5, atol=1e-5)


def test_velocity(run, port_time_embedding):
    model, x, up = run
    with torch.no_grad():
        cache = model.expert_cache(model.encode_prefix(x["images"], x["image_masks"], x["tokens"], x["token_mask"]))
        state = None if model.cfg.is_pi05 else x["state"]
        v = model.velocity_from_features(model.expert_forward(cache, state, x["x_t"], x["t"]))
    assert up["velocity"].abs().max() > 0.1
    _measured("velocity", float((v - up["velocity"]).abs().max()), 2e-5)


def test_the_time_embedding_is_the_one_difference(run):
    """With JAX's float32 time embedding (ours by default) the port's velocity is off by more than float
    noise and by less than 2e-4: the size of float32 rounding of sin / cos at arguments up to ~1.6e3."""
    model, x, up = run
    with torch.no_grad():
        cache = model.expert_cache(model.encode_prefix(x["images"], x["image_masks"], x["tokens"], x["token_mask"]))
        state = None if model.cfg.is_pi05 else x["state"]
        v = model.velocity_from_features(model.expert_forward(cache, state, x["x_t"], x["t"]))
    diff = float((v - up["velocity"]).abs().max())
    print(f"\nvelocity with JAX's float32 time embedding: {diff:.3g}")
    assert 3e-6 < diff < 2e-4


@pytest.mark.parametrize("steps", STEPS)
def test_sampled_actions_for_fixed_noise(run, steps, port_time_embedding):
    model, x, up = run
    state = None if model.cfg.is_pi05 else x["state"]
    ours = model.sample_actions(x["images"], x["image_masks"], x["tokens"], x["token_mask"], state, x["noise"],
                                num_steps=steps)
    _measured(f"actions K={steps}", float((ours - up[f"actions_k{steps}"]).abs().max()), 1e-5)


def test_per_element_loss_and_gradients(run, port_time_embedding):
    model, x, up = run
    model.zero_grad()
    t = x["time"][:, None, None]
    x_t = t * x["noise"] + (1 - t) * x["actions"]
    u_t = x["noise"] - x["actions"]
    state = None if model.cfg.is_pi05 else x["state"]
    _, action_out = model.joint_forward(x["images"], x["image_masks"], x["tokens"], x["token_mask"], state, x_t,
                                        x["time"])
    loss = (model.velocity_from_features(action_out) - u_t) ** 2
    assert loss.shape == up["loss"].shape == (B, H, 32)
    _measured("loss", float((loss - up["loss"]).abs().max()), 1e-4)
    loss.mean().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    compared, worst_rel, worst_floor = 0, 0.0, 0.0
    for name, g_up in up.items():
        if not name.startswith("grad."):
            continue
        ours = from_external(name[len("grad."):], "openpi")
        assert ours in grads, f"openpi has a gradient for {name}, ours none"
        diff, scale = float((grads[ours] - g_up).abs().max()), float(g_up.abs().max())
        if ".self_attn.k_proj.bias" in name or scale == 0.0:  # exactly zero in exact arithmetic (key
            worst_floor = max(worst_floor, diff)  # biases), or no path to the loss: float noise at most
        else:
            worst_rel = max(worst_rel, diff / scale)
        compared += 1
    assert compared > 100  # every layer of both stacks, the vision tower and the projections
    _measured("gradients, max |diff| / max |openpi grad| per tensor", worst_rel, 1.2e-5)
    _measured("gradients of the key biases (true value 0)", worst_floor, 4e-8)


@pytest.mark.parametrize("with_state", [False, True])
def test_prompt_and_discretised_state_token_ids(upstream, with_state):
    """Our FileTokenizer against openpi's PaligemmaTokenizer.tokenize on the same sentencepiece model."""
    from vlarl_cli.policies.tokenization import FileTokenizer

    folder = upstream["folder"]
    theirs = load_file(folder / "tokens.safetensors")
    tok = FileTokenizer(folder / "sp.model")
    if with_state:
        ids, mask = tok.encode_with_state(PROMPTS, STATES, TOKEN_LEN)
    else:
        ids, mask = tok.encode(PROMPTS, TOKEN_LEN)
    key = "state" if with_state else "plain"
    for i in range(len(PROMPTS)):
        assert ids[i].tolist() == theirs[f"{key}.{i}"].tolist(), (key, i)
        assert mask[i].tolist() == theirs[f"{key}_mask.{i}"].tolist(), (key, i)
    assert bool(mask[2].all())  # the long prompt is truncated to TOKEN_LEN on both sides


def test_rlinf_critic_class_loads_ours_and_ours_loads_its(upstream):
    """RLinf's own ValueHead (rlinf 0.3.0) takes our MLPCritic's state dict strictly and computes the same
    values; its freshly built state dict loads strictly into ours (same names, same shapes)."""
    folder = upstream["folder"]
    out = load_file(folder / "critic-out.safetensors")
    ours = build_mlp_critic(CRITIC_IN, CRITIC_HIDDEN, "relu")
    ours.load_state_dict(load_file(folder / "critic.safetensors"))
    with torch.no_grad():
        values = ours(load_file(folder / "critic-features.safetensors")["features"])
    torch.testing.assert_close(values, out["values"], rtol=1e-6, atol=1e-7)  # the same Linear / ReLU kernels
    theirs = {k[len("fresh."):]: v for k, v in out.items() if k.startswith("fresh.")}
    fresh = build_mlp_critic(CRITIC_IN, CRITIC_HIDDEN, "relu")
    fresh.load_state_dict(theirs, strict=True)
    # same init scheme: Kaiming (fan_out) hidden layers, N(0, 0.02) output layer, zero biases
    torch.manual_seed(0)
    initial = build_mlp_critic(CRITIC_IN, CRITIC_HIDDEN).state_dict()
    for k, v in theirs.items():
        mine = initial[k]
        if k.endswith("bias"):
            assert float(v.abs().max()) == 0.0 and float(mine.abs().max()) == 0.0
        else:
            # std estimates from >= 256 entries: <= 6% noise each, so 25% is a 4-sigma bound
            assert abs(float(v.std()) - float(mine.std())) < 0.25 * float(v.std()), k


def test_openpis_camera_slots_give_rlinfs_after_vlm_value_input(run):
    """camera_slots = 3 keeps openpi's empty right-wrist slot: then EVERY prefix output matches openpi, the
    padded prompt rows included (they attend uniformly to all keys), and the critic input equals RLinf's
    mean_token pooling (first 2 camera slots + every prompt slot) of openpi's own prefix output."""
    model, x, up = run
    cfg = model.cfg.replace(camera_slots=3, add_value_head=True, value_after_vlm=True)
    exact = Pi0Model(cfg)
    missing, _ = exact.load_state_dict(model.state_dict(), strict=False)
    assert all(k.startswith("value_head.") for k in missing)
    with torch.no_grad():
        prefix = exact.encode_prefix(x["images"], x["image_masks"], x["tokens"], x["token_mask"])
        torch.testing.assert_close(prefix.hidden, up["prefix_hidden"], rtol=1e-5, atol=1e-5)
        t = cfg.tokens_per_image
        rlinf_pooled = torch.cat([up["prefix_hidden"][:, : 2 * t], up["prefix_hidden"][:, 3 * t:]], 1).mean(1)
        torch.testing.assert_close(exact.prefix_value(prefix.hidden, prefix.pad), exact.value_head(rlinf_pooled),
                                   rtol=1e-5, atol=1e-6)
