"""Record RLinf 0.3.0's GR00T RL head (sampling, flow-SDE log-probs, value, gradients) on the golden tiny weights.

Run by scripts/reference/gr00t_golden.sh in .reference/gr00t (never imports vlarl_cli); writes
tests/fixtures/gr00t/rlinf.npz, compared with vlarl by tests/policies/gr00t/test_gr00t_rlinf.py.

What runs is RLinf's code: ``FlowMatchingActionHeadForRLActionPrediction`` of
``rlinf/models/embodiment/gr00t/gr00t_n1d5/gr00t_action_model.py`` (a subclass of Isaac-GR00T n1.5's
``FlowmatchingActionHead``) and of ``gr00t_n1d6/gr00t_action_model.py`` (holding the modules of Isaac-GR00T
n1.6's ``Gr00tN1d6ActionHead``, attached exactly as ``GR00T_N1_6_ForRLActionPrediction.__init__`` does), their
``get_rl_action`` (rollout: chain, per-step log-probs, value) and ``forward`` (the training recompute), RLinf's
``ValueHead`` and ``replace_dropout_with_identity``, with RLinf's LIBERO ``rl_head_config``
(examples/embodiment/config/model/gr00t*.yaml: flow_sde, noise_level 0.5, one stochastic step, mean_token
value over every VL token). Weights: every tensor ``golden_weight(name)``, so vlarl rebuilds them by name.

What does NOT run (and why): the full ``GR00T_N1_5_ForRLActionPrediction`` / ``GR00T_N1_6_...`` classes and
their Eagle backbones. They subclass Isaac-GR00T's ``GR00T_N1_5`` / ``Gr00tN1d6``, whose constructors build
the Eagle VLM from the release's modeling files (N1.6 asserts ``attn_implementation == flash_attention_2``;
``flash_attn`` has no CPU build) and ``from_pretrained`` the full checkpoints. The RL heads are fed the
backbone's output instead: VL features for a batch whose prompts have different lengths (right padding as
RLinf's ``predict_action_batch`` pads to ``padding_value``), with the attention / image masks RLinf's
N1.6 head passes to the DiT. Imports that only the un-run policy classes use are satisfied by named
placeholders (``PLACEHOLDERS``); every module the heads call is the real upstream file.

N1.5's ``value_head`` input width is hard-coded to 3584 (= 2048 VL + 1536 state, the full-size widths): it is
rebuilt with RLinf's own ``ValueHead`` class at the tiny width 64 + 48 (N1.6 derives it from the config).
"""

from __future__ import annotations

import argparse
import random
import sys
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gr00t_golden import N15_HEAD, N16_CFG, golden_weight, import_torchvision, load

B, S, CHUNKS, ENV_DIM, K = 3, 12, 5, 7, 4
LENGTHS = (12, 9, 7)  # real prompt tokens per row; the rest is right padding
#: parameters whose gradients are recorded (layers the actor and the critic share, plus the DiT's VL keys)
GRAD_NAMES = {
    "n15": ["vlln.weight", "vlln.bias", "state_encoder.layer1.W", "state_encoder.layer2.b",
            "vl_self_attention.transformer_blocks.0.attn1.to_q.weight",
            "vl_self_attention.transformer_blocks.1.ff.net.2.bias",
            "model.transformer_blocks.0.attn1.to_k.weight", "value_head.mlp.6.weight"],
    "n16": ["vlln.weight", "vlln.bias", "state_encoder.layer1.W", "state_encoder.layer2.b",
            "model.transformer_blocks.0.attn1.to_k.weight", "model.transformer_blocks.2.attn1.to_v.weight",
            "value_head.mlp.6.weight"],
}
PLACEHOLDERS = ("gr00t.data.dataset.ModalityConfig",
                "gr00t.model.gr00t_n1.GR00T_N1_5 / GR00T_N1_5_Config",
                "gr00t.configs.model (package; register_model_config a no-op)",
                "gr00t.model.gr00t_n1d6.processing_gr00t_n1d6.Gr00tN1d6Processor", "rlinf.scheduler.Worker")


