"""pi0 / pi0.5 as an RL policy (the contract in :mod:`vlarl_cli.policies.base`).

``sample(obs)``: process the raw env observation, encode the prefix ONCE, denoise ``K`` steps through
the shared flow-matching sampler (openpi time, noise at t = 1) with the expert attending the cached
prefix keys/values, and return env actions ``[B, C, A]``, per-element log-probs ``[B, C, A]`` (the
``[B, H, 32]`` log-probs cut to the executed horizon and the real action dims), values ``[B]`` and the
replay record.

``evaluate(replay)``: recompute the prefix from the stored model inputs (gradients flow), then the
log-probs of the stored chain under the current weights (:func:`flow_logprobs`), values and, for
``flow_noise``, the entropy.

Value head (REFERENCE.md section 3; RLinf's critic by default, :func:`~vlarl_cli.policies.pi0.modeling.
build_value_head`): ``value_after_vlm=True`` reads the mean VLM prefix output (every prefix slot, as
RLinf; ``value_pooling="valid"`` for the valid tokens only); otherwise the mean action-token expert output at the FIRST denoising step
(``t = 1``, ``x = chain[:, 0]``), a deterministic function of the replay so sample and evaluate agree
exactly (RLinf averages the value over all steps at rollout but uses one step in training).

Replay keys: ``images`` uint8 ``[B, camera_slots, S, S, 3]``, ``image_masks`` ``[B, camera_slots]``, ``tokens`` / ``token_mask``
``[B, L]``, ``state`` ``[B, 32]``, ``chain`` ``[B, K+1, H, 32]``, ``denoise_index`` ``[B]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from vlarl_cli.checkpoints.pipeline import LoadReport
from vlarl_cli.policies import noise as noise_lib
from vlarl_cli.policies.activations import ActivationStack, keeps_activations, logprob_calls
from vlarl_cli.policies.base import EvaluateOutput, PolicyOutput, Replay
from vlarl_cli.policies.flow_matching import flow_training_draws, pad_chunk
from vlarl_cli.policies.gripper import gripper_from_env
from vlarl_cli.policies.noise import AnyGenerator
from vlarl_cli.policies.normalization import Normalizer, NormStats
from vlarl_cli.policies.pi0.config import Pi0Config
from vlarl_cli.policies.pi0.modeling import ExpertCache, Pi0Model
from vlarl_cli.policies.pi0.processing import Pi0Processor, make_tokenizer, to_model_images
from vlarl_cli.policies.tokenization import Tokenizer

__all__ = ["REPLAY_KEYS", "Pi0Policy"]

REPLAY_KEYS = ("images", "image_masks", "tokens", "token_mask", "state", "chain", "denoise_index")


class Pi0Policy(Pi0Model):
    """The pi0 / pi0.5 network plus processing, sampling and log-prob recomputation."""

    #: FSDP units (read by vlarl_cli.distributed.fsdp when the config names none). NOT
    #: GemmaDecoderLayer: the joint attention drives each layer's submodules directly and never calls
    #: the layer's forward, so FSDP's hooks on it would never unshard its parameters. The MLPs hold
    #: ~90% of Gemma's weights; the attention projections stay in the root unit (RLinf makes the same
    #: choice for openpi with GemmaMLP).
    fsdp_wrap_classes = ("SiglipEncoderLayer", "GemmaMLP")

    def __init__(self, cfg: Pi0Config, *, tokenizer: Tokenizer | None = None,
                 norm_stats: dict[str, NormStats] | None = None) -> None:
        super().__init__(cfg)
        self.num_action_chunks = cfg.num_action_chunks
        self.action_dim = cfg.action_env_dim
        #: what the env renders for this policy (policies.base.policy_cameras / policy_obs_mode)
        self.obs_mode = cfg.obs_mode
        self.cameras: tuple[str, ...] = ("main", "wrist") if cfg.obs_mode == "rgb" else ()
        self.norm_stats = dict(norm_stats or {})
        #: what :func:`~vlarl_cli.policies.pi0.checkpoint.load_policy` loaded, skipped and initialised
        self.load_report: LoadReport | None = None
        #: the verified prompt tokenizer (path, sha256, vocab_size, source), recorded on the protocol card;
        #: None for the built-in byte tokenizer of tiny test models
        self.tokenizer_record: dict[str, Any] | None = None
        mode = cfg.normalization_mode if self.norm_stats else "identity"
        self.processor = Pi0Processor(cfg, tokenizer or make_tokenizer(cfg), Normalizer(self.norm_stats, mode))
        if cfg.is_lora:
            from vlarl_cli.policies.lora import apply_lora

            apply_lora(self.vlm.language_model, cfg.lora_rank, cfg.lora_scale_alpha)
        self.apply_trainability()

    # ------------------------------------------------------------------ setup
    def set_norm_stats(self, norm_stats: dict[str, NormStats] | None) -> None:
        self.norm_stats = dict(norm_stats or {})
        mode = self.cfg.normalization_mode if self.norm_stats else "identity"
        self.processor.normalizer = Normalizer(self.norm_stats, mode)

    def apply_trainability(self) -> None:
        """``train_expert_only``: freeze the VLM (vision + language). ``is_lora``: freeze the VLM's base
        weights and train only its LoRA factors (the expert and heads stay fully trainable)."""
        from vlarl_cli.policies.lora import LoRALinear

        cfg = self.cfg
        for p in self.vlm.parameters():
            p.requires_grad_(not (cfg.train_expert_only or cfg.is_lora))
        if cfg.is_lora and not cfg.train_expert_only:
            for m in self.vlm.modules():
                if isinstance(m, LoRALinear):
                    m.lora_A.requires_grad_(True)
                    m.lora_B.requires_grad_(True)

    def flow_config(self) -> Any:
        return self.cfg.flow_config()

    def activation_stacks(self) -> list[ActivationStack]:
        """What one update's backward keeps per micro-batch element (``--dry-run``'s activation term): SigLIP
        on both camera slots and Gemma on the prefix when the VLM trains, the action expert on its suffix
        over the prefix keys / values, once per log-prob call (joint: every step) plus pi0's value call."""
        cfg, ckpt = self.cfg, self.gradient_checkpointing
        prefix = 2 * cfg.tokens_per_image + cfg.max_token_len
        # on a GPU in fp32 the keys / values reach the attention kernel expanded to the query heads (modeling.py):
        # q, k, v and the output each ``num_heads * head_dim`` wide per token, the prefix's keys / values likewise;
        # in bf16 / fp16 the kernel takes the grouped keys / values as they are
        kv_heads = cfg.num_heads if self._dtype() == torch.float32 else cfg.num_kv_heads
        attn, kv_width = 2 * (cfg.num_heads + kv_heads) * cfg.head_dim, 2 * kv_heads * cfg.head_dim
        stacks = []
        if keeps_activations(self.vlm.vision_tower):
            stacks.append(ActivationStack("siglip", 2 * cfg.tokens_per_image, cfg.vision_width, cfg.vision_mlp,
                                          4 * cfg.vision_width, cfg.vision_depth, heads=cfg.vision_heads,
                                          gated=False))
        if keeps_activations(self.vlm):
            stacks.append(ActivationStack("gemma", prefix, cfg.vlm_width, cfg.vlm_mlp, attn, cfg.vlm_depth,
                                          heads=cfg.num_heads, checkpointed=ckpt))
        calls = logprob_calls(self.flow_config()) + (0 if cfg.value_after_vlm or self.value_head is None else 1)
        stacks.append(ActivationStack("expert", self.suffix_len, cfg.expert_width, cfg.expert_mlp, attn,
                                      cfg.vlm_depth, heads=cfg.num_heads, passes=calls, kv_tokens=prefix,
                                      kv_width=kv_width, checkpointed=ckpt))
        return stacks

    @property
    def device(self) -> torch.device:
        return self.action_in_proj.weight.device

    # ------------------------------------------------------------------ internals
    def _prefix(self, inputs: dict[str, Tensor]) -> tuple[ExpertCache, Tensor | None]:
        images = to_model_images(inputs["images"].to(self.device), self._dtype())
        # A frozen VLM (train_expert_only) needs no autograd graph for the prefix: the expert's
        # gradients only flow through its own weights, and this saves the prefix activations.
        vlm_trainable = any(p.requires_grad for p in self.vlm.parameters())
        with torch.set_grad_enabled(torch.is_grad_enabled() and vlm_trainable):
            prefix = self.encode_prefix(images, inputs["image_masks"].to(self.device),
                                        inputs["tokens"].to(self.device), inputs["token_mask"].to(self.device))
        state = None if self.cfg.is_pi05 else inputs["state"].to(self.device)
        return self.expert_cache(prefix), state

    def _velocity_fn(self, cache: ExpertCache, state: Tensor | None, calls: list[tuple[Tensor, Tensor, Tensor]]):
        from vlarl_cli.policies.flow_matching import VelocityOutput

        def fn(x: Tensor, t: Tensor) -> VelocityOutput:
            feats = self.expert_forward(cache, state, x, t)
            calls.append((x, t, feats))
            raw = self.noise_head(feats) if self.noise_head is not None else None
            return VelocityOutput(self.velocity_from_features(feats), raw)

        return fn

    def _values(self, cache: ExpertCache, state: Tensor | None, x0: Tensor,
                calls: list[tuple[Tensor, Tensor, Tensor]]) -> Tensor:
        b = x0.shape[0]
        if self.value_head is None:
            return torch.zeros(b, dtype=torch.float32, device=x0.device)
        if self.cfg.value_after_vlm:
            return self.prefix_value(cache.prefix.hidden, cache.prefix.pad)
        # Reuse the sampler's first call (t = 1 on the initial noise itself). Decided by identity, never by
        # values: under FSDP every rank must run the same forwards, and a value test would skip the extra
        # forward only on ranks whose samples all happen to have denoise index 0.
        for x, t, feats in calls:
            if x is x0 and bool((t == 1.0).all()):
                return self.expert_value(feats)
        ones = torch.ones(b, dtype=torch.float32, device=x0.device)
        return self.expert_value(self.expert_forward(cache, state, x0, ones))

    def _cut(self, x: Tensor) -> Tensor:
        """``[B, H, 32] -> [B, C, A]``: executed horizon and real action dims."""
        # a copy, not a view: FSDP2 warns that in-place ops on returned views would skip its hooks
        return x[:, : self.cfg.num_action_chunks, : self.cfg.action_env_dim].clone()

    # ------------------------------------------------------------------ the contract
    @torch.no_grad()
    def sample(self, obs: dict[str, Any], deterministic: bool = False,
               generator: AnyGenerator = None, noise: Tensor | None = None) -> PolicyOutput:
        """Raw env observation -> :class:`PolicyOutput` (shapes in :mod:`vlarl_cli.policies.base`).

        ``generator`` drives the initial noise, the denoise index and the transition noise;
        ``noise`` ``[B, action_horizon, max_action_dim]`` fixes the initial noise (parity checks,
        noise-space policies)."""
        from vlarl_cli.policies.flow_matching import sample_flow

        inputs = self.processor.prepare(obs)
        cache, state = self._prefix(inputs)
        b = inputs["tokens"].shape[0]
        calls: list[tuple[Tensor, Tensor, Tensor]] = []
        shape = (b, self.cfg.action_horizon, self.cfg.max_action_dim)
        if noise is None:
            noise = noise_lib.randn(shape, generator, device=self.device, dtype=torch.float32)
        elif tuple(noise.shape) != shape:
            raise ValueError(f"noise must be {list(shape)}, got {list(noise.shape)}")
        noise = noise.to(device=self.device, dtype=torch.float32)
        fs = sample_flow(self._velocity_fn(cache, state, calls), noise, self.flow_config(),
                         deterministic=deterministic, generator=generator)
        values = self._values(cache, state, noise, calls)
        actions = self.processor.actions_to_env(fs.actions.cpu(), inputs["raw_state"])
        replay: Replay = {k: inputs[k] for k in ("images", "image_masks", "tokens", "token_mask", "state")}
        replay["chain"] = fs.chain.float().cpu()
        replay["denoise_index"] = fs.denoise_index.cpu()
        return PolicyOutput(actions=actions, logprobs=self._cut(fs.logprobs).float().cpu(),
                            values=values.float().cpu(), replay=replay)

    def evaluate(self, replay: Replay) -> EvaluateOutput:
        """Recompute log-probs ``[B, C, A]``, values ``[B]`` and entropy (flow_noise) from a replay."""
        from vlarl_cli.policies.flow_matching import flow_logprobs

        missing = [k for k in REPLAY_KEYS if k not in replay]
        if missing:
            raise KeyError(f"replay lacks {missing} (has {sorted(replay)})")
        cache, state = self._prefix(replay)
        chain = replay["chain"].to(self.device)
        calls: list[tuple[Tensor, Tensor, Tensor]] = []
        logp, entropy = flow_logprobs(self._velocity_fn(cache, state, calls), chain,
                                      replay["denoise_index"].to(self.device), self.flow_config())
        values = self._values(cache, state, chain[:, 0], calls)
        return EvaluateOutput(logprobs=self._cut(logp).float(), values=values.float().clone(),
                              entropy=None if entropy is None else self._cut(entropy).float())

    def supervised_loss(self, obs: dict[str, Any], actions: Tensor, *, generator: torch.Generator | None = None,
                        noise: Tensor | None = None, time: Tensor | None = None) -> Tensor:
        """Flow-matching behaviour-cloning loss (scalar) of env-space demonstration chunks ``actions [B, C, A]``.

        The env actions go the reverse way of :meth:`Pi0Processor.actions_to_env`: gripper convention undone,
        the delta transform undone (``a[:6] -= state[:6]``), normalised, zero-padded to ``max_action_dim``
        and, along the horizon, padded to ``action_horizon`` by repeating the last step. Then openpi's
        ``compute_loss`` (``src/openpi/models/pi0.py``): ``t ~ Beta(1.5, 1) * 0.999 + 0.001``,
        ``x_t = t noise + (1 - t) actions``, target ``u = noise - actions``, squared error of the predicted
        velocity. Reduction (``cfg.sft_loss_reduction``): ``"executed"`` (the default) averages over the
        executed ``C`` steps and the real ``A`` dims only (padding would dilute the loss and train the model
        to predict zeros); ``"openpi"`` averages over all ``H x max_action_dim`` entries exactly as openpi's
        ``compute_loss`` (so the numbers compare with openpi's SFT logs).
        ``noise [B, action_horizon, max_action_dim]`` / ``time [B]`` fix the draws (tests); otherwise they
        come from ``generator``.
        """
        cfg = self.cfg
        inputs = self.processor.prepare(obs)
        b = inputs["tokens"].shape[0]
        c, a = cfg.num_action_chunks, cfg.action_env_dim
        if tuple(actions.shape) != (b, c, a):
            raise ValueError(f"actions must be [B={b}, C={c}, A={a}], got {tuple(actions.shape)}")
        x = actions.detach().float().cpu().clone()
        x[..., -1] = gripper_from_env(cfg.gripper, x[..., -1])
        if cfg.extra_delta_transform:
            d = min(6, inputs["raw_state"].shape[-1])
            x[..., :d] -= inputs["raw_state"][:, None, :d]
        x = self.processor.normalizer.normalize(x, "actions")
        target = pad_chunk(x, cfg.action_horizon, cfg.max_action_dim).to(self.device)
        noise, u = flow_training_draws((b, cfg.action_horizon, cfg.max_action_dim), generator, noise, None)
        if time is None:
            time = u * 0.999 + 0.001
        noise = noise.to(device=self.device, dtype=torch.float32)
        t = time.to(device=self.device, dtype=torch.float32)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * target
        u_t = noise - target
        cache, state = self._prefix(inputs)
        v_t = self.velocity_from_features(self.expert_forward(cache, state, x_t, t))
        err = (v_t - u_t) ** 2
        return err.mean() if cfg.sft_loss_reduction == "openpi" else err[:, :c, :a].mean()
