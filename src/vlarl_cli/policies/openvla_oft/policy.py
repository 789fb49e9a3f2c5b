"""OpenVLA-OFT with RLinf's 256-bin token head as an RL policy (contract: :mod:`vlarl_cli.policies.base`).

``sample(obs)``: process the raw env observation, run ONE forward pass that scores all ``C * A`` action
tokens, draw every element's bin from ``softmax(logits / temperature)`` (argmax when deterministic),
and return env actions ``[B, C, A]``, per-element token log-probs ``[B, C, A]`` under that same
tempered distribution (zeros when deterministic), values ``[B]`` (``[B, C]`` with ``value_type:
action_level``) and the replay record.

``evaluate(replay)``: the same forward pass from the stored inputs (gradients flow), log-probs of the
stored bins at the same temperature, the bin distribution's entropy ``[B, C, A]`` and values ``[B]``.

Temperature: RLinf scores the old AND new log-probs of its OFT recipes at the rollout temperature
(``temperature_train`` 1.6), so the PPO ratio compares like with like; ``policy.temperature`` is that
value and the runner may change it between rollouts (e.g. ``temperature_eval``). RLinf's optional
top-k warper is not applied (its recipes leave top_k at 0 / the full 256 bins).

Replay keys: ``images`` uint8 ``[B, S, S, 3]`` (``[B, n, S, S, 3]`` with several images), ``tokens`` /
``token_mask`` ``[B, L]``, ``proprio`` ``[B, P]`` (with ``use_proprio``), and the sampling record:
``action_tokens`` long ``[B, C, A]`` (vocabulary ids, as RLinf stores them) for the token head, or
``normalized_actions`` float32 ``[B, C, A]`` for the L1-regression head.

L1-regression head (the OFT authors' checkpoints): the head's output is the mean of a Gaussian in the
normalised action space with a learned state-independent std ``exp(actor_logstd)`` per action dim, as
RLinf does for its regression heads under PPO (``Normal(mean, exp(actor_logstd))``, initial log-std -2.5,
RLinf ``starvla/action_heads/oft.py``). Sampling draws from it, deterministic mode returns the mean;
log-probs and entropy are the Gaussian's, per element.

Values: with ``value_type: chunk_level`` ``values [B]`` is the critic's single output (the value of the
observation the chunk starts from); with ``value_type: action_level`` ``sample`` and ``evaluate`` return
all ``[B, C]`` (one per executed action, for GAE over action steps); :meth:`OftPolicy.action_values`
gives ``[B, num_values]`` in both cases.

Evaluation sampling: RLinf's OFT evaluation configs sample at ``temperature_eval`` 1.6 with
``do_sample: True``; the standard protocol takes the argmax. :data:`EVAL_SAMPLING` holds both and
:meth:`OftPolicy.configure_eval` installs one, after which ``sample(deterministic=True)`` follows it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from vlarl_cli.checkpoints.pipeline import LoadReport
from vlarl_cli.policies.activations import ActivationStack, keeps_activations
from vlarl_cli.policies.base import EvaluateOutput, PolicyOutput, Replay
from vlarl_cli.policies.gripper import gripper_from_env
from vlarl_cli.policies.noise import AnyGenerator, randn
from vlarl_cli.policies.openvla_oft.config import OftConfig
from vlarl_cli.policies.openvla_oft.modeling import OftModel
from vlarl_cli.policies.openvla_oft.processing import (
    ActionStats,
    OftProcessor,
    PromptTokenizer,
    make_tokenizer,
    pixel_values,
    select_unnorm_key,
)
from vlarl_cli.policies.token import sample_tokens, token_logprobs

__all__ = ["REPLAY_KEYS", "OftPolicy"]

REPLAY_KEYS = ("images", "tokens", "token_mask")

#: How evaluation samples actions per protocol: (do_sample, temperature). ``rlinf``: RLinf's
#: ``evaluations/libero/libero_*_openvlaoft_eval.yaml`` (``do_sample: True``, ``temperature_eval: 1.6``);
#: ``standard``: argmax (OpenVLA / openvla-oft ``run_libero_eval.py``).
EVAL_SAMPLING: dict[str, tuple[bool, float | None]] = {"rlinf": (True, 1.6), "standard": (False, None)}


class OftPolicy(OftModel):
    """The OpenVLA-OFT network plus processing, token sampling and log-prob recomputation.

    Args:
        cfg: the configuration (:func:`~vlarl_cli.policies.openvla_oft.config.preset`).
        tokenizer: default from ``cfg.tokenizer``.
        dataset_statistics: OpenVLA ``dataset_statistics.json`` content; the action statistics under
            ``cfg.unnorm_key`` un-normalise the actions (without statistics actions stay in [-1, 1]).
    """

    #: set by :func:`~vlarl_cli.policies.openvla_oft.checkpoint.load_policy`: what was loaded, skipped, fresh
    load_report: LoadReport | None = None

    def __init__(self, cfg: OftConfig, *, tokenizer: PromptTokenizer | None = None,
                 dataset_statistics: dict[str, Any] | None = None) -> None:
        super().__init__(cfg)
        self.num_action_chunks = cfg.num_action_chunks
        self.action_dim = cfg.action_dim
        self.temperature = cfg.temperature
        self.dataset_statistics: dict[str, Any] = {}
        self.eval_do_sample, self.eval_temperature = False, cfg.temperature
        self.processor = OftProcessor(cfg, tokenizer or make_tokenizer(cfg), None)
        self.set_dataset_statistics(dataset_statistics)
        if cfg.is_lora:
            self._apply_lora()
        self.apply_trainability()
        if cfg.add_value_head and cfg.implement_version == "official" and cfg.value_pooling == "first":
            import warnings

            warnings.warn("OpenVLA-OFT official variant: the critic reads the last prompt token of every row. "
                          "RLinf's official code reads the slot k + 1 after it (k = the row's prompt padding; the "
                          "first action slot when there is none), so values differ from RLinf's.", stacklevel=2)

    # ------------------------------------------------------------------ setup
    def _apply_lora(self) -> None:
        """LoRA where RLinf puts it for OpenVLA-OFT (:data:`~vlarl_cli.policies.lora.RLINF_OFT_TARGETS`):
        the Llama layers and ``lm_head``, the projector, the vision towers' attention and MLPs (the SigLIP
        pooling head, unused by the forward pass, is left out). ``alpha = r`` as RLinf; RLinf draws A from
        a Gaussian, here Kaiming-uniform; B = 0 in both, so the wrapped model starts exactly at the base."""
        from vlarl_cli.policies.lora import DEFAULT_TARGETS, apply_lora

        r, alpha = self.cfg.lora_rank, self.cfg.lora_scale_alpha
        apply_lora(self.language_model, r, alpha, (*DEFAULT_TARGETS, "lm_head"))
        apply_lora(self.projector, r, alpha, ("fc1", "fc2", "fc3"))
        for tower in (self.vision_backbone.featurizer.encoder, self.vision_backbone.fused_featurizer.encoder):
            apply_lora(tower, r, alpha, ("q_proj", "k_proj", "v_proj", "o_proj", "out_proj", "fc1", "fc2"))

    def set_dataset_statistics(self, stats: dict[str, Any] | None) -> None:
        """Install OpenVLA dataset statistics (``{key: {"action": {q01, q99, mask}}}``) or none."""
        self.dataset_statistics = dict(stats or {})
        action_stats = None
        if self.dataset_statistics:
            key = select_unnorm_key(self.dataset_statistics, self.cfg.unnorm_key)
            action_stats = ActionStats.from_dict(key, self.dataset_statistics[key])
            if action_stats.q01.numel() != self.cfg.action_dim:
                from vlarl_cli.errors import ConfigError

                raise ConfigError(f'The action statistics "{key}" have {action_stats.q01.numel()} dims but '
                                  f"action_dim is {self.cfg.action_dim}.", "Set actor.model.action_dim to match.")
        self.processor.stats = action_stats
        if self.cfg.use_proprio and action_stats is not None:
            self.processor.proprio_stats = ActionStats.from_dict(action_stats.key,
                                                                 self.dataset_statistics[action_stats.key], "proprio")

    def configure_eval(self, protocol: str) -> None:
        """Evaluation sampling of ``protocol`` (:data:`EVAL_SAMPLING`): ``sample(deterministic=True)``
        then samples at its temperature (rlinf) or takes the argmax / mean (standard)."""
        if protocol not in EVAL_SAMPLING:
            from vlarl_cli.errors import ConfigError, did_you_mean

            raise ConfigError(f'No OpenVLA-OFT evaluation sampling for protocol "{protocol}".'
                              f"{did_you_mean(protocol, list(EVAL_SAMPLING))}", f"Use one of {', '.join(EVAL_SAMPLING)}.")
        do_sample, temperature = EVAL_SAMPLING[protocol]
        self.eval_do_sample = do_sample
        self.eval_temperature = self.cfg.temperature if temperature is None else temperature

    def apply_trainability(self) -> None:
        """``is_lora``: only the LoRA factors of the language model (and the value head) train."""
        from vlarl_cli.policies.lora import LoRALinear

        for p in self.parameters():
            p.requires_grad_(not self.cfg.is_lora)
        if self.cfg.is_lora:
            for m in self.modules():
                if isinstance(m, LoRALinear):
                    m.lora_A.requires_grad_(True)
                    m.lora_B.requires_grad_(True)
            for head in (self.value_head, self.action_head, self.proprio_projector):
                if head is not None:
                    head.requires_grad_(True)
        if self.actor_logstd is not None:
            self.actor_logstd.requires_grad_(self.cfg.learn_std)

    # ------------------------------------------------------------------ internals
    def _forward(self, inputs: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        dev = self.device
        pixels = pixel_values(inputs["images"].to(dev), self._dtype())
        proprio = inputs["proprio"].to(dev) if "proprio" in inputs else None
        return self.action_outputs(pixels, inputs["tokens"].to(dev), inputs["token_mask"].to(dev), proprio)

    def activation_stacks(self) -> list[ActivationStack]:
        """What one update's backward keeps per micro-batch element (``--dry-run``'s activation term): the
        DINOv2 + SigLIP towers on every image when they train, and Llama over BOS, the patches, the prompt
        and the action slots (one parallel-decoding pass)."""
        cfg, ckpt = self.cfg, self.gradient_checkpointing
        n, patches = cfg.num_images_in_input, cfg.num_patches
        stacks = []
        towers = self.vision_backbone
        if keeps_activations(towers.featurizer):
            stacks.append(ActivationStack("dinov2", n * (patches + 1 + cfg.dino_registers), cfg.dino_width,
                                          cfg.dino_mlp_ratio * cfg.dino_width, 4 * cfg.dino_width, cfg.dino_depth,
                                          heads=cfg.dino_heads, gated=False))
        if keeps_activations(towers.fused_featurizer):
            stacks.append(ActivationStack("siglip", n * patches, cfg.siglip_width, cfg.siglip_mlp,
                                          4 * cfg.siglip_width, cfg.siglip_depth, heads=cfg.siglip_heads,
                                          gated=False))
        tokens = (cfg.num_prefix_tokens + cfg.max_prompt_len + cfg.num_action_tokens + int(cfg.has_stop_token))
        head_dim = cfg.llm_width // cfg.llm_heads
        stacks.append(ActivationStack("llama", tokens, cfg.llm_width, cfg.llm_mlp,
                                      2 * (cfg.llm_heads + cfg.llm_kv_heads) * head_dim, cfg.llm_depth,
                                      heads=cfg.llm_heads, checkpointed=ckpt))
        return stacks

    def _chunked(self, x: Tensor) -> Tensor:
        """``[B, T] -> [B, C, A]`` (token j = chunk step j // A, dim j % A, as RLinf's reshape)."""
        return x.reshape(x.shape[0], self.cfg.num_action_chunks, self.cfg.action_dim)

    def _gaussian(self, hidden: Tensor) -> torch.distributions.Normal:
        """The L1 head's mean ``[B, C, A]`` with std ``exp(actor_logstd)`` (normalised action space)."""
        assert self.action_head is not None and self.actor_logstd is not None
        mean = self.action_head(hidden, self.cfg.num_action_chunks)
        std = self.actor_logstd.float().exp().to(mean.device).expand_as(mean)
        return torch.distributions.Normal(mean, std)

    def action_values(self, replay: Replay) -> Tensor:
        """All critic outputs ``[B, num_values]`` (``[B, C]`` with ``value_type: action_level``)."""
        _, hidden = self._forward(replay)
        return self.values_from_hidden(hidden)

    def _contract_values(self, hidden: Tensor) -> Tensor:
        """The contract's values: ``[B]`` (``chunk_level``) or ``[B, C]`` (``action_level``: one per executed
        action, which the runner's GAE uses with ``reward_type: action_level``, as RLinf does)."""
        values = self.values_from_hidden(hidden)
        return values if self.cfg.value_type == "action_level" else values[:, 0]

    # ------------------------------------------------------------------ the contract
    @torch.no_grad()
    def sample(self, obs: dict[str, Any], deterministic: bool = False,
               generator: AnyGenerator = None) -> PolicyOutput:
        """Raw env observation -> :class:`PolicyOutput` (shapes in :mod:`vlarl_cli.policies.base`)."""
        inputs = self.processor.prepare(obs)
        logits, hidden = self._forward(inputs)
        replay: Replay = dict(inputs)
        values = self._contract_values(hidden).float().cpu()
        if self.action_head is not None:
            dist = self._gaussian(hidden)
            if deterministic:
                a, logp = dist.mean, torch.zeros_like(dist.mean)
            else:
                eps = randn(tuple(dist.mean.shape), generator, device=dist.mean.device, dtype=dist.mean.dtype)
                a = dist.mean + dist.stddev * eps
                logp = dist.log_prob(a)
            replay["normalized_actions"] = a.float().cpu()
            return PolicyOutput(actions=self.processor.normalized_to_env(a.cpu()), logprobs=logp.float().cpu(),
                                values=values, replay=replay)
        if deterministic and self.eval_do_sample:  # RLinf's evaluation samples (EVAL_SAMPLING["rlinf"])
            k = sample_tokens(logits, self.eval_temperature, deterministic=False, generator=generator)
        else:
            k = sample_tokens(logits, self.temperature, deterministic=deterministic, generator=generator)
        if deterministic:
            logp = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
        else:
            logp, _ = token_logprobs(logits, k, self.temperature)
        k_cpu = self._chunked(k).cpu()
        replay["action_tokens"] = k_cpu + self.cfg.action_token_start
        return PolicyOutput(actions=self.processor.actions_to_env(k_cpu), logprobs=self._chunked(logp).float().cpu(),
                            values=values, replay=replay)

    def evaluate(self, replay: Replay) -> EvaluateOutput:
        """Recompute log-probs ``[B, C, A]``, values ``[B]`` and entropy ``[B, C, A]`` from a replay."""
        record = "normalized_actions" if self.action_head is not None else "action_tokens"
        missing = [name for name in (*REPLAY_KEYS, record) if name not in replay]
        if missing:
            raise KeyError(f"replay lacks {missing} (has {sorted(replay)})")
        logits, hidden = self._forward(replay)
        values = self._contract_values(hidden)
        if self.action_head is not None:
            dist = self._gaussian(hidden)
            a = replay["normalized_actions"].to(dist.mean.device, torch.float32)
            return EvaluateOutput(logprobs=dist.log_prob(a), values=values, entropy=dist.entropy())
        ids = replay["action_tokens"].to(logits.device)
        b = ids.shape[0]
        k = ids.reshape(b, -1) - self.cfg.action_token_start
        if k.shape[1] != self.cfg.num_action_tokens or bool(((k < 0) | (k >= self.cfg.n_action_bins)).any()):
            raise ValueError(f"replay action_tokens must be [B, {self.cfg.num_action_chunks}, {self.cfg.action_dim}] "
                             f"ids in [{self.cfg.action_token_start}, "
                             f"{self.cfg.action_token_start + self.cfg.n_action_bins}), got {tuple(ids.shape)}")
        logp, entropy = token_logprobs(logits, k, self.temperature)
        return EvaluateOutput(logprobs=self._chunked(logp), values=values, entropy=self._chunked(entropy))

    def supervised_loss(self, obs: dict[str, Any], actions: Tensor) -> Tensor:
        """Cross-entropy (scalar mean over the ``C * A`` action tokens and the batch) of the bins of the
        env-space demonstration chunks ``actions [B, C, A]`` under the untempered logits (OpenVLA's
        next-token training loss restricted to the action tokens).

        The env actions go the reverse way of :meth:`OftProcessor.actions_to_env`: LIBERO gripper
        (``-1 open / +1 close``) back to ``[0, 1]`` with 1 = open, BOUNDS_Q99 normalisation
        ``2 (x - q01) / (q99 - q01 + 1e-8) - 1`` on the masked dims, clipped to ``[-1, 1]``, then OpenVLA's
        ActionTokenizer binning ``discretized = digitize(a, linspace(-1, 1, n_bins))`` and relative index
        ``k = n_bins - discretized`` (the highest id is the most negative action), so that
        :func:`tokens_to_normalized_actions` maps ``k`` back to the bin centre containing ``a``.
        """
        cfg = self.cfg
        inputs = self.processor.prepare(obs)
        b = inputs["tokens"].shape[0]
        c, a = cfg.num_action_chunks, cfg.action_dim
        if tuple(actions.shape) != (b, c, a):
            raise ValueError(f"actions must be [B={b}, C={c}, A={a}], got {tuple(actions.shape)}")
        x = actions.detach().double().cpu().clone()
        x[..., -1] = gripper_from_env(cfg.gripper, x[..., -1])
        stats = self.processor.stats
        if stats is not None:
            normed = 2.0 * (x - stats.q01) / (stats.q99 - stats.q01 + 1e-8) - 1.0
            x = torch.where(stats.mask, normed, x)
        if self.action_head is not None:  # the OFT authors' L1 regression loss on normalised actions
            _, hidden = self._forward(inputs)
            mean = self.action_head(hidden, cfg.num_action_chunks)
            return (mean - x.clamp(-1.0, 1.0).to(mean)).abs().mean()
        bins = torch.linspace(-1.0, 1.0, cfg.n_action_bins, dtype=torch.float64)
        # torch.bucketize(right=True) == np.digitize: index i with bins[i-1] <= a < bins[i]
        discretized = torch.bucketize(x.clamp(-1.0, 1.0), bins, right=True)
        k = (cfg.n_action_bins - discretized).clamp(0, cfg.n_action_bins - 1)
        logits, _ = self._forward(inputs)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.n_action_bins).float(),
                                                 k.reshape(-1).to(logits.device))
