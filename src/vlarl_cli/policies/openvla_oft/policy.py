"""OpenVLA-OFT with RLinf's 256-bin token head as an RL policy (contract: :mod:`vlarl_cli.policies.base`).

``sample(obs)``: process the raw env observation, run ONE forward pass that scores all ``C * A`` action
tokens, draw every element's bin from ``softmax(logits / temperature)`` (argmax when deterministic),
and return env actions ``[B, C, A]``, per-element token log-probs ``[B, C, A]`` under that same
tempered distribution (zeros when deterministic), values ``[B]`` and the replay record.

``evaluate(replay)``: the same forward pass from the stored inputs (gradients flow), log-probs of the
stored bins at the same temperature, the bin distribution's entropy ``[B, C, A]`` and values ``[B]``.

Temperature: RLinf scores the old AND new log-probs of its OFT recipes at the rollout temperature
(``temperature_train`` 1.6), so the PPO ratio compares like with like; ``policy.temperature`` is that
value and the runner may change it between rollouts (e.g. ``temperature_eval``). RLinf's optional
top-k warper is not applied (its recipes leave top_k at 0 / the full 256 bins).

Replay keys: ``images`` uint8 ``[B, S, S, 3]``, ``tokens`` / ``token_mask`` ``[B, L]``,
``action_tokens`` long ``[B, C, A]`` (vocabulary ids, as RLinf stores them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from vlarl_cli.policies.base import EvaluateOutput, PolicyOutput, Replay
from vlarl_cli.policies.noise import AnyGenerator
from vlarl_cli.policies.normalization import gripper_from_libero
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

REPLAY_KEYS = ("images", "tokens", "token_mask", "action_tokens")


class OftPolicy(OftModel):
    """The OpenVLA-OFT network plus processing, token sampling and log-prob recomputation.

    Args:
        cfg: the configuration (:func:`~vlarl_cli.policies.openvla_oft.config.preset`).
        tokenizer: default from ``cfg.tokenizer``.
        dataset_statistics: OpenVLA ``dataset_statistics.json`` content; the action statistics under
            ``cfg.unnorm_key`` un-normalise the actions (without statistics actions stay in [-1, 1]).
    """

    def __init__(self, cfg: OftConfig, *, tokenizer: PromptTokenizer | None = None,
                 dataset_statistics: dict[str, Any] | None = None) -> None:
        super().__init__(cfg)
        self.num_action_chunks = cfg.num_action_chunks
        self.action_dim = cfg.action_dim
        self.temperature = cfg.temperature
        self.dataset_statistics: dict[str, Any] = {}
        self.processor = OftProcessor(cfg, tokenizer or make_tokenizer(cfg), None)
        self.set_dataset_statistics(dataset_statistics)
        if cfg.is_lora:
            from vlarl_cli.policies.lora import apply_lora

            apply_lora(self.language_model.model, cfg.lora_rank, cfg.lora_scale_alpha)
        self.apply_trainability()

    # ------------------------------------------------------------------ setup
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
            if self.value_head is not None:
                self.value_head.requires_grad_(True)

    # ------------------------------------------------------------------ internals
    def _forward(self, inputs: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        dev = self.device
        pixels = pixel_values(inputs["images"].to(dev), self._dtype())
        return self.action_outputs(pixels, inputs["tokens"].to(dev), inputs["token_mask"].to(dev))

    def _chunked(self, x: Tensor) -> Tensor:
        """``[B, T] -> [B, C, A]`` (token j = chunk step j // A, dim j % A, as RLinf's reshape)."""
        return x.reshape(x.shape[0], self.cfg.num_action_chunks, self.cfg.action_dim)

    # ------------------------------------------------------------------ the contract
    @torch.no_grad()
    def sample(self, obs: dict[str, Any], deterministic: bool = False,
               generator: AnyGenerator = None) -> PolicyOutput:
        """Raw env observation -> :class:`PolicyOutput` (shapes in :mod:`vlarl_cli.policies.base`)."""
        inputs = self.processor.prepare(obs)
        logits, hidden = self._forward(inputs)
        k = sample_tokens(logits, self.temperature, deterministic=deterministic, generator=generator)
        if deterministic:
            logp = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
        else:
            logp, _ = token_logprobs(logits, k, self.temperature)
        k_cpu = self._chunked(k).cpu()
        actions = self.processor.actions_to_env(k_cpu)
        replay: Replay = {name: inputs[name] for name in ("images", "tokens", "token_mask")}
        replay["action_tokens"] = k_cpu + self.cfg.action_token_start
        return PolicyOutput(actions=actions, logprobs=self._chunked(logp).float().cpu(),
                            values=self.values_from_hidden(hidden).float().cpu(), replay=replay)

    def evaluate(self, replay: Replay) -> EvaluateOutput:
        """Recompute log-probs ``[B, C, A]``, values ``[B]`` and entropy ``[B, C, A]`` from a replay."""
        missing = [name for name in REPLAY_KEYS if name not in replay]
        if missing:
            raise KeyError(f"replay lacks {missing} (has {sorted(replay)})")
        logits, hidden = self._forward(replay)
        ids = replay["action_tokens"].to(logits.device)
        b = ids.shape[0]
        k = ids.reshape(b, -1) - self.cfg.action_token_start
        if k.shape[1] != self.cfg.num_action_tokens or bool(((k < 0) | (k >= self.cfg.n_action_bins)).any()):
            raise ValueError(f"replay action_tokens must be [B, {self.cfg.num_action_chunks}, {self.cfg.action_dim}] "
                             f"ids in [{self.cfg.action_token_start}, "
                             f"{self.cfg.action_token_start + self.cfg.n_action_bins}), got {tuple(ids.shape)}")
        logp, entropy = token_logprobs(logits, k, self.temperature)
        return EvaluateOutput(logprobs=self._chunked(logp), values=self.values_from_hidden(hidden),
                              entropy=self._chunked(entropy))

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
        if cfg.gripper == "libero":
            x[..., -1] = gripper_from_libero(x[..., -1])
        stats = self.processor.stats
        if stats is not None:
            normed = 2.0 * (x - stats.q01) / (stats.q99 - stats.q01 + 1e-8) - 1.0
            x = torch.where(stats.mask, normed, x)
        bins = torch.linspace(-1.0, 1.0, cfg.n_action_bins, dtype=torch.float64)
        # torch.bucketize(right=True) == np.digitize: index i with bins[i-1] <= a < bins[i]
        discretized = torch.bucketize(x.clamp(-1.0, 1.0), bins, right=True)
        k = (cfg.n_action_bins - discretized).clamp(0, cfg.n_action_bins - 1)
        logits, _ = self._forward(inputs)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.n_action_bins).float(),
                                                 k.reshape(-1).to(logits.device))