def rl_head_config(version: str):
    from omegaconf import OmegaConf

    cfg = dict(joint_logprob=False, noise_method="flow_sde", ignore_last=False, safe_get_logprob=False,
               noise_anneal=False, noise_params=[0.7, 0.3, 400], noise_level=0.5, add_value_head=True,
               chunk_critic_input=False, detach_critic_input=True, disable_dropout=True, use_vlm_value=False,
               value_vlm_mode="mean_token", padding_value=570 if version == "n15" else 0)
    return OmegaConf.create(cfg)


def placeholder(name: str, **attrs) -> None:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod


def rlinf_modules(root: Path, version: str):
    """RLinf's files under their own names; parent packages bare (rlinf/models/__init__ starts Ray)."""
    for pkg in ("rlinf", "rlinf.utils", "rlinf.models", "rlinf.models.embodiment", "rlinf.models.embodiment.modules",
                "rlinf.models.embodiment.gr00t", f"rlinf.models.embodiment.gr00t.gr00t_{version.replace('n', 'n1d')}"):
        sys.modules.pop(pkg, None)
    placeholder("rlinf.scheduler", Worker=type("Worker", (), {}))
    emb = root / "models/embodiment"
    load("rlinf.utils.logging", root / "utils/logging.py")
    load("rlinf.models.embodiment.base_policy", emb / "base_policy.py")
    vh = load("rlinf.models.embodiment.modules.value_head", emb / "modules/value_head.py")
    load("rlinf.models.embodiment.modules.explore_noise_net", emb / "modules/explore_noise_net.py")
    load("rlinf.models.embodiment.gr00t.simulation_io", emb / "gr00t/simulation_io.py")
    utils = load("rlinf.models.embodiment.gr00t.utils", emb / "gr00t/utils.py")
    sub = "gr00t_n1d5" if version == "n15" else "gr00t_n1d6"
    model = load(f"rlinf.models.embodiment.gr00t.{sub}.gr00t_action_model", emb / f"gr00t/{sub}/gr00t_action_model.py")
    return model, vh.ValueHead, utils.replace_dropout_with_identity


def drop_gr00t() -> None:
    for mod in [m for m in sys.modules if m == "gr00t" or m.startswith(("gr00t.", "rlinf"))]:
        del sys.modules[mod]


def n15_head(src: Path, rlinf_root: Path):
    drop_gr00t()
    load("gr00t.data.embodiment_tags", src / "gr00t/data/embodiment_tags.py")
    load("gr00t.data.schema", src / "gr00t/data/schema.py")
    load("gr00t.data.transform.base", src / "gr00t/data/transform/base.py")
    placeholder("gr00t.data.dataset", ModalityConfig=type("ModalityConfig", (), {}))
    load("gr00t.model.action_head.action_encoder", src / "gr00t/model/action_head/action_encoder.py")
    load("gr00t.model.action_head.cross_attention_dit", src / "gr00t/model/action_head/cross_attention_dit.py")
    fm = load("gr00t.model.action_head.flow_matching_action_head",
              src / "gr00t/model/action_head/flow_matching_action_head.py")
    placeholder("gr00t.model.gr00t_n1", GR00T_N1_5=type("GR00T_N1_5", (), {}),
                GR00T_N1_5_Config=type("GR00T_N1_5_Config", (), {}))
    model, value_head_cls, no_dropout = rlinf_modules(rlinf_root, "n15")
    cfg = fm.FlowmatchingActionHeadConfig(**N15_HEAD)
    head = model.FlowMatchingActionHeadForRLActionPrediction(cfg, rl_head_config("n15"), CHUNKS, ENV_DIM)
    head.value_head = value_head_cls(input_dim=N15_HEAD["backbone_embedding_dim"] + N15_HEAD["input_embedding_dim"],
                                     hidden_sizes=(1024, 512, 256), output_dim=1, activation="relu", bias_last=True)
    no_dropout(head)
    return head


