"""GR00T N1.5 / N1.6 as an RL policy (contract in :mod:`vlarl_cli.policies.base`).

    policy = Gr00tPolicy(preset("tiny"), ModelSettings(preset="tiny"), default_modality("libero_franka"))
    out = policy.sample(obs)            # obs: raw env batch (uint8 images, states [B, 8], descriptions)
    ev = policy.evaluate(out.replay)    # ev.logprobs == out.logprobs under unchanged weights

Sampling runs the Eagle backbone once, then ``denoising_steps`` DiT calls through the shared sampler
(:func:`vlarl_cli.policies.flow_matching.sample_flow`) in GR00T's time convention (``noise_at=0``:
t = 0 is noise, t = 1 is data; the head predicts ``data - noise``). Of the 16 predicted actions the
first ``num_action_chunks`` are executed; log-probs are cut to those steps and the real action dims.
The replay holds the raw uint8 images, prompt tokens, normalised state, embodiment id, the denoising
chain and the stochastic index, from which :meth:`Gr00tPolicy.evaluate` recomputes the log-probs.

Value (RLinf ``get_value``): RLinf's critic (:mod:`.critic`, MLP 1024-512-256 with ReLU) over [mean of ALL
processed VL tokens, padding included; state token features] (or only the VL mean with ``value_after_vlm``),
inputs not detached: RLinf's GR00T code never reads ``detach_critic_input``, so its value loss trains the
shared layers that require grad, and so does vlarl's (a recipe that sets the key true is told).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from vlarl_cli import keys
from vlarl_cli.checkpoints.pipeline import LoadReport
from vlarl_cli.errors import ConfigError
from vlarl_cli.policies import noise as noise_lib
from vlarl_cli.policies.activations import ActivationStack, keeps_activations, logprob_calls
from vlarl_cli.policies.base import EvaluateOutput, Observation, PolicyOutput, Replay
from vlarl_cli.policies.flow_matching import (
    FlowConfig,
    VelocityOutput,
    flow_logprobs,
    flow_training_draws,
    pad_chunk,
    sample_flow,
)
from vlarl_cli.policies.gr00t.action_head import ActionHead
from vlarl_cli.policies.gr00t.backbone import EagleBackbone
from vlarl_cli.policies.gr00t.config import FSDP_WRAP_CLASSES, Gr00tConfig, ModelSettings, trainability
from vlarl_cli.policies.gr00t.critic import Gr00tCritic, pool_vl
from vlarl_cli.policies.gr00t.modality import ZERO_STATE_TAGS, ModalitySpec
from vlarl_cli.policies.gr00t.processing import (
    PromptTokenizer,
    build_prompt,
    load_tokenizer,
    preprocess_images,
)
from vlarl_cli.policies.gripper import gripper_from_env
from vlarl_cli.policies.noise import AnyGenerator

__all__ = ["Gr00tPolicy", "NoiseHead", "disable_dropout", "rlinf_state_rounding"]

#: replay keys besides the flow record (``chain``, ``denoise_index``)
INPUT_KEYS = (keys.MAIN_IMAGES, keys.WRIST_IMAGES, "input_ids", "attention_mask", "state", "embodiment_id")


def rlinf_state_rounding(states: Tensor, dtype: torch.dtype) -> Tensor:
    """RLinf rounds the raw env states through bfloat16 before normalising them (``predict_action_batch`` of
    both ``gr00t_n1d5`` and ``gr00t_n1d6``: "reproduce the info loss in training"); Isaac-GR00T does not.
    We follow RLinf when the model itself runs in bfloat16 (its recipes), and keep float32 states otherwise."""
    return states.to(torch.bfloat16).float() if dtype == torch.bfloat16 else states


def disable_dropout(module: nn.Module) -> int:
    """Replace every dropout module under ``module`` by ``nn.Identity``; returns how many were replaced.

    GR00T's DiT and VL attention carry p=0.2 dropout; with it active, two forward passes of the same
    chain differ and the recomputed PPO ratio is noise (RLinf ``disable_dropout``)."""
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)):
                setattr(parent, name, nn.Identity())
                count += 1
    return count


class NoiseHead(nn.Module):
    """ReinFlow learned noise (flow_noise): DiT action-token features [B, H, hidden] -> raw log-variance
    [B, H, action_dim] (squashed into [log 0.08^2, log 0.16^2] by the sampler). Widths as RLinf (128, 64), tanh."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, 128), nn.Tanh(), nn.Linear(128, 64), nn.Tanh(),
                                 nn.Linear(64, out_dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class Gr00tPolicy(nn.Module):
    """GR00T flow-matching policy. Submodules ``backbone`` and ``action_head`` (value and noise heads
    live under ``action_head`` as in RLinf)."""

    #: set by :func:`~.checkpoint.load_policy`: what was loaded, skipped and freshly initialised
    load_report: LoadReport | None = None

    def __init__(self, config: Gr00tConfig, settings: ModelSettings, modality: ModalitySpec, *,
                 device: Any = "cpu", dtype: torch.dtype | None = None,
                 tokenizer: PromptTokenizer | None = None) -> None:
        super().__init__()
        from vlarl_cli.precision import resolve_dtype

        device = torch.device(device)
        if settings.version != config.version:
            raise ConfigError(f"model_type {settings.model_type} is GR00T {settings.version} but the checkpoint / "
                              f"preset is {config.version}.",
                              "Use model_type gr00t for N1.5 and gr00t_n1d6 for N1.6.")
        self._check(config, settings, modality)
        self.config = config
        self.settings = settings
        self.modality = modality
        self.num_action_chunks = settings.num_action_chunks
        # vlarl sft's demonstration chunks: Isaac-GR00T trains on the whole action horizon (steps past an
        # episode's end repeat its last action), not only the C steps an env executes
        self.supervised_chunk = config.action_horizon
        self.action_dim = settings.action_dim
        self.flow_cfg = FlowConfig(num_steps=settings.denoising_steps, method=settings.noise_method,
                                   noise_level=settings.noise_level, noise_at=0.0,
                                   joint_logprob=settings.joint_logprob)
        with torch.device(device):
            self.backbone = EagleBackbone(config)
            self.action_head = ActionHead(config)
            if settings.add_value_head:
                in_dim = config.backbone_embedding_dim + (0 if settings.value_after_vlm else config.input_embedding_dim)
                self.action_head.value_head = Gr00tCritic(in_dim, hidden=settings.value_hidden)
            if settings.noise_method == "flow_noise":
                self.action_head.noise_head = NoiseHead(config.hidden_size, config.action_dim)
        if dtype is None:
            dtype = resolve_dtype(settings.precision or "fp32", device)
        self.to(dtype)
        for module in self.modules():  # rotary frequencies stay float32 (transformers keeps them so too)
            for name in ("inv_freq", "original_inv_freq"):
                if name in module._non_persistent_buffers_set:
                    setattr(module, name, getattr(module, name).float())
        if settings.disable_dropout:
            disable_dropout(self)
        self.action_head.model.gradient_checkpointing = settings.gradient_checkpointing
        self._tokenizer = tokenizer
        self.apply_trainability()

    # ------------------------------------------------------------------ setup helpers
    @staticmethod
    def _check(cfg: Gr00tConfig, s: ModelSettings, m: ModalitySpec) -> None:
        if m.action_width != s.action_dim:
            raise ConfigError(f"action_dim {s.action_dim} does not match the {m.action_width} action dims of "
                              f"embodiment {m.embodiment_tag} ({[k for k, _ in m.action_keys]}).",
                              f"Set actor.model.action_dim: {m.action_width}.")
        if m.action_width > cfg.action_dim or m.state_width > cfg.state_dim:
            raise ConfigError(f"embodiment {m.embodiment_tag} needs {m.state_width} state / {m.action_width} action "
                              f"dims but the model has {cfg.state_dim} / {cfg.action_dim}.",
                              "Use a checkpoint trained for this embodiment.")
        if not 1 <= s.num_action_chunks <= cfg.action_horizon:
            raise ConfigError(f"num_action_chunks must be in [1, {cfg.action_horizon}] (GR00T predicts "
                              f"{cfg.action_horizon} actions), got {s.num_action_chunks}.",
                              f"Set actor.model.num_action_chunks <= {cfg.action_horizon}.")
        if not 0 <= m.embodiment_id < cfg.num_embodiments:
            raise ConfigError(f"embodiment slot {m.embodiment_id} of {m.embodiment_tag} is outside the model's "
                              f"{cfg.num_embodiments} slots.", "Fix embodiment_id.json / the embodiment tag.")
        if len(m.video_keys) not in (1, 2):
            raise ConfigError(f"GR00T on LIBERO uses 1 or 2 cameras, the checkpoint expects {m.video_keys}.",
                              "Use a LIBERO checkpoint (cameras image + wrist_image).")
        s.check_padding(cfg.padding_value, cfg.prompt_length(len(m.video_keys)))

    def apply_trainability(self) -> None:
        """The trainable set as Isaac-GR00T builds it from the config (``EagleBackbone`` /
        ``Gr00tN1d6ActionHead.set_trainable_parameters``): every tensor trains, then the LLM (``tune_llm``), the
        vision tower + ``mlp1`` (``tune_visual``), the head's projectors / DiT / VL LayerNorm are frozen when their
        flag is off, and the top ``tune_top_llm_layers`` LLM layers train again. ``train_expert_only`` freezes the
        whole backbone on top (vlarl's former default); the value / noise heads always train."""
        flags, deviations = trainability(self.config, self.settings)
        if deviations:
            import warnings

            warnings.warn(f"GR00T trainable set: {'; '.join(deviations)}. RLinf passes no such flags: it trains what "
                          "the checkpoint's config.json says, so this run differs from RLinf's.", stacklevel=3)
        head, eagle = self.action_head, self.backbone.eagle
        self.requires_grad_(True)
        frozen: list[nn.Module] = []
        if not flags["tune_llm"]:
            frozen.append(eagle.language_model)
        if not flags["tune_visual"]:
            frozen += [eagle.vision_model, eagle.mlp1]
        if not flags["tune_projector"]:
            frozen += [head.state_encoder, head.action_encoder, head.action_decoder]
            frozen += [head.position_embedding] if self.config.add_pos_embed else []
        if not flags["tune_diffusion_model"]:
            frozen.append(head.model)
        if not flags["tune_vlln"] and self.config.version == "n1.6":
            frozen.append(head.vlln)
        for module in frozen:
            module.requires_grad_(False)
        top = int(flags["tune_top_llm_layers"])
        if top > 0:
            lm: Any = eagle.language_model.model
            for layer in lm.layers[-top:]:
                layer.requires_grad_(True)
        if self.settings.train_expert_only:
            self.backbone.requires_grad_(False)

    @property
    def backbone_trainable(self) -> bool:
        return any(p.requires_grad for p in self.backbone.parameters())

    def activation_stacks(self) -> list[ActivationStack]:
        """What one update's backward keeps per micro-batch element (``--dry-run``'s activation term): the
        Eagle backbone (SigLIP on every camera, Qwen3 up to ``select_layer``) when it trains, N1.5's VL
        self-attention, and the DiT over state / future / action tokens cross-attending the VL tokens, once
        per log-prob call (joint: every denoising step)."""
        cfg, ckpt = self.config, bool(self.action_head.model.gradient_checkpointing)
        images = len(self.modality.video_keys)
        vl = cfg.prompt_length(images)
        inner = getattr(self.backbone, self.backbone.inner_name)
        patches = (cfg.image_size // cfg.patch_size) ** 2
        stacks = []
        if keeps_activations(inner.vision_model):
            stacks.append(ActivationStack("vision", images * patches, cfg.vision_hidden_size,
                                          cfg.vision_intermediate_size, 4 * cfg.vision_hidden_size,
                                          cfg.vision_num_layers, heads=cfg.vision_num_heads, gated=False))
        llm_layers = self._llm_layers_with_graph(inner)
        if llm_layers:
            # transformers' SDPA path expands keys / values to the query heads when a mask is given (repeat_kv):
            # the kernel keeps q, k, v and the output each llm_num_heads wide
            qkv = 4 * cfg.llm_num_heads * cfg.llm_head_dim
            stacks.append(ActivationStack("qwen3", vl, cfg.llm_hidden_size, cfg.llm_intermediate_size, qkv,
                                          llm_layers, heads=cfg.llm_num_heads))
        if cfg.vl_self_attention_layers:
            width = cfg.backbone_embedding_dim
            stacks.append(ActivationStack("vl_self_attention", vl, width, 4 * width, 4 * cfg.vl_num_heads *
                                          cfg.vl_head_dim, cfg.vl_self_attention_layers, heads=cfg.vl_num_heads,
                                          gated=False))
        dim = cfg.input_embedding_dim
        calls = logprob_calls(self.flow_cfg)
        tokens = 1 + cfg.num_future_tokens + cfg.action_horizon
        half = cfg.dit_num_layers // 2  # even blocks cross-attend the VL tokens (their k / v), odd ones self-attend
        for name, layers, kv in (("dit_cross", cfg.dit_num_layers - half, vl), ("dit_self", half, 0)):
            stacks.append(ActivationStack(name, tokens, dim, 4 * dim, 4 * dim, layers, heads=cfg.dit_num_heads,
                                          gated=False, passes=calls, kv_tokens=kv, kv_width=2 * dim if kv else 0,
                                          checkpointed=ckpt))
        return stacks

    @staticmethod
    def _llm_layers_with_graph(inner: Any) -> int:
        """Qwen3 layers whose activations backward keeps: all of them when the vision tower, mlp1 or the token
        embeddings train, else those from the lowest layer with a trainable tensor up (N1.6's default: the
        top ``tune_top_llm_layers``); 0 when none trains (N1.5's ``eagle_linear`` alone keeps no LLM layer)."""
        lm: Any = inner.language_model.model
        layers = list(lm.layers)
        if keeps_activations(inner.vision_model, inner.mlp1, lm.embed_tokens):
            return len(layers)
        first = next((i for i, layer in enumerate(layers) if keeps_activations(layer)), len(layers))
        return len(layers) - first

    def train(self, mode: bool = True) -> Gr00tPolicy:
        """Frozen modules stay in eval mode, as upstream's ``set_frozen_modules_to_eval_mode``: the LLM unless
        ``tune_llm`` (its trained top layers included, as there), the vision tower and mlp1 unless
        ``tune_visual``, the whole backbone when nothing in it trains."""
        super().train(mode)
        flags, _ = trainability(self.config, self.settings)
        eagle = self.backbone.eagle
        if not self.backbone_trainable:
            self.backbone.eval()
        if not flags["tune_llm"]:
            eagle.language_model.eval()
        if not flags["tune_visual"]:
            eagle.vision_model.eval()
            eagle.mlp1.eval()
        return self

    @property
    def dtype(self) -> torch.dtype:
        return self.action_head.position_embedding.weight.dtype if self.config.add_pos_embed else \
            next(self.action_head.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.action_head.parameters()).device

    @property
    def tokenizer(self) -> PromptTokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.settings.tokenizer_path, self.config.vocab_size)
        return self._tokenizer

    def fsdp_wrap_class_names(self) -> tuple[str, ...]:
        """Names of the layer classes present in this model that FSDP should wrap individually."""
        present = {type(m).__name__ for m in self.modules()}
        return tuple(n for n in FSDP_WRAP_CLASSES if n in present)

    @property
    def fsdp_wrap_classes(self) -> tuple[str, ...]:
        """What :func:`vlarl_cli.distributed.fsdp.wrap_classes` falls back to when the config names none."""
        return self.fsdp_wrap_class_names()

    # ------------------------------------------------------------------ inputs
    def prepare_inputs(self, obs: Observation) -> Replay:
        """Raw env batch -> the model-input part of the replay (all tensors, batch first)."""
        device = self.device
        main = torch.as_tensor(obs[keys.MAIN_IMAGES])
        wrist = torch.as_tensor(obs[keys.WRIST_IMAGES]) if keys.WRIST_IMAGES in obs else main
        states = torch.as_tensor(obs[keys.STATES], dtype=torch.float32)
        descriptions = list(obs[keys.TASK_DESCRIPTIONS])
        b = main.shape[0]
        if main.dtype != torch.uint8 or main.dim() != 4:
            raise ValueError(f"{keys.MAIN_IMAGES} must be uint8 [B, H, W, 3], got {main.dtype} {tuple(main.shape)}")
        if states.shape[0] != b or len(descriptions) != b:
            raise ValueError(f"batch sizes differ: images {b}, states {states.shape[0]}, descriptions "
                             f"{len(descriptions)}")
        cfg = self.config
        n_img = len(self.modality.video_keys)
        ids, mask = build_prompt(self.tokenizer, descriptions, num_images=n_img,
                                 tokens_per_image=cfg.tokens_per_image, length=cfg.prompt_length(n_img),
                                 image_token_id=cfg.image_token_id, pad_id=cfg.prompt_pad_id,
                                 formalize=cfg.formalize_language, style=cfg.prompt_style, version=cfg.version)
        state = torch.zeros(b, cfg.state_dim, dtype=torch.float32)
        if self.modality.embodiment_tag in ZERO_STATE_TAGS:  # RLinf feeds this embodiment a zero raw state
            states = torch.zeros(b, self.modality.state_width)
        if self.settings.use_proprio:
            state[:, : self.modality.state_width] = self.modality.normalize_state(
                rlinf_state_rounding(states.cpu(), self.dtype))
        return {keys.MAIN_IMAGES: main.to(device), keys.WRIST_IMAGES: wrist.to(device),
                "input_ids": ids.to(device), "attention_mask": mask.to(device), "state": state.to(device),
                "embodiment_id": torch.full((b,), self.modality.embodiment_id, dtype=torch.long, device=device)}

    def _pixels(self, inputs: Replay) -> Tensor:
        cams = [inputs[keys.MAIN_IMAGES]]
        if len(self.modality.video_keys) == 2:
            cams.append(inputs[keys.WRIST_IMAGES])
        return torch.stack([preprocess_images(c, self.config) for c in cams], dim=1)  # [B, N, 3, S, S]

    def encode(self, inputs: Replay) -> dict[str, Tensor]:
        """Backbone + head pre-processing: processed VL tokens [B, S, d_vl], masks [B, S], state token
        [B, 1, d_in]. The backbone runs without autograd when none of its tensors is trainable."""
        dtype = self.dtype
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.backbone_trainable):
            feats = self.backbone(self._pixels(inputs).to(dtype), inputs["input_ids"], inputs["attention_mask"])
        vl = self.action_head.process_vl(feats)
        state_feat = self.action_head.encode_state(inputs["state"].to(dtype), inputs["embodiment_id"])
        return {"vl": vl, "vl_mask": inputs["attention_mask"].bool(),
                "image_mask": inputs["input_ids"] == self.config.image_token_id, "state_feat": state_feat}

    def _velocity_fn(self, enc: dict[str, Tensor], embodiment_id: Tensor) -> Any:
        head: Any = self.action_head
        use_noise = self.flow_cfg.method == "flow_noise"

        def fn(x_t: Tensor, t: Tensor) -> VelocityOutput:
            v, feats = head.velocity(x_t, t, enc["vl"], enc["state_feat"], embodiment_id, enc["vl_mask"],
                                     enc["image_mask"])
            return VelocityOutput(velocity=v, noise_logvar_raw=head.noise_head(feats) if use_noise else None)

        return fn

    def values(self, enc: dict[str, Tensor]) -> Tensor:
        """[B] float32 values (zeros without a value head)."""
        head = getattr(self.action_head, "value_head", None)
        vl = enc["vl"]
        if head is None:
            return torch.zeros(vl.shape[0], dtype=torch.float32, device=vl.device)
        pooled = pool_vl(vl)  # RLinf: mean over all VL tokens, its 0-padding included
        parts = [pooled] if self.settings.value_after_vlm else [pooled, enc["state_feat"].flatten(1)]
        # not detached, as RLinf (whose GR00T code never reads detach_critic_input): the value loss also trains
        # the shared layers that require grad (VL layer norm, N1.5's VL self-attention, the state encoder)
        return head(torch.cat(parts, dim=-1))

    # ------------------------------------------------------------------ policy contract
    def _cut(self, x: Tensor) -> Tensor:
        return x[:, : self.num_action_chunks, : self.action_dim]

    def sample(self, obs: Observation, deterministic: bool = False,
               generator: AnyGenerator = None) -> PolicyOutput:
        """Raw env batch -> env actions [B, C, 7], log-probs [B, C, 7], values [B], replay."""
        inputs = self.prepare_inputs(obs)
        b = inputs["state"].shape[0]
        with torch.no_grad():
            enc = self.encode(inputs)
            noise = noise_lib.randn((b, self.config.action_horizon, self.config.action_dim), generator,
                                   device=self.device, dtype=torch.float32).to(self.dtype)
            fs = sample_flow(self._velocity_fn(enc, inputs["embodiment_id"]), noise, self.flow_cfg,
                             deterministic=deterministic, generator=generator)
            values = self.values(enc)
        env = self.modality.unnormalize_action(fs.actions[:, : self.num_action_chunks].float())
        scale = self.settings.effective_action_noise_scale
        if not deterministic and scale > 0:
            # N1.6 exploration noise on the executed actions, outside the log-prob (RLinf action_noise_scale)
            eps = noise_lib.randn(env.shape, generator, device=env.device, dtype=env.dtype)
            env = (env + scale * eps).clamp(-1.0, 1.0)
        actions = self.modality.to_env_action(env)
        replay = {**inputs, "chain": fs.chain, "denoise_index": fs.denoise_index}
        return PolicyOutput(actions=actions, logprobs=self._cut(fs.logprobs), values=values, replay=replay)

    def evaluate(self, replay: Replay) -> EvaluateOutput:
        """Recompute log-probs [B, C, 7] (and entropy for flow_noise) and values [B] under current weights."""
        enc = self.encode(replay)
        logp, entropy = flow_logprobs(self._velocity_fn(enc, replay["embodiment_id"]), replay["chain"],
                                      replay["denoise_index"], self.flow_cfg)
        return EvaluateOutput(logprobs=self._cut(logp), values=self.values(enc),
                              entropy=None if entropy is None else self._cut(entropy))

    def supervised_loss(self, obs: Observation, actions: Tensor, *, generator: torch.Generator | None = None,
                        noise: Tensor | None = None, time: Tensor | None = None) -> Tensor:
        """Flow-matching behaviour-cloning loss (scalar) of env-space demonstration chunks ``actions [B, T, A]``.

        The env actions go the reverse way of :meth:`sample`: the LIBERO gripper convention is undone
        (``-1 open / +1 close -> 1 open / 0 close``), min-max normalised with the embodiment's action
        statistics, zero-padded to the model's ``action_dim`` and padded along the horizon to
        ``action_horizon`` by repeating the last step. Then Isaac-GR00T's
        ``flow_matching_action_head.py`` (``forward`` / ``sample_time``), in GR00T time (0 = noise):
        ``t = (s - u) / s`` (N1.5; N1.6: ``t = (1 - u) * s``) with ``u ~ Beta(1.5, 1)`` and ``s = noise_s = 0.999``,
        ``x_t = (1 - t) noise + t actions``, velocity target ``actions - noise``, squared error averaged
        over the real entries only (upstream's ``action_mask``: the ``A`` real dims of the ``T`` given steps;
        ``vlarl sft`` gives the whole horizon, :attr:`supervised_chunk`, as upstream trains).
        ``noise [B, action_horizon, model action_dim]`` / ``time [B]`` fix the draws.
        """
        cfg = self.config
        inputs = self.prepare_inputs(obs)
        b = inputs["state"].shape[0]
        c, a = actions.shape[1], self.action_dim
        if actions.ndim != 3 or (actions.shape[0], actions.shape[2]) != (b, a) or not (
                self.num_action_chunks <= c <= cfg.action_horizon):
            raise ValueError(f"actions must be [B={b}, T, A={a}] with {self.num_action_chunks} <= T <= "
                             f"{cfg.action_horizon}, got {tuple(actions.shape)}")
        x = actions.detach().float().cpu().clone()
        x[..., -1] = gripper_from_env(self.modality.gripper_convention, x[..., -1])
        x = self.modality.normalize_action(x)
        target = pad_chunk(x, cfg.action_horizon, cfg.action_dim).to(device=self.device, dtype=torch.float32)
        noise, u = flow_training_draws((b, cfg.action_horizon, cfg.action_dim), generator, noise, None)
        if time is None:  # sample_time of the release: N1.5 (s - u) / s, N1.6 (1 - u) * s, s = noise_s = 0.999
            time = (1 - u) * 0.999 if cfg.version == "n1.6" else (0.999 - u) / 0.999
        noise = noise.to(device=self.device, dtype=torch.float32)
        t = time.to(device=self.device, dtype=torch.float32)
        x_t = (1 - t[:, None, None]) * noise + t[:, None, None] * target
        velocity = target - noise
        enc = self.encode(inputs)
        pred = self._velocity_fn(enc, inputs["embodiment_id"])(x_t.to(self.dtype), t).velocity.float()
        return ((pred - velocity) ** 2)[:, :c, :a].mean()