def n16_head(src: Path, rlinf_root: Path):
    drop_gr00t()
    placeholder("gr00t.configs.model", register_model_config=lambda *a, **k: None)
    sys.modules["gr00t.configs.model"].__path__ = []
    cfg_mod = load("gr00t.configs.model.gr00t_n1d6", src / "gr00t/configs/model/gr00t_n1d6.py")
    load("gr00t.data.embodiment_tags", src / "gr00t/data/embodiment_tags.py")
    load("gr00t.model.modules.dit", src / "gr00t/model/modules/dit.py")
    load("gr00t.model.modules.eagle_backbone", src / "gr00t/model/modules/eagle_backbone.py")
    load("gr00t.model.modules.embodiment_conditioned_mlp", src / "gr00t/model/modules/embodiment_conditioned_mlp.py")
    n16 = load("gr00t.model.gr00t_n1d6.gr00t_n1d6", src / "gr00t/model/gr00t_n1d6/gr00t_n1d6.py")
    placeholder("gr00t.model.gr00t_n1d6.processing_gr00t_n1d6", Gr00tN1d6Processor=type("P", (), {}))
    model, _, no_dropout = rlinf_modules(rlinf_root, "n16")
    cfg = cfg_mod.Gr00tN1d6Config(**N16_CFG)
    pretrained = n16.Gr00tN1d6ActionHead(cfg)
    head = model.FlowMatchingActionHeadForRLActionPrediction(cfg, rl_head_config("n16"), CHUNKS)
    for attr in ("model", "state_encoder", "action_encoder", "action_decoder", "position_embedding", "vlln",
                 "mask_token"):  # as GR00T_N1_6_ForRLActionPrediction.__init__
        if hasattr(pretrained, attr):
            setattr(head, attr, getattr(pretrained, attr))
    no_dropout(head)
    return head


def inputs(seed: int, vl_dim: int, state_dim: int, action_dim: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(B, S, dtype=torch.bool)
    for row, n in enumerate(LENGTHS):
        mask[row, :n] = True
    image_mask = torch.zeros(B, S, dtype=torch.bool)
    image_mask[:, 1:5] = True  # image tokens inside every row's prompt
    return {"vl": torch.randn(B, S, vl_dim, generator=g), "state": torch.randn(B, 1, state_dim, generator=g),
            "embodiment_id": torch.tensor([1, 0, 1]), "attention_mask": mask, "image_mask": image_mask,
            "noise": torch.randn(B, N16_CFG["action_horizon"], action_dim, generator=g),
            "loss_weights": torch.randn(B, CHUNKS, ENV_DIM, generator=g), "value_weights": torch.randn(B, generator=g)}


def record(head, c: dict[str, torch.Tensor], p: str) -> dict[str, np.ndarray]:
    from transformers.feature_extraction_utils import BatchFeature

    with torch.no_grad():
        for name, param in head.named_parameters():
            param.copy_(golden_weight(name, tuple(param.shape)))
    head.eval()
    out = {f"{p}_in_{k}": v.numpy() for k, v in c.items()}
    out[f"{p}_param_names"] = np.array(sorted(n for n, _ in head.named_parameters()))
    bo = lambda: BatchFeature(data={"backbone_features": c["vl"].clone(), "image_mask": c["image_mask"],  # noqa: E731
                                    "backbone_attention_mask": c["attention_mask"]})
    ai = BatchFeature(data={"state": c["state"], "embodiment_id": c["embodiment_id"]})
    real_randn, real_randint = torch.randn, random.randint
    torch.randn = lambda *a, **k: c["noise"].clone()  # the initial noise x_0 (RLinf draws it with torch.randn)
    try:
        with torch.no_grad():
            _, ev = head.get_rl_action(bo(), ai, mode="eval")
            out[f"{p}_eval_actions"] = ev["actions"].numpy()
            for index in range(K):  # RLinf draws ONE stochastic step per call (random.randint): each in turn
                random.randint = lambda a, b, _i=index: _i
                torch.manual_seed(100 + index)  # its transition noise (bf16 torch.normal)
                _, tr = head.get_rl_action(bo(), ai, mode="train")
                out[f"{p}_chain_{index}"] = tr["chains"].numpy()
                out[f"{p}_denoise_inds_{index}"] = tr["denoise_inds"].numpy()
                out[f"{p}_prev_logprobs_{index}"] = tr["prev_logprobs"].float().numpy()
                out[f"{p}_prev_values_{index}"] = tr["prev_values"].float().numpy()
    finally:
        torch.randn, random.randint = real_randn, real_randint
    out.update(training_pass(head, bo, ai, c, p, out[f"{p}_chain_2"], out[f"{p}_denoise_inds_2"]))
    return out


def training_pass(head, bo, ai, c, p: str, chain: np.ndarray, inds: np.ndarray) -> dict[str, np.ndarray]:
    """RLinf's ``forward`` (the PPO recompute) on the recorded chain of step ``index``; gradients of a fixed
    weighting of the executed log-probs ([:, :CHUNKS, :ENV_DIM], as ``default_forward`` cuts them) and of the
    values, separately, on the shared layers."""
    out: dict[str, np.ndarray] = {}
    rec = {}
    params = dict(head.named_parameters())
    for what in ("logprob", "value"):
        head.zero_grad(set_to_none=True)
        logp, values = head(bo(), ai, chains=torch.from_numpy(chain), denoise_inds=torch.from_numpy(inds))
        rec["logprobs"], rec["values"] = logp.detach(), values.detach()
        if what == "logprob":
            loss = (logp[:, 0, :CHUNKS, :ENV_DIM] * c["loss_weights"]).sum()
        else:
            loss = (values.mean(dim=-1) * c["value_weights"]).sum()
        loss.backward()
        for name in GRAD_NAMES[p]:
            g = params[name].grad
            out[f"{p}_grad_{what}_{name}"] = (torch.zeros_like(params[name]) if g is None else g).numpy().copy()
    out[f"{p}_train_logprobs"] = rec["logprobs"].numpy()
    out[f"{p}_train_values"] = rec["values"].numpy()
    return out


# ------------------------------------------------------------------------------------------ end to end
CHAIN_GRADS = {
    "n1.6": ["language_model.model.layers.1.self_attn.q_proj.weight", "language_model.model.layers.0.mlp.down_proj.weight",
             "language_model.model.norm.weight", "mlp1.1.weight",
             "vision_model.vision_model.encoder.layers.1.self_attn.v_proj.weight"],
    "n1.5": ["language_model.model.layers.1.self_attn.q_proj.weight", "language_model.model.layers.0.mlp.down_proj.weight",
             "language_model.model.norm.weight", "mlp1.0.weight",
             "vision_model.vision_model.encoder.layers.1.self_attn.v_proj.weight"],
}
#: fixture key prefix per release (N1.6's was recorded first, as ``chain_``)
CHAIN_PREFIX = {"n1.6": "chain_", "n1.5": "chain15_"}


def chain_record(release: str, src: Path, rlinf_root: Path) -> dict[str, np.ndarray]:
    """Isaac-GR00T's Eagle backbone (gr00t_eagle.py: SDPA; N1.6 one image per SigLIP-2 call) feeding RLinf's RL head,
    as GR00T_N1_5/N1_6_ForRLActionPrediction chain them (backbone -> BatchFeature -> action head). Records one
    rollout with stochastic step 1, the recompute, and the gradients of a log-prob loss in the backbone (RLinf
    trains N1.6's top LLM layers by the checkpoint's config). N1.5's head reads no padding mask, so its loss
    weights only the unpadded row 0 (pad features are SDPA's here, FA2's in RLinf's runs and in vlarl)."""
    import shutil
    import tempfile

    from gr00t_eagle import IMAGE_TOKEN, RELEASES, build, features, tiny_config
    from gr00t_eagle import inputs as eagle_inputs
    from transformers.feature_extraction_utils import BatchFeature

    head = (n16_head if release == "n1.6" else n15_head)(src, rlinf_root)
    with torch.no_grad():
        for name, param in head.named_parameters():
            param.copy_(golden_weight(name, tuple(param.shape)))
    head.eval()
    c = inputs(161, 64, 128, 128) if release == "n1.6" else inputs(151, 64, 64, 32)
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / f"eagle_{release.replace('.', '')}_tiny"
        shutil.copytree(src / RELEASES[release]["folder"], folder)
        tiny_config(folder, release)
        eagle = build(folder, release)
    x = eagle_inputs(release)
    ai = BatchFeature(data={"state": c["state"], "embodiment_id": c["embodiment_id"]})

    def backbone_output(grad: bool) -> BatchFeature:  # EagleBackbone.forward's BatchFeature
        feats = features(eagle, x, per_image=True, grad=grad, release=release)
        data = {"backbone_features": feats, "backbone_attention_mask": x["attention_mask"] == 1}
        if release == "n1.6":
            data["image_mask"] = x["input_ids"] == IMAGE_TOKEN
        return BatchFeature(data=data)

    p, out = CHAIN_PREFIX[release], {}
    real_randn, real_randint = torch.randn, random.randint
    torch.randn, random.randint = (lambda *a, **k: c["noise"].clone()), (lambda a, b: 1)
    try:
        torch.manual_seed(7)
        with torch.no_grad():
            _, tr = head.get_rl_action(backbone_output(False), ai, mode="train")
    finally:
        torch.randn, random.randint = real_randn, real_randint
    out[f"{p}chain"], out[f"{p}prev_logprobs"] = tr["chains"].numpy(), tr["prev_logprobs"].float().numpy()
    out[f"{p}prev_values"] = tr["prev_values"].float().numpy()
    eagle.zero_grad(set_to_none=True)
    logp, values = head(backbone_output(True), ai, chains=tr["chains"], denoise_inds=tr["denoise_inds"])
    weights = c["loss_weights"].clone()
    if release == "n1.5":
        weights[1:] = 0.0
    (logp[:, 0, :CHUNKS, :ENV_DIM] * weights).sum().backward()
    params = dict(eagle.named_parameters())
    for name in CHAIN_GRADS[release]:
        out[f"{p}grad_{RELEASES[release]['prefix']}{name}"] = params[name].grad.numpy().copy()
    out[f"{p}train_logprobs"], out[f"{p}train_values"] = logp.detach().numpy(), values.detach().numpy()
    return out


def main() -> None:
    import_torchvision()
    ap = argparse.ArgumentParser()
    ap.add_argument("--n15", type=Path, required=True)
    ap.add_argument("--n16", type=Path, required=True)
    ap.add_argument("--rlinf", type=Path, required=True, help="the installed rlinf package directory")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    data: dict[str, np.ndarray] = {"lengths": np.array(LENGTHS), "chunks": np.array(CHUNKS),
                                   "placeholders": np.array(PLACEHOLDERS)}
    for p, build, case in (("n15", n15_head, inputs(151, 64, 64, 32)), ("n16", n16_head, inputs(161, 64, 128, 128))):
        head = build(args.n15 if p == "n15" else args.n16, args.rlinf)
        data.update(record(head, case, p))
    data.update(chain_record("n1.6", args.n16, args.rlinf))
    data.update(chain_record("n1.5", args.n15, args.rlinf))
    np.savez_compressed(args.out / "rlinf.npz", **data)
    print({k: (v.shape, v.dtype) for k, v in data.items()})


if __name__ == "__main__":
    main()
